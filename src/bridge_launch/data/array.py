"""Shard writing as a Slurm job array through submitit (`data prepare --cluster NAME`).

Each array element writes a fixed subset of the planned shards (the same bytes as the local
path). submitit's own folder (pickled tasks, logs) lives next to the partial output directory on
the shared filesystem and is deleted on success; on failure it is kept and named in the error."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import time
from pathlib import Path

from bridge_launch.core import slurm_time
from bridge_launch.core.errors import LaunchError, UsageError, extra_line


def check_cluster(cluster: str) -> dict:
    """The profile's [slurm] settings, if it can run prepare's job array; else one clear error.
    Called before any record is read, so a wrong --cluster costs nothing."""
    from bridge_launch.spec import clusters

    prof = clusters.load(cluster)
    if prof.get("backend") != "slurm":
        raise UsageError(
            f"--cluster {cluster}: backend {prof.get('backend')!r} cannot run job arrays (valid: a slurm profile)"
        )
    if prof.get("containers"):
        raise UsageError(
            f"--cluster {cluster}: runs jobs in containers; data prepare --cluster needs bare processes "
            "that see this Python (use a profile with containers = false)"
        )
    slurm = prof.get("slurm", {})
    if slurm.get("time"):
        slurm_time.checked(slurm["time"], f"cluster:{cluster} [slurm] time")
    if slurm.get("slurm_conf"):
        os.environ["SLURM_CONF"] = slurm["slurm_conf"]
    if shutil.which("sbatch") is None:
        raise LaunchError("sbatch is not on PATH; --cluster needs a Slurm client on this machine")
    if importlib.util.find_spec("submitit") is None:
        raise UsageError(extra_line("submitit"))
    return slurm


def run_array(cluster: str, tasks: list, tmp: Path, workers: int, *, on_progress=None, log=None) -> list:
    """Write the shard tasks as a job array; returns write_shard's result for every task."""
    import submitit

    from bridge_launch.data.shards import write_shards

    slurm = check_cluster(cluster)

    folder = tmp.parent / f"{tmp.name}.submitit"
    n = min(len(tasks), max(1, workers) * 4)
    chunks = [tasks[i::n] for i in range(n)]
    ex = submitit.SlurmExecutor(folder=str(folder), python=None)
    params = {
        "array_parallelism": max(1, workers),
        "cpus_per_task": 1,
        "ntasks_per_node": 1,
        "nodes": 1,
        "job_name": "bridge-launch-data-prepare",
    }
    if slurm.get("partition"):
        params["partition"] = slurm["partition"]
    if slurm.get("account"):
        params["account"] = slurm["account"]
    limit = slurm_time.minutes(slurm["time"]) if slurm.get("time") else 60  # checked by check_cluster
    params["time"] = "UNLIMITED" if limit is None else limit
    ex.update_parameters(**params)
    try:
        jobs = ex.map_array(write_shards, chunks)
    except Exception as e:
        raise LaunchError(
            f"submitting the job array to {cluster} failed: "
            f"{str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__}"
        ) from e
    if log:
        log(f"submitted job array {jobs[0].job_id.split('_')[0]} ({len(jobs)} elements) to {cluster}")
    pending = dict(enumerate(jobs))
    written = []
    try:
        while pending:
            for i, job in list(pending.items()):
                if job.done():
                    try:
                        res = job.result()
                    except Exception as e:
                        msg = str(e).strip().splitlines()
                        last = next(
                            (ln for ln in reversed(msg) if ln.strip() and not ln.startswith(" ")), type(e).__name__
                        )
                        raise LaunchError(f"array element {job.job_id} failed: {last} (logs in {folder})") from e
                    del pending[i]
                    written += res
                    if on_progress:
                        on_progress(sum(r[1] for r in res))
            time.sleep(0.5)
    except BaseException:
        for job in pending.values():
            try:
                job.cancel(check=False)
            except Exception:  # noqa: BLE001 - cancelling the rest is best effort; the first error is raised
                pass
        # The caller deletes the partial directory next: wait (a while) until squeue shows no element
        # of the array, so none can write there. (submitit cannot say: elements cancelled while still
        # pending never reach accounting, and it calls their state UNKNOWN.)
        array_id = jobs[0].job_id.split("_")[0]
        deadline = time.monotonic() + 60
        while pending and time.monotonic() < deadline:
            try:
                q = subprocess.run(
                    ["squeue", "-h", "-j", array_id, "-o", "%i"], capture_output=True, text=True, timeout=30
                )
            except (OSError, subprocess.TimeoutExpired):
                break
            if q.returncode or not q.stdout.strip():  # gone (squeue says "Invalid job id" once it is purged)
                break
            time.sleep(0.5)
        raise
    shutil.rmtree(folder, ignore_errors=True)
    return written
