"""The Slurm job as bridge-launch writes it: the sbatch script (directives, environment, the
rendezvous on the first node, the secret reader, the health step, the training step with its
stop and time-limit traps, a chain segment's or a retried job's own decisions) and the staged
per-node launcher. Pure: text from the job, nothing run."""

from __future__ import annotations

import re

from bridge_launch import __version__
from bridge_launch.backends import torchrun as T
from bridge_launch.backends.base import (
    IMAGE_REVISION_DIR,
    RANK_PREFIX_ENV,
    WORKLOAD_DIR,
    Artifact,
    entry_command,
    env_secret_origins,
    export_lines,
    header,
    image_revision_command,
    numa_wrapper,
    q,
    runtime_env,
    says_image_revision,
)
from bridge_launch.backends.slurm import attempts, resume_point
from bridge_launch.backends.slurm import secrets as slurm_secrets
from bridge_launch.core.errors import UsageError
from bridge_launch.core.image_ref import pyxis_ref
from bridge_launch.core.ports import EPHEMERAL_PORTS
from bridge_launch.core.upstream import BRIDGE_IN_CONTAINER
from bridge_launch.logs.failures import DETERMINISTIC, grep_pattern
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


# The per-node launcher (every job; for an --until-done segment, its time-limit stop too).
# torchrun runs as its child, not exec'ed, so that when the batch shell asks for a save (the stop
# file appears) the signal goes to the training processes themselves (torchrun's children) and
# never to torchrun: a signalled torchrun forwards it to each worker's whole process group,
# DataLoader workers included, waits only its shutdown timeout (30 s) before SIGKILL, and exits
# non-zero even when every worker saved, which sets off srun --kill-on-bad-exit on the other nodes
# (trainer_protocol.py, torchrun). Finding children through /proc works for every torch version
# and needs neither procps nor torchrun flags; a pyxis container shares the host's PID namespace,
# so the same holds inside it. Before torchrun has started its workers, a cancel (a stop file that
# says "cancel") waits for them and stops them; a time-limit stop (an empty stop file) leaves them
# be: a trainer signalled before its exit-signal handler is installed would die without saving,
# and there is nothing new to save yet.
# The launcher's body, one command per line; {launcher} and {node_args} are the job's.
_NODE_LAUNCH = """\
stop=$1 sig=$2
shift 2
{launcher} {node_args} "$@" &
tr=$!
while kill -0 "$tr" 2>/dev/null; do
    if [ -e "$stop" ]; then
        pids=""
        for p in /proc/[0-9]*; do
            s=$(cat "$p/stat" 2>/dev/null) || continue
            s=${{s##*) }}
            set -- $s
            [ "$2" = "$tr" ] && pids="$pids ${{p#/proc/}}"
        done
        if [ -n "$pids" ]; then
            echo "bridge-launch: $(hostname): SIG$sig to the training processes$pids (torchrun $tr is left alone)" >&2
            kill -s "$sig" $pids
            break
        fi
        [ -s "$stop" ] || {{
            echo "bridge-launch: $(hostname): no training process has started yet; none signalled" >&2
            break
        }}
    fi
    sleep 1
done
wait "$tr"
"""


def _node_args(job) -> str:
    """The torchrun flags that differ per node, expanded inside the task (from the Slurm step's
    own environment): the node rank, this node's log dir under the run dir (torchrun_opts: --tee
    files and error.json survive the container) and the rendezvous settings, where the first node
    of the allocation (SLURM_NODEID 0, the batch host whose address the script resolved) hosts
    the c10d store."""
    conf = T.rdzv_conf(job, is_host='$([ "$SLURM_NODEID" = 0 ] && echo 1 || echo 0)')
    return (
        f'--node-rank="$SLURM_NODEID" --log-dir={q(T.log_dir(job))}/"$SLURM_JOB_ID/node$SLURM_NODEID" '
        f'--rdzv-conf="{conf}"'
    )


COMPILE_CACHE_DIR = "cache"  # under the run dir: per-node Triton and TorchInductor caches


def node_launcher_path(job) -> str:
    """Where the per-node launcher is staged: launch/<run id>.node-launch.sh in the run dir."""
    return f"launch/{job.run_id}.node-launch.sh"


def node_launcher(job) -> str:
    """The per-node launcher, a staged file: srun starts it once per node (in the container when
    there is one), with the stop file, the signal for the training processes, and torchrun's
    arguments. The node rank and the node's log dir come from the Slurm task's own environment,
    so they are read here rather than in the batch shell."""
    launcher = "torchrun" if job.container else f"{q(job.python)} -m torch.distributed.run"
    lines = [
        "#!/bin/bash",
        f"# bridge-launch {__version__}: the per-node launcher of run {job.run_id} (srun starts one per node).",
        "# Usage: node-launch.sh STOP_FILE SIGNAL TORCHRUN-ARGUMENTS...",
        "# torchrun runs as a child: when STOP_FILE appears, SIGNAL goes to the training processes (torchrun's",
        "# children), never to torchrun; a STOP_FILE that says 'cancel' also stops workers still starting.",
    ]
    # Compile caches that outlive the container (--no-container-mount-home leaves ~/.triton in it):
    # Triton's kernels and autotuning (the Gated DeltaNet kernels autotune cold otherwise) and
    # TorchInductor's, one directory per node index under the run dir, so every segment of a chain
    # reuses them and no two nodes write one; a value the environment already sets wins.
    lines += [
        f"cache={q(job.run_dir + '/' + COMPILE_CACHE_DIR)}",
        'export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-$cache/triton/node$SLURM_NODEID}"',
        'export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$cache/inductor/node$SLURM_NODEID}"',
    ]
    if job.bridge_src:
        # --bridge-src: the mounted checkout's src and Megatron-LM ahead of the image's install (as
        # Megatron-Bridge's own NeMo-Run launchers set PYTHONPATH), expanded inside the container
        lines.append(
            f"export PYTHONPATH={BRIDGE_IN_CONTAINER}/src:{BRIDGE_IN_CONTAINER}/3rdparty/Megatron-LM"
            "${PYTHONPATH:+:$PYTHONPATH}"
        )
    if says_image_revision(job):
        py = "python3" if job.container else q(job.python)
        report = f'{q(job.run_dir + "/" + IMAGE_REVISION_DIR)}/"$SLURM_JOB_ID".json'
        lines += [
            "# what this image (or --bridge-src) runs against the recipe's pins, said first (image_revision.py)",
            f'if [ "$SLURM_NODEID" = 0 ]; then {image_revision_command(job, py, report)} >&2 || true; fi',
        ]
    lines.append(f'echo "{node_facts.NODE_LINE.format(host="$(hostname)")}"  # whose ranks this log holds (node_facts)')
    return "\n".join(lines) + "\n" + _NODE_LAUNCH.format(launcher=launcher, node_args=_node_args(job))


def torchrun_command(job) -> list:
    """One torchrun per node, through the staged per-node launcher (node_launcher)."""
    # every job: a cancel (or a chain's time limit) reaches the training processes, never torchrun
    head = [
        "bash",
        f"{job.run_dir}/{node_launcher_path(job)}",
        Raw('"$stop_file"'),
        job.limit_save["exit_signal"] if job.limit_save else "TERM",
    ]
    cmd = [
        *head,
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
    cmd += entry_command(job)
    if job.chain or job.retry:  # checkpoint.ckpt_step=M when the newest checkpoint is incomplete (at run time)
        cmd.append(Raw('"${resume_args[@]}"'))
    return cmd


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


def _health_lines(job, srun) -> list[str]:
    """The health step: one task per node of this allocation, in the job's image, at most 2 minutes;
    a node that fails it stops the job before torchrun (its line names the node and the check)."""
    run_dir, exit_file = job.run_dir, f'{q(job.run_dir + "/exit")}/"$SLURM_JOB_ID"'
    step = ["srun" if a == Raw("with_secrets srun") else a for a in srun]  # the step needs no secret
    step = [a for a in step if not str(a).startswith(("--output=", "--kill-on-bad-exit"))]
    step = [  # nor the names of the secrets among the variables pyxis passes into the container
        "--container-env=" + ",".join(n for n in a.split("=", 1)[1].split(",") if n not in job.secrets)
        if str(a).startswith("--container-env=")
        else a
        for a in step
    ]
    step += ["--kill-on-bad-exit=0", "--time=2", Raw('--output="$health_out"')]
    py = "python3" if job.container else job.python
    cmd = [
        *step,
        py,
        f"{run_dir}/{WORKLOAD_DIR}/node_health.py",
        Raw(f'--report={q(run_dir + "/health")}/"$SLURM_JOB_ID"'),
    ]
    stop = [f"printf '%s\\n' 1 > {exit_file}", "exit 1"]
    if job.chain:  # the chain stops: its next segment would start on the same nodes
        chain_dir = q(f"{run_dir}/chain/{job.run_id}")
        stop = [f"mkdir -p {chain_dir}", f'echo "health step failed: $bad" > {chain_dir}/stopped', *stop]
    elif job.retry:  # the next attempt, without the nodes at fault
        stop = [stop[0], *attempts.health_failed(job), stop[1]]
    return [
        "# the health step: each node checks its GPUs, IMEX channels and the paths of the job, then (several nodes)"
        " the fabric with all-reduces (node_health.py)",
        f'health_out={q(run_dir + "/logs")}/health-"$SLURM_JOB_ID".out',
        " \\\n    ".join(_arg(a) for a in [*cmd, *health_args(job)]),
        "health_rc=$?",
        'cat "$health_out" 2>/dev/null',
        'if [ "$health_rc" -ne 0 ]; then',
        f'    bad=$(grep -h " FAIL " "$health_out" 2>/dev/null | sed "s/^.*{node_facts.HEALTH_MARK} //" | '
        'paste -sd "|" -)',
        '    echo "bridge-launch: the health step failed: ${bad:-srun exit $health_rc}" >&2',
        *[f"    {x}" for x in stop],
        "fi",
        "",
    ]


def _single_block(job, srun) -> list[str]:
    """One job: `bridge-launch cancel` sends USR2 to this shell alone (scancel --batch), which has
    the launcher on every node send SIGTERM to the training processes (torchrun left alone); with
    a time limit, Slurm's USR1 `lead` seconds before it has them save and exit the same way (an
    empty stop file: status reads it as a stop at the time limit, not a completion)."""
    stop = [
        f'stop_file={q(job.run_dir + "/exit")}/stop-"$SLURM_JOB_ID"',
        "trap 'echo \"bridge-launch: cancelled: SIGTERM to the training processes on every node (torchrun is left "
        f'alone)" >&2; echo cancel > "$stop_file"\' {job.scheduler.get("cancel_signal", "USR1")}',
    ]
    if job.limit_save:
        stop.append(
            f"trap 'echo \"bridge-launch: time limit in {job.limit_save['signal_lead']}s: the training processes are "
            'told to save and exit" >&2; [ -e "$stop_file" ] || : > "$stop_file"\' USR1'
        )
    return [
        *stop,
        " \\\n    ".join(_arg(a) for a in [*srun, *torchrun_command(job)]) + " &",
        "step=$!",
        'while :; do wait "$step"; rc=$?; kill -0 "$step" 2>/dev/null || break; done',
        f'printf \'%s\\n\' "$rc" > {q(job.run_dir + "/exit")}/"$SLURM_JOB_ID"',
        *(attempts.after_step() if job.retry else ['exit "$rc"']),
    ]


def _chain_block(job, srun) -> list[str]:
    """--until-done: this segment settles the previous one if Slurm ended it before it could
    (a save that outlasts the time limit is SIGKILLed with its batch shell), submits its successor
    (afterany, so two never overlap), resumes from the newest complete checkpoint, runs training,
    and decides: done -> cancel the successor; a new checkpoint -> let it continue; no new
    checkpoint in two segments in a row, a deterministic failure or no restarts left -> stop."""
    c = job.chain
    iters, lead, restarts_max = c["train_iters"], job.limit_save["signal_lead"], c["max_restarts"]
    logs = q(job.run_dir + "/logs")
    script = q(f"{job.run_dir}/launch/{job.run_id}.sbatch")
    det = q(grep_pattern(DETERMINISTIC))
    step_cmd = " \\\n    ".join(_arg(a) for a in [*srun, *torchrun_command(job)])
    # One successor per segment job, however often Slurm runs this script under the same job id (a
    # requeue after a node failure, scontrol requeue): the first run claims the submission with an
    # atomic mkdir and records the successor; a rerun finds the record and submits nothing.
    # the nodes earlier segments left out (CHAIN/left_out) stay out of the successor
    left_out = attempts.exclusions(job, 'cut -f 2 "$chain/left_out"')
    successor = [
        '    if mkdir "$chain/successor-$SLURM_JOB_ID.claim" 2>/dev/null; then',
        f"        ex=$({left_out} | paste -sd, -)",
        '        next=$(BRIDGE_LAUNCH_SEGMENT=$((segment + 1)) sbatch --parsable ${ex:+--exclude="$ex"} '
        f'--dependency=afterany:"$SLURM_JOB_ID" {script}) || next=""',
        "        next=${next%%;*}",
        '        echo "$next" > "$chain/successor-$SLURM_JOB_ID"',
        '        if [ -n "$next" ]; then echo "$next" >> "$chain/jobs"; fi',
        "    else",
        '        next=$(cat "$chain/successor-$SLURM_JOB_ID" 2>/dev/null) || next=""',
        '        echo "bridge-launch: segment $segment runs again as job $SLURM_JOB_ID (requeued); its successor '
        '${next:-(none)} was submitted before" >&2',
        "    fi",
    ]
    watch = _limit_watch(job)
    if c.get("max_segments"):
        successor = [f'if [ "$segment" -lt {c["max_segments"]} ]; then', *successor, "fi"]
    else:
        successor = ["if :; then", *successor, "fi"]
    return [
        f"chain={q(job.run_dir + '/chain/' + job.run_id)}",
        f"logs={logs}",
        'mkdir -p "$chain"',
        "segment=${BRIDGE_LAUNCH_SEGMENT:-1}",
        'stop_file="$chain/stop-$SLURM_JOB_ID"',
        'echo "$SLURM_JOB_ID $segment start $(date +%s)" >> "$chain/segments"',
        'end() { echo "$SLURM_JOB_ID $segment end $(date +%s)" >> "$chain/segments"; exit "$1"; }',
        'finish() { if [ -n "${next:-}" ]; then scancel "$next" 2>/dev/null; fi; end "$1"; }',
        'stop() { printf \'%s\\n\' "$1" > "$chain/stopped"; echo "bridge-launch: chain stopped: $1" >&2; }',
        "# outcome JOB WHAT FROM TO DETAIL: the chain's account of a segment (status reads it)",
        'outcome() { echo "$1 $2 $3 $4 ${*:5}" >> "$chain/outcomes"; rm -f "$chain/open"; }',
        "# judge JOB FROM TO ASKED RC ENDED: why a segment saved nothing new (why is empty when it did).",
        "# ASKED: it was told to save (USR1); RC: the step's exit code, ? if unknown; ENDED: Slurm sent TERM",
        "judge() {",
        '    why=""; [ "$3" -gt "$2" ] && return 0',
        "    local started finished",
        f'    started=$(cat "$logs/sbatch-$1.out" "$logs/$1"-*.log 2>/dev/null | grep -cE {q(P.SAVING_GREP)})',
        f'    finished=$(cat "$logs/sbatch-$1.out" "$logs/$1"-*.log 2>/dev/null | grep -cE {q(P.SAVED_GREP)})',
        '    if [ "$4" = 1 ] && [ "$started" -gt "$finished" ]; then why="the save did not finish within the signal '
        f'lead of {lead} s"',
        f'    elif [ "$4" = 1 ] && {{ [ "$6" = 1 ] || [ "$5" = "?" ]; }}; then why="the trainer did not finish its '
        f'step and save within the signal lead of {lead} s"',
        '    elif [ "$4" = 1 ] && [ "$5" != 0 ]; then why="the trainer exited with code $5 after the signal without '
        'saving"',
        '    elif [ "$4" = 1 ]; then why="the trainer exited after the signal without saving"',
        '    elif [ "$6" = 1 ] || [ "$5" = "?" ]; then why="Slurm ended the segment (time limit or a lost node) '
        'before a new checkpoint"',
        '    else why="the trainer exited (code $5) below train_iters without a new checkpoint"; fi',
        "}",
        "# no_progress JOB FROM WHY: count it; two in a row stop the chain (returns 1)",
        "no_progress() {",
        '    local n=$(( $(cat "$chain/no_progress" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$chain/no_progress"',
        '    outcome "$1" no-progress "$2" "$2" "$3"',
        f'    if [ "$n" -ge {c["max_no_progress"]} ]; then stop "no progress in $n segments in a row: $3"; return 1; '
        "fi",
        "}",
        *resume_point.bash_functions(c),
        'if [ -e "$chain/done" ] || [ -e "$chain/stopped" ]; then end 0; fi',
        'if ! resume_point; then stop "$resume_note"; outcome "$SLURM_JOB_ID" stopped 0 0 "$resume_note"; end 1; fi',
        "before=$resume_it",
        "# A segment Slurm ended before it could judge itself (its 'open' record is still here): judge it now.",
        'if [ -f "$chain/open" ]; then',
        '    read -r pjob pfrom < "$chain/open"',
        '    if [ "$pjob" != "$SLURM_JOB_ID" ]; then',
        '        psig=0; [ -e "$chain/stop-$pjob" ] && psig=1',
        '        judge "$pjob" "$pfrom" "$before" "$psig" "?" "?"',
        '        if [ -z "$why" ]; then echo 0 > "$chain/no_progress"; outcome "$pjob" continued "$pfrom" "$before"',
        '        elif ! no_progress "$pjob" "$pfrom" "$why"; then end 1; fi',
        "    fi",
        "fi",
        f'if [ "$before" -ge {iters} ]; then touch "$chain/done"; end 0; fi',
        'if [ -n "$resume_note" ]; then echo "bridge-launch: $resume_note" >&2; fi',
        'next=""',
        *successor,
        'echo "$SLURM_JOB_ID $before" > "$chain/open"',
        "asked=0 ended=0",
        'trap \'asked=1; if [ -e "$chain/stopped" ]; then echo "bridge-launch: cancelled: the training '
        'processes are told to save and exit" >&2; echo cancel > "$stop_file"; else echo "bridge-launch: time '
        'limit in $(( deadline - $(date +%s) ))s: the training processes are told to save and exit" >&2; '
        'touch "$stop_file"; fi\' USR1',
        "trap 'ended=1' TERM",
        *watch,
        step_cmd + " &",
        "step=$!",
        'while :; do wait "$step"; rc=$?; kill -0 "$step" 2>/dev/null || break; done',
        "# the last figures (the final save) for the watcher of the next segment and for status",
        'if [ -n "${watcher:-}" ]; then kill "$watcher" 2>/dev/null; measure > /dev/null; fi',
        f'printf \'%s\\n\' "$rc" > {q(job.run_dir + "/exit")}/"$SLURM_JOB_ID"',
        "resume_point || true",
        "after=$resume_it",
        "# the spare successor goes before the chain says it is done, so no status shows it pending after",
        f'if [ "$after" -ge {iters} ]; then if [ -n "$next" ]; then scancel "$next" 2>/dev/null; next=""; fi; '
        'touch "$chain/done"; outcome "$SLURM_JOB_ID" done "$before" "$after"; end 0; fi',
        'if [ "$after" -gt "$before" ]; then echo 0 > "$chain/no_progress"; fi',
        'if [ "$rc" -ne 0 ] && [ "$asked" = 0 ] && [ "$ended" = 0 ]; then',
        f'    why=$(grep -hE {det} "$logs/sbatch-$SLURM_JOB_ID.out" "$logs/$SLURM_JOB_ID"-*.log 2>/dev/null | head -n '
        "1 | cut -c 1-240)",
        '    if [ -n "$why" ]; then stop "deterministic failure in segment $segment: $why"; outcome "$SLURM_JOB_ID" '
        'failed "$before" "$after" "$why"; finish "$rc"; fi',
        '    restarts=$(( $(cat "$chain/restarts" 2>/dev/null || echo 0) + 1 )); echo "$restarts" > "$chain/restarts"',
        *[f"    {x}" for x in _chain_leave_out(job)],
        f'    outcome "$SLURM_JOB_ID" failed "$before" "$after" "exit $rc, restart $restarts of {restarts_max}'
        '${cause:+: $cause}$left"',
        f'    if [ "$restarts" -gt {restarts_max} ]; then stop "failed $restarts times; --max-restarts {restarts_max} '
        'used up"; finish "$rc"; fi',
        f'    echo "bridge-launch: segment $segment failed (exit $rc); retry $restarts of {restarts_max} in '
        f'${{next:-nothing}}" >&2; end "$rc"',
        "fi",
        'judge "$SLURM_JOB_ID" "$before" "$after" "$asked" "$rc" "$ended"',
        'if [ -z "$why" ]; then',
        '    outcome "$SLURM_JOB_ID" continued "$before" "$after"',
        '    if [ -z "$next" ]; then stop "segment $segment ended at iteration $after, below train_iters, with no '
        'successor"; finish 1; fi',
        '    echo "bridge-launch: segment $segment saved iteration $after (from $before); $next continues" >&2; end 0',
        "fi",
        'no_progress "$SLURM_JOB_ID" "$before" "$why" || finish 1',
        'echo "bridge-launch: segment $segment made no progress: $why; ${next:-nothing} tries again" >&2',
        'if [ -z "$next" ]; then stop "segment $segment made no progress ($why) and has no successor"; fi',
        "end 1",
    ]


def _chain_leave_out(job) -> list[str]:
    """A segment's flaky failure whose logs name a node (attempts.culprit: a node fault in its own log,
    srun's lost node, the NCCL peer): its pending successor leaves that node out (`scontrol update
    ExcNodeList`, the segments' exclusions so far and the job's own), unless the partition would then
    have too few nodes for it; CHAIN/left_out records it (job, node, cause) for status and the
    bad-node list. Sets `left` to what the outcome says."""
    left_out = attempts.exclusions(job, 'cut -f 2 "$chain/left_out"')
    return [
        *attempts.culprit(),
        'left=""',
        'if [ -n "$culprit_node" ] && [ -n "$next" ]; then',
        '    printf \'%s\\t%s\\t%s\\n\' "$SLURM_JOB_ID" "$culprit_node" "$cause" >> "$chain/left_out"',
        f"    excl=$({left_out})",
        '    have=$(sinfo -h -N -p "$SLURM_JOB_PARTITION" -o %N 2>/dev/null | sort -u | grep -cvxF "$excl")',
        f'    if [ "${{have:-0}}" -lt {job.nodes} ]; then left="; $next keeps $culprit_node: the partition has '
        f'${{have:-0}} other nodes, fewer than {job.nodes}"',
        '    elif scontrol update JobId="$next" ExcNodeList="$(echo "$excl" | paste -sd, -)" 2>/dev/null; then '
        'left="; $next leaves out $(echo "$excl" | paste -sd, -)"',
        '    else left="; $next could not be told to leave out $culprit_node"; fi',
        "fi",
    ]


LIMIT_WATCH_PERIOD = 30  # seconds between two reads of the segment's log (Slurm's own signal granularity)
MEASURE_STATE = "measure.json"  # in the chain dir: the figures so far and how far each log was read


def _limit_watch(job) -> list[str]:
    """A segment measures its own step and save times (workloads/step_times.py over its logs,
    every LIMIT_WATCH_PERIOD s, with the figures of the segments before it) and, when they need a
    longer lead than the job's --signal, asks for the save itself (USR1 to this shell, the same
    path as Slurm's signal) early enough for them. The deadline is the job's EndTime as Slurm
    holds it (the start plus the time limit where squeue does not answer). The figures stay in
    the chain's MEASURE_STATE (status shows them); no python3 on the batch host: the lead stays."""
    lead, e = job.limit_save["signal_lead"], job.limit_save["estimate"]
    tool = q(f"{job.run_dir}/{WORKLOAD_DIR}/step_times.py")
    planned = f"{e.get('save_s') or '-'} {e.get('eval_s') or '-'}"
    limit = job.limit_save.get("time_limit_s") or 0
    return [
        'deadline=""; ends=$(squeue -h -j "$SLURM_JOB_ID" -o %e 2>/dev/null)',
        'case $ends in [0-9][0-9][0-9][0-9]-*) deadline=$(date -d "$ends" +%s 2>/dev/null) || deadline="";; esac',
        f'[ -n "$deadline" ] || deadline=$(( $(date +%s) + {limit} ))',
        'echo "bridge-launch: this segment reaches its time limit at $(date -d "@$deadline" "+%F %T")" >&2',
        f'measure() {{ python3 {tool} "$chain/{MEASURE_STATE}" {planned} "$logs/$SLURM_JOB_ID"-*.log 2>/dev/null; }}',
        "watch_limit() {",
        "    local fig need",
        f"    while sleep {LIMIT_WATCH_PERIOD}; do",
        "        fig=$(measure) || continue",
        "        need=${fig%% *}",
        f'        if [ "$need" -gt {lead} ] && [ $(( $(date +%s) + need + {LIMIT_WATCH_PERIOD} )) -ge "$deadline" ]; '
        "then",
        "            set -- $fig",
        f'            echo "bridge-launch: measured step $2 s, save $3 s: they need a lead of $need s, not {lead} s; '
        'asking for the save now" >&2',
        "            kill -USR1 $$; return",
        "        fi",
        "    done",
        "}",
        'watcher=""',
        f'if ! command -v python3 >/dev/null; then echo "bridge-launch: no python3 on the batch host: the signal lead '
        f'stays {lead} s, unmeasured" >&2; else watch_limit & watcher=$!; fi',
    ]


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
    run_dir = job.run_dir
    env = runtime_env(job)
    # torchrun tees every worker's output with its global rank in front (rank-prefixed logs).
    env.update(RANK_PREFIX_ENV)
    env.update(T.triage_env(job))  # NCCL hang triage: flight recorder on, dumped on a timeout
    trace = T.sets_trace_file(job)
    s = job.scheduler
    srun = [
        "srun",
        f"--nodes={job.nodes}",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        f"--output={run_dir}/logs/%j-%N.log",
    ]
    if job.container:
        srun += [f"--container-image={pyxis_ref(job.container)}"]
        if job.mounts:
            srun += [f"--container-mounts={','.join(job.mounts)}"]
        names = [*env, *([T.TRACE_FILE_VAR] if trace else []), *job.secrets]
        srun += [f"--container-env={','.join(names)}", f"--container-workdir={run_dir}"]
    # --cpu-bind (spec/clusters.py): a site's autobind would pin the node's one task, and so every worker
    # and DataLoader process under it, to the task's CPUs before the NUMA wrapper binds each worker
    bind = s.get("cpu_bind", "none")
    srun += [*([f"--cpu-bind={bind}"] if bind else []), f"--mpi={s.get('mpi') or 'none'}", *s.get("srun_args", [])]
    secret_lines = slurm_secrets.script_lines(job)
    if secret_lines:  # each step's srun gets the secrets read from their sources (a subshell, then exec srun)
        srun[0] = Raw("with_secrets srun")
    lines = ["#!/bin/bash", f"# {header(job)}"]
    lines += [f"#SBATCH --{k}" + (f"={v}" if v is not None else "") for k, v in directives(job)]
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
    lines += [
        "set -uo pipefail",
        "",
        *export_lines(env),
    ]
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
        *(attempts.prelude(job, resume_point.bash_functions(job.retry)) if job.retry else []),
        *(_health_lines(job, srun) if s.get("health_check") else []),
        *(_chain_block(job, srun) if job.chain else _single_block(job, srun)),
    ]
    files = {node_launcher_path(job): node_launcher(job)}
    if secret_lines:
        files[slurm_secrets.reader_path(job)] = slurm_secrets.reader_file(job)
    return Artifact("sbatch", "\n".join(lines) + "\n", f"launch/{job.run_id}.sbatch", files)


# --- talking to Slurm ------------------------------------------------------------------------

# Slurm job state -> registry state.
