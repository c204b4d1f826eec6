"""Watching runs: their logs as texts (from whatever each backend already fetches), live metrics
for `status RUN`, `status --watch`, and the filters of `logs --rank/--grep/--tail`."""

from __future__ import annotations

import re

from bridge_launch.core.errors import UsageError
from bridge_launch.runs import lifecycle as launch
from bridge_launch.runs.registry import TERMINAL, Registry

TAIL = 65536  # bytes of each log that status reads (the iteration line, the last save, an error)


def read_logs(run, job, tail: int | None = None) -> list:
    """A run's log texts in order (batch output then each node's, segment by segment), whole or
    the last `tail` bytes of each, through its backend (SSH, a platform API, local files)."""
    from bridge_launch import backends

    return backends.backend(run.backend).log_texts(run, job, tail)


def lineage(reg, run) -> list:
    """The runs of `run`'s chain up to and including it (a resume continues its predecessor)."""
    chain = reg.chain(run.chain) if run.chain else [run]
    return [r for r in chain if r.created <= run.created] or [run]


def lineage_log(reg, run) -> "Log":  # noqa: F821 - logread is imported lazily
    """Everything the run and the runs it resumed printed, in order."""
    from bridge_launch.logs.reader import Log

    texts = []
    for r in lineage(reg, run):
        texts += read_logs(r, launch.load_job(reg, r))
    return Log(texts)


def _seq_length(job) -> int | None:
    for key in ("dataset.seq_length", "model.seq_length", "dataset.sequence_length"):
        v = job.config.get(key) if job else None
        if isinstance(v, int) and v > 0:
            return v
    return None


def metrics(run, job=None, texts=None) -> dict:
    """Live metrics of one run from the tails of its logs: step, train_iters, loss, grad_norm,
    step_time_s, tflops_per_gpu, tokens_per_s, eta_s (while it runs), saved (the last checkpoint
    saved), error (the first error line of the failing rank)."""
    from bridge_launch.logs.reader import Log

    if texts is None:
        try:
            texts = read_logs(run, job if job is not None else launch.load_job(Registry(), run), TAIL)
        except Exception as exc:  # noqa: BLE001 - the logs may be unreachable; say so, show the rest
            return {"logs": f"unreadable: {exc}"}
    m = Log(texts).progress()
    total = m.get("train_iters")
    if job is not None and not total:
        t = job.config.get("train.train_iters")
        total = t if isinstance(t, int) else None
        if total:
            m["train_iters"] = total
    seq = _seq_length(job)
    st = m.get("step_time_s")
    if st and seq and isinstance(m.get("global_batch"), int):
        m["tokens_per_s"] = m["global_batch"] * seq / st
    if st and total and m.get("step") is not None and run.state not in TERMINAL:
        m["eta_s"] = max(0, total - m["step"]) * st
    return m


def duration(seconds: float) -> str:
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _num(v, digits: int = 4) -> str:
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) < 1e5 else f"{v:,.0f}"
    return str(v)


def metric_lines(m: dict, run) -> list[str]:
    """The metrics block of `status RUN`."""
    lines = []
    if m.get("logs"):
        lines.append(f"logs        {m['logs']}")
    if m.get("step") is not None:
        total = m.get("train_iters")
        pct = f" ({100 * m['step'] / total:.0f}%)" if total else ""
        eta = f"   ETA {duration(m['eta_s'])}" if m.get("eta_s") is not None else ""
        lines.append(f"step        {m['step']}/{total or '?'}{pct}{eta}")
        parts = []
        if m.get("loss") is not None:
            parts.append(f"{m.get('loss_key', 'lm loss')} {_num(m['loss'], 6)}")
        if m.get("grad_norm") is not None:
            parts.append(f"grad norm {_num(m['grad_norm'])}")
        if m.get("lr") is not None:
            parts.append(f"lr {m['lr']:.3g}" if isinstance(m["lr"], float) else f"lr {m['lr']}")
        if parts:
            lines.append("loss        " + "   ".join(parts))
        speed = []
        if m.get("step_time_s") is not None:
            speed.append(f"{m['step_time_s']:.3g} s/step")
        if m.get("tflops_per_gpu") is not None:
            speed.append(f"{_num(m['tflops_per_gpu'])} TFLOP/s/GPU")
        if m.get("tokens_per_s") is not None:
            speed.append(f"{m['tokens_per_s']:,.0f} tokens/s")
        if speed:
            lines.append("speed       " + "   ".join(speed))
    elif run.state in ("RUNNING", "PENDING"):
        lines.append("step        (no iteration line yet)")
    if m.get("saved") is not None:
        lines.append(f"saved       iteration {m['saved']} (the last checkpoint saved)")
    if m.get("error"):
        lines.append(f"error       {m['error']}")
    return lines


# ------------------------------------------------------------------------------------------------
# what `status` adds to its views
# ------------------------------------------------------------------------------------------------
def run_metrics(reg, run) -> dict:
    return run_metrics_and_log(reg, run)[0]


def run_metrics_and_log(reg, run) -> tuple[dict, "Log | None", object]:  # noqa: F821 - logread is lazy
    """(live metrics, the tails of the logs they come from as a Log, the job): `status RUN` judges
    more of the same tails (stragglers, the speed plan expects) without reading them twice."""
    from bridge_launch.logs.reader import Log
    from bridge_launch.runs import lifecycle as launch

    try:
        job = launch.load_job(reg, run)
    except Exception:  # noqa: BLE001 - a record without its job file still has logs
        job = None
    try:
        texts = read_logs(run, job if job is not None else launch.load_job(Registry(), run), TAIL)
    except Exception as exc:  # noqa: BLE001 - the logs may be unreachable; say so, show the rest
        return {"logs": f"unreadable: {exc}"}, None, job
    m = metrics(run, job, texts=texts)
    if job is not None and job.gpu_type == "cpu":  # CPU processes: a trainer's TFLOP/s/GPU says nothing
        m.pop("tflops_per_gpu", None)
    if run.info.get("cancelled"):  # what the cancel's signal made the ranks print is not the run's error
        m.pop("error", None)
    return m, Log(texts), job


def run_view(reg, run, *, metrics: bool) -> dict:
    """A run as `status -o json` shows it; with metrics (one run, an experiment) its live metrics."""
    d = run.to_dict()
    if metrics:
        d["metrics"] = run_metrics(reg, run)
    return d


def loss_text(run) -> str:
    v = run.info.get("loss")
    return f"{v:.4f}" if isinstance(v, float) else ("" if v is None else str(v))


def group_column(runs: list, group):
    """(runs, extra) for the runs table: with an experiment shown, its member labels; with runs of
    experiments among recent ones, their experiment's name, each experiment's runs together at the
    place of its newest. extra(run) gives the added cells (extra(None): the added headers)."""
    if group is not None:
        labels = {r.run_id: label for r, label in group["runs"]}
        return runs, lambda r: ["member"] if r is None else [labels.get(r.run_id, "")]
    if not any(r.info.get("experiment") for r in runs):
        return runs, lambda _r: []
    first: dict = {}
    for i, r in enumerate(runs):
        first.setdefault(r.info.get("experiment") or r.run_id, i)
    runs = sorted(runs, key=lambda r: first[r.info.get("experiment") or r.run_id])
    return runs, lambda r: ["experiment"] if r is None else [r.info.get("experiment") or ""]


# ------------------------------------------------------------------------------------------------
# logs --rank --grep --tail
# ------------------------------------------------------------------------------------------------
def line_filter(rank: int | None, grep: str | None):
    """A predicate over log lines: from rank `rank` (by its prefix) and matching `grep`."""
    rx = None
    if grep is not None:
        try:
            rx = re.compile(grep)
        except re.error as exc:
            raise UsageError(f"--grep {grep!r} is not a regular expression: {exc}") from None
    if rank is not None and rank < 0:
        raise UsageError(f"--rank {rank}: ranks start at 0")
    from bridge_launch.logs.reader import strip_prefix

    def keep(line: str) -> bool:
        if rank is not None and strip_prefix(line)[0] != rank:
            return False
        return rx is None or rx.search(line) is not None

    return keep
