"""Stragglers after the fact: the ranks that stay slower than the rest, from the lines Megatron
prints for them (logs.reader: Log.stragglers, Log.timer_reports).

Sources (formats cited in logs/reader.py):
- Megatron-LM's StragglerDetector (--log-straggler; Megatron-Bridge's `straggler` config prints the
  same line, MB train.py:217-227, :1045-1074): per log interval the fastest and slowest rank by
  round-trip time (MnRtt/MxRtt, MC core/utils.py:1814-1833) and, with straggler_minmax_count N > 1,
  the N lowest and highest estimated throughputs (:1834-1843). In an interval a rank is slower by
  max/min - 1 on Rtt, or fastest/own - 1 on Etpt (Etpt is inversely proportional to the rank's
  time, :1800-1808). The lines carry only these extremes, so "the rest" is the fastest rank.
- Timers.log with --timing-log-option all (MC core/timers.py:357-376): every rank's time per timer;
  there a rank is slower by own / median(other ranks) - 1 on a timer.
- minmax and max timer lines (MC timers.py:338-355) name no rank: only their spread is reported.

A rank is named when it is slower by at least THRESHOLD in at least MIN_INTERVALS intervals (not
necessarily in a row: one noisy interval does not clear a rank that is slow in the others). 10%
is well above the interval-to-interval noise of a healthy job (Megatron-LM's functional tests
allow 5% on the median iteration time of whole runs, test_pretraining_regular_pipeline.py:15, and
evaluate.py ±5% on the mean GPU utilization); 5 intervals keep one slow checkpoint or data stall
from naming a rank.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

THRESHOLD = 0.10
MIN_INTERVALS = 5
SOURCE_LINE = "Megatron-LM@2a75ac12c megatron/core/utils.py:1814-1843 (StragglerDetector.report)"
SOURCE_TIMERS = "Megatron-LM@2a75ac12c megatron/core/timers.py:338-376 (Timers.log)"


@dataclass
class Straggler:
    rank: int
    intervals: int  # intervals in which it was slower by at least the threshold
    of: int  # intervals reported
    worst: float  # the largest slowdown seen (0.25: 25% slower)
    typical: float  # the median slowdown over its slow intervals
    first_step: int | None
    last_step: int | None
    by: str  # "round-trip time" | "throughput (Etpt)" | "timer NAME"
    host: str | None = None


@dataclass
class Stragglers:
    threshold: float
    min_intervals: int
    intervals: int  # straggler-detector lines read
    timer_intervals: int  # per-rank timer blocks read
    stragglers: list = field(default_factory=list)
    spreads: list = field(default_factory=list)  # minmax timers: {"timer", "intervals", "over", "median"}
    sources: list = field(default_factory=list)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["named"] = [s.rank for s in self.stragglers]
        return d


def _median(xs: list) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def slow_in_report(rep, threshold: float) -> dict:
    """{rank: (slowdown, by)} of one straggler-detector interval."""
    out: dict = {}
    rtt = rep.values.get("Rtt")
    if rtt and rtt[0] and rtt[1]:
        (lo, _), (hi, hi_rank) = rtt
        if lo > 0 and hi / lo - 1 >= threshold:
            out[hi_rank] = (hi / lo - 1, "round-trip time")
    etpt = rep.values.get("Etpt")
    fastest = max([v for v, _ in rep.top] + ([etpt[1][0]] if etpt and etpt[1] else []), default=None)
    if fastest:
        for v, r in rep.bottom:
            if v > 0 and fastest / v - 1 >= threshold and fastest / v - 1 > out.get(r, (0.0, ""))[0]:
                out[r] = (fastest / v - 1, "throughput (Etpt)")
    return out


def slow_in_timers(rep, threshold: float) -> dict:
    """{(rank, timer): slowdown} of one per-rank (--timing-log-option all) timer block."""
    out: dict = {}
    for name, ranks in rep.timers.items():
        if not isinstance(ranks, dict) or len(ranks) < 2:
            continue
        for r, t in ranks.items():
            rest = _median([x for q, x in ranks.items() if q != r])
            if rest > 0 and t / rest - 1 >= threshold:
                out[(r, name)] = t / rest - 1
    return out


def find(
    reports,
    timer_reports=(),
    *,
    hosts=None,
    threshold: float = THRESHOLD,
    min_intervals: int = MIN_INTERVALS,
) -> Stragglers:
    """The ranks slower than the rest by `threshold` in at least `min_intervals` intervals, slowest
    first. `hosts`: {rank: host}, or a function giving it (asked only when a rank is named)."""
    seen: dict = {}  # (rank, by) -> [(slowdown, step)]
    for rep in reports:
        for r, (slow, by) in slow_in_report(rep, threshold).items():
            seen.setdefault((r, by), []).append((slow, rep.step))
    per_rank = [t for t in timer_reports if t.option == "all"]
    for rep in per_rank:
        for (r, name), slow in slow_in_timers(rep, threshold).items():
            seen.setdefault((r, f"timer {name}"), []).append((slow, rep.step))
    named = []
    for (r, by), hits in seen.items():
        if len(hits) < min_intervals:
            continue
        steps = [s for _, s in hits if s is not None]
        of = len(reports) if not by.startswith("timer ") else len(per_rank)
        named.append(
            Straggler(
                r,
                len(hits),
                of,
                max(x for x, _ in hits),
                _median([x for x, _ in hits]),
                min(steps) if steps else None,
                max(steps) if steps else None,
                by,
            )
        )
    # one entry per rank: the measure that saw it most often
    best: dict = {}
    for s in sorted(named, key=lambda s: (-s.intervals, -s.typical)):
        best.setdefault(s.rank, s)
    out = sorted(best.values(), key=lambda s: (-s.intervals, -s.typical, s.rank))
    if out and hosts is not None:
        table = hosts() if callable(hosts) else hosts
        for s in out:
            s.host = table.get(s.rank)
    spreads = []
    minmax: dict = {}
    for rep in timer_reports:
        if rep.option != "minmax":
            continue
        for name, (lo, hi) in rep.timers.items():
            if lo and lo > 0:
                minmax.setdefault(name, []).append(hi / lo - 1)
    for name, xs in minmax.items():
        over = sum(1 for x in xs if x >= threshold)
        if over >= min_intervals:
            spreads.append({"timer": name, "intervals": len(xs), "over": over, "median": _median(xs)})
    sources = ([SOURCE_LINE] if reports else []) + ([SOURCE_TIMERS] if timer_reports else [])
    return Stragglers(threshold, min_intervals, len(reports), len(per_rank), out, spreads, sources)


def rank_series(reports) -> list:
    """Per-rank round-trip time per log interval, for check --plot: [("fastest rank", {step: ms}),
    ("rank R", {step: ms}) for each rank a line names slowest], the fastest first (the reference the
    others are drawn against). The lines carry only the extremes, so a rank's series has the
    intervals in which it was the slowest."""
    fastest: dict = {}
    slowest: dict = {}
    for i, rep in enumerate(reports):
        rtt = rep.values.get("Rtt")
        if not rtt or not rtt[0] or not rtt[1]:
            continue
        step = rep.step if rep.step is not None else i + 1
        fastest[step] = rtt[0][0]
        slowest.setdefault(rtt[1][1], {})[step] = rtt[1][0]
    if not fastest:
        return []
    ranks = sorted(slowest, key=lambda r: -len(slowest[r]))
    return [("fastest rank", fastest), *((f"rank {r}", slowest[r]) for r in ranks)]


def render(v: Stragglers) -> str:
    """One line (the check's report and `status RUN`): who is slow, or why nothing can be said."""
    crit = f"{v.threshold:.0%} slower in at least {v.min_intervals} intervals"
    if not v.intervals and not v.timer_intervals and not v.spreads:
        return "no straggler lines in the log (Megatron's --log-straggler / Bridge's straggler.log_straggler)"
    if v.stragglers:
        parts = []
        for s in v.stragglers:
            where = f" on {s.host}" if s.host else ""
            steps = f", steps {s.first_step}..{s.last_step}" if s.first_step is not None else ""
            parts.append(
                f"rank {s.rank}{where}: {s.typical:.0%} slower (worst {s.worst:.0%}) by {s.by} in {s.intervals} of "
                f"{s.of} intervals{steps}"
            )
        text = "; ".join(parts)
    else:
        counted = v.intervals or v.timer_intervals
        text = f"none: no rank {crit} ({counted} intervals read)" if counted else "no rank named"
    for sp in v.spreads:
        text += (
            f"; timer {sp['timer']}: max {sp['median']:.0%} over min (median) in {sp['over']} of {sp['intervals']} "
            "intervals (minmax lines name no rank; --timing-log-option all does)"
        )
    return text
