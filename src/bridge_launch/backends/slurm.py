"""The Slurm backend: one sbatch script, one torchrun per node, c10d rendezvous on the
first node, pyxis container flags where the profile names an image."""

from __future__ import annotations

import re

from ..errors import UsageError
from .base import Artifact, entry_command, export_lines, header, numa_wrapper, q, runtime_env

_DIRECTIVE_SAFE = re.compile(r"^[^\s'\"\\]+$")


class Raw(str):
    """An argument the batch shell must expand (left unquoted)."""


def _arg(a) -> str:
    return a if isinstance(a, Raw) else q(a)


def segment_size(nodes: int, domain: int) -> int:
    """Megatron-Bridge's rule: all nodes if they fit in one NVLink domain, else the largest
    divisor of the node count that does."""
    if domain <= 0 or nodes <= domain:
        return nodes
    return max(d for d in range(1, domain + 1) if nodes % d == 0)


def directives(job) -> list[tuple[str, str | None]]:
    s, run_dir = job.scheduler, job.run_dir
    out: list[tuple[str, str | None]] = [
        ("job-name", job.run_id),
        ("nodes", str(job.nodes)),
        ("ntasks-per-node", "1"),
    ]
    if s.get("request_gpus"):
        out.append(("gpus-per-node", str(job.gpus_per_node)))
    if s.get("exclusive"):
        out.append(("exclusive", None))
    if s.get("mem"):
        out.append(("mem", s["mem"]))
    for key in ("time", "partition", "account", "qos", "reservation"):
        if s.get(key):
            out.append((key, s[key]))
    if s.get("exclude"):
        out.append(("exclude", ",".join(s["exclude"])))
    if s.get("segment") and job.nodes > 1:
        out.append(("segment", str(segment_size(job.nodes, job.profile.get("nvlink_domain_nodes", 0)))))
    if s.get("signal"):
        out.append(("signal", s["signal"]))
    out += [("output", f"{run_dir}/logs/sbatch-%j.out"), ("open-mode", "append")]
    for extra in s.get("sbatch_args", []):
        name, sep, value = extra.lstrip("-").partition("=")
        out.append((name, value if sep else None))
    for name, value in out:
        if value is not None and not _DIRECTIVE_SAFE.match(value):
            raise UsageError(f"sbatch --{name} value {value!r} contains whitespace, quotes or backslashes, "
                             "which #SBATCH lines cannot carry")
    return out


def torchrun_command(job) -> list:
    """One torchrun per node; its node rank comes from the Slurm task's own environment,
    so it is read inside the task (bash -c) rather than in the batch shell."""
    launcher = "torchrun" if job.container else f"{q(job.python)} -m torch.distributed.run"
    cmd = [
        "bash", "-c", f'exec {launcher} --node-rank="$SLURM_NODEID" "$@"', "node-launch",
        f"--nnodes={job.nodes}", f"--nproc-per-node={job.gpus_per_node}",
        "--rdzv-backend=c10d", Raw('--rdzv-endpoint="$head_node:$rdzv_port"'), Raw('--rdzv-id="$SLURM_JOB_ID"'),
    ]
    wrapper = numa_wrapper(job)
    if wrapper:
        cmd += ["--no-python", *wrapper]
    return cmd + entry_command(job)


def render(job) -> Artifact:
    run_dir = job.run_dir
    env = runtime_env(job)
    s = job.scheduler
    srun = ["srun", f"--nodes={job.nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
            f"--output={run_dir}/logs/%j-%N.log"]
    if job.container:
        srun += [f"--container-image={job.container}"]
        if job.mounts:
            srun += [f"--container-mounts={','.join(job.mounts)}"]
        srun += [f"--container-env={','.join([*env, *job.secrets])}"]
    srun += list(s.get("srun_args", []))
    lines = ["#!/bin/bash", f"# {header(job)}"]
    lines += [f"#SBATCH --{k}" + (f"={v}" if v is not None else "") for k, v in directives(job)]
    if job.secrets:
        lines.append(f"# Secrets passed by name from the submitting environment: {' '.join(job.secrets)}")
    lines += [
        "set -uo pipefail",
        "",
        *export_lines(env),
        "",
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        f"rdzv_port={s['rdzv_port']}" if s.get("rdzv_port") else "rdzv_port=$((20000 + SLURM_JOB_ID % 20000))",
        f"mkdir -p {q(run_dir + '/logs')} {q(run_dir + '/exit')}",
        "",
        " \\\n    ".join(_arg(a) for a in [*srun, *torchrun_command(job)]),
        "rc=$?",
        f"printf '%s\\n' \"$rc\" > {q(run_dir + '/exit')}/\"$SLURM_JOB_ID\"",
        'exit "$rc"',
    ]
    return Artifact("sbatch", "\n".join(lines) + "\n", f"launch/{job.run_id}.sbatch")
