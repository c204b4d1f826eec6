"""The canary: before the real job, the checks no local preflight can make (the image pulls and
starts, its Megatron-Bridge builds the recipe with the job's overrides, the data, checkpoint and
HuggingFace cache are there inside the container, IMEX/NVLink, NCCL bus bandwidth), run on the
cluster in the job's own image with its mounts and environment (workloads/cluster_checks.py).

- Slurm: a short job on one or two nodes of the same partition, rendered by the same renderer as
  the job (a derived job: workload "canary", its own time limit); the real job is submitted with
  `--dependency=afterok:<canary>` and `--kill-on-invalid-dep=yes`, so it never starts when the
  canary fails. With --until-done only the first segment waits for it.
- Lepton, DGX Cloud: no dependencies between jobs, so the same checks run as the first step of the
  job on every node; a failure ends the job before training starts.

This module is the launcher side: the profile's [canary] section, the in-job spec, the Slurm
submission, what `status` reads back. It imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json

from bridge_launch.job.derived import JOB_PLACEHOLDER as JOB_PLACEHOLDER
from bridge_launch.job.derived import SPEC_DIR as SPEC_DIR
from bridge_launch.job.derived import SUFFIX as SUFFIX
from bridge_launch.job.derived import canary_job as canary_job
from bridge_launch.job.derived import gated as gated
from bridge_launch.job.derived import report_path as report_path
from bridge_launch.job.derived import spec as spec
from bridge_launch.job.derived import spec_rel as spec_rel


def files(job, art) -> dict:
    """What submit stages besides the job's own files: the spec and, on Slurm, the canary's script
    (`art`: the job's artifact, which carries the canary's)."""
    out = {spec_rel(job.run_id): json.dumps(spec(job), indent=1) + "\n"}
    if art.canary is not None:
        out.update(art.canary.staged())
    return out


def submit(be, job, run, main_artifact, secrets: dict) -> tuple[list, dict]:
    """Slurm: the canary first, then the real job waiting for it: its script (rendered with a
    placeholder for the canary's id, main_artifact.waits_for) is staged once the id is filled in.
    Lepton, DGX Cloud: the job, whose first step is the canary. Returns the real job's ids and the
    run info to record."""
    report = report_path(job.run_dir, job.run_id)
    if main_artifact.canary is None:
        ids = be.submit(job, run, main_artifact, secrets)
        return ids, {"canary": {"where": "first step", "state": "PENDING", "verdict": "pending", "report": report}}
    cid = be.submit(canary_job(job), run, main_artifact.canary, secrets)[0]
    try:
        main, art = gated(job, cid), main_artifact.after(cid)
        be.stage(main, {art.filename: art.text}, new_dir=False)
        ids = be.submit(main, run, art, secrets)
    except BaseException:
        with contextlib.suppress(Exception):
            be.command(job.scheduler, ["scancel", cid])
        raise
    return ids, {"canary": {"job_id": cid, "state": "PENDING", "verdict": "pending", "report": report}}


# ---------------------------------------------------------------------------------------------
# status: the canary's verdict and first failing check
# ---------------------------------------------------------------------------------------------
_FAIL_LINE = "bridge-launch canary: FAIL at "  # workloads/cluster_checks.py's verdict lines
_PASS_LINE = "bridge-launch canary: PASS"


def _from_report(report: dict) -> tuple[str, dict | None]:
    if not report.get("complete"):
        return "running", None
    return report.get("verdict", "unknown"), report.get("first_failure")


def settle(be, run, st: dict) -> dict:
    """A run with a canary: the canary's state and verdict into the status, and the run FAILED with
    the first failing check when the canary failed (its real job never starts)."""
    c = dict(run.info.get("canary") or {})
    if not c or c.get("verdict") == "pass" or (run.backend == "slurm" and not c.get("job_id")):
        return st
    if run.backend == "slurm":
        c = _settle_slurm(be, run, c)
    else:  # Lepton / DGX Cloud: the job's first step
        c = _settle_cloud(be, run, c, st.get("state"))
    out = dict(st, canary=c)
    if c.get("verdict") == "fail":
        ff = c.get("first_failure") or {}
        out.update(
            state="FAILED", reason=f"canary failed at {ff.get('check', '?')}: {ff.get('detail', '')}".rstrip(": ")
        )
        if run.backend == "slurm" and st.get("state") == "PENDING" and run.job_ids:
            with contextlib.suppress(Exception):  # Slurm removes it itself (--kill-on-invalid-dep); make sure
                be.command(_job(run).scheduler, ["scancel", *run.job_ids])
    elif run.backend == "slurm" and c.get("verdict") in ("pending", "running") and st.get("state") == "PENDING":
        out["reason"] = f"waiting for the canary (job {c['job_id']}, {c.get('state', '?')})"
    return out


def _job(run):
    from bridge_launch.runs.records import load_job
    from bridge_launch.runs.registry import Registry

    return load_job(Registry(), run)


def _settle_slurm(be, run, c: dict) -> dict:
    from bridge_launch.backends.slurm.backend import container_failure

    s = _job(run).scheduler
    jid = c["job_id"]
    info = be.squeue(s, [jid]).get(jid)
    if info is None or info["state"] not in ("PENDING", "RUNNING"):
        info = be.sacct(s, [jid]).get(jid) or info or be.exit_marker(s, run, jid)
    c["state"] = info.get("state", "UNKNOWN")
    text = be.read_file(s, c["report"])
    report = None
    if text:
        with contextlib.suppress(ValueError):
            report = json.loads(text)
    if report is not None:
        c["checks"] = [{k: x.get(k) for k in ("check", "status", "detail")} for x in report.get("checks", [])]
    verdict, first = _from_report(report) if report is not None else ("pending", None)
    if c["state"] in ("PENDING", "RUNNING"):
        c.update(verdict="running" if c["state"] == "RUNNING" else "pending", first_failure=None)
        return c
    if report is not None and verdict == "fail" or verdict == "pass" and c["state"] == "COMPLETED":
        c.update(verdict=verdict, first_failure=first)
        return c
    if verdict == "pass":  # rank 0 passed every check, yet the job failed: another rank or node did
        c.update(
            verdict="fail",
            first_failure={
                "check": "canary",
                "status": "fail",
                "detail": (
                    f"every check passed on rank 0, but the canary job ended {c['state']}"
                    f"{' (' + info['reason'] + ')' if info.get('reason') else ''}: another rank failed; see "
                    f"{run.run_dir}/logs/{jid}-*.log"
                ),
            },
        )
        return c
    # the canary ended without a complete report: it never ran (an image that cannot be pulled) or died
    canary_run = dataclasses.replace(run, job_ids=[jid])
    why = container_failure(be.recent_log_texts(s, canary_run))
    if why:
        c.update(verdict="fail", first_failure={"check": "image", "status": "fail", "detail": why})
    else:
        done = ", ".join(x["check"] for x in c.get("checks", [])) or "none"
        c.update(
            verdict="fail",
            first_failure={
                "check": "canary",
                "status": "fail",
                "detail": (
                    f"the canary job ended {c['state']}{' (' + info['reason'] + ')' if info.get('reason') else ''} "
                    "before its "
                    f"report was complete (checks done: {done}); see {run.run_dir}/logs/sbatch-{jid}.out"
                ),
            },
        )
    return c


def _settle_cloud(be, run, c: dict, state: str | None) -> dict:
    """The job ran the canary first: COMPLETED means it passed; a FAILED job's logs say whether the
    canary stopped it (its verdict line) or training failed after it passed. The logs are fetched
    only then, once."""
    from bridge_launch.backends.base import log_tail

    if state == "COMPLETED":
        return dict(c, verdict="pass", state="COMPLETED")
    if state != "FAILED":
        return dict(c, state=state or "?")
    for path in be.log_files(run, _job(run)):
        text = log_tail(path, 1 << 20) or ""
        at = text.rfind(_FAIL_LINE)
        if at >= 0:
            rest = text[at + len(_FAIL_LINE) :].splitlines()[0]
            check, _, detail = rest.partition(": ")
            detail = detail.rsplit("; report ", 1)[0]
            return dict(
                c, verdict="fail", state="FAILED", first_failure={"check": check, "status": "fail", "detail": detail}
            )
        if _PASS_LINE in text:
            return dict(c, verdict="pass", state="COMPLETED")
    return dict(c, verdict="unknown", state="FAILED")


def cancel(be, run) -> None:
    """Slurm: cancel the canary with its run (idempotent)."""
    c = run.info.get("canary") or {}
    if run.backend == "slurm" and c.get("job_id") and c.get("verdict") in (None, "pending", "running"):
        with contextlib.suppress(Exception):
            be.command(_job(run).scheduler, ["scancel", c["job_id"]])


def log_files(be, run) -> list:
    """The canary's logs first (Slurm), then the run's."""
    c = run.info.get("canary") or {}
    first = []
    if run.backend == "slurm" and c.get("job_id"):
        first = be.log_files(dataclasses.replace(run, job_ids=[c["job_id"]]), _job(run))
    return [*first, *be.log_files(run, _job(run))]


def status_line(c: dict) -> str:
    """`status RUN`'s canary line."""
    v = c.get("verdict", "?")
    head = f"job {c.get('job_id')}: " if c.get("job_id") else f"{c['where']}: " if c.get("where") else ""
    if v == "pass":
        warn = [x["check"] for x in c.get("checks", []) if x.get("status") == "warn"]
        return f"{head}passed" + (f" (warnings: {', '.join(warn)})" if warn else "") + f"; report {c.get('report')}"
    if v == "fail":
        ff = c.get("first_failure") or {}
        return f"{head}FAILED at {ff.get('check')}: {ff.get('detail')}; report {c.get('report')}"
    return f"{head}{v} ({c.get('state', '?')})"


# ---------------------------------------------------------------------------------------------
# --dry-run
# ---------------------------------------------------------------------------------------------
def describe(job) -> str:
    c = job.canary
    src = job.provenance["job"].get("canary", "")
    net = (
        f"busbw >= {c['busbw_min_fraction']:.0%} of {c['busbw_gbps']:g} GB/s ({job.gpu_type})"
        if c["busbw_gbps"]
        else f"busbw reported, not judged (no [canary] busbw_gbps for {job.gpu_type})"
    )
    if job.backend == "slurm":
        where = (
            f"a job on {c['nodes']} node{'s' if c['nodes'] != 1 else ''} of the same partition, time {c['time']}, "
            "submitted first; the job waits for it (--dependency=afterok, --kill-on-invalid-dep=yes)"
            + ("; with --until-done, the first segment only" if job.chain else "")
        )
        cost = (
            f"its own queue wait, then the image pull and the checks (the trainer and data checks up to "
            f"{c['check_timeout']} s each), at most {c['time']} in all"
        )
    else:
        where = f"the first step of the job on all {job.nodes} node(s); the job stops if a check fails"
        cost = f"the checks, in the job's allocation (the trainer and data checks up to {c['check_timeout']} s each)"
    return (
        f"Canary     {where}  [{src}]\n"
        f"           checks: image, trainer, data, checkpoint, hf_cache, fabric, network ({net})\n"
        f"           adds before the first step: {cost}"
    )


def view(job, main_artifact) -> dict:
    """--dry-run -o json's canary: its settings, spec and (Slurm) its script, from the job's artifact."""
    out = {"settings": job.canary, "spec_file": spec_rel(job.run_id), "spec": spec(job)}
    if main_artifact.canary is not None:
        out["artifact"] = main_artifact.canary.to_dict()
        out["artifact"]["filename"] = main_artifact.canary.filename
    return out


def dry_run_text(job, main_artifact) -> str:
    parts = ["", describe(job)]
    if main_artifact.canary is not None:
        art = main_artifact.canary
        parts += [
            f"\n--- canary {art.kind}: {art.filename} (submitted before the job; {JOB_PLACEHOLDER} above is its "
            "job id) ---",
            art.text.rstrip("\n"),
        ]
    parts += [f"\n--- canary spec: {spec_rel(job.run_id)} ---", json.dumps(spec(job), indent=1)]
    return "\n".join(parts) + "\n"
