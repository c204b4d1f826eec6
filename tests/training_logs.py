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
) -> str:
    """A Bridge run's output: Step Time + iteration lines every step, saves, post-training
    validation/test, as the smoke workload prints them."""
    out = [P.starting_line(start - 1)]
    last = stop or n
    for s in range(start, last + 1):
        out.append("[rank0]: " + P.step_time_line(0.5, 123.4))
        losses = {"lm loss": loss(s)}
        out.append(
            rank_prefix
            + P.iteration_line(
                iteration=s,
                train_iters=n,
                consumed=s * 16,
                elapsed_ms=500.0,
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
