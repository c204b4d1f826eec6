"""The throughput criterion: a run's achieved speed against an expectation the caller passes in
(a TFLOP/s per GPU or a step time: `plan`'s figure, a golden-values file's iteration time, or a
number), with the model FLOPs utilisation where the GPU's peak is known, and, when the run is
slower than expected by more than the tolerance, where the time went.

What is measured (the formats are read by logs/reader.py, defined in workloads/trainer_protocol.py):
- TFLOP/s per GPU: the iteration lines' `throughput per GPU (TFLOP/s/GPU)` (Megatron-Bridge with
  logger.log_throughput, train_utils.py:1095-1096 at 067f987), else the rank-0 `Step Time : S s
  GPU utilization: T MODEL_TFLOP/s/GPU` lines, else FLOPs per step / (world x step time) when the
  expectation carries the model's FLOPs per step (plan/estimate.py flops_per_token).
- Step time: the iteration lines' `elapsed time per iteration (ms)`.
Both are the median over the steps after the first tenth (at least one step), the warm-up window
Megatron-Bridge's own performance check skips (scripts/performance/utils/evaluate.py:368-373).

Where the time went, from the timers Megatron-Bridge logs every log interval (utils/train_utils.py
:686-720 names them, :1155 logs them per iteration with normalizer=log_interval; the max across
ranks is what the step waits for, core/timers.py:338-355): `forward-backward` (of it,
`batch-generator`: the wait for data, logged at timing_log_level 2), `optimizer`, and the rest of
the step; and the checkpoint saves (`save-checkpoint`, per save, train.py:1324-1363), spread over
the steps trained.
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge_launch.logs.reader import Log
from bridge_launch.workloads import trainer_protocol as P

TOLERANCE = 0.20  # a run this much slower than expected is flagged
WARMUP_FRACTION = 0.10  # evaluate.py:368-373: skip max(1, int(n * 0.1)) steps

TIMER_STEP = ("forward-backward", "optimizer")
TIMER_DATA = "batch-generator"
TIMER_SAVES = (P.SAVE_TIMER, P.SAVE_TIMER_NON_PERSISTENT)


@dataclass
class Expectation:
    tflops_per_gpu: float | None = None
    step_s: float | None = None
    source: str = ""  # where the figure comes from, said in the evidence
    flops_per_step: float | None = None  # the model's, to turn step time into TFLOP/s
    world: int | None = None
    peak_tflops: float | None = None  # per GPU, for MFU (core/hardware.py peak_tflops)


def from_plan(thr: dict, world: int, peak: float | None) -> Expectation:
    """What `plan` expects (plan/estimate.py throughput()): its TFLOP/s per GPU assumption (the
    recipe's measured figure for the GPU and precision), FLOPs per step and the world size."""
    return Expectation(
        tflops_per_gpu=thr["tflops_assumption"],
        source=f"plan: {thr['source']}",
        flops_per_step=thr["flops_per_step"],
        world=world,
        peak_tflops=peak,
    )


def _median(xs) -> float:
    import statistics  # only when a throughput is judged (check's import time)

    return statistics.median(xs)


def _steady(series: dict) -> list:
    steps = sorted(series)
    skip = max(1, int(len(steps) * WARMUP_FRACTION)) if len(steps) > 1 else 0
    return [series[s] for s in steps[skip:]]


def measured(log: Log, exp: Expectation | None = None) -> dict:
    """{"steps", "tflops_per_gpu", "tflops_from", "step_s", "mfu"}: medians over the steady steps."""
    out: dict = {"tflops_per_gpu": None, "tflops_from": None, "step_s": None, "mfu": None}
    ms = [v for v in _steady(log.series(P.FIELD_ELAPSED_MS)) if isinstance(v, float)]
    out["steps"] = len(ms)
    if ms:
        out["step_s"] = _median(ms) / 1000
    tf = [v for v in _steady(log.series(P.FIELD_TFLOPS)) if isinstance(v, float)]
    if tf:
        out["tflops_per_gpu"], out["tflops_from"] = _median(tf), "the iteration lines"
    elif log.step_times:
        st = log.step_times
        steady = st[max(1, int(len(st) * WARMUP_FRACTION)) :] if len(st) > 1 else st
        out["tflops_per_gpu"], out["tflops_from"] = _median(t for _s, t in steady), "the Step Time lines"
    elif exp and exp.flops_per_step and exp.world and out["step_s"]:
        out["tflops_per_gpu"] = exp.flops_per_step / (exp.world * out["step_s"]) / 1e12
        out["tflops_from"] = "the model's FLOPs per step over the step time"
    if exp and exp.peak_tflops and out["tflops_per_gpu"]:
        out["mfu"] = out["tflops_per_gpu"] / exp.peak_tflops
    return out


def where_the_time_went(log: Log) -> dict:
    """Per-iteration milliseconds from the timers (the max across ranks, averaged over the log
    intervals after the first tenth) and the checkpoint saves' share of the run's time."""
    reports = [r for r in log.timer_reports if r.option in ("minmax", "max")]
    skip = max(1, int(len(reports) * WARMUP_FRACTION)) if len(reports) > 1 else 0
    per: dict = {}
    saves: list = []
    for i, r in enumerate(reports):
        for name, (_lo, hi) in r.timers.items():
            if name in TIMER_SAVES:
                saves.append(hi)
            elif i >= skip and hi is not None:
                per.setdefault(name, []).append(hi)
    out = {name: sum(v) / len(v) for name, v in per.items() if name in (*TIMER_STEP, TIMER_DATA)}
    ms = [v for v in log.series(P.FIELD_ELAPSED_MS).values() if isinstance(v, float)]
    out["steps_ms_total"] = sum(ms)
    out["saves"] = len(saves)
    out["saves_ms_total"] = sum(saves)
    return out


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "?"


def explain(log: Log, step_s: float | None) -> str:
    """'step 1230 ms: forward-backward 900 (data wait 300), optimizer 200, other 130; checkpoint
    saves 3 x 1500 ms = 4% of the time' from the timers, or why it cannot be said."""
    t = where_the_time_went(log)
    parts = []
    if step_s and any(k in t for k in TIMER_STEP):
        step_ms = step_s * 1000
        fb, opt = t.get("forward-backward", 0.0), t.get("optimizer", 0.0)
        data = f" (data wait {t[TIMER_DATA]:.0f} ms, {_pct(t[TIMER_DATA], step_ms)})" if TIMER_DATA in t else ""
        other = max(0.0, step_ms - fb - opt)
        parts.append(
            f"step {step_ms:.0f} ms: forward-backward {fb:.0f}{data}, optimizer {opt:.0f}, other {other:.0f} "
            f"(communication outside them, logging)"
        )
    else:
        parts.append("no forward-backward/optimizer timers in the log (logger.timing_log_level >= 1 prints them)")
    if t["saves"]:
        whole = t["steps_ms_total"] + t["saves_ms_total"]
        parts.append(
            f"checkpoint saves {t['saves']} x {t['saves_ms_total'] / t['saves']:.0f} ms = "
            f"{_pct(t['saves_ms_total'], whole)} of the time"
        )
    return "; ".join(parts)


def judge(log: Log, exp: Expectation, tolerance: float = TOLERANCE) -> tuple[bool, str, dict]:
    """(passed, evidence, data): slower than `exp` by more than `tolerance` fails. TFLOP/s when
    both sides have it, else the step time; the evidence says which, and where the time went."""
    m = measured(log, exp)
    data = {**m, "expected_tflops_per_gpu": exp.tflops_per_gpu, "expected_step_s": exp.step_s, "source": exp.source}
    if exp.tflops_per_gpu and m["tflops_per_gpu"]:
        ratio = m["tflops_per_gpu"] / exp.tflops_per_gpu
        what = f"median {m['tflops_per_gpu']:.4g} TFLOP/s/GPU ({m['tflops_from']}) vs {exp.tflops_per_gpu:.4g} expected"
    elif exp.step_s and m["step_s"]:
        ratio = exp.step_s / m["step_s"]
        what = f"median step {m['step_s']:.4g} s vs {exp.step_s:.4g} s expected"
    else:
        have = "TFLOP/s" if m["tflops_per_gpu"] else "step times" if m["step_s"] else "neither TFLOP/s nor step times"
        return False, f"no measurement to compare: the log has {have}, the expectation ({exp.source}) another", data
    slower = 1 - ratio
    data["slower"] = slower
    what += f" ({exp.source}) over {m['steps']} steady steps"
    if m["mfu"] is not None:
        what += f"; MFU {100 * m['mfu']:.1f}% of {exp.peak_tflops:.4g} peak"
    if slower > tolerance:
        why = explain(log, m["step_s"])
        data["where"] = why
        return (
            False,
            f"{what}: {100 * slower:.0f}% slower, more than {100 * tolerance:.0f}%; where the time went: {why}",
            data,
        )
    if abs(slower) < 0.005:
        return True, f"{what}: as expected", data
    if slower > 0:
        return True, f"{what}: {100 * slower:.0f}% slower, within {100 * tolerance:.0f}%", data
    return True, f"{what}: {100 * -slower:.0f}% faster", data
