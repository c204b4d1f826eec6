"""Named rule sets for `compare`: A judged against the reference B on loss, timing and memory, the
way Megatron-Bridge's performance scripts (evaluate.py) and Megatron-LM's functional tests judge a
run, or by bridge-launch's own loss parity (parity.py), the default: loss alone, as compare judged before
the rule sets (a loss-parity check should not start failing on a noisy machine's timing, nor read a
long log's timing and memory lines it does not judge).

Every rule is data (RULE_SETS: what it checks, its thresholds, its source at the pinned commits)
and the judging is small pure functions over `Metrics` (the per-step values a log or a golden-values
file carries). The sources, read at the pins and recorded in docs/judging_sources.md:

- MB: Megatron-Bridge 067f987df03b8355b03192d88d70f1709fedf51a, scripts/performance/utils/evaluate.py
- MLM: Megatron-LM 2a75ac12c54ba6a42b34024756820bf819a2e25f, tests/functional_tests/python_test_utils/

The rules themselves are data in rule_sources.py (light enough for `compare --help` to cite them).
"""

from __future__ import annotations

import json
import math
import operator
from dataclasses import asdict, dataclass, field
from itertools import repeat

from bridge_launch.judge.rule_sources import (  # noqa: F401 - the rule data, re-exported
    COMMON,
    DEFAULT,
    EVALUATE,
    MB_CORRELATION,
    MB_FINAL,
    MB_MAX_OUTLIER_RATIO,
    MB_MEMORY,
    MB_OUTLIER_SIGMA,
    MB_SKIP_LOSS,
    MB_SKIP_TIME,
    MB_TIMING,
    MB_TOLERANCES,
    MLM_LOSS_RTOL,
    MLM_MEMORY_RTOL,
    MLM_NUM_ZEROS_RTOL,
    MLM_TIME_RTOL,
    NAMES,
    PIPELINE,
    RULE_SETS,
    Rule,
    help_text,
    rule,
)
from bridge_launch.logs.reader import as_float


# ------------------------------------------------------------------------------------------------
# what a source carries
# ------------------------------------------------------------------------------------------------
@dataclass
class Metrics:
    """The values of one log, run or golden-values file, each {iteration: float}."""

    label: str
    kind: str = "log"  # log | run | golden
    loss: dict = field(default_factory=dict)
    iter_ms: dict = field(default_factory=dict)
    gpu_util: dict = field(default_factory=dict)  # the `GPU utilization:` value, MODEL TFLOP/s/GPU
    num_zeros: dict = field(default_factory=dict)
    grad_norm: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)  # alloc, max_alloc, max_reserved in GB (evaluate.py's)
    memory_steps: dict = field(default_factory=dict)  # {"mem-allocated-bytes": {step: bytes}, ...}
    totals: dict = field(default_factory=dict)  # {series: N} a golden-values file's (end - start) / interval + 1
    notes: list = field(default_factory=list)
    # {series name: a function that reads it}: a series read only when a rule asks for it (`get`)
    loaders: dict = field(default_factory=dict, repr=False, compare=False)

    def get(self, name: str) -> dict:
        """The series `name` ("iter_ms", ...), read now where it was left to read on demand (one set
        on the object in the meantime wins)."""
        load = self.loaders.pop(name, None)
        if load is not None and not getattr(self, name):
            setattr(self, name, load())
        return getattr(self, name)


# Memory report names: MB train_utils.py:166-177, 1195-1213 (GB, 1e9); MC common_utils.py:320-334 (MB, 1024**2)
GB_NAMES = {
    "alloc": "mem-allocated-gigabytes",
    "max_alloc": "mem-max-allocated-gigabytes",
    "max_reserved": "mem-max-reserved-gigabytes",
}
MB_NAMES = {"alloc": "allocated", "max_alloc": "max allocated", "max_reserved": "max reserved"}
STEP_MEMORY = {"mem-allocated-bytes": "alloc", "mem-max-allocated-bytes": "max_alloc"}


def from_log(log, metric: str, label: str, kind: str = "log", *, loss=None) -> Metrics:
    """What a run's output carries (logs.reader.Log), each series read when a rule asks for it
    (`Metrics.get`): iteration-line fields, the `GPU utilization:` lines zipped with the iteration
    lines by position, as evaluate.py does (:135-142), and memory reports (alloc and max_alloc the
    first, max_reserved the largest: evaluate.py:120-132). `loss`: a function that gives the loss
    values where they are read already (a parity Series' values)."""
    from bridge_launch.workloads import trainer_protocol as P

    m = Metrics(label, kind)
    m.loaders.update(
        loss=loss or (lambda: log.float_series(metric)),
        iter_ms=lambda: log.float_series(P.FIELD_ELAPSED_MS),
        num_zeros=lambda: log.float_series(P.FIELD_NUM_ZEROS),
        grad_norm=lambda: log.float_series(P.FIELD_GRAD_NORM),
        gpu_util=lambda: _gpu_util(log, m),
        memory=lambda: _memory(log)[0],
        memory_steps=lambda: _memory(log)[1],
    )
    return m


def _gpu_util(log, m: Metrics) -> dict:
    util = log.gpu_utilization
    if not util:
        return {}
    steps = log.steps
    if len(util) != len(steps):
        m.notes.append(
            f"{len(util)} `GPU utilization:` lines and {len(steps)} iteration lines, zipped by position as "
            "evaluate.py does (:135-142)"
        )
    return dict(zip(steps, util, strict=False))


def _memory(log) -> tuple[dict, dict]:
    """The memory reports (Log.memory) as `memory` (GB by evaluate.py's keys) and `memory_steps`
    (bytes per step by Megatron-LM's series names)."""
    memory: dict = {}
    steps: dict = {}
    for rep in log.memory:
        names, scale = (GB_NAMES, 1.0) if rep["unit"] == "GB" else (MB_NAMES, 1024**2 / 1e9)
        for key, name in names.items():
            v = rep["values"].get(name)
            if not isinstance(v, (int, float)):
                continue
            gb = v * scale
            if key == "max_reserved":
                memory[key] = max(memory.get(key, gb), gb)
            else:
                memory.setdefault(key, gb)
            for series, k in STEP_MEMORY.items():
                if k == key:
                    steps.setdefault(series, {}).setdefault(rep["step"], gb * 1e9)
    return memory, steps


def read_golden(path: str) -> dict:
    """A golden-values file's JSON object (UsageError when it cannot be read); Bridge's wrapped forms
    {"baseline": {...}} and {"current": {...}} unwrapped (evaluate.py:657-666)."""
    from bridge_launch.core.errors import UsageError

    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a golden-values file is a JSON object")
    for wrap in ("baseline", "current"):
        if isinstance(data.get(wrap), dict) and len(data) == 1:
            data = data[wrap]
    return data


def is_bridge_golden(data: dict) -> bool:
    """Megatron-Bridge's layout: {"<0-indexed step>": {"lm loss": ..., ...}, "alloc": ...} (evaluate.py:732-750)."""
    return any(k.isdigit() and isinstance(v, dict) for k, v in data.items())


# Bridge's per-step names (evaluate.py:71-81, :797-812)
BRIDGE_STEP_NAMES = {
    "iter_ms": "elapsed time per iteration (ms)",
    "gpu_util": "GPU utilization",
}


def bridge_golden_series(data: dict, name: str) -> dict:
    """{iteration: value} of one per-step name; Bridge's step keys are 0-indexed (step N-1 is iteration N)."""
    return {int(k) + 1: as_float(v[name]) for k, v in data.items() if k.isdigit() and isinstance(v, dict) and name in v}


def from_golden(path: str, loss: dict, label: str) -> Metrics:
    """What a golden-values file carries: Megatron-LM's ({metric: {start_step, end_step,
    step_interval, values}}, memory in bytes, iteration-time in seconds: common.py:69-80) or
    Megatron-Bridge's (per-step objects, memory in GB)."""
    data = read_golden(path)
    m = Metrics(label, "golden", loss=dict(loss))
    if is_bridge_golden(data):
        m.iter_ms = bridge_golden_series(data, BRIDGE_STEP_NAMES["iter_ms"])
        m.gpu_util = bridge_golden_series(data, BRIDGE_STEP_NAMES["gpu_util"])
        for key in ("alloc", "max_alloc", "max_reserved"):
            if isinstance(data.get(key), (int, float)):
                m.memory[key] = float(data[key])
        return m

    def values(name: str, scale: float = 1.0) -> dict:
        entry = data.get(name)
        if not isinstance(entry, dict) or not isinstance(entry.get("values"), dict):
            return {}
        out = {}
        for k, v in entry["values"].items():
            try:
                step = int(k)
            except ValueError:
                continue
            x = as_float(v)
            out[step] = x * scale if math.isfinite(x) else x
        try:
            m.totals[name] = (entry["end_step"] - entry["start_step"]) / entry["step_interval"] + 1
        except (KeyError, TypeError, ZeroDivisionError):
            pass
        return out

    values("lm loss")  # its total
    m.iter_ms = values("iteration-time", 1000.0)  # seconds (TensorBoard), ms on the iteration line
    m.num_zeros = values("num-zeros")
    for series, key in STEP_MEMORY.items():
        v = values(series)
        if v:
            m.memory_steps[series] = v
            first = v[min(v)]
            if math.isfinite(first):
                m.memory[key] = first / 1e9
    return m


# ------------------------------------------------------------------------------------------------
# checks
# ------------------------------------------------------------------------------------------------
@dataclass
class Check:
    rule: str
    kind: str  # loss | timing | memory
    status: str  # pass | fail | info | skipped
    detail: str
    source: str
    values: dict = field(default_factory=dict)


@dataclass
class Judgement:
    a: str
    b: str
    rules: str
    passed: bool
    checks: list
    notes: list = field(default_factory=list)

    def verdicts(self) -> dict:
        """{kind: True (every judged check passed) | False | None (nothing judged)}."""
        out: dict = {}
        for kind in ("loss", "timing", "memory"):
            judged = [c for c in self.checks if c.kind == kind and c.status in ("pass", "fail")]
            out[kind] = all(c.status == "pass" for c in judged) if judged else None
        return out

    def to_dict(self) -> dict:
        return {
            "a": self.a,
            "b": self.b,
            "rules": self.rules,
            "passed": self.passed,
            "verdicts": self.verdicts(),
            "checks": [asdict(c) for c in self.checks],
            "notes": list(self.notes),
        }


def _ok(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _mean(xs: list) -> float | None:
    try:
        total = sum(xs)
    except TypeError:
        total = math.nan
    if not math.isfinite(total):  # a value that is not a finite number is left out (np.nanmean)
        xs = [x for x in xs if _ok(x)]
        total = sum(xs)
    return total / len(xs) if xs else None


def _median(xs: list) -> float | None:
    xs = sorted(xs)
    n = len(xs)
    if not n:
        return None
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def _pct(r: float) -> str:
    return f"{100 * r:+.2f}%" if _ok(r) else "n/a"


def _g(v) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _check(rules: str, name: str, status: str, detail: str, **values) -> Check:
    r = rule(rules, name)
    return Check(r.name, r.kind, status, detail, r.source, values)


# -- Megatron-Bridge: evaluate.py ---------------------------------------------------------------
def mb_tolerance(golden: float) -> float:
    """The point-wise tolerance by the golden value's magnitude (evaluate.py:217-224)."""
    return next(tol for edge, tol in MB_TOLERANCES if golden > edge)


def pearson(xs: list, ys: list) -> float | None:
    n = len(xs)
    if n < 2:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return None  # np.corrcoef gives NaN, and NaN < 0.95 is False: evaluate.py passes it
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / math.sqrt(sxx * syy)


def mb_loss(a: Metrics, b: Metrics, rules: str = "megatron-bridge") -> list[Check]:
    """validate_convergence (evaluate.py:145-328) over B's steps, after skipping the first
    int(N * 0.0) (:197-202); the four checks run on the steps where both are finite."""
    a_loss, b_loss = a.get("loss"), b.get("loss")
    steps = sorted(b_loss)
    steps = steps[int(len(steps) * MB_SKIP_LOSS) :]
    if not steps:
        return [_check(rules, "coverage", "fail", f"{b.label} has no loss values")]
    missing = [s for s in steps if not _ok(a_loss.get(s)) or not _ok(b_loss[s])]
    out = [
        _check(
            rules,
            "coverage",
            "fail" if missing else "pass",
            f"{len(missing)} of {len(steps)} steps without a finite value in both (first: step {missing[0]})"
            if missing
            else f"{len(steps)} steps, all finite in both",
            missing=len(missing),
            steps=len(steps),
        )
    ]
    both = [s for s in steps if s not in set(missing)]
    cur = [a_loss[s] for s in both]
    gold = [b_loss[s] for s in both]
    if not both:
        return out
    corr = pearson(cur, gold)
    out.append(
        _check(
            rules,
            "correlation",
            "pass" if corr is None or corr >= MB_CORRELATION else "fail",
            (f"{corr:.4f} {'>=' if corr >= MB_CORRELATION else '<'} {MB_CORRELATION}" if corr is not None else "")
            or "undefined (a constant curve; evaluate.py's NaN passes)",
            correlation=corr,
        )
    )
    bad = []
    for s, c, g in zip(both, cur, gold, strict=True):
        rel = abs(c - g) / abs(g) if g != 0 else abs(c)  # :227-230
        if rel > mb_tolerance(g):  # :232
            bad.append((s, rel, mb_tolerance(g)))
    ratio = len(bad) / len(both)
    out.append(
        _check(
            rules,
            "point-wise",
            "fail" if ratio > MB_MAX_OUTLIER_RATIO else "pass",
            f"{len(bad)} of {len(both)} steps outside their band ({ratio:.1%}, at most {MB_MAX_OUTLIER_RATIO:.0%})"
            + (f"; first: step {bad[0][0]} {100 * bad[0][1]:.2f}% > {bad[0][2]:.0%}" if bad else ""),
            outside=len(bad),
            steps=len(both),
            first=bad[0][0] if bad else None,
        )
    )
    last = steps[-1]
    if last in both:
        c, g = a_loss[last], b_loss[last]
        rel = abs(c - g) / abs(g) if g else abs(c)
        out.append(
            _check(
                rules,
                "final-loss",
                "fail" if rel > MB_FINAL else "pass",
                f"step {last}: A {_g(c)}  B {_g(g)}  ({100 * rel:.2f}%, {'beyond' if rel > MB_FINAL else 'within'} "
                f"{MB_FINAL:.0%})",
                step=last,
                rel=rel,
            )
        )
    else:
        out.append(_check(rules, "final-loss", "fail", f"A has no finite value at B's last step {last}", step=last))
    res = [c - g for c, g in zip(cur, gold, strict=True)]
    mean = sum(res) / len(res)
    std = math.sqrt(sum((r - mean) ** 2 for r in res) / len(res))  # np.std: population
    outliers = sum(1 for r in res if abs(r - mean) > MB_OUTLIER_SIGMA * std)
    ratio = outliers / len(res)
    out.append(
        _check(
            rules,
            "outliers",
            "fail" if ratio > MB_MAX_OUTLIER_RATIO else "pass",
            f"{outliers} of {len(res)} residuals beyond {MB_OUTLIER_SIGMA:g} sigma ({ratio:.1%}, at most "
            f"{MB_MAX_OUTLIER_RATIO:.0%})",
            outliers=outliers,
        )
    )
    if a.get("grad_norm"):
        bad_gn = next((s for s, v in sorted(a.grad_norm.items()) if not _ok(v)), None)
        out.append(
            _check(
                rules,
                "grad-norm",
                "fail" if bad_gn is not None else "pass",
                f"not finite at step {bad_gn}" if bad_gn is not None else f"{len(a.grad_norm)} values, all finite",
            )
        )
    else:
        out.append(_check(rules, "grad-norm", "skipped", "A carries no grad norm"))
    return out


def timing_window(steps: list) -> list:
    """B's steps after the first 10% (at least one skipped): evaluate.py:368-373."""
    steps = sorted(steps)
    return steps[max(1, int(len(steps) * MB_SKIP_TIME)) :]


def mb_timing(a: Metrics, b: Metrics, rules: str = "megatron-bridge") -> Check:
    """validate_performance (evaluate.py:331-446): the means over B's steps after the first 10%;
    signed_diff = (A - B) / B beyond ±5% fails (:379-382). Where either side has no `GPU
    utilization:` line, the iteration time in its place (the same window and band)."""

    def carries(m: Metrics) -> bool:  # a model too small for the printed precision shows only zeros
        return any(v for v in m.get("gpu_util").values() if isinstance(v, (int, float)) and math.isfinite(v))

    if carries(a) and carries(b):
        what, unit, cur_s, ref_s, higher = (
            "GPU utilization",
            " MODEL TFLOP/s/GPU",
            a.get("gpu_util"),
            b.get("gpu_util"),
            True,
        )
        note = ""
    else:
        what, unit, cur_s, ref_s, higher = "iteration time", " ms", a.get("iter_ms"), b.get("iter_ms"), False
        lacking = " and ".join(x.label for x in (a, b) if not carries(x)) or "neither"
        note = f"no `GPU utilization:` value above 0 in {lacking}: the iteration time (ms) judged in its place; "
    name = "gpu-utilization"
    window = timing_window(list(ref_s))
    if not window:
        return _check(rules, name, "skipped", f"{note}{b.label} carries no {what}", metric=what)
    cur = _mean([cur_s.get(s, math.nan) for s in window])
    gold = _mean([ref_s[s] for s in window])
    span = f"steps {window[0]}..{window[-1]}"
    if cur is None or gold is None:
        return _check(
            rules,
            name,
            "fail",
            f"{note}no {what} of {'A' if cur is None else 'B'} over B's {span}",
            metric=what,
        )
    diff = (cur - gold) / gold if gold else 0.0
    beyond = abs(diff) > MB_TIMING
    if higher:
        word = ("dropped" if diff < 0 else "rose") + f" {abs(diff):.2%}"
    else:
        word = f"{abs(diff):.2%} " + ("slower" if diff > 0 else "faster")
    status = "fail" if beyond else "pass"
    band = f"beyond ±{MB_TIMING:.0%}" if beyond else f"within ±{MB_TIMING:.0%}"
    return _check(
        rules,
        name,
        status,
        f"{note}{what} mean over {span}: A {cur:.4g}{unit}  B {gold:.4g}{unit}: {word} ({band})",
        metric=what,
        a=cur,
        b=gold,
        signed_diff=diff,
        window=[window[0], window[-1]],
    )


def mb_memory(a: Metrics, b: Metrics, rules: str = "megatron-bridge") -> list[Check]:
    """validate_memory (evaluate.py:449-569): |A - B| / B beyond 5% fails, growth and shrinkage alike."""
    name = "memory"
    memory_a, memory_b = a.get("memory"), b.get("memory")
    if not ("alloc" in memory_b and "max_alloc" in memory_b):
        return [
            _check(
                rules,
                name,
                "skipped",
                f"{b.label} has no alloc/max_alloc (no memory report); evaluate.py skips the memory check (:877-879)",
            )
        ]
    out = []
    keys = ["alloc", "max_alloc"] + (["max_reserved"] if "max_reserved" in memory_b else [])
    for key in keys:
        g = memory_b[key]
        c = memory_a.get(key)
        if c is None:
            out.append(_check(rules, name, "fail", f"{key}: A has no memory report (B {g:.4g} GB)"))
            continue
        diff = abs(c - g) / g if g else 0.0
        status = "fail" if diff > MB_MEMORY else "pass"
        out.append(
            _check(
                rules,
                name,
                status,
                f"{key}: A {c:.4g} GB  B {g:.4g} GB  ({_pct((c - g) / g if g else 0.0)}"
                + f", {'beyond' if diff > MB_MEMORY else 'within'} ±{MB_MEMORY:.0%})",
                key=key,
                a=c,
                b=g,
            )
        )
    return out


# -- Megatron-LM: the functional tests -----------------------------------------------------------
def allowed_outside(n: float) -> float:
    return min(max(n // 100, 1), 50)  # common.py:279


def mlm_series(a: dict, b: dict, rtol: float, total: float | None = None) -> dict:
    """common.py:271-282 on B's steps: np.isclose(A, B, rtol, atol=0), approximate (at most
    min(max(N//100, 1), 50) not close) and deterministic (all equal). A step A lacks is not close
    (the harness's arrays would not even line up)."""
    steps = sorted(b)
    n = total if total else len(steps)
    xs, ys = [a.get(s) for s in steps], [b[s] for s in steps]
    try:
        every_finite = math.isfinite(sum(xs)) and math.isfinite(sum(ys))  # a sum is finite only if every term is
    except TypeError:  # a step A lacks (None)
        every_finite = False
    if every_finite:  # in C loops
        close = list(
            map(operator.le, map(abs, map(operator.sub, xs, ys)), map(operator.mul, repeat(rtol), map(abs, ys)))
        )
        equal = list(map(operator.eq, xs, ys))
    else:
        close = [_ok(x) and _ok(y) and abs(x - y) <= rtol * abs(y) for x, y in zip(xs, ys, strict=True)]
        equal = [_ok(x) and x == y for x, y in zip(xs, ys, strict=True)]
    allowed = allowed_outside(n)
    share = sum(close) / len(close) if close else 0.0
    first = next((s for s, ok in zip(steps, close, strict=True) if not ok), None)
    return {
        "steps": len(steps),
        "not_close": len(steps) - sum(close),
        "allowed": allowed,
        "total": n,
        "approximate": bool(close) and share >= 1 - allowed / n,
        "deterministic": bool(equal) and all(equal),
        "first": first,
        "missing": sum(1 for s in steps if s not in a),
    }


def _mlm_check(rules, name, a: dict, b: dict, rtol, total, deterministic, label_b) -> Check:
    if not b:
        return _check(rules, name, "skipped", f"{label_b} carries no {name}")
    if not a:
        return _check(rules, name, "fail", f"A carries no {name} ({label_b} does)")
    r = mlm_series(a, b, rtol, total)
    ok = r["approximate"] and (r["deterministic"] or not deterministic)
    detail = (
        f"{r['not_close']} of {r['steps']} steps outside {rtol:.0%} (at most {r['allowed']:g} of {r['total']:g})"
        + (f", first: step {r['first']}" if r["first"] is not None else "")
        + (f", {r['missing']} missing in A" if r["missing"] else "")
        + f"; deterministic (exact): {'yes' if r['deterministic'] else 'no'}"
        + ("" if deterministic else " (information without --deterministic)")
    )
    return _check(rules, name, "pass" if ok else "fail", detail, **r)


def steady_window(b_steps) -> range:
    return range(5, 21) if (max(b_steps) if b_steps else 0) <= 25 else range(30, 46)  # common.py:241


def mlm_iteration_time(a: Metrics, b: Metrics, rules: str = "megatron-lm") -> Check:
    """common.py:239-258: the median of each over the steady window, compared as one value."""
    if not b.get("iter_ms"):
        return _check(rules, "iteration-time", "skipped", f"{b.label} carries no iteration time")
    win = steady_window(list(b.iter_ms))
    cur = _median([v for s, v in a.get("iter_ms").items() if s in b.iter_ms and s in win])
    gold = _median([v for s, v in b.iter_ms.items() if s in win])
    span = f"steps {win.start}..{win.stop - 1}"
    if cur is None or gold is None:
        return _check(
            rules, "iteration-time", "fail", f"no iteration time of {'B' if gold is None else 'A'} in the window {span}"
        )
    ok = _ok(cur) and _ok(gold) and abs(cur - gold) <= MLM_TIME_RTOL * abs(gold)
    rel = (cur - gold) / gold if gold else 0.0
    return _check(
        rules,
        "iteration-time",
        "pass" if ok else "fail",
        f"median over {span}: A {cur:.4g} ms  B {gold:.4g} ms  ({_pct(rel)}, {'within' if ok else 'beyond'} "
        f"{MLM_TIME_RTOL:.0%})",
        a=cur,
        b=gold,
        rel=rel,
    )


# -- the rule sets -------------------------------------------------------------------------------
def judge(rules: str, a: Metrics, b: Metrics, *, parity=None, deterministic: bool = False) -> Judgement:
    """A against the reference B under a rule set. bridge-launch needs `parity` (parity.compare's
    Comparison), whose verdict is the whole verdict."""
    checks: list[Check] = []
    if rules == "bridge-launch":
        c = parity
        checks.append(
            _check(
                rules,
                "loss-parity",
                "pass" if c.parity else "fail",
                f"{c.outside} of {c.steps} steps outside {100 * c.rtol:g}% (at most {c.allowed})"
                + (f"; final {'within' if c.final['ok'] else 'outside'} {100 * c.final_rtol:g}%" if c.final else "")
                + "".join(f"; {p}" for p in c.problems),
            )
        )
    elif rules == "megatron-bridge":
        checks += mb_loss(a, b, rules)
        checks.append(mb_timing(a, b, rules))
        checks += mb_memory(a, b, rules)
    elif rules == "megatron-lm":
        checks.append(
            _mlm_check(
                rules,
                "lm loss",
                a.get("loss"),
                b.get("loss"),
                MLM_LOSS_RTOL,
                b.totals.get("lm loss"),
                deterministic,
                b.label,
            )
        )
        checks.append(
            _mlm_check(
                rules,
                "num-zeros",
                a.get("num_zeros"),
                b.get("num_zeros"),
                MLM_NUM_ZEROS_RTOL,
                b.totals.get("num-zeros"),
                deterministic,
                b.label,
            )
        )
        checks.append(mlm_iteration_time(a, b, rules))
        for series in STEP_MEMORY:
            checks.append(
                _mlm_check(
                    rules,
                    series,
                    a.get("memory_steps").get(series, {}),
                    b.get("memory_steps").get(series, {}),
                    MLM_MEMORY_RTOL,
                    b.totals.get(series),
                    False,  # memory has no deterministic test (pipeline :16-17)
                    b.label,
                )
            )
    else:
        raise ValueError(f"unknown rule set {rules!r}")
    passed = (parity.parity if rules == "bridge-launch" else True) and all(c.status != "fail" for c in checks)
    return Judgement(a.label, b.label, rules, passed, checks, [*a.notes, *b.notes])


def render(j: Judgement, *, header: bool = True) -> str:
    """The judgement in words: each check with its source, then the verdict per kind."""
    out = []
    if header:
        out += [f"A: {j.a}", f"B: {j.b} (reference)"]
    out.append(f"rules: {j.rules}")
    for c in j.checks:
        mark = {"pass": "ok  ", "fail": "FAIL", "info": "info", "skipped": "--  "}[c.status]
        out.append(f"  {mark} {c.kind:<6} {c.rule:<23} {c.detail}")
        out.append(f"       {'':<6} {'':<23} [{c.source}]")
    for n in j.notes:
        out.append(f"  note: {n}")
    v = j.verdicts()
    if j.rules != "bridge-launch":
        words = ", ".join(f"{k} {'-' if x is None else 'ok' if x else 'FAILED'}" for k, x in v.items())
        out.append(("PASSED" if j.passed else "FAILED") + f" ({j.rules} rules: {words})")
    return "\n".join(out) + "\n"
