"""The one reader of Megatron-LM / Megatron-Bridge training output.

Everything bridge-launch knows about a run's progress comes from here: `status` (step, loss,
throughput, ETA, checkpoint, first error), `--follow`, `check` (the hardware gate), `compare`
(loss parity), until-done's progress and the failure reasons (classify). The formats are
the trainer protocol's (workloads/trainer_protocol.py: the facts the smoke workload writes by,
each cited at the pinned Megatron-Bridge / Megatron-LM commits); nothing here defines a format.

A run's output is a list of texts in order: the segments of an --until-done chain, the runs of a
resume lineage, and each node's log within them. The reader takes them in that order and keeps,
for every step, the line of the attempt that got furthest: a later text that starts again below
the last step seen (a restart from a checkpoint) replaces what came after its start. Rank
prefixes (`[rank3]: `, `[default0]:`, srun -l's ` 3: `) are stripped where a line is shown; the
scans do not care about them. Timestamps with and without microseconds are read; lines without
loss fields (fp16 iterations skipped while the loss scale settles) are iterations like any other.

Cost: one regex scan per text for iteration lines (fields are split only for the lines asked
for) plus one substring search per rarer kind of line, all over the raw text.
"""

from __future__ import annotations

import bisect
import math
import mmap
import operator
import os
import re
import signal
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property, lru_cache, partial
from itertools import islice

from bridge_launch.core import forked
from bridge_launch.logs import failures
from bridge_launch.workloads import trainer_protocol as P
from bridge_launch.workloads.node_facts import NODE_LINE_MARK, NODE_LINE_RE

LOSS = P.LOSS_KEY
# Texts this long (bytes) or longer are read by more than one process where the CPUs allow, a
# pass over them costing more than a fork (Log.survey, float_columns_of): a 100,000-iteration log
# is 42 MB; a fork, ~2 ms.
PARALLEL_MIN = 4 << 20


# ------------------------------------------------------------------------------------------------
# lines
# ------------------------------------------------------------------------------------------------
def strip_prefix(line: str) -> tuple[int | None, str]:
    """(rank, line without its prefixes). The rank is torchrun's `[rankN]` (global) where there is
    one, else `[defaultN]` (local to its node), else srun --label's task number, else None."""
    label = P.SRUN_LABEL_RE.match(line)
    ranks: dict = {}
    if label:
        ranks["srun"] = int(label.group(1))
        line = line[label.end() :]
    while True:
        m = P.RANK_PREFIX_RE.match(line)
        if not m:
            break
        ranks.setdefault(m.group(1), int(m.group(2)))
        line = line[m.end() :]
    if not ranks:
        return None, line
    for kind in ("rank", "default", "srun"):
        if kind in ranks:
            return ranks[kind], line
    return None, line


def number(value: str):
    """A field value as a number where it is one (int for integers, float otherwise, nan/inf
    included), else the string."""
    v = value.strip()
    if v.lstrip("+-").isdigit():  # str.isdigit before int(): most values are floats, and a raise costs
        try:
            return int(v)
        except ValueError:  # digits int() does not take (superscripts)
            pass
    try:
        return float(v)
    except ValueError:
        return v


def fields(rest: str) -> dict:
    """The `key: value |` fields after an iteration line's head, values as numbers."""
    return {k: number(v) for k, v in P.FIELD_RE.findall(rest)}


def parse_stamp(text: str) -> datetime | None:
    for fmt in P.STAMP_FORMATS:
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    return None


def _iso_stamp(text: str) -> datetime | None:
    """parse_stamp for many lines: STAMP_FORMATS are ISO 8601, which fromisoformat reads ten times faster."""
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return parse_stamp(text)


def finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


class _Mapped(mmap.mmap):
    """A log file mapped, not copied (Log.of_files(mapped=True)): finds and regexes read the page
    cache in place; what mmap lacks of bytes works on copies: `count` on one cache-sized piece at a
    time (`counts`), `decode` on the whole."""

    def count(self, sub, start: int | None = None, end: int | None = None) -> int:
        return counts(self if start is None and end is None else self[start:end], [sub])[0]

    def decode(self, *args) -> str:
        return self[:].decode(*args)


COUNT_PIECE = 1 << 20  # bytes of a mapped text copied at a time to count in (`counts`)


def counts(raw, needles: list) -> list[int]:
    """raw.count of each needle. A mapped text is copied one MiB piece at a time, all the needles
    counted on each piece: a piece reaches len(needle) - 1 bytes into the next, so that it counts the
    occurrences that start in it. A needle that can overlap itself ("aa") is counted on one copy."""
    if not isinstance(raw, _Mapped):
        return [raw.count(n) for n in needles]
    out = dict.fromkeys(needles, 0)  # each needle once
    whole = [n for n in out if any(n[:k] == n[-k:] for k in range(1, len(n)))]
    if whole:
        copy = raw[:]
        out.update((n, copy.count(n)) for n in whole)
    pieces = [n for n in out if n not in whole]
    if pieces:
        reach = max(len(n) for n in pieces) - 1
        step = COUNT_PIECE
        for lo in range(0, len(raw), step):
            piece = raw[lo : lo + step + reach]
            for n in pieces:
                # occurrences that start in [lo, lo + step): those that end within the piece and
                # start before its reach (a shorter needle must not be counted in the reach)
                out[n] += piece.count(n, 0, step + len(n) - 1)
    return [out[n] for n in needles]


_BINARY = (bytes, bytearray, mmap.mmap)


def _text(t) -> str:
    return t.decode("utf-8", "replace") if isinstance(t, _BINARY) else t


def _enc(raw, s: str):
    return s.encode() if isinstance(raw, _BINARY) else s


@lru_cache(maxsize=64)
def _rx(pattern: str, binary: bool) -> re.Pattern:
    return re.compile(pattern.encode() if binary else pattern)


def _rx_for(pattern: str, raw) -> re.Pattern:
    """`pattern` compiled for what a text was read as (bytes or str)."""
    return _rx(pattern, isinstance(raw, _BINARY))


def increasing(xs: list) -> bool:
    """Each item above the one before."""
    return all(map(operator.lt, xs, islice(xs, 1, None)))


def unlogged(steps: list) -> tuple[int, list[tuple[int, int]]]:
    """Steps missing inside a sorted series of distinct steps, at the series' own most common spacing
    (its log interval): (how many, [(first, last), ...] of each gap). A series whose last step is
    off that spacing (train_iters not a multiple of the interval) has no gap there."""
    n = len(steps)
    if n < 3 or steps[-1] - steps[0] == n - 1:  # every step, the common case, without a pass
        return 0, []
    spacing = Counter(map(operator.sub, islice(steps, 1, None), steps)).most_common(1)[0][0]
    if spacing <= 0 or steps[-1] - steps[0] == spacing * (n - 1):
        return 0, []
    gaps = [(a + spacing, b - spacing) for a, b in zip(steps, islice(steps, 1, None), strict=False) if b - a > spacing]
    gaps = [(lo, hi) for lo, hi in gaps if lo <= hi]
    return sum((hi - lo) // spacing + 1 for lo, hi in gaps), gaps


def gaps_text(gaps: list[tuple[int, int]], listed: int = 3) -> str:
    """'30-70, 90' (at most `listed` gaps, then how many more)."""
    parts = [f"{lo}-{hi}" if hi > lo else f"{lo}" for lo, hi in gaps[:listed]]
    return ", ".join(parts) + (f" and {len(gaps) - listed} more" if len(gaps) > listed else "")


def as_float(v) -> float:
    """A value as a float; one that is not a number is inf, never close to anything (Megatron-LM's
    harness turns a string into inf: common.py:253-265)."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.inf


def _floats(values: list) -> list:
    """as_float of each, in one C loop where every value is a number."""
    try:
        return list(map(float, values))
    except (TypeError, ValueError):
        return list(map(as_float, values))


def _line_at(text: str, pos: int) -> tuple[int, str]:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return start, text[start : end if end >= 0 else len(text)].rstrip("\r")


@dataclass
class Iteration:
    """One iteration line. `fields` is split on first use."""

    step: int
    total: int
    rest: str
    text: int = 0  # which of the texts it came from
    _fields: dict | None = field(default=None, repr=False)

    @property
    def fields(self) -> dict:
        if self._fields is None:
            self._fields = fields(self.rest)
        return self._fields

    @property
    def losses(self) -> dict:
        """Every loss average on the line, in print order: "lm loss", MoE auxiliary losses, "mtp_N loss"."""
        return {k: v for k, v in self.fields.items() if k not in P.NOT_LOSSES}

    def get(self, key, default=None):
        return self.fields.get(key, default)

    @property
    def loss(self):
        return self.fields.get(LOSS)

    @property
    def grad_norm(self):
        return self.fields.get(P.FIELD_GRAD_NORM)

    @property
    def elapsed_ms(self):
        return self.fields.get(P.FIELD_ELAPSED_MS)

    @property
    def skipped(self) -> int:
        return self.fields.get(P.FIELD_SKIPPED, 0) if isinstance(self.fields.get(P.FIELD_SKIPPED, 0), int) else 0

    @property
    def nan(self) -> int:
        return self.fields.get(P.FIELD_NAN, 0) if isinstance(self.fields.get(P.FIELD_NAN, 0), int) else 0

    def clean(self) -> bool:
        """No value that is not finite, both counters zero (checked on the raw text, cheaply)."""
        r = self.rest
        return P.ZERO_SKIPPED in r and P.ZERO_NAN in r and not any(mark in r for mark in P.NONFINITE_MARKS)


@dataclass
class Event:
    """A rarer line: a save, a load, a validation/test result, an exit, a NaN check, memory."""

    kind: str  # saved | loaded | starting | validation | exit | nan_check | memory
    step: int | None
    line: str  # without rank prefixes
    rank: int | None
    text: int
    pos: int
    data: dict = field(default_factory=dict)


def _nan_event(line: str, ti: int, pos: int) -> Event | None:
    m = P.NAN_CHECK_RE.search(line)
    if not m:
        return None
    rank, bare = strip_prefix(line)
    if m.group(1) is not None:
        r, it, result, msg = int(m.group(1)), int(m.group(2)), m.group(3), m.group(4)
    else:
        r, it, result, msg = int(m.group(6)), int(m.group(7)), m.group(5), m.group(8)
    return Event("nan_check", it, bare, r if r is not None else rank, ti, pos, {"result": result, "message": msg})


# ------------------------------------------------------------------------------------------------
# straggler and timer lines: their formats are trainer_protocol's (P.STRAGGLER_*, P.TIMER*)
# ------------------------------------------------------------------------------------------------
STRAGGLER_MARK, STRAGGLER_FIELD_RE = P.STRAGGLER_MARK, P.STRAGGLER_FIELD_RE
STRAGGLER_RANKS_MARK, STRAGGLER_RANKS_RE, VALUE_RANK_RE = P.STRAGGLER_RANKS_MARK, P.STRAGGLER_RANKS_RE, P.VALUE_RANK_RE
TIMERS_MARK, TIMERS_HEAD_RE, TIMER_OPTIONS = P.TIMERS_MARK, P.TIMERS_HEAD_RE, P.TIMER_OPTIONS
TIMER_MAX_RE, TIMER_ALL_NAME_RE, TIMER_ALL_RANK_RE = P.TIMER_MAX_RE, P.TIMER_ALL_NAME_RE, P.TIMER_ALL_RANK_RE
RANK_AT_LINE_START_RE = re.compile(r"^\[rank(\d+)\]: ", re.M)  # backends/base.py RANK_PREFIX_TEMPLATE
_OTHER_SOURCE_LINES = 256  # other ranks' lines passed over in a row inside one rank's block
# Where a line names a rank's host: the NaN check's RuntimeError "Rank R, node N, device D, iteration I: ..."
# (MC core/rerun_state_machine.py:518-535) and torchrun's failure summary "  host      : H" above
# "  rank      : R (local_rank: L)" (T distributed/elastic/multiprocessing/errors/__init__.py:184-202).
RANK_NODE_RE = re.compile(r"Rank (\d+), node (\S+), device \d+")
SUMMARY_HOST_RE = re.compile(r"host\s*: (\S+)\s*\n[^\n]*?rank\s*: (\d+) \(local_rank")


@dataclass
class StragglerReport:
    """One StragglerDetector line: {metric: ((min value, its rank), (max value, its rank))} and,
    with straggler_minmax_count > 1, the lowest and highest Etpt (value, rank) pairs."""

    step: int | None  # the last iteration line before it
    values: dict
    bottom: list = field(default_factory=list)
    top: list = field(default_factory=list)
    text: int = 0
    pos: int = 0


@dataclass
class TimerReport:
    """One Timers.log block: option minmax {name: (min, max)}, max {name: (None, max)}, all
    {name: {rank: ms}}."""

    option: str
    step: int | None
    timers: dict
    text: int = 0
    pos: int = 0


# ------------------------------------------------------------------------------------------------
# a run's output
# ------------------------------------------------------------------------------------------------
class Log:
    """A run's output: texts in order (segments, restarts, nodes). Everything is read lazily."""

    def __init__(self, texts):
        self.raw = [t for t in texts if t]  # str or bytes, as read

    @cached_property
    def texts(self) -> list[str]:
        return [_text(t) for t in self.raw]

    @classmethod
    def of_files(cls, paths, *, mapped: bool = False) -> "Log":
        """The files' texts, as bytes; with `mapped`, a file of a MiB or more is mapped instead of
        read (for what reads a few columns of long logs: no copy of each file first)."""
        out: list = []
        for p in paths:
            try:
                with open(p, "rb") as fh:
                    size = os.fstat(fh.fileno()).st_size if mapped else 0
                    out.append(_Mapped(fh.fileno(), 0, access=mmap.ACCESS_READ) if size >= 1 << 20 else fh.read())
            except (OSError, ValueError):
                continue
        return cls(out)

    # -- iterations --------------------------------------------------------------------------
    @cached_property
    def iterations(self) -> list[Iteration]:
        """Every iteration line, ordered by step; where a text restarts below the furthest step
        seen, its lines replace the earlier ones from there on (the attempt that counts)."""
        out: list[Iteration] = []
        restarts = self._restart_points
        for ti, text in enumerate(self.texts):
            if ti in restarts and out:
                self._cut(out, restarts[ti] + 1)
            found = P.ITERATION_RE.findall(text)
            if not found:
                continue
            for step, total, rest in found:
                s = int(step)
                if out and s <= out[-1].step:
                    self._cut(out, s)
                out.append(Iteration(s, int(total), rest, ti))
        return out

    @staticmethod
    def _cut(out: list, step: int) -> None:
        """Drop the records at `step` and after (they are being run again)."""
        lo, hi = 0, len(out)
        while lo < hi:
            mid = (lo + hi) // 2
            if out[mid].step < step:
                lo = mid + 1
            else:
                hi = mid
        del out[lo:]

    @cached_property
    def _restart_points(self) -> dict:
        """{text index: the iteration a load or a (re)start in that text resumed from}: its first
        such line, found by a substring search. The first text's is never needed (nothing before it)."""
        points = {}
        for ti in range(1, len(self.raw)):
            first = None
            for mark, rx, group in ((P.LOADED_MARK, P.LOADED_RE, 2), (P.STARTING_MARK, P.STARTING_RE, 1)):
                for pos in self._raw_positions(ti, mark):
                    m = rx.search(self._raw_line(ti, pos))
                    if m:
                        if first is None or pos < first[0]:
                            first = (pos, int(m.group(group)))
                        break
            if first is not None:
                points[ti] = first[1]
        return points

    @property
    def last(self) -> Iteration | None:
        its = self.iterations
        return its[-1] if its else None

    # -- whole columns: a findall per text, without an Iteration per line ---------------------------
    def _text_steps(self, ti: int) -> list[int]:
        """The step of every iteration line of one text, as printed (restarts not cut)."""
        cache = self.__dict__.setdefault("_steps_of", {})
        if ti not in cache:
            raw = self.raw[ti]
            cache[ti] = list(map(int, _rx_for(P.ITERATION_STEP, raw).findall(raw)))
        return cache[ti]

    def _assemble(self, parts: list) -> tuple[list, list]:
        """(steps, values) of the iteration lines that count, from each text's (steps, values) as
        printed: the cut of `iterations` (a text that restarts below what came before replaces it
        from there on)."""
        steps_out: list = []
        vals_out: list = []
        restarts = self._restart_points if len(parts) > 1 else {}

        def cut(step: int) -> None:
            k = bisect.bisect_left(steps_out, step)
            del steps_out[k:], vals_out[k:]

        for ti, (steps, vals) in enumerate(parts):
            if ti in restarts and steps_out:
                cut(restarts[ti] + 1)
            if not steps:
                continue
            if (not steps_out or steps[0] > steps_out[-1]) and increasing(steps):
                steps_out += steps
                vals_out += vals
                continue
            for st, v in zip(steps, vals, strict=True):
                if steps_out and st <= steps_out[-1]:
                    cut(st)
                steps_out.append(st)
                vals_out.append(v)
        return steps_out, vals_out

    @cached_property
    def steps(self) -> list[int]:
        """The steps of the iteration lines that count, in order (`iterations`' steps, fields unread)."""
        if "iterations" in self.__dict__:
            return [it.step for it in self.iterations]
        parts = [(st, st) for st in map(self._text_steps, range(len(self.raw)))]
        return self._assemble(parts)[0]

    def _column(self, key: str) -> tuple[list, list] | None:
        """(steps, raw values) of `key` over the iteration lines that count, by two findalls per text
        (the steps, the `| key: value |` fields) paired in order; None where a text's two counts
        differ (some lines without the field): then only the line-by-line reading pairs them. A text
        none of whose lines carries the field gives no values (its lines still cut what they rerun)."""
        parts = []
        pattern = P.field_value(key)
        lacking = False
        for ti, raw in enumerate(self.raw):
            steps = self._text_steps(ti)
            values = _rx_for(pattern, raw).findall(raw) if steps else []
            if not values and steps:
                values, lacking = [None] * len(steps), True
            elif len(values) != len(steps):
                return None
            parts.append((steps, values))
        steps, values = self._assemble(parts)
        if lacking:
            kept = [(st, v) for st, v in zip(steps, values, strict=True) if v is not None]
            steps, values = [st for st, _ in kept], [v for _, v in kept]
        return steps, values

    def series(self, key: str = LOSS) -> dict:
        """{step: value} of one field (a loss key, "grad norm", ...) over every iteration line, the
        value as a number where it is one (`number`).

        Read as a column (`_column`) where every iteration line carries the field; else the value is
        cut out of each line by two substring searches (the field's `| key: ` and the `|` after it),
        the same text FIELD_RE gives, without splitting every field of every line."""
        if "iterations" not in self.__dict__:
            col = self._column(key)
            if col is not None:
                steps, values = col
                return dict(zip(steps, (number(_text(v)) for v in values), strict=True))
        out = {}
        needle, head = f"| {key}: ", f" {key}: "
        for it in self.iterations:
            if it._fields is not None:
                if key in it._fields:
                    out[it.step] = it._fields[key]
                continue
            r = it.rest
            i = r.find(needle)
            if i >= 0:
                i += len(needle)
            elif r.startswith(head):
                i = len(head)
            else:
                continue
            j = r.find("|", i)
            if j >= 0:
                out[it.step] = number(r[i:j])
        return out

    def float_series(self, key: str = LOSS) -> dict:
        """`series` as floats (a value that is not a number is inf), for long comparisons."""
        return dict(zip(*self.float_columns(key), strict=True))

    def float_columns(self, key: str = LOSS) -> tuple[list, list]:
        """float_series as (steps, values), in step order."""
        col = None if "iterations" in self.__dict__ else self._column(key)
        if col is None:
            d = {st: as_float(v) for st, v in self.series(key).items()}
            return list(d), list(d.values())
        steps, values = col
        return steps, _floats(values)

    def keys(self) -> list[str]:
        """The field names the iteration lines carry, in first-seen order: those of the first and the
        last line (read from each end of the texts)."""
        seen: dict = {}
        for it in (self.initial(), self.final()):
            for k in it.fields if it is not None else ():
                seen.setdefault(k, None)
        return list(seen)

    # -- rarer lines ------------------------------------------------------------------------------
    def _find(self, mark: str):
        """(text index, position, line start, line) of each line holding `mark`, in order."""
        for ti, text in enumerate(self.texts):
            pos = text.find(mark)
            while pos >= 0:
                start, line = _line_at(text, pos)
                yield ti, pos, start, line
                nxt = text.find("\n", pos)
                if nxt < 0:
                    break
                pos = text.find(mark, nxt)

    @cached_property
    def events(self) -> list[Event]:
        out: list[Event] = []
        for ti, pos, _, line in self._find(P.SAVED_MARK):
            m = P.SAVED_RE.search(line)
            if m:
                rank, bare = strip_prefix(line)
                out.append(Event("saved", int(m.group(1)), bare, rank, ti, pos, {"path": m.group(2)}))
        for ti, pos, _, line in self._find(P.LOADED_MARK):
            m = P.LOADED_RE.search(line)
            if m:
                rank, bare = strip_prefix(line)
                out.append(Event("loaded", int(m.group(2)), bare, rank, ti, pos, {"path": m.group(1)}))
        for ti, pos, _, line in self._find(P.STARTING_MARK):
            m = P.STARTING_RE.search(line)
            if m:
                rank, bare = strip_prefix(line)
                out.append(Event("starting", int(m.group(1)), bare, rank, ti, pos))
        for ti, pos, _, line in self._find(P.VALIDATION_MARK):
            m = P.VALIDATION_RE.search(line)
            if m:
                rank, bare = strip_prefix(line)
                values = {}
                for k, v in P.FIELD_RE.findall(m.group(4)):
                    if k.endswith(" value"):
                        values[k[: -len(" value")]] = number(v)
                out.append(
                    Event(
                        "validation",
                        int(m.group(2)),
                        bare,
                        rank,
                        ti,
                        pos,
                        {"set": m.group(3) or "in-loop", "losses": values},
                    )
                )
        for ti, pos, _, line in self._find(P.EXIT_MARK):
            m = P.EXIT_RE.search(line)
            if m:
                rank, bare = strip_prefix(line)
                what = m.group(1)
                kind = next((k for word, k in P.EXIT_KINDS if word in what), "exit")
                step = re.search(r"at iteration (\d+)", what)
                out.append(
                    Event(
                        "exit",
                        int(step.group(1)) if step else self._step_before(ti, pos),
                        bare,
                        rank,
                        ti,
                        pos,
                        {"why": kind, "text": what},
                    )
                )
        for ti, pos, _, line in self._find(P.NAN_CHECK_MARK):
            ev = _nan_event(line, ti, pos)
            if ev:
                out.append(ev)
        out.sort(key=lambda e: (e.text, e.pos))
        return out

    def _step_before(self, ti: int, pos: int) -> int | None:
        """The step of the last iteration line before `pos` in text `ti` (for lines without one)."""
        text = self.texts[ti]
        lo = pos
        while lo > 0:
            lo = max(0, lo - 65536)
            hits = P.ITERATION_RE.findall(text, lo, pos)
            if hits:
                return int(hits[-1][0])
        return None

    def of_kind(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]

    @property
    def saves(self) -> list[Event]:
        return self.of_kind("saved")

    @property
    def validations(self) -> list[Event]:
        return self.of_kind("validation")

    @property
    def exits(self) -> list[Event]:
        return self.of_kind("exit")

    @property
    def nan_checks(self) -> list[Event]:
        return self.of_kind("nan_check")

    @cached_property
    def step_times(self) -> list[tuple[float, float]]:
        """Bridge's rank-0 `Step Time : S s GPU utilization: T MODEL_TFLOP/s/GPU` lines: (seconds, TFLOP/s/GPU)."""
        return [(float(s), float(t)) for raw in self.raw for s, t in _rx_for(P.STEP_TIME_RE.pattern, raw).findall(raw)]

    @cached_property
    def gpu_utilization(self) -> list[float]:
        """The TFLOP/s/GPU of every `Step Time` line, in order (`step_times`' second values)."""
        if "step_times" in self.__dict__:
            return [t for _, t in self.step_times]
        out: list[float] = []
        for raw in self.raw:
            out += map(float, _rx_for(P.STEP_TIME_UTIL, raw).findall(raw))
        return out

    @property
    def last_step_time(self) -> tuple[float, float] | None:
        for text in reversed(self.texts):
            pos = text.rfind("Step Time :")
            if pos >= 0:
                m = P.STEP_TIME_RE.search(_line_at(text, pos)[1])
                if m:
                    return float(m.group(1)), float(m.group(2))
        return None

    @cached_property
    def memory(self) -> list[dict]:
        """Memory reports: {"rank", "step", "unit", "values": {name: number}}."""
        out = []
        for raw in self.raw:
            for rank, step, unit, rest in _rx_for(P.MEMORY_RE.pattern, raw).findall(raw):
                unit, rest = _text(unit), _text(rest)
                values = {k.strip(): number(v) for k, v in re.findall(r"\|\s*([^|:]+?):\s*([^|]+)", rest)}
                out.append({"rank": int(rank), "step": int(step), "unit": unit, "values": values})
        return out

    # -- straggler and timer lines: found by a substring search of the raw texts ----------------------
    def _raw_lines(self, ti: int, pos: int, one_source: bool = False):
        """The line holding `pos` and the lines after it, one by one, decoded, without rank prefixes.
        With `one_source`, only the lines with the first line's prefixes: a block one rank prints
        (a Timers.log block) reaches the log line by line, one tail thread a rank copying
        `header + line` (T distributed/elastic/multiprocessing/tail_log.py:42-46, :128-140), so
        other ranks' lines can fall between its lines. The prefix text is compared, not the rank:
        `[defaultN]` is local to a node, and srun's label tells the nodes apart. Lines without
        prefixes cannot be told apart and are all yielded; at most _OTHER_SOURCE_LINES of other
        sources are passed over in a row."""
        raw = self.raw[ti]
        nl = _enc(raw, "\n")
        start = raw.rfind(nl, 0, pos) + 1
        source, skipped = None, 0
        while start < len(raw):
            stop = raw.find(nl, start)
            line = _text(raw[start : stop if stop >= 0 else len(raw)]).rstrip("\r")
            bare = strip_prefix(line)[1]
            head = line[: len(line) - len(bare)]
            if source is None:
                source = head
            if not one_source or not source or head == source:
                skipped = 0
                yield bare
            elif skipped < _OTHER_SOURCE_LINES:
                skipped += 1
            else:
                return
            if stop < 0:
                return
            start = stop + 1

    def _raw_line(self, ti: int, pos: int) -> str:
        return next(self._raw_lines(ti, pos), "")

    def _step_at(self, ti: int, pos: int) -> int | None:
        """The step of the last iteration line before `pos` (found backwards, line heads only)."""
        raw = self.raw[ti]
        rx = _rx_for(P.ITERATION_HEAD, raw)
        needle = _enc(raw, "iteration ")
        lo = max(0, pos - (1 << 20))
        p = raw.rfind(needle, lo, pos)
        while p >= 0:
            m = rx.match(raw, p)
            if m:
                return int(m.group(1))
            p = raw.rfind(needle, lo, p)
        return None

    @cached_property
    def stragglers(self) -> list[StragglerReport]:
        """Every StragglerDetector line (--log-straggler), in order, with its Bottom/Top lines."""
        out: list[StragglerReport] = []
        for ti, pos in self.raw_find(STRAGGLER_MARK):
            line = self._raw_line(ti, pos)
            values: dict = {}
            for mm, name, value, rank in STRAGGLER_FIELD_RE.findall(line):
                pair = values.setdefault(name, [None, None])
                pair[0 if mm == "Mn" else 1] = (float(value), int(rank))
            if "Rtt" in values and None not in values["Rtt"]:
                minmax = {k: tuple(v) for k, v in values.items()}
                out.append(StragglerReport(self._step_at(ti, pos), minmax, text=ti, pos=pos))
        if out:
            where = [(r.text, r.pos) for r in out]
            for ti, pos in self.raw_find(STRAGGLER_RANKS_MARK):
                m = STRAGGLER_RANKS_RE.search(self._raw_line(ti, pos))
                k = bisect.bisect_left(where, (ti, pos)) - 1  # the report it follows
                if m and k >= 0:
                    ranked = [(float(v), int(r)) for v, r in VALUE_RANK_RE.findall(m.group(2))]
                    setattr(out[k], "bottom" if m.group(1) == "Bottom" else "top", ranked)
        return out

    @cached_property
    def timer_reports(self) -> list[TimerReport]:
        """Every Timers.log block (--timing-log-option minmax, max or all), in order."""
        out: list[TimerReport] = []
        for ti, pos in self.raw_find(TIMERS_MARK):
            lines = self._raw_lines(ti, pos, one_source=True)
            m = TIMERS_HEAD_RE.search(next(lines))
            if not m:
                continue
            option = TIMER_OPTIONS[m.group(1)]
            timers: dict = {}
            name = None
            for line in lines:
                if option == "minmax":
                    t = P.TIMER_MINMAX_RE.search(line)
                    if not t:
                        break
                    timers[t.group(1)] = (float(t.group(2)), float(t.group(3)))
                elif option == "max":
                    t = TIMER_MAX_RE.search(line)
                    if not t:
                        break
                    timers[t.group(1)] = (None, float(t.group(2)))
                else:
                    r = TIMER_ALL_RANK_RE.search(line)
                    if r and name is not None:
                        timers[name][int(r.group(1))] = float(r.group(2))
                        continue
                    n = TIMER_ALL_NAME_RE.search(line)
                    if not n:
                        break
                    name = n.group(1)
                    timers[name] = {}
            if timers:
                out.append(TimerReport(option, self._step_at(ti, pos), timers, ti, pos))
        return out

    @cached_property
    def rank_hosts(self) -> dict:
        """{rank: host} where a line names both (NaN checks, torchrun's failure summary)."""
        out: dict = {}
        for ti, pos in self.raw_find(", node "):
            m = RANK_NODE_RE.search(self._raw_line(ti, pos))
            if m:
                out.setdefault(int(m.group(1)), m.group(2))
        for ti, pos in self.raw_find("Root Cause"):
            raw = self.raw[ti]
            window = _text(raw[pos : pos + 4096])
            for host, rank in SUMMARY_HOST_RE.findall(window):
                out.setdefault(int(rank), host)
        # a node's own log: the launcher's line names the host, the rank prefixes its ranks
        for ti, pos in self.raw_find(NODE_LINE_MARK):
            m = NODE_LINE_RE.search(self._raw_line(ti, pos))
            if m:
                for rank in set(RANK_AT_LINE_START_RE.findall(self.texts[ti])):
                    out.setdefault(int(rank), m.group(1))
        return out

    def stamp_of(self, it: Iteration) -> datetime | None:
        """The timestamp in front of an iteration line (with or without microseconds), if any."""
        text = self.texts[it.text]
        head = f"iteration {it.step:8d}/"
        pos = text.rfind(head)
        if pos < 0:
            return None
        start = text.rfind("\n", 0, pos) + 1
        m = P.STAMP_RE.search(text, start, pos)
        return parse_stamp(m.group(1)) if m else None

    def timeline(self) -> list[tuple[int, datetime | None, float | None, int]]:
        """(step, stamp, elapsed ms per iteration, text index) of every iteration line as printed,
        text by text: restarts are not cut (GPU-hour accounting counts each step every time it ran)."""
        out = []
        for ti, text in enumerate(self.texts):
            for m in P.ITERATION_RE.finditer(text):
                start = text.rfind("\n", 0, m.start()) + 1
                stamp = P.STAMP_RE.search(text, start, m.start())
                rest = m.group(3)
                i = rest.find(f"{P.FIELD_ELAPSED_MS}:")
                ms = number(rest[i + len(P.FIELD_ELAPSED_MS) + 1 : rest.find("|", i)]) if i >= 0 else None
                out.append(
                    (
                        int(m.group(1)),
                        _iso_stamp(stamp.group(1)) if stamp else None,
                        float(ms) if finite(ms) else None,
                        ti,
                    )
                )
        return out

    # -- whole-log questions answered without parsing every line (the gate on long logs) ---------
    def tally(self, metric: str = LOSS) -> dict:
        """Counts over the raw texts, by substring search alone: iteration lines (by their skipped
        counter, which every Megatron iteration line has), lines whose skipped and NaN counters are
        both 0, lines carrying `metric`; and where a loss or norm is not finite (`nonfinite`). Exact
        for Megatron's formats; a mismatch sends the caller to the line-by-line reading."""
        return {**self._counts(metric), "nonfinite": self.nonfinite}

    def _counts(self, metric: str) -> dict:
        cache = self.__dict__.setdefault("_counts_of", {})
        if metric not in cache:
            counters = zero = with_metric = 0
            for raw in self.raw:
                c, z, w = counts(raw, [_enc(raw, s) for s in (P.FIELD_SKIPPED + ":", P.ZERO_COUNTERS, f"| {metric}: ")])
                counters, zero, with_metric = counters + c, zero + z, with_metric + w
            cache[metric] = {"lines": counters, "counters": counters, "zero_counters": zero, "with_metric": with_metric}
        return cache[metric]

    @cached_property
    def nonfinite(self) -> list[tuple[int, int]]:
        """(text index, raw position) of the first loss and the first norm in each text whose value
        is not finite."""
        out = []
        for ti, raw in enumerate(self.raw):
            for rx in P.NONFINITE_RES:
                m = (rx[1] if isinstance(raw, _BINARY) else rx[0]).search(raw)
                if m:
                    out.append((ti, m.start()))
        return out

    @property
    def size(self) -> int:
        """The length of the texts, in bytes (or characters) as read."""
        return sum(map(len, self.raw))

    def survey(self, metric: str = LOSS) -> None:
        """On a log of PARALLEL_MIN or more, make now the whole-text passes of `check` (the gate's
        counts, non-finite values and NaN-check errors, the straggler and timer lines), each cached
        as when first asked for: the non-finite searches and the timer lines in a forked child
        (core/forked.py) while this process makes the rest, about half the passes each. A shorter
        log is left to read each when asked for."""
        if self.size < PARALLEL_MIN:
            return
        with forked.Child(lambda: (self.nonfinite, self.timer_reports)) as there:
            self._counts(metric)
            for name in ("nan_check_errors", "stragglers"):  # cached properties
                getattr(self, name)
            nonfinite, timers = there.result()
        self.__dict__.update(nonfinite=nonfinite, timer_reports=timers)

    def _tail_iterations(self, raw, first: bool = False) -> list:
        """The iteration lines at the end (or, with first, the start) of one raw text: a window
        that doubles until it holds one."""
        size = 1 << 16
        n = len(raw)
        while True:
            chunk = raw[:size] if first else raw[max(0, n - size) :]
            text = _text(chunk)
            if not first and size < n:
                text = text[text.find("\n") + 1 :]  # the window may start mid-line
            hits = P.ITERATION_RE.findall(text)
            if hits or size >= n:
                return hits
            size *= 4

    def final(self) -> Iteration | None:
        """The last iteration line of the last text that has one (the attempt that counts)."""
        for ti in range(len(self.raw) - 1, -1, -1):
            hits = self._tail_iterations(self.raw[ti])
            if hits:
                step, total, rest = hits[-1]
                return Iteration(int(step), int(total), rest, ti)
        return None

    def initial(self) -> Iteration | None:
        for ti, raw in enumerate(self.raw):
            hits = self._tail_iterations(raw, first=True)
            if hits:
                step, total, rest = hits[0]
                return Iteration(int(step), int(total), rest, ti)
        return None

    def last_line(self, mark: str, regex=None, *, after: tuple | None = None):
        """(text index, match or None, bare line, rank) of the last line holding `mark` (and
        matching `regex`), searching texts from the end; with after=(text index, raw position),
        only what comes after that point."""
        for ti in range(len(self.raw) - 1, -1, -1):
            if after and ti < after[0]:
                break
            raw = self.raw[ti]
            lo = after[1] if after and ti == after[0] else 0
            end = len(raw)
            needle = _enc(raw, mark)
            while True:
                pos = raw.rfind(needle, lo, end)
                if pos < 0:
                    break
                start = raw.rfind(_enc(raw, "\n"), 0, pos) + 1
                stop = raw.find(_enc(raw, "\n"), pos)
                line = _text(raw[start : stop if stop >= 0 else len(raw)]).rstrip("\r")
                m = regex.search(line) if regex else None
                if regex is None or m:
                    rank, bare = strip_prefix(line)
                    return ti, m, bare, rank
                end = start
        return None

    def raw_find(self, mark: str) -> list:
        """(text index, raw position) of each occurrence of `mark` (a substring search per text)."""
        return [(ti, pos) for ti in range(len(self.raw)) for pos in self._raw_positions(ti, mark)]

    def _raw_positions(self, ti: int, mark: str):
        raw = self.raw[ti]
        needle = _enc(raw, mark)
        pos = raw.find(needle)
        while pos >= 0:
            yield pos
            pos = raw.find(needle, pos + len(needle))

    @cached_property
    def nan_check_errors(self) -> list[Event]:
        """The NaN-check errors, found by a substring search of the raw texts."""
        out = []
        for ti, pos in self.raw_find(P.NAN_CHECK_MARK):
            raw = self.raw[ti]
            start = raw.rfind(_enc(raw, "\n"), 0, pos) + 1
            stop = raw.find(_enc(raw, "\n"), pos)
            ev = _nan_event(_text(raw[start : stop if stop >= 0 else len(raw)]), ti, pos)
            if ev:
                out.append(ev)
        return out

    def position_of(self, it: Iteration) -> int:
        """Where the (last) line of this iteration lies in its raw text."""
        raw = self.raw[it.text]
        return raw.rfind(_enc(raw, f"iteration {it.step:8d}/"))

    # -- summaries ----------------------------------------------------------------------------
    def progress(self) -> dict:
        """Status fields from the last iteration line and the rarer lines: step, train_iters, loss,
        grad_norm, step_time_s, tflops_per_gpu, global_batch, checkpoint (the last save), error."""
        out: dict = {}
        last = self.last
        if last is not None:
            out.update(step=last.step, train_iters=last.total)
            f = last.fields
            if LOSS in f:
                out["loss"] = f[LOSS]
            elif last.losses:
                key, value = next(iter(last.losses.items()))
                out.update(loss=value, loss_key=key)
            for key, name in (
                (P.FIELD_GRAD_NORM, "grad_norm"),
                (P.FIELD_GBS, "global_batch"),
                (P.FIELD_TFLOPS, "tflops_per_gpu"),
                (P.FIELD_LR, "lr"),
            ):
                if key in f:
                    out[name] = f[key]
            if finite(f.get(P.FIELD_ELAPSED_MS)):
                out["step_time_s"] = f[P.FIELD_ELAPSED_MS] / 1000.0
        st = self.last_step_time
        if st:
            out.setdefault("step_time_s", st[0])
            out.setdefault("tflops_per_gpu", st[1])
        saves = self.saves
        if saves:
            out["saved"] = saves[-1].step
        err = first_error(self.texts)
        if err:
            out["error"] = err
        return out


# ------------------------------------------------------------------------------------------------
# the old entry points, read through the Log
# ------------------------------------------------------------------------------------------------
def float_columns_of(logs: list[Log], key: str = LOSS) -> list[tuple[list, list]]:
    """Each log's float_columns(key). The logs are dealt in turn to this process and to one forked
    child per further CPU (core/forked.py: cpus()), each reading its share one log after another; a
    share under PARALLEL_MIN is read here. Two logs on two CPUs: one each."""
    ways = max(1, min(forked.cpus(), len(logs)))
    shares = [range(k, len(logs), ways) for k in range(ways)]

    def read(share: range) -> list:
        return [logs[i].float_columns(key) for i in share]

    out: list = [None] * len(logs)
    with ExitStack() as stack:
        children = [
            (share, stack.enter_context(forked.Child(partial(read, share), fork=_size(logs, share) >= PARALLEL_MIN)))
            for share in shares[1:]
        ]
        for share, columns in [(shares[0], read(shares[0]))] + [(sh, child.result()) for sh, child in children]:
            for i, col in zip(share, columns, strict=True):
                out[i] = col
    return out


def _size(logs: list[Log], share: range) -> int:
    return sum(logs[i].size for i in share)


def last_step(text: str):
    """(step, total, loss) of the last iteration line in `text`, or None."""
    hits = P.ITERATION_RE.findall(text) if text else []
    if not hits:
        return None
    step, total, rest = hits[-1]
    loss = fields(rest).get(LOSS)
    return int(step), int(total), loss if isinstance(loss, (int, float)) else None


def progress(texts) -> dict:
    """Status fields from the tails of a run's logs (backends.base.progress)."""
    return Log(list(texts)).progress()


# ------------------------------------------------------------------------------------------------
# the first error line of the failing rank
# ------------------------------------------------------------------------------------------------
# A Python exception's last line ("torch.OutOfMemoryError: CUDA out of memory ..."), the trainer's
# NaN check, and launcher/runtime errors (srun, pyxis, NCCL).
_EXCEPTION_RE = re.compile(
    r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt|Failure)\b:? ?.*$"
    r"|^[\w.]*(?:Error|Exception)$"
)
_ERROR_WORDS = re.compile(r"\berror: |\bERROR\b|\bFATAL\b|Segmentation fault|core dumped|Killed\b")
# Lines that are consequences of another rank's failure, not its cause.
_COLLATERAL = re.compile(
    r"ChildFailedError|SignalException|torch\.distributed\.elastic|Sending process \d+ closing signal|"
    r"failed \(exitcode: -\d+\)|srun: error: .*(Terminated|Killed)|srun: .*(task|step).*(abort|cancel)|"
    r"DistBackendError|ProcessGroupNCCL.*(abort|Aborting|shut)|Socket Timeout|Connection reset by peer|"
    # A peer died first. gloo (CPU): "[.../gloo/transport/tcp/pair.cc:553] Connection closed by peer
    # [ADDR]:PORT. This is typically caused by a remote worker crashing." (torch 2.13 wheel). NCCL
    # (the real trainer): ncclGetErrorString(ncclRemoteError) "remote process exited or there was a
    # network error" (NCCL src/init.cc), torch's "ncclRemoteError: A call failed possibly due to a
    # network error or a remote process exiting prematurely." (T csrc/distributed/c10d/NCCLUtils.cpp,
    # getNcclErrorDetailStr) and NCCL's "socketProgress: Connection closed by remote peer". Alone,
    # such a line is still reported (the fallback below); it only yields to a rank with a cause.
    r"Connection closed by (remote )?peer|caused by a remote worker crashing|"
    r"remote process exited or there was a network error|ncclRemoteError|"
    r"Broken pipe|recvValue|TCPStore|exiting program|^SystemExit: 0$|with SystemExit: 0\b|"
    r"bridge-launch: |^\[W |UserWarning|FutureWarning|DeprecationWarning"
)


# Substrings without which a text holds no error line _candidates would yield (cheap to rule out).
_SUSPECT_WORDS = (
    "rror",
    "RROR",
    "xception",
    "Traceback",
    "FATAL",
    "Killed",
    "Unexpected result",
    "Segmentation",
    "core dumped",
    "imeout",
    "TIMEOUT",
    "NCCL",
    "ECC",
    "Xid",
    "NODE_FAIL",
    "oom-kill",
    "No such file",
    "lost connection",
    "Broken pipe",
    "reset by peer",
    "Interrupt",
    "Failure",
    "out of memory",
    "ALLOC_FAILED",
    "Watchdog",
    "HYBRID-EP",
    "Node failure",
    "Dataset path",
    "not a valid Energon",
    "Connection reset",
)


@dataclass
class ErrorLine:
    rank: int | None
    line: str  # without rank prefixes
    kind: str | None = None  # failures.CLASSES' class ("deterministic", "node", "flaky", "hang"), or None
    what: str | None = None  # the class name, e.g. "out of memory"

    def __str__(self) -> str:
        return (f"rank {self.rank}: " if self.rank is not None else "") + self.line[:300]


def _candidates(text: str):
    """(rank, bare line, index) of each line that reads like an error, in order: known failures
    (failures.py), NaN checks, error words, and the exception line that ends each traceback."""
    known = failures.known_re()
    in_tb: dict = {}  # rank -> inside a traceback, waiting for its exception line
    for i, raw in enumerate(text.splitlines()):
        rank, bare = strip_prefix(raw)
        s = bare.strip()
        if not s:
            continue
        if s.startswith("Traceback (most recent call last)"):
            in_tb[rank] = True
            continue
        if in_tb.get(rank):
            if bare[:1] in (" ", "\t") or s.startswith(("^", "~")):
                continue  # a frame or its source line
            in_tb[rank] = False
            if not P.BENIGN_EXIT_RE.search(s):
                yield rank, s, i, True
            continue
        if known.search(s) or _EXCEPTION_RE.match(s) or P.NAN_CHECK_MARK in s or _ERROR_WORDS.search(s):
            if not P.BENIGN_EXIT_RE.search(s):
                yield rank, s, i, False


def _scan_window(text: str) -> str:
    """Errors are near where things stopped; reading at most the last 4 MiB keeps status cheap."""
    return text[-4 * 1024 * 1024 :] if len(text) > 4 * 1024 * 1024 else text


def first_error_detail(texts) -> ErrorLine | None:
    """The first error line of the rank that failed first, with failures.py's class.

    Which rank failed first: torchrun's own "Root Cause (first observed failure)" with a positive
    exit code (a negative one is a rank killed by a signal after another failed), else the first
    rank whose error is not a consequence of another's (NCCL aborts, SIGTERM tracebacks, srun
    tearing the step down). Its line: the first known failure (failures.py: out of memory, NCCL
    timeout, ...) among that rank's lines, else its exception's last line, else its first error line."""
    texts = [_text(t) for t in texts if t]
    if not texts:
        return None
    # every torchrun (one per node) names its own root cause; a rank that exited 1 because a peer
    # on another node died is one too, so each is only a first guess, in order
    roots: list = []
    for text in texts:
        for m in P.ROOT_CAUSE_RE.finditer(text):
            if int(m.group(2)) > 0 and int(m.group(1)) not in roots:
                roots.append(int(m.group(1)))
    by_rank: dict = {}
    order: list = []
    for text in texts:
        if not any(word in text for word in _SUSPECT_WORDS):
            continue  # a healthy log: no line-by-line reading
        for rank, line, i, raised in _candidates(_scan_window(text)):
            if rank not in by_rank:
                by_rank[rank] = []
                order.append(rank)
            by_rank[rank].append((raised, i, line))
    if not by_rank:
        return None

    def pick(lines):
        known = [ln for _, _, ln in lines if failures.classify_line(ln) and not _COLLATERAL.search(ln)]
        if known:
            return known[0]
        causes = [(raised, ln) for raised, _, ln in lines if not _COLLATERAL.search(ln)]
        exc = [ln for raised, ln in causes if raised or _EXCEPTION_RE.match(ln)]
        return (exc or [ln for _, ln in causes] or [None])[0]

    ranks = [r for r in roots if r in by_rank]
    ranks += [r for r in order if r not in ranks]
    chosen = None
    for r in ranks:
        line = pick(by_rank[r])
        if line is not None:
            chosen = (r, line)
            break
    if chosen is None:
        r = ranks[0]
        chosen = (r, by_rank[r][0][2])
    rank, line = chosen
    if _COLLATERAL.search(line) and line.rstrip().endswith(":"):  # "ChildFailedError:", its message below it
        # the root cause's own exit code: torchrun's "Failures:" block before it lists the ranks it
        # stopped afterwards (SIGTERM), which name no cause
        found = next(((t, m) for t in texts for m in P.ROOT_CAUSE_RE.finditer(t)), None)
        if found:
            root = found[1]
            code = int(root.group(2))
            if code < 0:
                line = f"{line.rstrip()} rank {root.group(1)} was killed by signal {-code} ({_signal_name(-code)})"
            else:
                line = f"{line.rstrip()} rank {root.group(1)} exited with code {code}"
        else:
            death = next((m for t in texts for m in P.SIGNAL_DEATH_RE.finditer(t)), None)
            if death:
                line = f"{line.rstrip()} a worker was killed by signal {death.group(1)} ({death.group(2)})"
    cls = failures.classify_line(line)
    return ErrorLine(rank, line, *(cls or (None, None)))


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def first_error(texts) -> str | None:
    """The first error line of the failing rank, as one line ("rank 3: torch.OutOfMemoryError:
    CUDA out of memory..."), or None when the texts show no error."""
    err = first_error_detail(texts)
    return str(err) if err else None


def classify(text: str) -> tuple[str, str] | None:
    """(class, what) of a log's failure (failures.CLASSES): the class of the failing rank's first
    error line (first_error_detail), else the first known failure anywhere in the log."""
    err = first_error_detail([text])
    if err is not None and err.kind:
        return err.kind, err.what
    return failures.classify_line(text)


def failing_node(node_texts: dict) -> tuple[str, str] | None:
    """(node, its error line) when exactly one node's own log holds a node fault (failures.py's node
    class: Xid and ECC errors; NCCL errors, timeouts and resets show on every peer of the node that
    failed, so they name no node); with per-node logs (Slurm's %N), the node is the log's."""
    hits = {}
    for node, text in node_texts.items():
        err = first_error_detail([text])
        if err is not None and err.kind == "node":
            hits[node] = str(err)
    return next(iter(hits.items())) if len(hits) == 1 else None
