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

from bridge_launch.core.errors import UsageError

SUFFIX = "-canary"  # the canary's run id (job name, sbatch file) is the run's with this suffix
JOB_PLACEHOLDER = "@CANARY_JOB_ID@"  # in --dry-run's sbatch: the canary's job id, known at submit
SPEC_DIR = "canary"  # under the run dir: <run id>.spec.json (written at submit) and <run id>.json (the report)

# The profile's [canary] section (clusters.py validates it with these types and defaults).
PROFILE_KEYS = {
    "enabled": (bool, False),          # a profile may turn it on for every submit (--no-canary turns it off)
    "nodes": (int, 2),                 # Slurm: nodes of the job's partition (at most the job's)
    "time": (str, "00:30:00"),         # Slurm: the canary job's time limit (an image pull included)
    "busbw_gbps": ((int, float), 0),   # expected all-reduce bus bandwidth at the largest size (0: report only)
    "busbw_min_fraction": ((int, float), 0.8),  # below this fraction of busbw_gbps the network check fails
    "busbw_sizes": (list, [1 << 20, 16 << 20, 256 << 20]),  # bytes per all-reduce
    "busbw_iters": (int, 20),
    "check_timeout": (int, 900),       # seconds for the trainer check and for the data check
}


def check_profile(where: str, c: dict) -> None:
    """One clear line for a [canary] value that cannot work."""
    from bridge_launch.resolve.resolver import slurm_time_seconds

    if c["nodes"] < 1:
        raise UsageError(f"{where} [canary]: nodes must be >= 1, got {c['nodes']}")
    try:
        slurm_time_seconds(c["time"])
    except ValueError:
        raise UsageError(f"{where} [canary]: time {c['time']!r} is not a Slurm time (e.g. 00:30:00)") from None
    if c["busbw_gbps"] < 0:
        raise UsageError(f"{where} [canary]: busbw_gbps must be >= 0 (0: report the figure without judging it)")
    if not 0 < c["busbw_min_fraction"] <= 1:
        raise UsageError(f"{where} [canary]: busbw_min_fraction must be in (0, 1], got {c['busbw_min_fraction']}")
    sizes = c["busbw_sizes"]
    if not sizes or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 4 for n in sizes):
        raise UsageError(f"{where} [canary]: busbw_sizes must be a list of byte counts >= 4, got {sizes!r}")
    if c["busbw_iters"] < 1 or c["check_timeout"] < 10:
        raise UsageError(f"{where} [canary]: busbw_iters must be >= 1 and check_timeout >= 10 seconds")


def settings(prof: dict, requested: bool | None, nodes: int, jobsrc: dict) -> dict | None:
    """The canary's settings for a job (None: no canary). `requested`: --canary / --no-canary, or None
    for the profile's default."""
    section = prof.get("canary") or {}
    on = section.get("enabled", False) if requested is None else requested
    if not on:
        return None
    if prof["backend"] == "local":
        raise UsageError(f"--canary checks a cluster before the job starts; cluster '{prof['name']}' runs torchrun on "
                         "this machine (the local backend), where the job itself is the check")
    jobsrc["canary"] = "cli" if requested else f"cluster:{prof['name']}"
    full = {k: section.get(k, default) for k, (_, default) in PROFILE_KEYS.items()}
    full.pop("enabled")
    # Slurm runs it on its own allocation; on Lepton and DGX Cloud every node of the job runs it
    full["nodes"] = min(full["nodes"], nodes) if prof["backend"] == "slurm" else nodes
    return full


def spec_rel(run_id: str) -> str:
    return f"{SPEC_DIR}/{run_id}.spec.json"


def report_path(run_dir: str, run_id: str) -> str:
    return f"{run_dir}/{SPEC_DIR}/{run_id}.json"


def spec(job) -> dict:
    """What the in-job checks need (no secrets): the job's recipe and exact overrides, paths, the HF
    revisions, the schema's source, the expected bus bandwidth."""
    from bridge_launch.spec import schema

    c, cfg = job.canary, job.config
    src = {k: v for k, v in schema.source().items() if k != "note"}
    return {
        "run_id": job.run_id,
        "report": report_path(job.run_dir, job.run_id),
        "workload": job.workload,
        "entry": job.entry, "recipe": job.upstream, "mode": job.mode, "args": list(job.args),
        "world_size": job.world_size, "nodes": job.nodes, "gpu_type": job.gpu_type,
        "container": job.container, "mounts": list(job.mounts),
        "schema_source": src,
        "dataset": {"kind": job.dataset_kind, "path": cfg.get("dataset.path")},
        "pretrained_checkpoint": cfg.get("checkpoint.pretrained_checkpoint"),
        "hf": {"model": job.hf_model, "model_revision": cfg.get("model.hf_model_revision"),
               "processor": cfg.get("dataset.task_encoder.hf_processor_path") or job.hf_model,
               "processor_revision": cfg.get("dataset.task_encoder.hf_processor_revision")},
        "fabric": {"expect_mnnvl": job.profile.get("nvlink_domain_nodes", 0) > 1 and job.gpu_type != "cpu"},
        "network": {"sizes": list(c["busbw_sizes"]), "iters": c["busbw_iters"],
                    "expected_busbw_gbps": c["busbw_gbps"], "min_fraction": c["busbw_min_fraction"]},
        "check_timeout_s": c["check_timeout"],
    }


def canary_job(job, nodes: int | None = None):
    """The canary as a job of its own, for the same renderer: same image, mounts, environment,
    partition, account; its own run id suffix, node count and time limit; no chain; its entry is
    workload/cluster_checks.py with the spec."""
    c = job.canary
    n = nodes or c["nodes"]
    sched = {k: v for k, v in job.scheduler.items() if k != "signal"}
    if job.backend == "slurm":
        sched["time"] = c["time"]
    return dataclasses.replace(job, run_id=job.run_id + SUFFIX, nodes=n, world_size=n * job.gpus_per_node,
                               workload="canary", chain=None, scheduler=sched, args=[f"{job.run_dir}/{spec_rel(job.run_id)}"],
                               canary=None)


def gated(job, canary_job_id: str):
    """The real Slurm job, waiting for the canary: it starts only if the canary succeeds, and Slurm
    removes it when the canary fails (--kill-on-invalid-dep)."""
    sched = dict(job.scheduler)
    sched["sbatch_args"] = [*sched.get("sbatch_args", []), f"--dependency=afterok:{canary_job_id}",
                            "--kill-on-invalid-dep=yes"]
    return dataclasses.replace(job, scheduler=sched)


def artifact(job):
    """Slurm: the canary's sbatch script (launch/<run id>-canary.sbatch)."""
    from bridge_launch.backends.slurm import backend as slurm

    return slurm.render(canary_job(job))


def files(job) -> dict:
    """What submit stages besides the job's own files: the spec and, on Slurm, the canary's script."""
    out = {spec_rel(job.run_id): json.dumps(spec(job), indent=1) + "\n"}
    if job.backend == "slurm":
        art = artifact(job)
        out[art.filename] = art.text
    return out


def submit(be, job, run, main_artifact, secrets: dict) -> tuple[list, dict]:
    """Slurm: the canary first, then the real job waiting for it (its script re-rendered with the
    canary's id). Lepton, DGX Cloud: the job, whose first step is the canary. Returns the real
    job's ids and the run info to record."""
    report = report_path(job.run_dir, job.run_id)
    if job.backend != "slurm":
        ids = be.submit(job, run, main_artifact, secrets)
        return ids, {"canary": {"where": "first step", "state": "PENDING", "verdict": "pending", "report": report}}
    from bridge_launch.backends.slurm import backend as slurm

    cjob, cart = canary_job(job), artifact(job)
    cid = be.submit(cjob, run, cart, secrets)[0]
    try:
        main = gated(job, cid)
        art = slurm.render(main)
        be.stage(main, {art.filename: art.text}, new_dir=False)
        ids = be.submit(main, run, art, secrets)
    except BaseException:
        with contextlib.suppress(Exception):
            be._run(job.scheduler, ["scancel", cid])
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
        out.update(state="FAILED", reason=f"canary failed at {ff.get('check', '?')}: {ff.get('detail', '')}".rstrip(": "))
        if run.backend == "slurm" and st.get("state") == "PENDING" and run.job_ids:
            with contextlib.suppress(Exception):  # Slurm removes it itself (--kill-on-invalid-dep); make sure
                be._run(_job(run).scheduler, ["scancel", *run.job_ids])
    elif run.backend == "slurm" and c.get("verdict") in ("pending", "running") and st.get("state") == "PENDING":
        out["reason"] = f"waiting for the canary (job {c['job_id']}, {c.get('state', '?')})"
    return out


def _job(run):
    from bridge_launch.runs import lifecycle as launch
    from bridge_launch.runs.registry import Registry

    return launch.load_job(Registry(), run)


def _settle_slurm(be, run, c: dict) -> dict:
    from bridge_launch.backends.slurm.backend import container_failure

    s = _job(run).scheduler
    jid = c["job_id"]
    info = be._squeue(s, [jid]).get(jid)
    if info is None or info["state"] not in ("PENDING", "RUNNING"):
        info = be._sacct(s, [jid]).get(jid) or info or be._exit_marker(s, run, jid)
    c["state"] = info.get("state", "UNKNOWN")
    text = be._read(s, c["report"])
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
        c.update(verdict="fail", first_failure={"check": "canary", "status": "fail", "detail": (
            f"every check passed on rank 0, but the canary job ended {c['state']}"
            f"{' (' + info['reason'] + ')' if info.get('reason') else ''}: another rank failed; see "
            f"{run.run_dir}/logs/{jid}-*.log")})
        return c
    # the canary ended without a complete report: it never ran (an image that cannot be pulled) or died
    canary_run = dataclasses.replace(run, job_ids=[jid])
    why = container_failure(be._log_texts(s, canary_run))
    if why:
        c.update(verdict="fail", first_failure={"check": "image", "status": "fail", "detail": why})
    else:
        done = ", ".join(x["check"] for x in c.get("checks", [])) or "none"
        c.update(verdict="fail", first_failure={"check": "canary", "status": "fail", "detail": (
            f"the canary job ended {c['state']}{' (' + info['reason'] + ')' if info.get('reason') else ''} before its "
            f"report was complete (checks done: {done}); see {run.run_dir}/logs/sbatch-{jid}.out")})
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
    for path in be.log_files(run):
        text = log_tail(path, 1 << 20) or ""
        at = text.rfind(_FAIL_LINE)
        if at >= 0:
            rest = text[at + len(_FAIL_LINE):].splitlines()[0]
            check, _, detail = rest.partition(": ")
            detail = detail.rsplit("; report ", 1)[0]
            return dict(c, verdict="fail", state="FAILED",
                        first_failure={"check": check, "status": "fail", "detail": detail})
        if _PASS_LINE in text:
            return dict(c, verdict="pass", state="COMPLETED")
    return dict(c, verdict="unknown", state="FAILED")


def cancel(be, run) -> None:
    """Slurm: cancel the canary with its run (idempotent)."""
    c = run.info.get("canary") or {}
    if run.backend == "slurm" and c.get("job_id") and c.get("verdict") in (None, "pending", "running"):
        with contextlib.suppress(Exception):
            be._run(_job(run).scheduler, ["scancel", c["job_id"]])


def log_files(be, run) -> list:
    """The canary's logs first (Slurm), then the run's."""
    c = run.info.get("canary") or {}
    first = []
    if run.backend == "slurm" and c.get("job_id"):
        first = be.log_files(dataclasses.replace(run, job_ids=[c["job_id"]]))
    return [*first, *be.log_files(run)]


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
# Lepton and DGX Cloud: the checks as the job's first step
# ---------------------------------------------------------------------------------------------
def cloud_script(job, rank_prelude: list, job_script) -> str:
    """The job's script with the canary first: the same script for the canary job (same torchrun,
    every node, rendezvous one port above the job's), in a subshell; when it fails the job stops
    with its exit code, before training starts."""
    check = job_script(canary_job(job, nodes=job.nodes), rank_prelude).rstrip("\n")
    main = job_script(dataclasses.replace(job, canary=None), rank_prelude)
    from bridge_launch.backends.base import q

    return "\n".join([
        "set -uo pipefail",
        *rank_prelude,
        "# bridge-launch canary: the checks first, in these pods (workload/cluster_checks.py); the job stops here if one fails",
        "(",
        'export MASTER_PORT=$((${MASTER_PORT:-29400} + 1))',
        check,
        ")",
        "rc=$?",
        'if [ "$rc" -ne 0 ]; then',
        f'    echo "bridge-launch: the canary failed (exit $rc): training not started; report {report_path(job.run_dir, job.run_id)}" >&2',
        f'    if [ "$NODE_RANK" = 0 ]; then mkdir -p {q(job.run_dir)}/exit && printf "%s\\n" "$rc" > {q(job.run_dir + "/exit/" + job.run_id)}; fi',
        '    exit "$rc"',
        "fi",
        main,
    ])


# ---------------------------------------------------------------------------------------------
# --dry-run
# ---------------------------------------------------------------------------------------------
def describe(job) -> str:
    c = job.canary
    src = job.provenance["job"].get("canary", "")
    net = (f"busbw >= {c['busbw_min_fraction']:.0%} of {c['busbw_gbps']:g} GB/s ({job.gpu_type})" if c["busbw_gbps"]
           else f"busbw reported, not judged (no [canary] busbw_gbps for {job.gpu_type})")
    if job.backend == "slurm":
        where = (f"a job on {c['nodes']} node{'s' if c['nodes'] != 1 else ''} of the same partition, time {c['time']}, "
                 "submitted first; the job waits for it (--dependency=afterok, --kill-on-invalid-dep=yes)"
                 + ("; with --until-done, the first segment only" if job.chain else ""))
    else:
        where = f"the first step of the job on all {job.nodes} node(s); the job stops if a check fails"
    return (f"Canary     {where}  [{src}]\n"
            f"           checks: image, trainer, data, checkpoint, hf_cache, fabric, network ({net})")


def view(job) -> dict:
    out = {"settings": job.canary, "spec_file": spec_rel(job.run_id), "spec": spec(job)}
    if job.backend == "slurm":
        out["artifact"] = artifact(job).to_dict()
        out["artifact"]["filename"] = artifact(job).filename
    return out


def dry_run_text(job) -> str:
    parts = ["", describe(job)]
    if job.backend == "slurm":
        art = artifact(job)
        parts += [f"\n--- canary {art.kind}: {art.filename} (submitted before the job; {JOB_PLACEHOLDER} above is its "
                  "job id) ---", art.text.rstrip("\n")]
    parts += [f"\n--- canary spec: {spec_rel(job.run_id)} ---", json.dumps(spec(job), indent=1)]
    return "\n".join(parts) + "\n"
