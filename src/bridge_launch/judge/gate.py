"""The seeds' hardware gate: "100/100, finite loss and grad norm, zero skipped/NaN iterations,
checkpoint and validation/test complete" — each criterion judged from a run's output (logread)
and reported with its evidence, and the golden-values export (Megatron-LM's functional-test
format) of the same output."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

from bridge_launch.judge import throughput
from bridge_launch.logs.reader import LOSS, Log, finite, gaps_text, number, unlogged
from bridge_launch.workloads import trainer_protocol as P

# name -> what it checks (the order of the report)
CRITERIA = {
    "steps": "the last iteration equals its total (or --steps)",
    "finite": "every loss and grad norm on the iteration lines is finite",
    "skipped": "no skipped iterations (the per-interval counter is 0 on every line)",
    "nan": "no NaN iterations (counter 0 on every line, no NaN-check error)",
    "checkpoint": "a checkpoint saved at the last iteration",
    "validation": "the post-training validation line is present",
    "test": "the post-training test line is present",
    "no-signal": "the trainer did not exit on a signal (SIGTERM)",
    "throughput": "TFLOP/s per GPU (or the step time) within the tolerance of an expectation (check --expect-*)",
}


@dataclass
class Criterion:
    name: str
    passed: bool
    evidence: str
    step: int | None = None  # where it failed (or the step it rests on)


@dataclass
class Verdict:
    source: str
    passed: bool
    step: int | None
    total: int | None
    criteria: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "passed": self.passed,
            "step": self.step,
            "total": self.total,
            "criteria": [asdict(c) for c in self.criteria],
        }


LINE_CRITERIA = {"finite", "skipped", "nan"}  # judged from every iteration line (`_lines`)


def selected(only=None, skip=(), expect=None) -> list[str]:
    """The criteria a check judges, in report order: all (or `only`) minus `skip`; throughput only
    with an expectation."""
    return [
        n for n in CRITERIA if (not only or n in only) and n not in skip and (n != "throughput" or expect is not None)
    ]


def reads_lines(only=None, skip=()) -> bool:
    """Whether a check with these criteria judges every iteration line (not only its ends)."""
    return bool(LINE_CRITERIA & set(selected(only, skip)))


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def check(
    log: Log,
    source: str,
    *,
    steps: int | None = None,
    only=None,
    skip=(),
    metric: str = LOSS,
    finished: bool | None = None,
    expect=None,
    tolerance: float | None = None,
) -> Verdict:
    """Judge `log` against the gate's criteria (all, or `only`, minus `skip`). `steps` is the
    expected step count (default: the total the iteration lines print). `finished`: whether the
    run has ended (None: unknown, e.g. a log file). `expect` (judge/throughput.py Expectation):
    the throughput criterion, judged only when given, within `tolerance` (default 20%).

    A long clean log is judged from substring counts over the raw text (logread.Log.tally: every
    iteration line's counters 0, no loss or norm that is not finite, the metric on every line) and
    its first and last lines; anything else is read line by line for the step where it failed."""
    names = selected(only, skip, expect)
    last = log.final()
    total = steps if steps is not None else (last.total if last else None)
    out: list[Criterion] = []

    def add(name, ok, evidence, step=None):
        if name in names:
            out.append(Criterion(name, ok, evidence, step))

    if last is None:
        for n in names:
            out.append(Criterion(n, False, "no iteration lines in the output"))
        return Verdict(source, False, None, total, out)

    # steps: the last one, and none missing inside the log's own range (a hole is evidence not judged)
    missing, gaps = _unlogged(log, last, metric) if "steps" in names else (0, [])
    if missing:
        add(
            "steps",
            False,
            f"{last.step}/{total}, but {missing} iteration(s) inside it are not in the output ({gaps_text(gaps)}): "
            "not judged",
            gaps[0][0],
        )
    elif last.step == total:
        add("steps", True, f"{last.step}/{total}", last.step)
    elif last.step < total:
        still = "stopped early" if finished else "not finished"
        add("steps", False, f"{still}, {last.step}/{total} so far", last.step)
    else:
        add("steps", False, f"{last.step} iterations, more than the {total} expected", last.step)

    # finite, skipped, nan
    if LINE_CRITERIA & set(names):
        _lines(log, last, metric, add)

    # checkpoint: the last save line, read from the end
    save = log.last_line(P.SAVED_MARK, P.SAVED_RE)
    if save and int(save[1].group(1)) == last.step:
        add("checkpoint", True, f"saved at iteration {last.step}: {save[2].strip()}", last.step)
    elif save:
        step = int(save[1].group(1))
        add("checkpoint", False, f"the last save was at iteration {step}, not at the last iteration {last.step}", step)
    else:
        add("checkpoint", False, "no checkpoint saved")

    # validation / test: the post-training lines, read from the end
    for name in ("validation", "test"):
        hit = log.last_line(f" on {name} set", P.VALIDATION_RE)
        if hit:
            m = hit[1]
            losses = {k[: -len(" value")]: number(v) for k, v in P.FIELD_RE.findall(m.group(4)) if k.endswith(" value")}
            shown = ", ".join(f"{k} {_fmt(v)}" for k, v in losses.items())
            if any(not finite(v) for v in losses.values()):
                add(name, False, f"iteration {m.group(2)} on {name} set: {shown} is not finite", int(m.group(2)))
            else:
                add(name, True, f"iteration {m.group(2)} on {name} set: {shown}", int(m.group(2)))
        else:
            add(name, False, f"no 'validation loss at iteration N on {name} set' line")

    # no signal exit after the last iteration line
    after = (last.text, max(0, log.position_of(last)))
    ex = log.last_line(P.EXIT_MARK, P.EXIT_RE, after=after)
    killed = log.last_line(P.SIGNAL_DEATH_MARK, P.SIGNAL_DEATH_RE, after=after)  # torchrun: a worker killed
    if ex and "SIGTERM" in ex[1].group(1):
        add("no-signal", False, f"after iteration {last.step}: {ex[1].group(1)}", last.step)
    elif killed:
        m = killed[1]
        add(
            "no-signal",
            False,
            f"after iteration {last.step}: torchrun says signal {m.group(1)} ({m.group(2)}) killed pid {m.group(3)}",
            last.step,
        )
    else:
        add("no-signal", True, "no signal exit" + (f" (exit: {ex[1].group(1)})" if ex else ""))

    if "throughput" in names:
        ok, evidence, _data = throughput.judge(log, expect, throughput.TOLERANCE if tolerance is None else tolerance)
        add("throughput", ok, evidence)

    passed = all(c.passed for c in out)
    return Verdict(source, passed, last.step, total, out)


def _unlogged(log: Log, last, metric: str) -> tuple[int, list]:
    """Iterations missing inside the log's own range at its log interval (logs/reader.unlogged):
    from the line count alone when the lines are every step from the first to the last."""
    first, n = log.initial(), log.tally(metric)["lines"]
    if first is None or n < 3 or last.step - first.step == n - 1:
        return 0, []
    return unlogged(sorted({it.step for it in log.iterations}))


def _lines(log: Log, last, metric: str, add) -> None:
    """The per-line criteria (finite, skipped, nan): from the tally when it is clean, else line by line."""
    t = log.tally(metric)
    checks = [ev for ev in log.nan_check_errors]
    n = t["lines"]
    clean = (
        n > 0 and t["counters"] == n and t["zero_counters"] == n and not t["nonfinite"] and t["with_metric"] in (0, n)
    )
    if clean:
        first = log.initial()
        span = (
            f"{metric} {_fmt(first.fields.get(metric))} -> {_fmt(last.fields.get(metric))}"
            if t["with_metric"]
            else f"no {metric} field"
        )
        add("finite", True, f"{n} iteration lines, all finite ({span})")
        add("skipped", True, f"0 skipped on all {n} iteration lines")
    else:
        its = log.iterations
        bad_finite = bad_skip = bad_nan = None
        has_metric = t["with_metric"] > 0
        for it in its:
            if it.clean() and (not has_metric or f"| {metric}: " in it.rest):
                continue
            f = it.fields
            if bad_finite is None:
                nonfinite = [(k, v) for k, v in it.losses.items() if not finite(v)]
                for key in (P.FIELD_GRAD_NORM, P.FIELD_PARAMS_NORM):
                    if key in f and not finite(f[key]):
                        nonfinite.append((key, f[key]))
                if nonfinite:
                    bad_finite = (it.step, ", ".join(f"{k} {v}" for k, v in nonfinite))
                elif has_metric and metric not in f and not it.skipped:
                    # Megatron prints no loss whose interval average is NaN or negative (MB train_utils.py:1122-1124)
                    bad_finite = (
                        it.step,
                        f"no {metric} printed although no iteration was skipped "
                        "(a NaN or negative average is not printed)",
                    )
            if bad_skip is None and it.skipped:
                bad_skip = (it.step, f"{it.skipped} skipped in the interval ending at iteration {it.step}")
            if bad_nan is None and it.nan:
                bad_nan = (it.step, f"{it.nan} NaN iteration(s) in the interval ending at iteration {it.step}")
        n = len(its)
        if bad_finite:
            add("finite", False, f"iteration {bad_finite[0]}: {bad_finite[1]}", bad_finite[0])
        else:
            v0, v1 = its[0].fields.get(metric), its[-1].fields.get(metric)
            add("finite", True, f"{n} iteration lines, all finite ({metric} {_fmt(v0)} -> {_fmt(v1)})")
        if bad_skip:
            add("skipped", False, f"iteration {bad_skip[0]}: {bad_skip[1]}", bad_skip[0])
        else:
            add("skipped", True, f"0 skipped on all {n} iteration lines")
        if bad_nan:
            add("nan", False, f"iteration {bad_nan[0]}: {bad_nan[1]}", bad_nan[0])
            return
    if checks:
        e = checks[0]
        add(
            "nan",
            False,
            f"iteration {e.step}: NaN check on rank {e.rank}: {e.data['result']} ({e.data['message']})",
            e.step,
        )
    else:
        add("nan", True, f"0 NaN iterations on all {n} iteration lines, no NaN-check error")


def render(v: Verdict) -> str:
    lines = [
        f"{v.source}: {'PASSED' if v.passed else 'FAILED'}"
        + (f" ({v.step}/{v.total})" if v.step is not None and v.total else "")
    ]
    for c in v.criteria:
        lines.append(f"  {'ok  ' if c.passed else 'FAIL'} {c.name:<11} {c.evidence}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------
# golden values (Megatron-LM tests/functional_tests/python_test_utils/common.py: GoldenValueMetric)
# ------------------------------------------------------------------------------------------------
# metric name in the golden file -> (iteration-line field, scale)
GOLDEN_FIELDS = {
    "lm loss": (LOSS, 1.0),
    "num-zeros": (P.FIELD_NUM_ZEROS, 1.0),
    "iteration-time": (P.FIELD_ELAPSED_MS, 0.001),  # seconds, as TensorBoard's iteration-time
}


def golden(log: Log) -> dict:
    """{metric: {"start_step", "end_step", "step_interval", "values": {"step": value}}}: every metric
    the iteration lines carry, values as Megatron-LM's harness writes them ("nan" for a value that
    is not finite)."""
    out = {}
    for name, (key, scale) in GOLDEN_FIELDS.items():
        series = log.series(key)
        if not series:
            continue
        steps = sorted(series)
        gaps = [b - a for a, b in zip(steps[1:], steps[2:], strict=False)] or [
            b - a for a, b in zip(steps, steps[1:], strict=False)
        ]
        interval = math.gcd(*gaps) if gaps else 1
        values = {}
        for s in steps:
            v = series[s]
            values[str(s)] = (v * scale if scale != 1.0 else v) if finite(v) else "nan"
        out[name] = {"start_step": steps[0], "end_step": steps[-1], "step_interval": interval or 1, "values": values}
    return out


def write_golden(data: dict, path: str) -> None:
    """Golden values (one run's, or several runs' noise bands) as Megatron-LM's harness writes them:
    JSON, indent 4, a final newline."""
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=4)
        fh.write("\n")
