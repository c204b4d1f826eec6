"""What every backend shares: the artifact type, the training command, the protocol."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Protocol

from .. import __version__

SMOKE_FILE = "smoke.py"


@dataclass(frozen=True)
class Artifact:
    kind: str  # "sbatch" | "local-command" | "lepton-job" | "dgxc-workload"
    text: str
    filename: str
    files: dict = field(default_factory=dict)  # extra files to place in the run dir: name -> source path

    def to_dict(self) -> dict:
        return {"kind": self.kind, "text": self.text}


def q(value) -> str:
    return shlex.quote(str(value))


def header(job, run_dir: str) -> str:
    overlays = f" + overlays {', '.join(job.overlays)}" if job.overlays else ""
    return (f"bridge-launch {__version__}: recipe {job.recipe}{overlays} on cluster {job.cluster} "
            f"({job.nodes} node{'s' if job.nodes != 1 else ''} x {job.gpus_per_node}); run dir {run_dir}")


def entry_command(job, run_dir: str) -> list[str]:
    """What torchrun starts on every worker: the script and its arguments."""
    if job.workload == "smoke":
        return [f"{run_dir}/{SMOKE_FILE}", *job.args]
    return [job.entry, "--recipe", job.upstream, "--mode", job.mode, *job.args]


def runtime_env(job, run_dir: str) -> dict:
    """Non-secret variables every process of the job sees (recipe + cluster + bookkeeping)."""
    env = dict(job.env)
    env["BRIDGE_LAUNCH_RUN_DIR"] = run_dir
    env["BRIDGE_LAUNCH_RUN_ID"] = run_dir.rstrip("/").rsplit("/", 1)[-1]
    return env


def export_lines(env: dict) -> list[str]:
    return [f"export {k}={q(v)}" for k, v in env.items()]


def numa_wrapper(job) -> list[str] | None:
    """Per-worker NUMA binding from torchrun's LOCAL_RANK (one task per node makes
    SLURM_LOCALID 0 everywhere, so it cannot be used)."""
    if not job.profile.get("numa_bind"):
        return None
    per = max(1, job.gpus_per_node // 2)
    bind = f"$((LOCAL_RANK/{per}))"
    return ["bash", "-c", f'exec numactl --cpunodebind={bind} --membind={bind} python "$@"', "numa-bind"]


class Backend(Protocol):
    def submit(self, job, run, artifact, secrets: dict) -> list[str]: ...
    def status(self, runs: list) -> dict: ...
    def logs(self, run, follow: bool): ...
    def cancel(self, run) -> None: ...
