"""Noise bands from repeated runs: N reference runs of one job (differing only in their seeds)
turned into min/max/mean/std per step and a recommended tolerance, the way Megatron-LM's
`compute_golden_statistics.py` does (Megatron-LM@2a75ac12c tests/functional_tests/python_test_utils/
compute_golden_statistics.py, recorded in docs/judging_sources.md §2), and a run judged against
them: a step is inside when its value lies within [min, max] widened on both sides by the
recommended tolerance, numpy.isclose-style (atol + rtol * |mean|, common.py:271).

What the script does, line by line at the pin:
- aggregation `_aggregate_training_results` (:251-293): per metric, step -> the values of every
  run, NaN left out (`_to_float`, :235-248); for iteration-time and memory also each run's values
  in step order (:274-293).
- `compute_statistics` (:413-464): per step min, max, mean, std (`statistics.stdev`, 0.0 for one
  sample), count and the samples; per metric num_samples, the largest count.
- `compute_recommended_tolerances` (:467-614): the largest observed deviation from the mean,
  relative (|sample - mean| / |mean|) or, where |mean| <= 1e-9, absolute (|sample|): per step
  (step >= start_step) for most metrics (:574-597); over each run's median of values[start_step:]
  for iteration-time (:496, :506-538); over each run's max of values[1:] for the memory metrics
  (:498, :541-572). relative_tolerance = round(max(variance * multiplier, 0.001), 4),
  absolute_tolerance = max(absolute variance * multiplier, 1e-6) (:599-612).
- the multiplier: the CLI's default 1.5 (:689-696; the function's own default is 3.0, :470), and
  start_step the CLI's default 0 (:715-722).

The golden-values file that records the bands is Megatron-LM's layout (common.py:69-80: metric ->
{start_step, end_step, step_interval, values}) with `values` the per-step mean, so every reader of
golden values (Megatron-LM's harness, whose pydantic model ignores extra keys, and `compare`)
still reads it; each metric's entry adds what the script writes for it (:782-791): `statistics`
(its statistics[metric]), `recommended_tolerance` (its recommended_tolerances[metric]) and
`metadata` (num_runs, result_files, confidence_multiplier, start_step).
"""

from __future__ import annotations

import math
import statistics as stats_lib
from dataclasses import asdict, dataclass, field

from bridge_launch.core.errors import UsageError
from bridge_launch.judge.parity import GOLDEN_NAMES, Series, allowed_outside
from bridge_launch.logs.reader import finite, gaps_text, unlogged

SCRIPT = "Megatron-LM@2a75ac12c tests/functional_tests/python_test_utils/compute_golden_statistics.py"
MULTIPLIER = 1.5  # the script's CLI default (:689-696)
START_STEP = 0  # the script's CLI default (:715-722)
MEDIAN_BASED = ("iteration-time",)  # :496
MAX_BASED = ("mem-allocated-bytes", "mem-max-allocated-bytes")  # :498
NEAR_ZERO = 1e-9  # :525, :559, :589
MIN_RELATIVE = 0.001  # :601
MIN_ABSOLUTE = 1e-6  # :608
# golden metric name -> the factor from the golden file's unit to the iteration line's (seconds -> ms)
SCALE = {"iteration-time": 1000.0}


def golden_name(metric: str) -> str:
    """The golden-values name of an iteration-line field ("elapsed time per iteration (ms)" ->
    "iteration-time"); a name that is already one (or has none) unchanged."""
    return next((g for g, f in GOLDEN_NAMES.items() if f == metric), metric)


# ------------------------------------------------------------------------------------------------
# the statistics (compute_golden_statistics.py)
# ------------------------------------------------------------------------------------------------
def _samples(runs: list[dict]) -> dict[int, list[float]]:
    """step -> [each run's value], in run order; values that are not finite left out (the script
    leaves out NaN, :264-267, and reads a golden file's "nan" strings as NaN, :235-248)."""
    out: dict[int, list[float]] = {}
    for values in runs:
        for step in sorted(values):
            v = values[step]
            if finite(v):
                out.setdefault(step, []).append(float(v))
    return out


def statistics(runs: list[dict]) -> dict[int, dict]:
    """step -> {min, max, mean, std, count, samples} over the runs' values at that step
    (`compute_statistics`, :445-460)."""
    return {
        step: {
            "min": min(xs),
            "max": max(xs),
            "mean": stats_lib.mean(xs),
            "std": stats_lib.stdev(xs) if len(xs) > 1 else 0.0,
            "count": len(xs),
            "samples": xs,
        }
        for step, xs in sorted(_samples(runs).items())
    }


def _spread(centre: float, xs: list[float]) -> tuple[float, float]:
    """(largest relative deviation, largest absolute value): the relative one where |centre| > 1e-9,
    else the absolute (:524-531, :558-565, :588-597)."""
    if abs(centre) > NEAR_ZERO:
        return max((abs(x - centre) / abs(centre) for x in xs), default=0.0), 0.0
    return 0.0, max((abs(x) for x in xs), default=0.0)


def recommend(
    name: str, stats: dict, runs: list[dict], multiplier: float = MULTIPLIER, start_step: int = START_STEP
) -> dict:
    """`compute_recommended_tolerances` for one metric (:500-612): {relative_tolerance,
    absolute_tolerance, max_observed_relative_variance, max_observed_absolute_variance,
    steps_included}."""
    rel = ab = 0.0
    included = 0
    per_run = [[float(v[s]) for s in sorted(v) if finite(v[s])] for v in runs]  # :283-293, in step order
    if name in MEDIAN_BASED or name in MAX_BASED:
        if name in MEDIAN_BASED:  # each run's median of values[start_step:] (:510-519)
            picks = [stats_lib.median(xs[start_step:]) for xs in per_run if xs[start_step:]]
        else:  # each run's max of values[1:] (all of them when it has one) (:545-553)
            picks = [max(xs[1:] if len(xs) > 1 else xs) for xs in per_run if xs]
        if picks:
            rel, ab = _spread(stats_lib.mean(picks), picks)
            included = len(picks)
    else:
        for step, st in stats.items():
            if step < start_step:  # :577-583
                continue
            included += 1
            r, a = _spread(st["mean"], st["samples"])
            rel, ab = max(rel, r), max(ab, a)
    return {
        "relative_tolerance": round(max(rel * multiplier, MIN_RELATIVE), 4),
        "absolute_tolerance": max(ab * multiplier, MIN_ABSOLUTE),
        "max_observed_relative_variance": round(rel, 6),
        "max_observed_absolute_variance": round(ab, 6),
        "steps_included": included,
    }


@dataclass
class Band:
    """One metric's band: per step {min, max, mean, std, count, samples}, and its tolerance."""

    name: str  # the golden-values name ("lm loss", "iteration-time", ...)
    sources: list  # the references' labels
    steps: dict  # step -> {min, max, mean, std, count, samples}
    tolerance: dict  # recommend()'s object
    multiplier: float = MULTIPLIER
    start_step: int = START_STEP
    label: str = ""  # what the report calls it (a bands file's path, or "the band of N references")

    @property
    def num_samples(self) -> int:
        return max((st["count"] for st in self.steps.values()), default=0)  # :439-441

    def scaled(self, k: float) -> Band:
        """The band in another unit (the golden file's seconds to the iteration line's ms)."""
        if k == 1.0:
            return self
        steps = {
            s: {
                **st,
                **{x: st[x] * k for x in ("min", "max", "mean", "std")},
                "samples": [v * k for v in st["samples"]],
            }
            for s, st in self.steps.items()
        }
        tol = dict(self.tolerance, absolute_tolerance=self.tolerance["absolute_tolerance"] * k)
        tol["max_observed_absolute_variance"] = tol["max_observed_absolute_variance"] * k
        return Band(self.name, self.sources, steps, tol, self.multiplier, self.start_step, self.label)

    def with_multiplier(self, multiplier: float) -> Band:
        """The recommended tolerance again for another multiplier, from the observed variances (:599-612)."""
        t = self.tolerance
        tol = dict(
            t,
            relative_tolerance=round(max(t["max_observed_relative_variance"] * multiplier, MIN_RELATIVE), 4),
            absolute_tolerance=max(t["max_observed_absolute_variance"] * multiplier, MIN_ABSOLUTE),
        )
        return Band(self.name, self.sources, self.steps, tol, multiplier, self.start_step, self.label)


def band(
    name: str, runs: list[dict], sources: list, *, multiplier: float = MULTIPLIER, start_step: int = START_STEP
) -> Band:
    """The band of `runs` (each {step: value}) for the golden-values metric `name`."""
    st = statistics(runs)
    return Band(name, list(sources), st, recommend(name, st, runs, multiplier, start_step), multiplier, start_step)


# ------------------------------------------------------------------------------------------------
# the golden-values file that records them
# ------------------------------------------------------------------------------------------------
def _interval(steps: list) -> int:
    """gate.golden's: the gcd of the gaps after the first (Megatron-LM samples step 1, then every 5th)."""
    gaps = [b - a for a, b in zip(steps[1:], steps[2:], strict=False)] or [
        b - a for a, b in zip(steps, steps[1:], strict=False)
    ]
    return (math.gcd(*gaps) if gaps else 1) or 1


def golden_entry(b: Band) -> dict:
    """Megatron-LM's golden entry of the band (values: the per-step mean) plus the script's own output for it."""
    steps = sorted(b.steps)
    entry: dict = {
        "start_step": steps[0] if steps else 0,
        "end_step": steps[-1] if steps else 0,
        "step_interval": _interval(steps),
        "values": {str(s): b.steps[s]["mean"] for s in steps},
        "statistics": {
            "num_samples": b.num_samples,
            "values": {str(s): dict(b.steps[s], samples=list(b.steps[s]["samples"])) for s in steps},
        },
        "recommended_tolerance": dict(b.tolerance),
        "metadata": {
            "num_runs": len(b.sources),
            "result_files": list(b.sources),
            "confidence_multiplier": b.multiplier,
            "start_step": b.start_step,
        },
    }
    return entry


def golden_file(goldens: list[dict], sources: list, *, multiplier: float = MULTIPLIER) -> dict:
    """The bands of N golden-values objects (gate.golden of each run: the script's N result files),
    every metric any of them has, as one golden-values object."""
    names = []
    for g in goldens:
        names += [n for n in g if n not in names]
    out = {}
    for name in names:
        runs = [_golden_values(g.get(name)) for g in goldens]
        b = band(name, runs, sources, multiplier=multiplier)
        if b.steps:
            out[name] = golden_entry(b)
    return out


def _golden_values(entry) -> dict:
    if not isinstance(entry, dict) or not isinstance(entry.get("values"), dict):
        return {}
    out = {}
    for k, v in entry["values"].items():
        try:
            out[int(k)] = float(v)
        except (TypeError, ValueError):
            continue  # "nan": left out (:264-267)
    return out


def is_bands(data: dict) -> bool:
    """A golden-values object that records bands (an entry with `statistics`)."""
    return any(isinstance(v, dict) and isinstance(v.get("statistics"), dict) for v in data.values())


def read_band(data: dict, metric: str, path: str) -> Band:
    """The band of `metric` (an iteration-line field or a golden name) in a bands file, in the
    iteration line's unit."""
    name = golden_name(metric) if golden_name(metric) in data else metric
    entry = data.get(name)
    if not isinstance(entry, dict) or not isinstance(entry.get("statistics"), dict):
        have = sorted(k for k, v in data.items() if isinstance(v, dict) and "statistics" in v)
        raise UsageError(f"{path}: no band for '{metric}' in this file (it has bands for: {', '.join(have) or 'none'})")
    steps = {}
    raw = entry["statistics"].get("values")
    if not isinstance(raw, dict):
        raise UsageError(f"{path}: '{name}' statistics need a 'values' object of step -> {{min, max, mean, std}}")
    for k, st in raw.items():
        try:
            step = int(k)
            row: dict = {x: float(st[x]) for x in ("min", "max", "mean", "std")}
            samples = st.get("samples") if isinstance(st.get("samples"), list) else []
            row["count"] = int(st.get("count", len(samples)))
            row["samples"] = [float(x) for x in samples]
        except (TypeError, ValueError, KeyError, AttributeError):
            raise UsageError(
                f"{path}: '{name}' step {k!r}: a band step is {{min, max, mean, std, count, samples}} of numbers"
            ) from None
        steps[step] = row
    given = entry.get("recommended_tolerance")
    meta = entry.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    try:
        if not isinstance(given, dict):
            raise TypeError
        tol = {
            "relative_tolerance": float(given["relative_tolerance"]),
            "absolute_tolerance": float(given["absolute_tolerance"]),
            "max_observed_relative_variance": float(given.get("max_observed_relative_variance", 0.0)),
            "max_observed_absolute_variance": float(given.get("max_observed_absolute_variance", 0.0)),
            "steps_included": int(given.get("steps_included", len(steps))),
        }
        multiplier = float(meta.get("confidence_multiplier", MULTIPLIER))
        start = int(meta.get("start_step", START_STEP))
    except (TypeError, ValueError, KeyError):
        raise UsageError(
            f"{path}: '{name}' needs a recommended_tolerance of numbers (relative_tolerance, absolute_tolerance, ...)"
        ) from None
    sources = [str(x) for x in meta.get("result_files", [])] or [path]
    b = Band(name, sources, steps, tol, multiplier, start, path)
    return b.scaled(SCALE.get(name, 1.0))


# ------------------------------------------------------------------------------------------------
# a run against a band
# ------------------------------------------------------------------------------------------------
@dataclass
class BandComparison:
    a: str
    b: str  # the band's label
    metric: str
    references: list
    num_samples: int
    tolerance: dict  # the recommended tolerance the band is widened by
    multiplier: float
    steps: int  # steps of A judged against the band
    outside: int
    allowed: int
    outside_steps: list  # [{step, a, min, max, mean, std, lo, hi, by, by_rel, sigmas}] in step order
    largest: dict | None  # the outside step with the largest excess relative to its mean
    parity: bool
    problems: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    rows: list = field(default_factory=list)  # (step, a, min, max, mean, std, by) for every judged step
    source: str = f"{SCRIPT}:413-464 (statistics), :467-614 (tolerances)"

    def to_dict(self, rows: bool = False) -> dict:
        d = asdict(self)
        if not rows:
            d.pop("rows")
        return d


def limits(st: dict, tol: dict) -> tuple[float, float]:
    """[min, max] widened by atol + rtol * |mean| on each side."""
    w = tol["absolute_tolerance"] + tol["relative_tolerance"] * abs(st["mean"])
    return st["min"] - w, st["max"] + w


def judge(a: Series, b: Band, *, metric: str, allowed: int | None = None) -> BandComparison:
    """A's value at each step the band has, inside [min - w, max + w] (w = atol + rtol * |mean|)
    or not; at most `allowed` steps outside (default Megatron-LM's min(max(N // 100, 1), 50),
    common.py:278-282). A value that is not finite is outside."""
    problems: list[str] = []
    if not a.values:
        problems.append(f"{a.label} has no '{metric}' values")
    if not b.steps:
        problems.append(f"the band has no '{metric}' values")
    missing, gaps = unlogged(sorted(a.values))
    if missing:  # steps of A's own range without the metric: not judged (parity.compare says the same)
        problems.append(f"{a.label} has no '{metric}' at {missing} step(s) inside its own range ({gaps_text(gaps)})")
    common = sorted(set(a.values) & set(b.steps))
    rows, out = [], []
    for s in common:
        st, x = b.steps[s], a.values[s]
        lo, hi = limits(st, b.tolerance)
        if not finite(x):
            by = math.inf
        elif x > hi:
            by = x - hi
        elif x < lo:
            by = x - lo
        else:
            by = 0.0
        rows.append((s, x, st["min"], st["max"], st["mean"], st["std"], by))
        if by != 0.0:
            mean = st["mean"]
            out.append(
                {
                    "step": s,
                    "a": x,
                    "min": st["min"],
                    "max": st["max"],
                    "mean": mean,
                    "std": st["std"],
                    "lo": lo,
                    "hi": hi,
                    "by": by,  # beyond the widened band: + above, - below
                    "by_rel": by / abs(mean) if mean and finite(by) else None,
                    "sigmas": (x - mean) / st["std"] if st["std"] > 0 and finite(x) else None,
                }
            )
    n = len(rows)
    limit = allowed if allowed is not None else allowed_outside(n)
    if b.steps and a.values:
        last = max(b.steps)
        if last not in a.values:
            problems.append(f"{a.label} has no value at the band's last step {last} (it ends at {max(a.values)})")
        if not n:
            problems.append(
                f"no step in common (A: {min(a.values)}..{max(a.values)}, band: {min(b.steps)}..{max(b.steps)})"
            )
    largest = max(out, key=lambda o: abs(o["by_rel"]) if o["by_rel"] is not None else math.inf, default=None)
    notes = []
    few = [s for s, st in b.steps.items() if st["count"] < b.num_samples]
    if few:
        notes.append(
            f"{len(few)} band steps have fewer than {b.num_samples} samples (first: step {few[0]}, "
            f"{b.steps[few[0]]['count']})"
        )
    return BandComparison(
        a.label,
        b.label or "the references",
        metric,
        list(b.sources),
        b.num_samples,
        dict(b.tolerance),
        b.multiplier,
        n,
        len(out),
        limit,
        out,
        largest,
        bool(n) and len(out) <= limit and not problems,
        problems,
        notes,
        rows,
    )


def render(c: BandComparison, *, listed: int = 10) -> str:
    t = c.tolerance
    out = [
        f"A: {c.a}",
        f"B: {c.b}: min/max/mean/std per step over {c.num_samples} runs (the reference)",
    ]
    out += [f"     {r}" for r in c.references]
    out += [
        f"{c.metric}: {c.steps} steps judged, {c.outside} outside the band [min, max] widened by the recommended "
        f"tolerance (at most {c.allowed} allowed)",
        f"  recommended tolerance: relative {100 * t['relative_tolerance']:.2f}% "
        f"({c.multiplier:g} x the largest observed deviation from the mean, "
        f"{100 * t['max_observed_relative_variance']:.4f}%), absolute {t['absolute_tolerance']:.3g}",
        f"  source: {c.source}",
    ]
    for o in c.outside_steps[:listed]:
        where = "above max" if o["by"] > 0 else "below min"
        edge = o["max"] if o["by"] > 0 else o["min"]
        if not finite(o["a"]):
            out.append(f"  outside: step {o['step']}: A {_g(o['a'])} is not finite")
            continue
        rel = f" ({_pct(o['by_rel'])} of the mean)" if o["by_rel"] is not None else ""
        sig = f", {o['sigmas']:+.1f} std from the mean" if o["sigmas"] is not None else ""
        out.append(
            f"  outside: step {o['step']}: A {_g(o['a'])} {where} {_g(edge)}; beyond the widened band by "
            f"{_g(o['by'])}{rel}{sig}"
        )
    if len(c.outside_steps) > listed:
        out.append(f"  ... {len(c.outside_steps) - listed} more outside (-o json lists all)")
    if c.largest and c.largest["by_rel"] is not None:
        out.append(f"  largest excess: {_pct(c.largest['by_rel'])} of the mean at step {c.largest['step']}")
    for p in c.problems:
        out.append(f"  ! {p}")
    for note in c.notes:
        out.append(f"  note: {note}")
    if c.rows:
        out.append(f"  {'step':>8}  {'A':>11}  {'min':>11}  {'max':>11}  {'mean':>11}  {'std':>9}  {'outside by':>10}")
        prev = None
        for i in _sample(c):
            s, x, lo, hi, mean, std, by = c.rows[i]
            if prev is not None and i != prev + 1:
                out.append(f"  {'...':>8}")
            mark = "" if by == 0 else ("n/a" if not finite(by) else _g(by))
            out.append(f"  {s:>8}  {_g(x):>11}  {_g(lo):>11}  {_g(hi):>11}  {_g(mean):>11}  {std:>9.3g}  {mark:>10}")
            prev = i
    out.append("WITHIN THE BAND" if c.parity else "OUTSIDE THE BAND")
    return "\n".join(out) + "\n"


def _sample(c: BandComparison) -> list[int]:
    n = len(c.rows)
    idx = set(range(min(3, n))) | set(range(max(0, n - 3), n))
    if c.outside_steps:
        k = next(i for i, r in enumerate(c.rows) if r[0] == c.outside_steps[0]["step"])
        idx |= {i for i in (k - 1, k, k + 1) if 0 <= i < n}
    return sorted(idx)


def _g(v) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _pct(r) -> str:
    return "n/a" if r is None or not finite(r) else f"{100 * r:+.2f}%"
