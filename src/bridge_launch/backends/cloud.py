"""What the Lepton and DGX Cloud backends share: the in-job command, secret references,
staging by tarball, retries, the local log cache.

Nothing here imports leptonai or nemo_run: render() must stay instant.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import re
import tarfile
import time
from pathlib import Path

from bridge_launch.backends import torchrun as T
from bridge_launch.backends.base import (
    IMAGE_REVISION_DIR,
    RANK_PREFIX_ENV,
    entry_command,
    image_revision_command,
    numa_wrapper,
    q,
    runtime_env,
    says_image_revision,
)
from bridge_launch.core import paths
from bridge_launch.core.errors import LaunchError
from bridge_launch.job.derived import canary_job, report_path
from bridge_launch.workloads.node_facts import NODE_LINE

LOOKUP = "@looked-up-at-submit:{}@"  # placeholders submit replaces with ids it asks the platform for
MASK = "****"


def job_name(run_id: str, prefix: str = "bl") -> str:
    """K8s-safe name, at most 34 characters (both platforms cut at 35)."""
    name = re.sub(r"[^a-z0-9-]", "-", f"{prefix}-{run_id}".lower()).strip("-")
    return name[:34].rstrip("-")


def secret_refs(job) -> dict:
    """Env name -> the platform's secret reference. The profile's `secret_refs` maps names;
    a secret it does not map is referenced under its own name."""
    refs = job.scheduler.get("secret_refs") or {}
    return {name: str(refs.get(name, name)) for name in job.secrets}


def plain_env(job) -> dict:
    """Non-secret env: runtime_env minus anything named like a secret (belt and braces:
    resolve already refuses secret values in [env]), plus torchrun's line prefix with the global
    rank (each replica's --tee would otherwise print "[defaultN]:", the rank on its node)."""
    env = {k: v for k, v in runtime_env(job).items() if k not in job.secrets}
    env.update(RANK_PREFIX_ENV)
    return env


def job_script(job, rank_prelude: list[str]) -> str:
    """The self-contained bash script every node runs: rank variables from the platform's
    own environment, one torchrun per node, per-node logs and an exit marker in the run dir.
    Nothing is downloaded."""
    if getattr(job, "canary", None):  # the canary's checks first, failing fast (workloads/cluster_checks.py)
        return cloud_script(job, rank_prelude, job_script)
    torchrun = ["torchrun"] if job.container else [job.python, "-m", "torch.distributed.run"]
    cmd = [*torchrun, f"--nnodes={job.nodes}", f"--nproc-per-node={job.gpus_per_node}"]
    # backends/torchrun: per-rank files in the run dir, a rendezvous that waits for pods pulling the
    # image minutes apart, and node 0 (the address MASTER_ADDR names) hosting the c10d store
    conf = T.rdzv_conf(job, is_host='$([ "$NODE_RANK" = 0 ] && echo 1 || echo 0)')
    rdzv = [
        '--node-rank="$NODE_RANK"',
        f'--log-dir={q(T.log_dir(job) + "/" + job.run_id)}/"node$NODE_RANK"',
        "--rdzv-backend=c10d",
        '--rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT"',
        f'--rdzv-conf="{conf}"',
        f"--rdzv-id={q(job.run_id)}",
        "--tee=3",
    ]
    wrapper = numa_wrapper(job)
    tail = (["--no-python", *wrapper] if wrapper else []) + entry_command(job)
    line = " ".join([*(q(a) for a in cmd), *rdzv, *(q(a) for a in tail)])
    log = f"logs/{job.run_id}-node$NODE_RANK.log"
    triage = [f"export {k}={q(v)}" for k, v in T.triage_env(job).items()]
    trace = T.trace_dir(job) + "/" + job.run_id
    said = []
    if says_image_revision(job):  # node 0 says first which Megatron-Bridge the image runs (image_revision.py)
        py = "python3" if job.container else q(job.python)
        report = q(f"{job.run_dir}/{IMAGE_REVISION_DIR}/{job.run_id}.json")
        cmd = f'{image_revision_command(job, py, report)} 2>&1 | tee -a "{log}"'
        said = [f'if [ "$NODE_RANK" = 0 ]; then {cmd} || true; fi']
    if T.sets_trace_file(job):  # flight-recorder dumps: one file per global rank (torchfrtrace DIR -p rank_)
        triage += [f"export {T.TRACE_FILE_VAR}={q(trace + '/' + T.TRACE_PREFIX)}", f"mkdir -p {q(trace)}"]
    return (
        "\n".join(
            [
                "set -uo pipefail",
                *rank_prelude,
                *triage,
                f"mkdir -p {q(job.run_dir)}/logs {q(job.run_dir)}/exit && cd {q(job.run_dir)} || exit 1",
                *said,
                f'echo "{NODE_LINE.format(host="$(hostname)")}" | tee -a "{log}"',  # whose ranks the log holds
                f'{line} 2>&1 | tee -a "{log}"',
                "rc=${PIPESTATUS[0]}",
                f'if [ "$NODE_RANK" = 0 ]; then printf "%s\\n" "$rc" > {q("exit/" + job.run_id)}; fi',
                'exit "$rc"',
            ]
        )
        + "\n"
    )


def pretty(payload: dict, secrets=()) -> str:
    return json.dumps(mask(payload, set(secrets)), indent=2) + "\n"


def mask(obj, secrets: set):
    """A copy with the plain value of any variable named as a secret masked. The payloads
    carry secret *references* only (so this changes nothing in practice, and the dry run
    stays the exact request); it guards against a value slipping in by mistake."""
    if isinstance(obj, dict):
        name = obj.get("name") if isinstance(obj.get("name"), str) else ""
        return {
            k: (MASK if k == "value" and name in secrets and isinstance(v, str) else mask(v, secrets))
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [mask(v, secrets) for v in obj]
    return obj


def fill(obj, values: dict):
    """Replace LOOKUP placeholders (whole strings, or a one-element list holding one)."""
    if isinstance(obj, dict):
        return {k: fill(v, values) for k, v in obj.items()}
    if isinstance(obj, list):
        if len(obj) == 1 and isinstance(obj[0], str) and obj[0] in values and isinstance(values[obj[0]], list):
            return list(values[obj[0]])
        return [fill(v, values) for v in obj]
    if isinstance(obj, str) and obj in values:
        return values[obj]
    return obj


def tarball_b64(files: dict) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=9) as tar:
        for rel, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return base64.b64encode(buf.getvalue()).decode()


def stage_commands(run_dir: str, files: dict, limit: int | None = None) -> list[str]:
    """Shell commands (for a busybox data-mover job) that unpack `files` into run_dir
    without deleting what is there (a resume reuses the dir). With `limit`, each command
    stays under that many characters (DGX Cloud caps a workload's args)."""
    b64 = tarball_b64(files)
    d = q(run_dir)
    if limit is None or len(b64) + 200 <= limit:
        return [f"mkdir -p {d} && echo {b64} | base64 -d | tar -xzf - -C {d}"]
    part = f"{run_dir}/.bridge-launch-stage.b64"
    size = limit - 200
    chunks = [b64[i : i + size] for i in range(0, len(b64), size)]
    cmds = [f"mkdir -p {d} && printf %s {chunks[0]} > {q(part)}"]
    cmds += [f"printf %s {c} >> {q(part)}" for c in chunks[1:]]
    cmds.append(f"base64 -d {q(part)} | tar -xzf - -C {d} && rm -f {q(part)}")
    return cmds


def retrying(what: str, fn, *, retries: int, wait: float, transient):
    """Call fn(); on a transient failure (transient(exc) -> reason or None) try again,
    up to `retries` attempts in all, then raise one clear LaunchError."""
    last = ""
    for attempt in range(max(1, retries)):
        try:
            return fn()
        except LaunchError:
            raise
        except Exception as exc:
            reason = transient(exc)
            if reason is None:
                raise
            last = reason
            if attempt + 1 < max(1, retries):
                time.sleep(wait * (2**attempt))
    raise LaunchError(f"{what}: {last} (gave up after {max(1, retries)} tries)")


def log_cache(run_id: str) -> Path:
    return paths.log_copies("cloud-logs", run_id)


def log_progress(backend, run, job) -> dict:
    """Status fields (step, loss, ...) from the tails of the logs the backend fetches; {} when
    they cannot be read (status still has the platform's state)."""
    from bridge_launch.backends.base import log_tail, progress

    try:
        return progress(log_tail(p) for p in backend.log_files(run, job))
    except LaunchError:
        return {}


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

    return "\n".join(
        [
            "set -uo pipefail",
            *rank_prelude,
            "# bridge-launch canary: the checks first, in these pods (workload/cluster_checks.py); the job stops here "
            "if one fails",
            "(",
            "export MASTER_PORT=$((${MASTER_PORT:-29400} + 1))",
            check,
            ")",
            "rc=$?",
            'if [ "$rc" -ne 0 ]; then',
            '    echo "bridge-launch: the canary failed (exit $rc): training not started; report '
            f'{report_path(job.run_dir, job.run_id)}" >&2',
            f'    if [ "$NODE_RANK" = 0 ]; then mkdir -p {q(job.run_dir)}/exit && printf "%s\\n" "$rc" > '
            f"{q(job.run_dir + '/exit/' + job.run_id)}; fi",
            '    exit "$rc"',
            "fi",
            main,
        ]
    )
