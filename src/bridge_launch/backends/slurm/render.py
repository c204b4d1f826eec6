"""The Slurm job as bridge-launch writes it: the sbatch script (directives, environment, the
rendezvous on the first node, the secret reader, the health step, the training step with its
stop and time-limit traps, a chain segment's or a retried job's own decisions) and the staged
per-node launcher. Pure: text from the job, nothing run."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from bridge_launch.backends import torchrun as T
from bridge_launch.backends.base import (
    IMAGE_REVISION_DIR,
    IMAGE_REVISION_FILE,
    RANK_PREFIX_ENV,
    WORKLOAD_DIR,
    Artifact,
    entry_command,
    env_secret_origins,
    export_lines,
    header,
    numa_wrapper,
    q,
    runtime_env,
    says_image_revision,
)
from bridge_launch.backends.slurm import attempts, resume_point
from bridge_launch.backends.slurm import secrets as slurm_secrets
from bridge_launch.core import pyxis, upstream
from bridge_launch.core.errors import UsageError
from bridge_launch.core.image_ref import pyxis_ref
from bridge_launch.core.ports import EPHEMERAL_PORTS
from bridge_launch.core.upstream import BRIDGE_IN_CONTAINER
from bridge_launch.job import derived
from bridge_launch.job.resolved import RUN_ID_PLACEHOLDER
from bridge_launch.logs import failures
from bridge_launch.logs.failures import LOST_NODE, NCCL_PEER, NODE_FAULT
from bridge_launch.plan import topology
from bridge_launch.workloads import node_facts
from bridge_launch.workloads import trainer_protocol as P

_DIRECTIVE_SAFE = re.compile(r"^[^\s'\"\\]+$")


class Raw(str):
    """An argument the batch shell must expand (left unquoted)."""


def _arg(a) -> str:
    return a if isinstance(a, Raw) else q(a)


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
        size = topology.segment_of(job)
        if size:
            out.append(("segment", str(size)))
    if s.get("signal"):
        out.append(("signal", s["signal"]))
    out += [("output", f"{run_dir}/logs/sbatch-%j.out"), ("open-mode", "append")]
    for extra in s.get("sbatch_args", []):
        name, sep, value = extra.lstrip("-").partition("=")
        out.append((name, value if sep else None))
    for name, value in out:
        if value is not None and not _DIRECTIVE_SAFE.match(value):
            raise UsageError(
                f"sbatch --{name} value {value!r} contains whitespace, quotes or backslashes, "
                "which #SBATCH lines cannot carry"
            )
    return out


# The batch logic is shell, in files of this package (batch/*.sh): the batch script sets their
# inputs, stages them in the run dir under launch/, sources them and calls their functions.
# node-launch.sh is run by srun on every node.
BATCH_DIR = Path(__file__).with_name("batch")
JOB, CONTAINERS, RESUME_POINT, CULPRIT, TIME_LIMIT, ATTEMPTS, SEGMENT, NODE_LAUNCH, NODE_CONTAINERS = (
    "job.sh",
    "containers.sh",
    "resume-point.sh",
    "culprit.sh",
    "time-limit.sh",
    "attempts.sh",
    "segment.sh",
    "node-launch.sh",
    "node-containers.sh",
)
FAILURES_FILE = "failures.tsv"  # logs/failures.py's table for this job: CLASS<TAB>WHAT<TAB>ERE, in order
WIDTH = 110  # the batch script's lines of words wrap here (a longer word stands alone)


def library(name: str) -> str:
    """A batch-logic file as it is staged."""
    return (BATCH_DIR / name).read_text()


def staged(job, name: str) -> str:
    """Where a batch-logic file is staged: launch/<run id>.<name> in the run dir."""
    return f"launch/{job.run_id}.{name}"


def node_launcher_path(job) -> str:
    """Where the per-node launcher is staged."""
    return staged(job, NODE_LAUNCH)


COMPILE_CACHE_DIR = "cache"  # under the run dir: per-node Triton and TorchInductor caches


def node_launcher_options(job) -> list:
    """node-launch.sh's options for this job: how torchrun starts (the image's, or this interpreter's
    on bare processes), its log dir and rendezvous settings (node rank and store host are read in
    the task), the compile caches, a --bridge-src checkout, the image's revision check."""
    out: list = []
    if not job.container:
        out += ["--python", job.python]
    out += [
        "--log-dir",
        T.log_dir(job),
        "--rdzv-conf",
        T.rdzv_conf(job, is_host="{is_host}"),
        "--cache-dir",
        f"{job.run_dir}/{COMPILE_CACHE_DIR}",
        "--node-line",
        node_facts.NODE_LINE,
    ]
    if job.bridge_src:
        out += ["--bridge-src", BRIDGE_IN_CONTAINER]
    if says_image_revision(job):
        rev = upstream.revision(job.bridge_commit)
        out += [
            "--revision-check",
            f"{job.run_dir}/{IMAGE_REVISION_FILE}",
            "--revision-pins",
            f"{rev.bridge}:{rev.core}",
            "--revision-report",
            f"{job.run_dir}/{IMAGE_REVISION_DIR}",
        ]
    return out


def torchrun_command(job) -> list:
    """One torchrun per node, through the staged per-node launcher (node-launch.sh): its options,
    the stop file and the training processes' signal, torchrun's arguments, the entry."""
    cmd = [
        "bash",
        f"{job.run_dir}/{node_launcher_path(job)}",
        *node_launcher_options(job),
        Raw('"$stop_file"'),
        job.limit_save["exit_signal"] if job.limit_save else "TERM",
        f"--nnodes={job.nodes}",
        f"--nproc-per-node={job.gpus_per_node}",
        "--rdzv-backend=c10d",
        Raw('--rdzv-endpoint="$rdzv_host:$rdzv_port"'),
        Raw('--rdzv-id="$SLURM_JOB_ID"'),
        "--tee=3",
    ]
    wrapper = numa_wrapper(job)
    if wrapper:
        cmd += ["--no-python", *wrapper]
    return cmd + entry_command(job)


def health_args(job) -> list:
    """node_health.py's arguments for this job: the profile's GPUs, IMEX where it has NVLink domains,
    the paths the job reads and the checkpoint directory it writes; on a job of several nodes, the
    fabric's all-reduces (rank 0's store next to the rendezvous port, the [canary] figures)."""
    gpu = job.gpu_type != "cpu"
    out: list = [f"--gpus={job.gpus_per_node if gpu else 0}", f"--gpu-model={job.gpu_type.upper() if gpu else ''}"]
    if gpu and job.nodes > 1 and job.profile.get("nvlink_domain_nodes", 0) > 1:
        out.append("--imex")
    cfg = job.config
    for flag, keys in (
        ("--read", ("dataset.path", "checkpoint.pretrained_checkpoint")),
        ("--write", ("checkpoint.save",)),
    ):
        for key in keys:
            v = cfg.get(key)
            if isinstance(v, str) and v.startswith("/") and "${" not in v:
                out.append(f"{flag}={key}={v}")
    if job.nodes > 1 and job.scheduler.get("health_fabric", True):
        c = job.profile["canary"]  # the profile's section, its defaults filled (spec/clusters.CANARY_KEYS)
        fixed = job.scheduler.get("rdzv_port")  # a site's own port: the one after it
        port = f"{fixed + 1}" if fixed else f"$(({T.HEALTH_PORT_BASE} + SLURM_JOB_ID % {T.HEALTH_PORT_SPAN}))"
        out += [
            Raw(f'--fabric="$rdzv_host:{port}"'),
            "--fabric-sizes=" + ",".join(str(x) for x in c["busbw_sizes"]),
            f"--fabric-iters={c['busbw_iters']}",
            f"--expect-gbps={c['busbw_gbps']}",
            f"--expect-cross-gbps={c.get('busbw_cross_rack_gbps', 0)}",  # jobs resolved before it existed
            f"--min-fraction={c['busbw_min_fraction']}",
            f"--domain-nodes={job.profile.get('nvlink_domain_nodes', 0)}",
        ]
    return out


def _units(words) -> list[str]:
    """Quoted words, an option without '=' kept with the value after it (`--mode sft`)."""
    out: list[str] = []
    words = list(words)
    for i, word in enumerate(words):
        text = _arg(word)
        prev = words[i - 1] if i else None
        bound = isinstance(prev, str) and prev.startswith("--") and "=" not in prev and not str(word).startswith("-")
        if out and bound:
            out[-1] += " " + text
        else:
            out.append(text)
    return out


def wrap(*groups, indent: str = "    ", run_id: str | None = None) -> list[str]:
    """Shell words as lines of at most WIDTH characters, each group from a new line. With the job's
    run id, a word is measured as the dry run shows it (the placeholder in the id's place), so the
    script submit writes breaks its lines where the dry run did."""
    lines = []
    for group in groups:
        line, width = "", 0
        for unit in _units(group):
            size = len(unit.replace(run_id, RUN_ID_PLACEHOLDER)) if run_id else len(unit)
            if line and len(indent) + width + 1 + size > WIDTH:
                lines.append(indent + line)
                line, width = unit, size
            else:
                line, width = (f"{line} {unit}", width + 1 + size) if line else (unit, size)
        if line:
            lines.append(indent + line)
    return lines


def assign(run_id: str | None = None, /, **values) -> list[str]:
    """NAME=VALUE lines, each value shell-quoted (a list: an array), wrapped at WIDTH (run_id: as wrap)."""
    words = []
    for name, value in values.items():
        if isinstance(value, list | tuple):
            words.append(Raw(f"{name}=({' '.join(q(v) for v in value)})"))
        else:
            words.append(Raw(f"{name}={_arg(value)}"))
    return wrap(words, indent="", run_id=run_id)


def array(name: str, words: list, run_id: str | None = None) -> list[str]:
    """NAME=(WORDS...) as lines: one where it fits in WIDTH, else wrapped between the parentheses."""
    one = " ".join(_units(words))
    if len(name) + 3 + len((one.replace(run_id, RUN_ID_PLACEHOLDER) if run_id else one)) <= WIDTH:
        return [f"{name}=({one})"]
    return [f"{name}=(", *wrap(words, run_id=run_id), ")"]


def _env_names(names: list[str]) -> list[str]:
    """env_names: the variables pyxis passes into the container (--container-env), as lines."""
    out, line = [], ""
    for name in names:
        if line and len(line) + 1 + len(name) > WIDTH - 12:
            out.append(line)
            line = name
        else:
            line = f"{line},{name}" if line else name
    return [f"env_names={out[0] if out else line}", *[f"env_names+=,{x}" for x in [*out[1:], line] if out]]


def _steps(job, env: list[str], secret_lines: bool) -> list[str]:
    """The job's steps as arrays that job.sh runs: srun's options for both, the health step, the
    training step (through the per-node launcher)."""
    s, run_dir = job.scheduler, job.run_dir
    common: list = [f"--nodes={job.nodes}", "--ntasks-per-node=1"]
    lines = ["# the job's steps (job.sh runs them): srun's options for both, the health step, the training step"]
    env_for_health: list = []
    env_for_train: list = []
    named: list = []
    if job.container:
        # the image step (containers.sh) puts the image in this job's named container on every node;
        # the steps after it start that container, in namespaces of their own (:no_exec: a running one
        # is not joined, so each step's --container-mounts apply; pyxis_slurmstepd.c:1327-1334)
        named = [Raw('--container-name="$container:no_exec"')]
        if job.mounts:
            common += [f"--container-mounts={','.join(job.mounts)}"]
        common += [f"--container-workdir={run_dir}"]
        lines += _env_names(env)
        env_for_health = [Raw('--container-env="$env_names"')]  # the health step needs no secret
        secrets = ",".join(job.secrets)
        env_for_train = [Raw(f'--container-env="$env_names,{secrets}"' if secrets else '--container-env="$env_names"')]
    # --cpu-bind (spec/clusters.py): a site's autobind would pin the node's one task, and so every worker
    # and DataLoader process under it, to the task's CPUs before the NUMA wrapper binds each worker
    bind = s.get("cpu_bind", "none")
    common += [*([f"--cpu-bind={bind}"] if bind else []), f"--mpi={s.get('mpi') or 'none'}", *s.get("srun_args", [])]
    lines += ["step=(", *wrap(common, run_id=job.run_id), ")"]
    if job.container:
        lines += [
            *array(
                "image",
                [
                    "srun",
                    Raw('"${step[@]}"'),
                    f"--container-image={pyxis_ref(job.container)}",
                    Raw('--container-name="$container"'),
                    "true",
                ],
                run_id=job.run_id,
            ),
        ]
    if s.get("health_check"):
        py = "python3" if job.container else job.python
        lines += [
            f'health_out={q(run_dir + "/logs")}/health-"$SLURM_JOB_ID".out',
            "health=(",
            *wrap(
                [
                    "srun",
                    Raw('"${step[@]}"'),
                    *named,
                    *env_for_health,
                    "--kill-on-bad-exit=0",
                    f"--time={s.get('health_minutes', pyxis.HEALTH_MINUTES)}",
                    Raw('--output="$health_out"'),
                ],
                [py, f"{run_dir}/{WORKLOAD_DIR}/node_health.py"],
                [Raw(f'--report={q(run_dir + "/health")}/"$SLURM_JOB_ID"')],
                health_args(job),
                run_id=job.run_id,
            ),
            ")",
        ]
    cmd = torchrun_command(job)
    at = cmd.index(Raw('"$stop_file"'))
    entry = entry_command(job)
    torchrun = cmd[at + 2 : len(cmd) - len(entry)]
    lines += [
        "train=(",
        *wrap(
            [*(["with_secrets"] if secret_lines else []), "srun", Raw('"${step[@]}"'), *named, *env_for_train],
            ["--kill-on-bad-exit=1", f"--output={run_dir}/logs/%j-%N.log"],
            cmd[:2],
            cmd[2:at],
            cmd[at : at + 2],
            torchrun,
            entry[: len(entry) - len(job.args)],
            job.args,
            run_id=job.run_id,
        ),
        ")",
    ]
    return lines


def _logic(job) -> tuple[list[str], dict[str, str], list[str]]:
    """The batch-logic files this job sources, with their inputs, and what it calls; the staged files
    (the library files and the deterministic patterns)."""
    run_dir, s = job.run_dir, job.scheduler
    names = [JOB, *([CONTAINERS] if job.container else [])]
    inputs: dict = {
        "exit_dir": f"{run_dir}/exit",
        "has_image": int(bool(job.container)),
        "has_health": int(bool(s.get("health_check"))),
        "health_mark": node_facts.HEALTH_MARK,
        "node_own_checks": "|".join(node_facts.NODE_OWN_CHECKS),
        "nodes": job.nodes,
        "signal_lead": job.limit_save["signal_lead"] if job.limit_save else "",
        "cancel_signal": s.get("cancel_signal", "USR1"),
    }
    stripe, save = (s.get("checkpoint_stripe") or "").split(), job.config.get("checkpoint.save")
    if stripe and save:  # the profile's Lustre layout for the checkpoint directory (job.sh stripe_checkpoints)
        inputs |= {"stripe": stripe, "stripe_dir": save}
    kept = job.chain or job.retry
    if kept:
        names += [RESUME_POINT, CULPRIT]
        inputs |= resume_point.inputs(kept)
        inputs |= {
            "logs": f"{run_dir}/logs",
            "script": f"{run_dir}/launch/{job.run_id}.sbatch",
            "failures": f"{run_dir}/{staged(job, FAILURES_FILE)}",
            "retry_unknown": int(bool(s.get("retry_unknown"))),
            "max_restarts": kept["max_restarts"],
            "own_exclude": list(s.get("exclude") or []),
            "node_fault": NODE_FAULT,
            "lost_node": LOST_NODE,
            "nccl_peer": NCCL_PEER,
        }
    stop_file = Raw(f'{q(run_dir + "/exit")}/stop-"$SLURM_JOB_ID"')
    if job.container:
        inputs |= {
            # bridge-launch.RUN.JOB: unique per job and image (a name that exists is reused whatever its
            # image, pyxis_slurmstepd.c:1355), never <digits>_... (scope=job's epilog match, pyxis_slurmd.c:84-93)
            "container": Raw(f'bridge-launch.{job.run_id}."$SLURM_JOB_ID"'),
            "host_step": ["srun", f"--nodes={job.nodes}", "--ntasks-per-node=1", "--mpi=none", "--kill-on-bad-exit=0"],
            "node_containers": f"{run_dir}/{staged(job, NODE_CONTAINERS)}",
            "image_space_gb": s.get("image_space_gb", pyxis.IMAGE_SPACE_GB),
        }
    if measure_file(job):
        names.append(TIME_LIMIT)
        e = job.limit_save["estimate"]
        inputs |= {
            "logs": f"{run_dir}/logs",
            "step_times": f"{run_dir}/{WORKLOAD_DIR}/step_times.py",
            "planned_save": e.get("save_s") or "-",
            "planned_eval": e.get("eval_s") or "-",
            "time_limit_s": job.limit_save.get("time_limit_s") or 0,
            "watch_period": LIMIT_WATCH_PERIOD,
            "measure_file": measure_file(job),
        }
    if job.chain:
        names.append(SEGMENT)
        c = job.chain
        inputs |= {
            "chain": f"{run_dir}/chain/{job.run_id}",
            "train_iters": c["train_iters"],
            "max_no_progress": c["max_no_progress"],
            "max_segments": c.get("max_segments") or 0,
            "saving_grep": P.SAVING_GREP,
            "saved_grep": P.SAVED_GREP,
        }
        stop_file = Raw('"$chain/stop-$SLURM_JOB_ID"')
        calls = ["segment_run"]
    elif job.retry:
        names.append(ATTEMPTS)
        inputs |= {
            "attempts": attempts.attempts_dir(job),
            "load_from_save": int(bool(job.retry["load_from_save"])),
        }
        calls = ["attempt_begin", "prepare", "single_step", "attempt_after_step"]
    else:
        calls = ["prepare", "single_step", 'exit "$rc"']
    files = {staged(job, n): library(n) for n in names}
    if job.container:
        files[staged(job, NODE_CONTAINERS)] = library(NODE_CONTAINERS)
    if kept:
        files[staged(job, FAILURES_FILE)] = failures.table_text(job.env)
    lines = [
        "# the batch logic (" + ", ".join(names) + "): its inputs and files; the steps; the calls",
        *assign(job.run_id, **inputs),
        f"stop_file={_arg(stop_file)}",
        # two a line: shellcheck -x follows each literal path, as it could not a loop's
        *[
            "; ".join(f". {q(run_dir + '/' + staged(job, n))} || exit 1" for n in names[i : i + 2])
            for i in range(0, len(names), 2)
        ],
    ]
    return lines, files, calls


LIMIT_WATCH_PERIOD = 30  # seconds between two reads of the job's log (Slurm's own signal granularity)
MEASURE_STATE = "measure.json"  # the figures so far and how far each log was read (time-limit.sh)


def measure_file(job) -> str | None:
    """Where a job that saves before its time limit keeps what it measured (time-limit.sh): a chain's in
    its chain dir (each segment starts from the figures of those before it), a plain job's in its run
    dir (each retried attempt likewise); None for a job with no time limit, which measures nothing."""
    ls = job.limit_save
    if not ls or not (job.chain or ls.get("time_limit_s")):
        return None
    where = f"{job.run_dir}/chain/{job.run_id}" if job.chain else job.run_dir
    return f"{where}/{MEASURE_STATE}"


# The rendezvous host, resolved once, here on the batch host (the allocation's first node): the
# node's address as Slurm knows it (NodeAddr; NodeName where unset), then an IPv4 address for it
# that is not a loopback one (Debian-style /etc/hosts maps a host's own name to 127.0.1.1, which
# the other nodes cannot reach); the name itself when neither answers.
_HEAD_LINES = [
    'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
    "head_addr=$(scontrol show node \"$head_node\" 2>/dev/null | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p' | head -n "
    "1)",
    "rdzv_host=$(getent ahostsv4 \"${head_addr:-$head_node}\" 2>/dev/null | awk '$1 !~ /^127\\./ {print $1; exit}')",
    "rdzv_host=${rdzv_host:-${head_addr:-$head_node}}",
]
_RDZV_NOTE = 'echo "bridge-launch: rendezvous on $rdzv_host:$rdzv_port ($head_node hosts the store)" >&2'


# secrets: from the submitting shell, or (Slurm) a source on the cluster
secret_origins = env_secret_origins


def render(job) -> Artifact:
    """The job's sbatch script and the files it calls; with a canary, the script waits for the
    canary's job (its id a placeholder until submit: Artifact.after), and the canary's own script
    comes with it (Artifact.canary), rendered here too: one render per submit."""
    if not job.canary:
        return _script(job)
    main = _script(derived.gated(job, derived.JOB_PLACEHOLDER))
    return dataclasses.replace(main, waits_for=derived.JOB_PLACEHOLDER, canary=_script(derived.canary_job(job)))


def _script(job) -> Artifact:
    run_dir, s = job.run_dir, job.scheduler
    env = runtime_env(job)
    # torchrun tees every worker's output with its global rank in front (rank-prefixed logs).
    env.update(RANK_PREFIX_ENV)
    env.update(T.triage_env(job))  # NCCL hang triage: flight recorder on, dumped on a timeout
    trace = T.sets_trace_file(job)
    lines = ["#!/bin/bash", f"# {header(job)}"]
    sbatch = directives(job)
    lines += [f"#SBATCH --{k}" + (f"={v}" if v is not None else "") for k, v in sbatch]
    through_env = [n for n in job.secrets if n not in (job.secret_sources or {})]
    if through_env:
        lines.append(f"# Secrets passed by name from the submitting environment: {' '.join(through_env)}")
    port = (
        f"rdzv_port={s['rdzv_port']}"
        if s.get("rdzv_port")
        else f"rdzv_port=$(({T.RDZV_PORT_BASE} + SLURM_JOB_ID % {T.RDZV_PORT_SPAN}))  "
        f"# below Linux's ephemeral ports ({EPHEMERAL_PORTS[0]}-{EPHEMERAL_PORTS[1]})"
    )
    mkdirs = [run_dir + "/logs", run_dir + "/exit"]
    secret_lines = slurm_secrets.script_lines(job)
    logic, files, calls = _logic(job)
    lines += ["set -uo pipefail", "", *export_lines(env)]
    if trace:  # one flight-recorder file per global rank, per job (torchfrtrace DIR -p rank_)
        lines.append(f'export {T.TRACE_FILE_VAR}={q(T.trace_dir(job))}/"$SLURM_JOB_ID"/{T.TRACE_PREFIX}')
    lines += [
        "",
        *_HEAD_LINES,
        port,
        _RDZV_NOTE,
        f"mkdir -p {' '.join(q(d) for d in mkdirs)}" + (f' {q(T.trace_dir(job))}/"$SLURM_JOB_ID"' if trace else ""),
        *secret_lines,
        "",
        *logic,
        *_steps(job, [*env, *([T.TRACE_FILE_VAR] if trace else [])], bool(secret_lines)),
        "; ".join(calls),
    ]
    files[node_launcher_path(job)] = library(NODE_LAUNCH)
    if secret_lines:
        files[slurm_secrets.reader_path(job)] = slurm_secrets.reader_file(job)
    segment = next((int(v) for k, v in sbatch if k == "segment" and v), None)
    return Artifact("sbatch", "\n".join(lines) + "\n", f"launch/{job.run_id}.sbatch", files, segment=segment)


# --- talking to Slurm ------------------------------------------------------------------------

# Slurm job state -> registry state.
