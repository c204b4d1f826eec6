"""What every backend shares: the artifact type, the training command, the protocol."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import Protocol

from bridge_launch import __version__

WORKLOAD_DIR = "workload"  # the smoke workload and its modules, staged into the run dir
SMOKE_FILE = f"{WORKLOAD_DIR}/smoke.py"
# torchrun --tee's line prefix with the global rank (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE; read back
# by trainer_protocol.RANK_PREFIX_RE): what `logs --rank` and the failing rank's first error go by.
RANK_PREFIX_TEMPLATE = "[rank${rank}]: "
CANARY_FILE = f"{WORKLOAD_DIR}/cluster_checks.py"  # the canary job's entry


def last_step(text: str):
    """(step, total, loss) of the last iteration line, or None (read by logread, the one log reader)."""
    from bridge_launch.logs.reader import last_step as read

    return read(text)


def children(pid: int) -> list[int]:
    """The live processes whose parent is `pid` (from /proc; this machine has no task/children file)."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
            out.append(int(entry.name))
    return out


def log_tail(path, size: int = 65536) -> str | None:
    """The last `size` bytes of a local log file, or None if it cannot be read."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.path.getsize(path) - size))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return None


def progress(texts) -> dict:
    """Status fields from the tails of a run's logs (logread: step, train_iters, loss, grad norm,
    step time, TFLOP/s/GPU, the last checkpoint saved, the first error line)."""
    from bridge_launch.logs.reader import progress as read

    return read([t for t in texts if t])


@dataclass(frozen=True)
class Artifact:
    kind: str  # "sbatch" | "local-command" | "lepton-job" | "dgxc-workload"
    text: str
    filename: str  # where submit writes it, relative to the run dir

    def to_dict(self) -> dict:
        return {"kind": self.kind, "text": self.text}


class Tree(bytes):
    """A staged file whose value is a tar archive, unpacked at its path under the run dir
    (--bridge-src's packed checkout) instead of written as one file."""


def q(value) -> str:
    return shlex.quote(str(value))


def header(job) -> str:
    overlays = f" + overlays {', '.join(job.overlays)}" if job.overlays else ""
    return (f"bridge-launch {__version__}: run {job.run_id}, recipe {job.recipe}{overlays} on cluster {job.cluster} "
            f"({job.nodes} node{'s' if job.nodes != 1 else ''} x {job.gpus_per_node})")


def entry_command(job) -> list[str]:
    """What torchrun starts on every worker: the script and its arguments."""
    if job.workload == "smoke":
        return [f"{job.run_dir}/{SMOKE_FILE}", *job.args]
    if job.workload == "canary":
        return [f"{job.run_dir}/{CANARY_FILE}", *job.args]
    return [job.entry, "--recipe", job.upstream, "--mode", job.mode, *job.args]


def runtime_env(job) -> dict:
    """Non-secret variables every process of the job sees (recipe + cluster + bookkeeping)."""
    env = dict(job.env)
    env["BRIDGE_LAUNCH_RUN_DIR"] = job.run_dir
    env["BRIDGE_LAUNCH_RUN_ID"] = job.run_id
    if job.secrets:
        env["BRIDGE_LAUNCH_SECRET_NAMES"] = ",".join(job.secrets)
    return env


# torchrun --tee=3 prints every worker's stdout and stderr with this prefix in front of each line
# (T distributed/run.py --tee and --log-line-prefix-template; the env var is its default).
RANK_PREFIX_ENV = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": RANK_PREFIX_TEMPLATE}


def elapsed_text(seconds: float) -> str:
    """Seconds as Slurm writes an elapsed time (sacct's Elapsed): HH:MM:SS, or D-HH:MM:SS."""
    s = max(0, int(seconds))
    days, s = divmod(s, 86400)
    text = f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{days}-{text}" if days else text


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
