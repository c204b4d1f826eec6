"""GPU-hours, accounted: where a run's (or an experiment's) allocations went, from the scheduler's
times and the run's logs.

Every Slurm job the run had (its canary, each attempt of a retried job, each segment of an
--until-done chain) is one allocation of `elapsed x GPUs` (sacct's Start, End and ElapsedRaw; GPUs:
sacct's AllocTRES gres/gpu where Slurm counts them, else its node count times the resolved job's
GPUs per node; on a CPU cluster the processes per node are counted as GPUs, and the account says
so). Each allocation is split, second by second, into:

- start-up: from the allocation's start to the first training step (queue time costs no
  GPU-hours: it is shown, not counted). Megatron-LM's start-up timers (PRs #2698, #2954) are not
  printed by Megatron-Bridge (docs/judging_sources.md §5), so the first step's start is the first
  iteration line's stamp less its elapsed time per iteration times the steps it covers.
- training: each step the first time it runs (the iteration lines' stamps place them), and the
  end of a job that ended cleanly (post-training evaluation, exit).
- redone: steps trained again: at or below the furthest step any earlier job of the run, or of the
  runs it resumed, had printed (a resume from an older checkpoint, a retry, a restart).
- lost: the canary's whole job, the health step (the step that runs node_health.py where the
  profile has `health_check`), and a job that did not end cleanly (FAILED, TIMEOUT, CANCELLED, NODE_FAIL...):
  its start-up and everything after its last step; a job that ran no step and did not complete.
- checkpointing: the saves, by the trainer's own `save-checkpoint` timer (the slowest rank,
  trainer_protocol.SAVE_TIMER), taken out of the steps' time (a save inside the loop) or out of
  the job's end (the final or the time-limit save).

The parts of one job add up to its elapsed time x GPUs by construction. The stamps on iteration
lines are the nodes' local time; where they fall outside the allocation by a whole number of
quarter hours (a container in UTC), they are shifted by it.

Only Slurm keeps the times this needs; for other backends `account` raises a UsageError that
says so. Callers: `status RUN` and `report` (cli), never the runs list (speed)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from bridge_launch.core.errors import LaunchError, UsageError

CATEGORIES = ("startup", "training", "redone", "lost", "checkpointing")
LABELS = {
    "startup": "start-up",
    "training": "training",
    "redone": "redone",
    "lost": "lost",
    "checkpointing": "checkpointing",
}
CLEAN = frozenset({"COMPLETED", "RUNNING", "COMPLETING"})  # a job that ended (or goes on) as it should
SHIFT_UNIT = 900  # seconds: time zones differ by whole quarter hours


@dataclass
class Allocation:
    """One Slurm job of a run, as the scheduler recorded it."""

    job_id: str
    kind: str  # canary, attempt, segment, job
    number: int  # its place among the run's jobs of that kind (1-based)
    state: str  # Slurm's word: COMPLETED, FAILED, TIMEOUT, CANCELLED, RUNNING, PENDING...
    gpus: int
    start: float | None  # epoch seconds; None: it never started
    end: float | None  # None: still running
    elapsed_s: float
    submit: float | None = None
    health_s: float = 0.0  # its health step (parse_sacct finds it), counted as lost
    nodes: str = ""

    @property
    def clean(self) -> bool:
        return self.state in CLEAN


@dataclass
class JobAccount:
    job_id: str
    kind: str
    number: int
    state: str
    nodes: str
    gpus: int
    elapsed_s: float
    queued_s: float | None
    seconds: dict  # category -> seconds (of the allocation's wall time)
    lost_by: dict = field(default_factory=dict)  # failed / canary / health -> seconds
    steps: tuple | None = None  # (first, last) step it printed
    redone_steps: int = 0
    first_step_s: float | None = None  # seconds from the allocation's start to its first step
    start: float | None = None
    end: float | None = None
    notes: list = field(default_factory=list)

    def gpu_hours(self) -> dict:
        return {k: self.seconds.get(k, 0.0) * self.gpus / 3600.0 for k in CATEGORIES}

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "seconds"}
        d["seconds"] = {k: round(self.seconds.get(k, 0.0), 3) for k in CATEGORIES}
        d["gpu_hours"] = {k: round(v, 6) for k, v in self.gpu_hours().items()}
        d["gpu_hours"]["total"] = round(self.elapsed_s * self.gpus / 3600.0, 6)
        d["lost_by"] = {k: round(v * self.gpus / 3600.0, 6) for k, v in self.lost_by.items()}
        d["steps"] = list(self.steps) if self.steps else None
        return d


# ------------------------------------------------------------------------------------------------
# the arithmetic: one allocation and what its logs printed
# ------------------------------------------------------------------------------------------------
def _epoch(stamp) -> float:
    return time.mktime(stamp.timetuple()) + stamp.microsecond / 1e6


def _shift(times: list[float], start: float, end: float) -> float:
    """The whole number of quarter hours that puts stamps read in this machine's time zone inside
    the allocation (nodes or containers in another zone), or 0."""
    lo, hi = min(times), max(times)
    if lo >= start - 60 and hi <= end + 60:
        return 0.0
    k = round(((start + end) / 2 - (lo + hi) / 2) / SHIFT_UNIT) * SHIFT_UNIT
    return float(k) if lo + k >= start - 60 and hi + k <= end + 60 else 0.0


def save_seconds(log) -> list[tuple[int | None, float]]:
    """(the step the save followed, seconds) of each save the trainer timed (its save-checkpoint
    timer, the slowest rank's value), from a logs.reader.Log."""
    from bridge_launch.workloads import trainer_protocol as P

    out, seen = [], set()
    for rep in log.timer_reports:
        for name in (P.SAVE_TIMER, P.SAVE_TIMER_NON_PERSISTENT):
            value = rep.timers.get(name)
            if value is None:
                continue
            ms = max(value.values()) if isinstance(value, dict) and value else value[1]
            if (rep.step, ms) not in seen:  # the same block printed by two ranks
                seen.add((rep.step, ms))
                out.append((rep.step, ms / 1000.0))
    return out


def account_job(alloc: Allocation, texts: list, furthest: int) -> tuple[JobAccount, int]:
    """Split one allocation; `furthest` is the furthest step trained before it. Returns its account
    and the furthest step after it."""
    from bridge_launch.logs.reader import Log

    acc = JobAccount(
        alloc.job_id,
        alloc.kind,
        alloc.number,
        alloc.state,
        alloc.nodes,
        alloc.gpus,
        alloc.elapsed_s,
        (alloc.start - alloc.submit) if alloc.start is not None and alloc.submit is not None else None,
        dict.fromkeys(CATEGORIES, 0.0),
        start=alloc.start,
        end=alloc.end,
    )
    secs = acc.seconds
    total = alloc.elapsed_s
    if alloc.start is None or total <= 0:
        return acc, furthest
    start = alloc.start
    end = start + total  # sacct's ElapsedRaw is End - Start, and a running job's time so far
    if alloc.kind == "canary":
        secs["lost"] = total
        acc.lost_by["canary"] = total
        return acc, furthest
    health = min(alloc.health_s, total)
    if health:
        acc.lost_by["health"] = health
    log = Log(texts)
    # the text that printed the iteration lines (the last rank's node), the others' only if it has none
    lines = log.timeline()
    by_text: dict = {}
    for row in lines:
        by_text.setdefault(row[3], []).append(row)
    rows = max(by_text.values(), key=len) if by_text else []
    saves = save_seconds(log)
    save_total = sum((s for _, s in saves), 0.0)
    if not rows:  # it never reached a step: a job that completed spent it starting up, any other lost it
        rest = total - health
        ckpt = min(save_total, rest)
        secs["checkpointing"] = ckpt
        if alloc.clean:
            secs["startup"] = rest - ckpt
        else:
            acc.lost_by["failed"] = rest - ckpt
        secs["lost"] = health + acc.lost_by.get("failed", 0.0)
        return acc, furthest
    starts = [e.step for e in log.events if e.kind in ("starting", "loaded") and e.step is not None]
    first_step = rows[0][0]
    begin_step = starts[0] if starts and starts[0] < first_step else first_step - 1
    acc.steps = (first_step, max(r[0] for r in rows))
    # saves: one after the last line comes out of the job's end; one after another line out of the
    # time to the next line (the save lies between them); any other out of the steps' time
    last = rows[-1][0]
    after = sum((sec for step, sec in saves if step is not None and step >= last), 0.0)
    between: dict = {}
    for step, sec in saves:
        if step is None or step < last:
            between[step] = between.get(step, 0.0) + sec
    ckpt_loop = 0.0
    stamped = [(s, _epoch(t), ms) for s, t, ms, _ in rows if t is not None]
    trained = redone = 0.0  # seconds of steps run the first time / again
    if len(stamped) == len(rows):
        k = _shift([t for _, t, _ in stamped], start, end)
        stamped = [(s, t + k, ms) for s, t, ms in stamped]
        if k:
            acc.notes.append(f"iteration stamps shifted by {k / 3600:+g} h into the allocation (another time zone)")
        s0, t0, ms0 = stamped[0]
        lo = start + health
        first = min(max(t0 - (ms0 or 0.0) / 1000.0 * max(1, s0 - begin_step), lo), end)
        prev_s, prev_t = begin_step, first
        for s, t, _ in stamped:
            t = min(max(t, prev_t), end)
            n = s - prev_s if s > prev_s else 1
            again = max(0, min(s, furthest) - (s - n))  # of the n steps it covers, those trained before
            part = t - prev_t
            want = between.pop(prev_s, 0.0)
            saved = min(want, part)  # whole-second stamps: two lines a save apart may print the same second
            between[None] = between.get(None, 0.0) + want - saved
            ckpt_loop += saved
            part -= saved
            redone += part * again / n
            trained += part * (n - again) / n
            acc.redone_steps += again
            furthest = max(furthest, s)
            prev_s, prev_t = s, t
        head, tail = first - lo, end - prev_t
    else:  # no stamps (Megatron-LM before 2024): the steps' own elapsed times; the rest is start-up and end
        prev_s = begin_step
        for s, _, ms, _ in rows:
            n = s - prev_s if s > prev_s else 1
            again = max(0, min(s, furthest) - (s - n))
            part = (ms or 0.0) / 1000.0 * n
            redone += part * again / n
            trained += part * (n - again) / n
            acc.redone_steps += again
            furthest = max(furthest, s)
            prev_s = s
        window = total - health
        if trained + redone > window:
            scale = window / (trained + redone)
            trained, redone = trained * scale, redone * scale
        head, tail = window - trained - redone, 0.0
        acc.notes.append("no stamps on the iteration lines: start-up holds the job's end as well")
    busy = trained + redone  # saves not placed between two lines: out of the steps' time, in proportion
    rest = min(sum(between.values(), 0.0), busy)
    if busy > 0:
        trained, redone = trained - rest * trained / busy, redone - rest * redone / busy
    ckpt_loop += rest
    if tail > 0:
        ckpt_tail = min(after, tail)
        tail -= ckpt_tail
    else:  # no stamps: the job's end is in `head`
        ckpt_tail = min(after, head)
        head -= ckpt_tail
    secs["checkpointing"] = ckpt_tail + ckpt_loop
    secs["training"], secs["redone"] = trained, redone
    acc.first_step_s = head + health
    if alloc.clean:
        secs["startup"] = head
        secs["training"] += tail
    else:
        acc.lost_by["failed"] = head + tail
    secs["lost"] = health + acc.lost_by.get("failed", 0.0)
    # float rounding: the parts add up to the elapsed time
    secs["training"] += total - sum(secs.values())
    return acc, furthest


def summarize(jobs: list[JobAccount]) -> dict:
    """Totals over accounts: GPU-hours per category and total, lost by cause, redone steps."""
    hours = dict.fromkeys(CATEGORIES, 0.0)
    lost_by: dict = {}
    for j in jobs:
        for k, v in j.gpu_hours().items():
            hours[k] += v
        for k, v in j.lost_by.items():
            lost_by[k] = lost_by.get(k, 0.0) + v * j.gpus / 3600.0
    total = sum(j.elapsed_s * j.gpus / 3600.0 for j in jobs)
    return {
        "gpu_hours": {**{k: round(v, 6) for k, v in hours.items()}, "total": round(total, 6)},
        "percent": {k: round(100.0 * v / total, 2) if total else 0.0 for k, v in hours.items()},
        "lost_by": {k: round(v, 6) for k, v in lost_by.items()},
        "redone_steps": sum(j.redone_steps for j in jobs),
    }


# ------------------------------------------------------------------------------------------------
# the sources: the scheduler's records and the run's logs
# ------------------------------------------------------------------------------------------------
def _num(text: str) -> float | None:
    return float(text) if text.strip().isdigit() else None


def _gres_gpus(tres: str) -> int | None:
    for part in tres.split(","):
        key, _, value = part.partition("=")
        if key in ("gres/gpu", "gres/gpu:") and value.isdigit():
            return int(value)
    return None


def parse_sacct(text: str, kinds: dict, gpus_per_node: int, health: bool) -> dict[str, Allocation]:
    """sacct -P rows (backends/slurm ALLOCATION_FIELDS, SLURM_TIME_FORMAT=%s) -> {job id: Allocation}. kinds: {job id:
    (kind, number)}; with `health`, each job's health step: the first step that runs Python (its
    JobName: python3 node_health.py; the image step before it runs `true`, the host steps and the
    training step bash), or step 0 where sacct names no step (rows without JobName)."""
    out: dict[str, Allocation] = {}
    steps: dict[str, float] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 9:
            continue
        jid, state, submit, start, end, elapsed, nnodes, tres, nodelist = parts[:9]
        name = os.path.basename(parts[9]) if len(parts) > 9 else ""
        base, _, step = jid.partition(".")
        if step:
            is_health = name.startswith("python") if name else step == "0"
            if health and is_health and base not in steps:
                steps[base] = _num(elapsed) or 0.0
            continue
        if base not in kinds:
            continue
        kind, number = kinds[base]
        n = int(nnodes) if nnodes.isdigit() else 0
        gpus = _gres_gpus(tres) or n * gpus_per_node
        out[base] = Allocation(
            base,
            kind,
            number,
            (state.split() or ["UNKNOWN"])[0],
            gpus,
            _num(start),
            _num(end),
            _num(elapsed) or 0.0,
            submit=_num(submit),
            nodes=nodelist if nodelist not in ("None assigned", "") else "",
        )
    for base, secs in steps.items():
        if base in out and out[base].kind != "canary":
            out[base].health_s = secs
    return out


def _job_ids(run, job) -> list[tuple[str, str, int]]:
    """(job id, kind, number) of each Slurm job the run had: its canary, then its jobs in order."""
    out = []
    c = run.info.get("canary") or {}
    if c.get("job_id"):
        out.append((str(c["job_id"]), "canary", 1))
    ids = list(run.job_ids)
    for x in run.info.get("segments") or run.info.get("attempts") or []:
        if str(x.get("job_id")) not in ids:
            ids.append(str(x["job_id"]))
    kind = "segment" if job.chain else "attempt" if job.retry and (len(ids) > 1 or run.info.get("attempts")) else "job"
    out += [(jid, kind, n) for n, jid in enumerate(ids, 1)]
    return out


def _texts(be, run, job, ids: list[str]) -> dict[str, list]:
    """{job id: its log texts}: the batch output and each node's log (`sbatch-J.out`, `J-NODE.log`)."""
    import dataclasses
    import re
    from pathlib import Path

    out: dict[str, list] = {}
    for path in be.log_files(dataclasses.replace(run, job_ids=ids), job):
        m = re.fullmatch(r"sbatch-(\d+)\.out|(\d+)-.+\.log", Path(path).name)
        if not m:
            continue
        try:
            data = Path(path).read_bytes()
        except OSError:
            continue
        out.setdefault(m.group(1) or m.group(2), []).append(data)
    return out


def _furthest(be, reg, runs) -> int:
    """The furthest step the runs printed (the runs a run resumed from)."""
    from bridge_launch.runs.records import load_job
    from bridge_launch.workloads import trainer_protocol as P

    best = 0
    for r in runs:
        if r.backend != "slurm":
            continue
        try:
            texts = _texts(be, r, load_job(reg, r), list(r.job_ids))
        except (LaunchError, UsageError, OSError):
            continue
        for data in (t for group in texts.values() for t in group):
            text = data.decode("utf-8", "replace")
            for m in P.ITERATION_RE.finditer(text):
                best = max(best, int(m.group(1)))
    return best


def run_account(reg, run) -> dict:
    """The GPU-hour account of one run (see the module's docstring): its jobs, each split, and the
    totals. UsageError for a run whose backend keeps no allocation times."""
    from bridge_launch import backends
    from bridge_launch.runs.monitor import lineage
    from bridge_launch.runs.records import load_job

    if run.backend != "slurm":
        raise UsageError(
            f"run {run.run_id}: GPU-hours are accounted from Slurm's records (sacct); a {run.backend} run "
            "has no allocation times to read"
        )
    job = load_job(reg, run)
    be = backends.backend("slurm")
    listed = _job_ids(run, job)
    kinds = {jid: (kind, n) for jid, kind, n in listed}
    allocs: dict[str, Allocation] = {}
    if listed:
        rows = be.allocations(job.scheduler, list(kinds))
        allocs = parse_sacct(rows, kinds, job.gpus_per_node, bool(job.scheduler.get("health_check")))
    notes = []
    missing = [jid for jid in kinds if jid not in allocs]
    if missing:
        notes.append(f"no accounting record (sacct) for job {', '.join(missing)}: not counted")
    if job.gpu_type == "cpu":
        notes.append(f"a CPU cluster: each job's {job.gpus_per_node} processes per node are counted as its GPUs")
    texts = _texts(be, run, job, [a.job_id for a in allocs.values()])
    before = [r for r in lineage(reg, run) if r.run_id != run.run_id]
    furthest = _furthest(be, reg, before)
    order = sorted(allocs.values(), key=lambda a: (a.kind != "canary", a.start is None, a.start or 0, a.number))
    accounts = []
    for a in order:
        acc, furthest = account_job(a, texts.get(a.job_id, []), furthest)
        accounts.append(acc)
        notes += [f"job {a.job_id}: {n}" for n in acc.notes]
    info = run.info
    return {
        "run_id": run.run_id,
        "recipe": run.recipe,
        "cluster": run.cluster,
        "state": run.state,
        "reason": run.reason,
        "step": info.get("step"),
        "train_iters": info.get("train_iters") or job.config.get("train.train_iters"),
        "resumed_from": run.resumed_from,
        "gpus_per_node": job.gpus_per_node,
        "gpu_type": job.gpu_type,
        **summarize(accounts),
        "jobs": [a.to_dict() for a in accounts],
        "notes": notes,
    }


def experiment_account(reg, group: dict) -> dict:
    """An experiment's account: each run's (those on Slurm), and the totals over them."""
    runs, notes = [], []
    for r, label in group["runs"]:
        try:
            acc = run_account(reg, r)
        except UsageError as exc:
            notes.append(str(exc))
            continue
        acc["member"] = label
        runs.append(acc)
    if not runs:  # an all-zero page would read as a free experiment: it is an unaccounted one
        raise UsageError(
            f"experiment {group['name']}: none of its {len(group['runs'])} runs ran on Slurm, whose records "
            f"(sacct) GPU-hours are accounted from ({notes[0] if notes else 'no runs'})"
        )
    hours = {k: round(sum(a["gpu_hours"][k] for a in runs), 6) for k in (*CATEGORIES, "total")}
    total = hours["total"]
    lost_by: dict = {}
    for a in runs:
        for k, v in a["lost_by"].items():
            lost_by[k] = round(lost_by.get(k, 0.0) + v, 6)
    return {
        "experiment": group["name"],
        "gpu_hours": hours,
        "percent": {k: round(100.0 * hours[k] / total, 2) if total else 0.0 for k in CATEGORIES},
        "lost_by": lost_by,
        "redone_steps": sum(a["redone_steps"] for a in runs),
        "runs": runs,
        "notes": notes,
    }
