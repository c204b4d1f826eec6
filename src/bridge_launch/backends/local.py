"""The `local` backend: torchrun on this machine, detached, in its own session.

The artifact is a bash script (kind "local-command") run as `bash run.sh` in a new
process group; it writes the torchrun exit code to `exit_code` in the run dir, which is
how status knows the job ended and how it ended.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from bridge_launch.backends.base import (
    RANK_PREFIX_ENV,
    Artifact,
    children,
    elapsed_text,
    entry_command,
    env_secret_origins,
    export_lines,
    header,
    log_tail,
    numa_wrapper,
    progress,
    q,
    read_log_files,
    runtime_env,
    stage_locally,
)
from bridge_launch.core.errors import LaunchError


def log_path(run_id: str) -> str:
    return f"logs/{run_id}.log"


def exit_path(run_id: str) -> str:
    return f"exit/{run_id}"


# secrets: from the submitting shell, or (Slurm) a source on the cluster
secret_origins = env_secret_origins


def render(job) -> Artifact:
    run_dir = job.run_dir
    torchrun = [job.python, "-m", "torch.distributed.run"] if not job.container else ["torchrun"]
    # --tee=3: each worker's output, rank-prefixed (RANK_PREFIX_ENV), as on Slurm (logs --rank)
    cmd = [*torchrun, "--standalone", f"--nnodes={job.nodes}", f"--nproc-per-node={job.gpus_per_node}", "--tee=3"]
    wrapper = numa_wrapper(job)
    if wrapper:
        cmd += ["--no-python", *wrapper]
    cmd += entry_command(job)
    lines = [
        "#!/usr/bin/env bash",
        f"# {header(job)}",
        "# Secrets named by the profile come from the submitting environment; none is written here.",
        "set -uo pipefail",
        f"cd {q(run_dir)}",
        "mkdir -p exit",
        *export_lines({**runtime_env(job), **RANK_PREFIX_ENV}),
        # A trap (rather than the default action) makes bash wait for torchrun and record its exit code.
        "trap 'echo \"bridge-launch: SIGTERM received; waiting for the workers to exit\" >&2' TERM",
        " \\\n    ".join(q(a) for a in cmd),
        "rc=$?",
        f"printf '%s\\n' \"$rc\" > {q(exit_path(job.run_id))}.tmp && mv -f {q(exit_path(job.run_id))}.tmp "
        f"{q(exit_path(job.run_id))}",
        'exit "$rc"',
    ]
    return Artifact("local-command", "\n".join(lines) + "\n", f"launch/{job.run_id}.sh")


def _alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (PID 1 may reap late)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return False


def run_processes(run_id: str) -> list[int]:
    """The live processes of a run: every process its script starts inherits BRIDGE_LAUNCH_RUN_ID
    (torchrun's workers too, though each has a session of its own, so they outlive a killed launcher)."""
    tag = f"BRIDGE_LAUNCH_RUN_ID={run_id}".encode()
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as fh:
                env = fh.read()
        except OSError:  # gone, or another user's
            continue
        if tag in env.split(b"\0") and _alive(int(entry.name)):
            out.append(int(entry.name))
    return out


class Backend:
    name = "local"

    def __init__(self):
        self.notes: list[str] = []

    def stage(self, job, files: dict, *, new_dir: bool) -> None:
        stage_locally(job.run_dir, files, new_dir=new_dir)

    def unstage(self, job) -> None:
        shutil.rmtree(job.run_dir, ignore_errors=True)

    def submit(self, job, run, artifact: Artifact, secrets: dict) -> list[str]:  # noqa: ARG002 - the Backend protocol's signature
        run_dir = Path(run.run_dir)
        (run_dir / "logs").mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update(secrets)
        with open(run_dir / log_path(run.run_id), "ab") as log:
            try:
                proc = subprocess.Popen(
                    ["bash", str(run_dir / artifact.filename)],
                    cwd=run_dir,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            except OSError as exc:
                raise LaunchError(f"could not start the local job: {exc}") from None
        return [str(proc.pid)]

    def status(self, runs: list) -> dict:
        out = {}
        for run, job in runs:
            run_dir = Path(run.run_dir)
            code = _read_exit(run_dir / exit_path(run.run_id))
            if code is not None:
                if run.info.get("cancelled"):
                    st = ("CANCELLED", f"exit code {code}")
                else:
                    st = ("COMPLETED", "") if code == 0 else ("FAILED", f"exit code {code}")
            elif run.job_ids and _alive(int(run.job_ids[-1])):
                st = ("RUNNING", "")
            elif orphans := run_processes(run.run_id):  # its launcher died, its trainers did not
                st = (
                    "RUNNING",
                    f"the launcher is gone, {len(orphans)} of its processes still run (pids "
                    f"{' '.join(map(str, orphans[:8]))}); 'bridge-launch cancel {run.run_id}' stops them",
                )
            elif run.info.get("cancelled"):
                st = ("CANCELLED", "")
            else:
                st = ("FAILED", "the launcher process is gone without an exit code")
            # as Slurm's columns: the time it ran (to its exit marker, or until now) and the node (this host)
            try:
                end = (run_dir / exit_path(run.run_id)).stat().st_mtime if code is not None else time.time()
            except OSError:
                end = time.time()
            out[run.run_id] = {
                "state": st[0],
                "reason": st[1],
                "elapsed": elapsed_text(end - run.created),
                "nodes": socket.gethostname(),
                **progress(log_tail(p) for p in self.log_files(run, job)),
            }
        return out

    def log_texts(self, run, job, tail: int | None = None) -> list:
        return read_log_files(self.log_files(run, job), tail)

    def log_files(self, run, job) -> list[Path]:  # noqa: ARG002  (the protocol's signature)
        return [Path(run.run_dir) / log_path(run.run_id)]

    def cancel(self, run, job) -> None:  # noqa: ARG002 - the Backend protocol's signature
        """SIGTERM to the training processes themselves (torchrun's children), as an --until-done
        segment sends it: with train.exit_signal_handler on, the trainer saves and exits 0 at the end
        of its step; without it, the signal kills it. torchrun is left alone: signalled, it would
        forward the signal to each worker's process group (DataLoader workers included) and print a
        SignalException traceback (trainer_protocol). Whatever is still running after 60 s is
        terminated, then killed."""
        if not run.job_ids:
            return
        pid = int(run.job_ids[-1])
        if not _alive(pid):
            _stop(run_processes(run.run_id))  # a dead launcher's trainers
            return
        workers = [w for launcher in children(pid) for w in children(launcher)]
        try:
            if workers:
                for w in workers:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(w, signal.SIGTERM)
            else:
                os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 10)):
            deadline = time.time() + wait
            while time.time() < deadline and _alive(pid):
                time.sleep(0.2)
            if not _alive(pid):
                return
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, sig)


def _stop(pids: list[int]) -> None:
    """SIGTERM, 60 s to finish the step and save, then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 10)):
        pids = [p for p in pids if _alive(p)]
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, sig)
        deadline = time.time() + wait
        while time.time() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.2)


def _read_exit(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
