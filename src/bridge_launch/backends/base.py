"""What every backend shares: the artifact type, the training command, the protocol."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Protocol

from bridge_launch import __version__
from bridge_launch.core import paths, upstream
from bridge_launch.job.artifact import Artifact as Artifact
from bridge_launch.job.artifact import Tree as Tree

WORKLOAD_DIR = "workload"  # the smoke workload and its modules, staged into the run dir
SMOKE_FILE = f"{WORKLOAD_DIR}/smoke.py"
# torchrun --tee's line prefix with the global rank (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE; read back
# by trainer_protocol.RANK_PREFIX_RE): what `logs --rank` and the failing rank's first error go by.
RANK_PREFIX_TEMPLATE = "[rank${rank}]: "
CANARY_FILE = f"{WORKLOAD_DIR}/cluster_checks.py"  # the canary job's entry
# The entry of a job whose recipe function bridge-launch ships: it registers the function from
# workload/bridge_recipes/<module> in megatron.bridge.recipes, then runs the image's run_recipe.py.
RECIPE_ENTRY_FILE = f"{WORKLOAD_DIR}/bridge_recipe_entry.py"
BRIDGE_RECIPES_DIR = f"{WORKLOAD_DIR}/bridge_recipes"


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


def q(value) -> str:
    return shlex.quote(str(value))


def header(job) -> str:
    overlays = f" + overlays {', '.join(job.overlays)}" if job.overlays else ""
    return (
        f"bridge-launch {__version__}: run {job.run_id}, recipe {job.recipe}{overlays} on cluster {job.cluster} "
        f"({job.nodes} node{'s' if job.nodes != 1 else ''} x {job.gpus_per_node})"
    )


def entry_command(job) -> list[str]:
    """What torchrun starts on every worker: the script and its arguments."""
    if job.workload == "smoke":
        return [f"{job.run_dir}/{SMOKE_FILE}", *job.args]
    if job.workload == "canary":
        return [f"{job.run_dir}/{CANARY_FILE}", *job.args]
    if getattr(job, "bridge_recipe_module", None):
        return [
            f"{job.run_dir}/{RECIPE_ENTRY_FILE}",
            recipe_module_path(job),
            job.entry,
            *job.recipe_argv(),
        ]
    return [job.entry, *job.recipe_argv()]


def recipe_module_path(job) -> str | None:
    """Where the job's shipped recipe module is staged (None: its function is Megatron-Bridge's own)."""
    module = getattr(job, "bridge_recipe_module", None)
    return f"{job.run_dir}/{BRIDGE_RECIPES_DIR}/{module}" if module else None


def needs_workload(job) -> bool:
    """Whether submit stages workload/ into the run dir: the smoke and canary workloads, a chain's
    step_times.py, the health step's node_health.py, the shipped recipe entry and its module, and
    image_revision.py, which every Megatron-Bridge job on Slurm runs first."""
    return bool(
        job.workload == "smoke"
        or job.canary
        or job.chain
        or job.scheduler.get("health_check")
        or getattr(job, "bridge_recipe_module", None)
        or says_image_revision(job)
    )


IMAGE_REVISION_FILE = f"{WORKLOAD_DIR}/image_revision.py"
IMAGE_REVISION_DIR = "image-revision"  # its findings as JSON, one file per job (Slurm) or run (cloud)


def says_image_revision(job) -> bool:
    """A Megatron-Bridge job on a cluster backend says first which Megatron-Bridge its image (or
    --bridge-src) runs against the recipe's pins, as upstream's launcher prints the image's commits
    (scripts/performance/utils/executors.py:179, docker/common/print_sha.sh)."""
    cluster = job.backend in ("slurm", "lepton", "dgxcloud")
    return bool(job.workload == "megatron-bridge" and job.bridge_commit and cluster)


def image_revision_command(job, python: str, report: str) -> str:
    """The shell command node 0 runs before torchrun (workloads/image_revision.py); it never fails
    the job. `report` is a shell word (it may expand a variable)."""
    rev = upstream.revision(job.bridge_commit)
    return (
        f"{python} {q(job.run_dir + '/' + IMAGE_REVISION_FILE)} --bridge={rev.bridge} --core={rev.core} "
        f"--report={report}"
    )


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
    """What callers use of every backend. The job is always passed in (a backend never loads a
    run's job itself), and nothing here prints: what a user should know comes back as notes."""

    name: str
    notes: list[str]  # what a user should know of the last submits ("warning: ...", "note: ..."): the CLI says it

    def stage(self, job, files: dict, *, new_dir: bool) -> None: ...
    def unstage(self, job) -> None: ...
    def submit(self, job, run, artifact, secrets: dict) -> list[str]: ...
    def status(self, runs: list) -> dict: ...  # [(run, job)] -> {run id: {"state", "reason", ...}}
    def log_files(self, run, job) -> list: ...
    def log_texts(self, run, job, tail: int | None = None) -> list: ...
    def cancel(self, run, job) -> None: ...


def read_log_files(paths, tail: int | None = None) -> list[bytes]:
    """The files' bytes, whole or the last `tail` bytes of each; a file that cannot be read is left out."""
    out = []
    for path in paths:
        try:
            with open(path, "rb") as fh:
                if tail:
                    fh.seek(max(0, os.path.getsize(path) - tail))
                out.append(fh.read())
        except OSError:
            continue
    return out


_WORKLOADS = Path(__file__).resolve().parent.parent / "workloads"  # the package's workloads/


def workload_files() -> dict:
    """The in-job workload (smoke.py and its sibling modules, the shipped recipe modules under
    bridge_recipes/), as staged into the run dir."""
    files = {
        f"{WORKLOAD_DIR}/{p.name}": p.read_text() for p in sorted(_WORKLOADS.glob("*.py")) if p.name != "__init__.py"
    }
    for p in sorted((_WORKLOADS / "bridge_recipes").glob("*.py")):
        if p.name != "__init__.py":
            files[f"{BRIDGE_RECIPES_DIR}/{p.name}"] = p.read_text()
    return files


def stage_locally(run_dir: str, files: dict, *, new_dir: bool) -> None:
    """Create the run dir (or reuse it, for a resume) and write the files, owner-only."""
    root = Path(run_dir)
    if new_dir:
        root.mkdir(parents=True, exist_ok=False)
    for sub in ("logs", "launch", "exit"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        if isinstance(text, Tree):  # a packed tree (--bridge-src), unpacked under rel/
            import io
            import tarfile

            with tarfile.open(fileobj=io.BytesIO(text)) as tar:
                tar.extractall(root / rel, filter="data")
            continue
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        paths.write_private(root / rel, text)


def env_secret_origins(job) -> dict:
    """Where each secret's value comes from on a backend that takes it from the submitting shell or
    a source on the cluster (local, Slurm): {name: (what --dry-run says of it, which layer set it)}."""
    sources = getattr(job, "secret_sources", None) or {}
    out = {}
    for n in job.secrets:
        if n in sources:
            spec = sources[n]
            text = f"{spec['source']}: read on the cluster when each step starts"
            out[n] = (text + (" (optional)" if spec["optional"] else ""), spec["from"])
        else:
            out[n] = (f"from your environment at submit: {'set' if os.environ.get(n) else 'not set'}", "")
    return out
