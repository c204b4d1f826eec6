"""Loss parity between runs: aligned per-step comparison of one metric ("lm loss" by default) of a
run, a log file or a Megatron-LM golden-values file against a reference, judged the way
Megatron-LM's functional tests judge a run against its golden values
(tests/functional_tests/python_test_utils/common.py, `pipeline`): each aligned step within a
relative tolerance (np.isclose(actual, golden, rtol, atol): |a - g| <= atol + rtol * |g|), with at
most min(max(N // 100, 1), 50) steps outside it; a value that is not finite is never close. On
top of that, the final value within its own tolerance. Defaults: rtol 2%, final 3%."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from bridge_launch.core.errors import UsageError
from bridge_launch.judge import rulesets
from bridge_launch.logs.reader import LOSS, finite

# The harness's metric names (golden files) for the iteration-line fields, and back.
GOLDEN_NAMES = {"lm loss": LOSS, "num-zeros": "num zeros", "iteration-time": "elapsed time per iteration (ms)"}


@dataclass
class Series:
    label: str
    values: dict  # step -> float (nan / inf for values that are not finite)
    kind: str = "log"  # log | run | golden


def allowed_outside(n: int) -> int:
    """Megatron-LM's harness: min(max(N // 100, 1), 50) failing steps allowed out of N."""
    return min(max(n // 100, 1), 50)


def _float(v) -> float:
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.inf  # the harness turns strings ("nan") into inf: never close


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
        values[step] = _float(v)
        if name == "iteration-time" and finite(values[step]):
            values[step] *= 1000.0  # seconds in the file, ms on the iteration line
    return Series(label or path, values, "golden")


def log_series(log, metric: str, label: str, kind: str = "log") -> Series:
    values = {s: _float(v) for s, v in log.series(metric).items()}
    return Series(label, values, kind)


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
    rows: list = field(default_factory=list)  # (step, a, b, rel) for every aligned step

    def to_dict(self, rows: bool = False) -> dict:
        d = asdict(self)
        if not rows:
            d.pop("rows")
        return d


def _rel(a: float, b: float) -> float:
    if not (finite(a) and finite(b)):
        return math.inf
    if b == 0:
        return 0.0 if a == 0 else math.inf
    return (a - b) / abs(b)


def _pearson(xs: list, ys: list) -> float | None:
    pairs = [(x, y) for x, y in zip(xs, ys, strict=False) if finite(x) and finite(y)]
    n = len(pairs)
    if n < 2:
        return None
    mx = sum(p[0] for p in pairs) / n
    my = sum(p[1] for p in pairs) / n
    sxx = sum((p[0] - mx) ** 2 for p in pairs)
    syy = sum((p[1] - my) ** 2 for p in pairs)
    if sxx == 0 or syy == 0:
        return 1.0 if sxx == syy else None
    return sum((p[0] - mx) * (p[1] - my) for p in pairs) / math.sqrt(sxx * syy)


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
    common = sorted(set(a.values) & set(b.values))
    problems = []
    if not a.values:
        problems.append(f"{a.label} has no '{metric}' values")
    if not b.values:
        problems.append(f"{b.label} has no '{metric}' values")
    rows = [(s, a.values[s], b.values[s], _rel(a.values[s], b.values[s])) for s in common]
    close = [finite(x) and finite(y) and abs(x - y) <= atol + rtol * abs(y) for _, x, y, _ in rows]
    n = len(rows)
    outside = n - sum(close)
    limit = allowed if allowed is not None else allowed_outside(n)
    first = next(
        ({"step": r[0], "a": r[1], "b": r[2], "rel": r[3]} for r, ok in zip(rows, close, strict=False) if not ok), None
    )
    # the largest difference by size, reported with its sign (A below B is negative, as in the rows)
    worst = max(((abs(r[3]), r[0], r[3]) for r in rows), default=None)
    final = None
    if b.values:
        last_ref = max(b.values)
        if last_ref in a.values:
            x, y = a.values[last_ref], b.values[last_ref]
            rel = _rel(x, y)
            final = {
                "step": last_ref,
                "a": x,
                "b": y,
                "rel": rel,
                "ok": finite(x) and finite(y) and abs(x - y) <= atol + final_rtol * abs(y),
            }
        else:
            have = max(a.values) if a.values else None
            problems.append(
                f"{a.label} has no value at the reference's last step {last_ref}"
                + (f" (it ends at {have})" if have is not None else "")
            )
    if not n and a.values and b.values:
        problems.append(f"no step in common (A: {min(a.values)}..{max(a.values)}, B: {min(b.values)}..{max(b.values)})")
    corr = _pearson([r[1] for r in rows], [r[2] for r in rows])
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
        rows,
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
    if c.rows and rows:
        pick = _sample(c, rows)
        out.append(f"  {'step':>8}  {'A':>12}  {'B':>12}  {'A vs B':>9}")
        prev = None
        for i in pick:
            s, x, y, r = c.rows[i]
            if prev is not None and i != prev + 1:
                out.append(f"  {'...':>8}")
            out.append(f"  {s:>8}  {_g(x):>12}  {_g(y):>12}  {_pct(r):>9}")
            prev = i
    out.append("PARITY" if c.parity else "NO PARITY")
    return "\n".join(out) + "\n"


def _sample(c: Comparison, n: int) -> list[int]:
    idx = set(range(min(3, len(c.rows)))) | set(range(max(0, len(c.rows) - 3), len(c.rows)))
    if c.first_outside:
        k = next(i for i, r in enumerate(c.rows) if r[0] == c.first_outside["step"])
        idx |= {i for i in (k - 1, k, k + 1) if 0 <= i < len(c.rows)}
    return sorted(idx)[: max(n, 9)]


def _g(v) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _pct(r) -> str:
    if r is None:
        return ""
    if not finite(r):
        return "n/a"
    return f"{100 * r:+.2f}%"
