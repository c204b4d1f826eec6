"""Megatron-Bridge training logs written the way its trainer writes them, for the gate, parity, plot and watch tests."""

from __future__ import annotations

import math

from bridge_launch.workloads import trainer_protocol as P

STAMP = "2026-01-01 12:00:00"


def training_log(
    n=100,
    *,
    loss=lambda s: 10.0 * math.exp(-s / 40) + 1.0,
    gn=lambda _s: 1.0,
    skipped=lambda _s: 0,
    nan=lambda _s: 0,
    save_at=None,
    validation=True,
    test=True,
    exit_line=None,
    stop=None,
    checks=(),
    rank_prefix="[rank3]: ",
    start=1,
    elapsed_ms=lambda _s: 500.0,
    tflops=lambda _s: 123.4,
    memory=None,
    straggler=None,
) -> str:
    """A Bridge run's output: Step Time + iteration lines every step, saves, post-training
    validation/test, as the smoke workload prints them. `tflops` None: no Step Time / GPU
    utilization line (a model config without kv_channels, MB train_utils.py:1036); `memory`:
    {name: GB} for the memory lines after iterations 1 and 2 (memory_line); `straggler`:
    step -> {rank: ms} for a StragglerDetector line after that iteration (straggler_line)."""
    out = [P.starting_line(start - 1)]
    last = stop or n
    for s in range(start, last + 1):
        if tflops(s) is not None:
            out.append("[rank0]: " + P.step_time_line(elapsed_ms(s) / 1000.0, tflops(s)))
        losses = {"lm loss": loss(s)}
        out.append(
            rank_prefix
            + P.iteration_line(
                iteration=s,
                train_iters=n,
                consumed=s * 16,
                elapsed_ms=elapsed_ms(s),
                lr=3e-4,
                global_batch=16,
                losses=losses,
                loss_scale=1.0,
                grad_norm=gn(s),
                skipped=skipped(s),
                nan=nan(s),
                stamp=STAMP,
            )
        )
        if memory and s <= start + 1:
            out += [f"[rank{r}]: " + memory_line(r, s, memory) for r in (0, 4)]
        if straggler and straggler(s):
            out.append("[rank0]: " + straggler_line(straggler(s)))
        if s in checks:
            out.append(
                f"[rank1]: RuntimeError: Rank 1, node n1, device 1, iteration {s}: Unexpected result nan "
                "(message='found NaN in local forward loss calculation')"
            )
        if save_at and s in save_at:
            out.append("[rank0]: " + P.saving_line(s, "/ckpt"))
            out.append("[rank0]: " + P.saved_line(s, "/ckpt"))
    if exit_line:
        out.append("[rank0]: " + P.barrier_and_log(exit_line, stamp=STAMP))
    else:
        out.append("[rank0]: " + P.barrier_and_log(P.TRAINING_DONE, stamp=STAMP))
        if validation:
            out += [
                "[rank3]: " + x for x in P.validation_lines(f"iteration {last} on validation set", {"lm loss": 2.0})
            ]
        if test:
            out += ["[rank3]: " + x for x in P.validation_lines(f"iteration {last} on test set", {"lm loss": 2.1})]
    return "\n".join(out) + "\n"


def memory_line(rank: int, step: int, values: dict) -> str:
    """Megatron-Bridge's memory report, a fixture (the smoke workload prints none): MB
    src/megatron/bridge/training/utils/train_utils.py:1141-1154 @ 067f987 prints
    "[Rank {}] {}".format(global_rank, f"(after {iteration} iterations) memory (GB)" + " | {metric}: {value}"...)
    with MEMORY_KEYS' names (:166-177) turned from bytes into gigabytes (report_memory, :1195-1213)."""
    return f"[Rank {rank}] (after {step} iterations) memory (GB)" + "".join(f" | {k}: {v}" for k, v in values.items())


BRIDGE_MEMORY = {
    "mem-allocated-gigabytes": 12.345,
    "mem-max-allocated-gigabytes": 30.5,
    "mem-reserved-gigabytes": 31.0,
    "mem-max-reserved-gigabytes": 32.25,
}


def straggler_line(ms_by_rank: dict, *, minmax_count: int = 1, stamp: str = STAMP) -> str:
    """Megatron-LM's StragglerDetector line(s) as trainer_protocol writes them (MC utils.py:1814-1843
    @ 2a75ac12c; the sample in megatron/core/README_STRAGGLER.md:13-16): Etpt is the same work over
    each rank's time (:1800-1808); with minmax_count N > 1 the "^^^^ Bottom/Top N Ranks" lines follow."""
    fast = min(ms_by_rank.values())
    etpt = {r: 300.0 * fast / t for r, t in ms_by_rank.items()}
    return "\n[rank0]: ".join(P.straggler_lines(ms_by_rank, etpt, minmax_count=minmax_count, stamp=stamp))


def every_pass_log(n: int, **kw) -> str:
    """Every line the survey's passes look for: a grad norm that is not finite, straggler lines, a
    timer block and a NaN-check error, in a log of n iterations (`kw`: training_log's)."""
    text = training_log(
        n,
        straggler=lambda s: {r: 1000.0 + (300.0 if r == 5 and s > n // 2 else 0.0) for r in range(8)},
        gn=lambda s: float("inf") if s == n - 3 else 1.0,
        save_at={n},
        **kw,
    )
    timers = (
        "[rank7]: (min, max) time across ranks (ms):\n"
        "[rank7]:     forward-backward ...............................: (100.00, 131.50)\n"
    )
    nan_check = (
        "[rank5]: RuntimeError: Rank 5, node gpu-node-17, device 5, iteration 30: Unexpected result nan "
        "(message='found NaN in local forward loss calculation')\n"
    )
    lines = text.splitlines(keepends=True)
    return "".join(lines[: len(lines) // 2]) + timers + nan_check + "".join(lines[len(lines) // 2 :])
