"""Loss parity between runs: aligned per-step comparison of one metric ("lm loss" by default) of a
run, a log file or a Megatron-LM golden-values file against a reference, judged the way
Megatron-LM's functional tests judge a run against its golden values
(tests/functional_tests/python_test_utils/common.py, `pipeline`): each aligned step within a
relative tolerance (np.isclose(actual, golden, rtol, atol): |a - g| <= atol + rtol * |g|), with at
most min(max(N // 100, 1), 50) steps outside it; a value that is not finite is never close. On
top of that, the final value within its own tolerance. Defaults: rtol 2%, final 3%."""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field, fields
from functools import cached_property
from itertools import repeat

from bridge_launch.core.errors import UsageError
from bridge_launch.judge import rulesets
from bridge_launch.logs.reader import LOSS, as_float, finite, gaps_text, increasing, unlogged

# The harness's metric names (golden files) for the iteration-line fields, and back.
GOLDEN_NAMES = {"lm loss": LOSS, "num-zeros": "num zeros", "iteration-time": "elapsed time per iteration (ms)"}


class Series:
    """One metric of a source by step: `values` {step: float} (nan / inf for values that are not
    finite) or `columns` (steps, values); either gives the other when first asked for, so both are
    read-only once built. A log's columns come in step order, and parity compares two such without a
    dict (`compare`)."""

    def __init__(self, label: str, values: dict | None = None, kind: str = "log", *, columns=None):
        if values is None and columns is None:
            raise TypeError("Series: give its values or its columns")
        self.label = label
        self.kind = kind  # log | run | golden
        if values is not None:
            self.__dict__["values"] = values
        if columns is not None:
            self.__dict__["columns"] = columns

    @cached_property
    def values(self) -> dict:
        return dict(zip(*self.columns, strict=True))

    @cached_property
    def columns(self) -> tuple[list, list]:
        return list(self.values), list(self.values.values())


def allowed_outside(n: int) -> int:
    """Megatron-LM's harness: min(max(N // 100, 1), 50) failing steps allowed out of N."""
    return min(max(n // 100, 1), 50)


def golden_series(path: str, metric: str, label: str | None = None) -> Series:
    """A golden-values file: Megatron-LM's {"lm loss": {"start_step", "end_step", "step_interval",
    "values": {"1": ...}}}, or Megatron-Bridge's {"<step>": {"lm loss": ...}, ...} with 0-indexed
    step keys (scripts/performance/utils/evaluate.py:732-750 @ 067f987), read as iterations."""
    data = rulesets.read_golden(path)
    if rulesets.is_bridge_golden(data):
        values = rulesets.bridge_golden_series(data, metric)
        if not values:
            names = sorted({k for v in data.values() if isinstance(v, dict) for k in v})
            have = ", ".join(names)
            raise UsageError(f"{path}: no '{metric}' in this golden-values file's steps (they have: {have})")
        return Series(label or path, values, "golden")
    name = metric if metric in data else next((g for g, f in GOLDEN_NAMES.items() if f == metric and g in data), None)
    if name is None:
        raise UsageError(f"{path}: no '{metric}' in this golden-values file (it has: {', '.join(sorted(data))})")
    entry = data[name]
    if not isinstance(entry, dict) or not isinstance(entry.get("values"), dict):
        raise UsageError(
            f"{path}: '{name}' needs a 'values' object of step -> value (Megatron-LM's golden-values format)"
        )
    values = {}
    for k, v in entry["values"].items():
        try:
            step = int(k)
        except ValueError:
            raise UsageError(f"{path}: '{name}' has a step {k!r} that is not a number") from None
        values[step] = as_float(v)
        if name == "iteration-time" and finite(values[step]):
            values[step] *= 1000.0  # seconds in the file, ms on the iteration line
    return Series(label or path, values, "golden")


def log_series(log, metric: str, label: str, kind: str = "log") -> Series:
    return Series(label, kind=kind, columns=log.float_columns(metric))


@dataclass
class Comparison:
    a: str
    b: str  # the reference
    metric: str
    steps: int  # aligned steps
    outside: int
    allowed: int
    rtol: float
    final_rtol: float
    first_outside: dict | None  # {"step", "a", "b", "rel"}
    max_rel: float | None  # signed: (A - B) / |B| at the step where |A - B| / |B| is largest
    max_rel_step: int | None
    correlation: float | None
    final: dict | None  # {"step", "a", "b", "rel", "ok"}
    parity: bool
    problems: list = field(default_factory=list)
    aligned: tuple = field(default=((), (), ()), repr=False)  # (steps, A's values, B's values) in step order

    @property
    def rows(self) -> list:
        """(step, a, b, rel) for every aligned step."""
        steps, xs, ys = self.aligned
        return [(s, x, y, _rel(x, y)) for s, x, y in zip(steps, xs, ys, strict=True)]

    def to_dict(self, rows: bool = False) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "aligned"}
        if rows:
            d["rows"] = self.rows
        return d


def _rel(a: float, b: float) -> float:
    if not (finite(a) and finite(b)):
        return math.inf
    if b == 0:
        return 0.0 if a == 0 else math.inf
    return (a - b) / abs(b)


def _final(x: float, y: float, step: int, atol: float, final_rtol: float) -> dict:
    """The final value against the reference's, within its own tolerance."""
    ok = finite(x) and finite(y) and abs(x - y) <= atol + final_rtol * abs(y)
    return {"step": step, "a": x, "b": y, "rel": _rel(x, y), "ok": ok}


def _all_finite(xs: list, ys: list) -> bool:
    return math.isfinite(sum(xs)) and math.isfinite(sum(ys))  # a sum is finite only if every term is


def _pearson(xs: list, ys: list, all_finite: bool | None = None) -> float | None:
    if not (_all_finite(xs, ys) if all_finite is None else all_finite):
        pairs = [(x, y) for x, y in zip(xs, ys, strict=False) if finite(x) and finite(y)]
        xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
    n = len(xs)
    if n < 2:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    dx = list(map(operator.sub, xs, repeat(mx)))
    dy = list(map(operator.sub, ys, repeat(my)))
    sxx = sum(map(operator.mul, dx, dx))
    syy = sum(map(operator.mul, dy, dy))
    if sxx == 0 or syy == 0:
        return 1.0 if sxx == syy else None
    return sum(map(operator.mul, dx, dy)) / math.sqrt(sxx * syy)


def compare(
    a: Series,
    b: Series,
    *,
    metric: str = LOSS,
    rtol: float = 0.02,
    atol: float = 0.0,
    allowed: int | None = None,
    final_rtol: float = 0.03,
) -> Comparison:
    """`a` against the reference `b`, on the steps both have."""
    (a_steps, a_vals), (common, b_vals) = a.columns, b.columns
    b_steps = common
    same = common == a_steps and increasing(common)  # the same steps, in order (two logs of one run length)
    if same:
        xs, ys = a_vals, b_vals
    else:
        av, bv = a.values, b.values
        common = sorted(av.keys() & bv.keys())
        xs = list(map(av.__getitem__, common))
        ys = list(map(bv.__getitem__, common))
    problems = []
    if not a_steps:
        problems.append(f"{a.label} has no '{metric}' values")
    if not b_vals:
        problems.append(f"{b.label} has no '{metric}' values")
    # steps inside a side's own range without the metric (a NaN average is not printed, a log lost
    # lines): not judged, so no parity on what is left
    for side, steps in ((a, a_steps), (b, b_steps)):
        missing, gaps = unlogged(steps if same or increasing(steps) else sorted(side.values))
        if missing:
            problems.append(
                f"{side.label} has no '{metric}' at {missing} step(s) inside its own range ({gaps_text(gaps)}): "
                "not judged"
            )
    # np.isclose, a value that is not finite never close; where every value is finite, in C loops
    all_finite = _all_finite(xs, ys)
    sizes = None  # |A - B| / |B| of every step, where no B is 0
    if all_finite:
        dist = list(map(abs, map(operator.sub, xs, ys)))
        of_b = list(map(abs, ys))
        bound = map(operator.mul, repeat(rtol), of_b)
        close = list(map(operator.le, dist, map(operator.add, repeat(atol), bound) if atol else bound))
        if 0.0 not in of_b:
            sizes = list(map(operator.truediv, dist, of_b))
    else:
        close = [finite(x) and finite(y) and abs(x - y) <= atol + rtol * abs(y) for x, y in zip(xs, ys, strict=True)]
    n = len(common)
    outside = close.count(False)
    limit = allowed if allowed is not None else allowed_outside(n)
    first = None
    if outside:
        k = close.index(False)
        first = {"step": common[k], "a": xs[k], "b": ys[k], "rel": _rel(xs[k], ys[k])}
    # the largest difference by size, reported with its sign (A below B is negative, as in the rows);
    # of equal sizes, the later step
    if sizes is None:
        sizes = [abs(_rel(x, y)) for x, y in zip(xs, ys, strict=True)]
    worst = None
    if sizes:
        top = max(sizes)
        k = n - 1 - sizes[::-1].index(top)
        worst = (top, common[k], _rel(xs[k], ys[k]))
    final = None
    if same and common:
        final = _final(xs[-1], ys[-1], common[-1], atol, final_rtol)
    elif b_vals:
        av, bv = a.values, b.values
        last_ref = max(bv)
        if last_ref in av:
            final = _final(av[last_ref], bv[last_ref], last_ref, atol, final_rtol)
        else:
            have = max(av) if av else None
            problems.append(
                f"{a.label} has no value at the reference's last step {last_ref}"
                + (f" (it ends at {have})" if have is not None else "")
            )
    if not n and a_steps and b_vals:
        av, bv = a.values, b.values
        problems.append(f"no step in common (A: {min(av)}..{max(av)}, B: {min(bv)}..{max(bv)})")
    corr = _pearson(xs, ys, all_finite)
    parity = bool(n) and outside <= limit and final is not None and final["ok"] and not problems
    return Comparison(
        a.label,
        b.label,
        metric,
        n,
        outside,
        limit,
        rtol,
        final_rtol,
        first,
        worst[2] if worst else None,
        worst[1] if worst else None,
        corr,
        final,
        parity,
        problems,
        (common, xs, ys),
    )


def render(c: Comparison, *, rows: int = 8) -> str:
    """The comparison in words, with a sample of the aligned rows around the first step out of tolerance."""
    out = [
        f"A: {c.a}",
        f"B: {c.b} (reference)",
        f"{c.metric}: {c.steps} aligned steps, {c.outside} outside {100 * c.rtol:g}% relative "
        f"(at most {c.allowed} allowed)",
    ]
    if c.first_outside:
        f = c.first_outside
        out.append(f"  first outside: step {f['step']}: A {_g(f['a'])}  B {_g(f['b'])}  ({_pct(f['rel'])})")
    if c.max_rel is not None:
        out.append(f"  largest difference: {_pct(c.max_rel)} at step {c.max_rel_step}")
    if c.correlation is not None:
        out.append(f"  correlation: {c.correlation:.4f}")
    if c.final:
        f = c.final
        out.append(
            f"  final (step {f['step']}): A {_g(f['a'])}  B {_g(f['b'])}  ({_pct(f['rel'])}, "
            f"{'within' if f['ok'] else 'outside'} {100 * c.final_rtol:g}%)"
        )
    for p in c.problems:
        out.append(f"  ! {p}")
    if c.steps and rows:
        steps, xs, ys = c.aligned
        pick = _sample(c, rows)
        out.append(f"  {'step':>8}  {'A':>12}  {'B':>12}  {'A vs B':>9}")
        prev = None
        for i in pick:
            s, x, y = steps[i], xs[i], ys[i]
            r = _rel(x, y)
            if prev is not None and i != prev + 1:
                out.append(f"  {'...':>8}")
            out.append(f"  {s:>8}  {_g(x):>12}  {_g(y):>12}  {_pct(r):>9}")
            prev = i
    out.append("PARITY" if c.parity else "NO PARITY")
    return "\n".join(out) + "\n"


def _sample(c: Comparison, n: int) -> list[int]:
    """Indices into the aligned steps: the first and last three, and around the first step outside."""
    total = c.steps
    idx = set(range(min(3, total))) | set(range(max(0, total - 3), total))
    if c.first_outside:
        k = c.aligned[0].index(c.first_outside["step"])
        idx |= {i for i in (k - 1, k, k + 1) if 0 <= i < total}
    return sorted(idx)[: max(n, 9)]


def _g(v) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _pct(r) -> str:
    if r is None:
        return ""
    if not finite(r):
        return "n/a"
    return f"{100 * r:+.2f}%"
