"""Retries for a Slurm job that is not a chain, decided by its own batch script (the launcher is not
running then): a flaky failure is resubmitted without the node the health step or the logs name
(--exclude), an attempt that saved a newer complete checkpoint does not use up --max-restarts and
the next one loads it, a deterministic failure (logs/failures.py) never retries.

Each attempt appends one record to ATTEMPTS/outcomes, tab-separated:

    JOB  ATTEMPT  OUTCOME  FROM  TO  NODES  BAD  DETAIL

OUTCOME is completed, stopped (a cancel or the time limit), retried (DETAIL names the next job) or
failed (not retried; DETAIL says why); FROM and TO are the complete checkpoints at its start and
end; BAD the nodes it left out of the next attempt ("-": none). ATTEMPTS/jobs lists the later
attempts' job ids, ATTEMPTS/excluded the nodes left out so far, ATTEMPTS/restarts the budget used;
ATTEMPTS/stopped (written by cancel) keeps an attempt from resubmitting."""

from __future__ import annotations

from bridge_launch.backends.base import q
from bridge_launch.logs.failures import DETERMINISTIC, LOST_NODE, NCCL_PEER, NODE_FAULT, grep_pattern
from bridge_launch.workloads import node_facts

OUTCOMES = "outcomes"
JOBS = "jobs"
STOPPED = "stopped"
FIELDS = ("job_id", "attempt", "outcome", "from", "to", "nodes", "bad", "detail")


def exclusions(job, recorded: str) -> str:
    """A shell pipeline printing, one a line, the nodes the next job must leave out: the job's own
    --exclude (a command-line --exclude replaces the script's #SBATCH one, so it is repeated) and the
    nodes the command `recorded` lists (the retries' or the chain's record)."""
    own = " ".join(q(n) for n in job.scheduler.get("exclude") or [])
    return f"{{ printf '%s\\n' {own}; {recorded} 2>/dev/null; }} | grep -v '^$' | sort -u"


def attempts_dir(job) -> str:
    return f"{job.run_dir}/attempts/{job.run_id}"


def prelude(job, checkpoint_functions: list[str]) -> list[str]:
    """Before the health step: this attempt's number, its resume point, and the functions that end
    it (attempt_end) or resubmit it (retry)."""
    r = job.retry
    most = r["max_restarts"]
    script = q(f"{job.run_dir}/launch/{job.run_id}.sbatch")
    load = (
        [
            'if [ "$attempt" -gt 1 ] && [ "$resume_it" -gt 0 ]; then resume_args=("checkpoint.load=$save_dir" '
            '"${resume_args[@]}"); elif [ "$attempt" = 1 ]; then resume_args=(); fi'
        ]
        if r["load_from_save"]
        else []
    )
    left_out = exclusions(job, 'cat "$attempts/excluded"')
    return [
        f"attempts={q(attempts_dir(job))}",
        f"logs={q(job.run_dir + '/logs')}",
        "attempt=${BRIDGE_LAUNCH_ATTEMPT:-1}",
        'mkdir -p "$attempts"',
        *checkpoint_functions,
        'if ! resume_point; then echo "bridge-launch: $resume_note" >&2; fi',
        "before=$resume_it after=$resume_it",
        *load,
        'if [ "$attempt" -gt 1 ]; then from=""; [ "$resume_it" -gt 0 ] && from=", from iteration $resume_it"; '
        'echo "bridge-launch: attempt $attempt on $SLURM_JOB_NODELIST$from" >&2; fi',
        "# attempt_end OUTCOME BAD DETAIL: this attempt's record (status reads it)",
        'attempt_end() { printf \'%s\\t%s\\t%s\\t%s\\t%s\\t%s\\t%s\\t%s\\n\' "$SLURM_JOB_ID" "$attempt" "$1" '
        '"$before" "$after" "$SLURM_JOB_NODELIST" "${2:--}" "${*:3}" >> "$attempts/outcomes"; }',
        "# retry RC WHY BAD PROGRESS: resubmit this script without the BAD nodes (comma-separated), or say why",
        "# not; exits RC either way. PROGRESS 1: it saved a newer checkpoint, which uses up no restart",
        "retry() {",
        "    local rc=$1 why=$2 bad=$3 n out excl",
        '    if [ -e "$attempts/stopped" ]; then attempt_end failed "$bad" "$why; not retried: the run was cancelled"; '
        'exit "$rc"; fi',
        '    if ! mkdir "$attempts/retry-$SLURM_JOB_ID.claim" 2>/dev/null; then',
        '        echo "bridge-launch: attempt $attempt ran again as job $SLURM_JOB_ID (requeued): its retry was '
        'submitted before" >&2; exit "$rc"',
        "    fi",
        '    n=$(cat "$attempts/restarts" 2>/dev/null || echo 0)',
        '    if [ "$4" = 0 ]; then n=$((n + 1)); fi',
        f'    if [ "$n" -gt {most} ]; then attempt_end failed "$bad" "$why; not retried: --max-restarts {most} used '
        'up"; exit "$rc"; fi',
        '    if [ -n "$bad" ]; then echo "$bad" | tr , "\\n" >> "$attempts/excluded"; fi',
        f"    excl=$({left_out} | paste -sd, -)",
        f'    out=$(BRIDGE_LAUNCH_ATTEMPT=$((attempt + 1)) sbatch --parsable ${{excl:+--exclude="$excl"}} {script} '
        "2>&1)",
        "    if [ $? -ne 0 ]; then",
        '        attempt_end failed "$bad" "$why; not retried: sbatch refused the next attempt${excl:+ without '
        '$excl}: $(echo "$out" | tail -n 1)"',
        '        echo "bridge-launch: no retry: $(echo "$out" | tail -n 1)" >&2; exit "$rc"',
        "    fi",
        '    out=$(echo "$out" | tail -n 1); out=${out%%;*}; echo "$n" > "$attempts/restarts"; echo "$out" >> '
        '"$attempts/jobs"',
        f'    local what="retry $n of {most}"',
        f'    if [ "$4" = 1 ]; then what="retry (it saved iteration $after: no restart used, $n of {most} so far)"; fi',
        '    attempt_end retried "$bad" "$why; $what as job $out${excl:+ without $excl}"',
        '    echo "bridge-launch: attempt $attempt failed ($why); $what as job $out${excl:+ without $excl}" >&2',
        '    exit "$rc"',
        "}",
        "",
    ]


def health_failed(job) -> list[str]:
    """The health step failed: the nodes with a fault of their own (node_facts.NODE_OWN_CHECKS) are left out of a retry
    when they are not every node of a larger job (the same failure everywhere is the job's or the
    profile's, and a retry would meet it again)."""
    return [
        f'hbad=$(grep -h " FAIL " "$health_out" 2>/dev/null | sed "s/^.*{node_facts.HEALTH_MARK} //" | '
        f"awk '$3 ~ /^({'|'.join(node_facts.NODE_OWN_CHECKS)}):/ {{print $1}}' | sort -u | paste -sd, -)",
        'nfail=$(grep -c " FAIL " "$health_out" 2>/dev/null); nfail=${nfail:-0}',
        f'if [ -n "$hbad" ] && {{ [ "$nfail" -lt {job.nodes} ] || [ {job.nodes} = 1 ]; }}; then',
        '    retry 1 "health step: ${bad:-srun exit $health_rc}" "$hbad" 0',
        "fi",
        'attempt_end failed - "health step: ${bad:-srun exit $health_rc}; not retried: no node of its own is at fault"',
    ]


def after_step() -> list[str]:
    """After the training step: the record, and a retry unless it completed, was stopped (a cancel,
    the time limit) or failed deterministically."""
    det = q(grep_pattern(DETERMINISTIC))
    out = '"$logs/sbatch-$SLURM_JOB_ID.out"'
    node_logs = '"$logs/$SLURM_JOB_ID"-*.log'
    return [
        "resume_point > /dev/null 2>&1 || true",
        "after=$resume_it",
        'if [ -e "$stop_file" ]; then',
        '    if [ -s "$stop_file" ]; then attempt_end stopped - "cancelled"; else attempt_end stopped - "the time '
        'limit (saved, resume continues)"; fi',
        '    exit "$rc"',
        "fi",
        'if [ "$rc" -eq 0 ]; then attempt_end completed - ""; exit 0; fi',
        f"why=$(grep -hE {det} {out} {node_logs} 2>/dev/null | head -n 1 | cut -c 1-240)",
        'if [ -n "$why" ]; then attempt_end failed - "exit $rc; deterministic, not retried: $why"; exit "$rc"; fi',
        *culprit(),
        'progress=0; [ "$after" -gt "$before" ] && progress=1',
        'retry "$rc" "exit $rc${cause:+: $cause}" "$culprit_node" "$progress"',
    ]


def culprit() -> list[str]:
    """The node the attempt's logs name as the source of its failure (culprit_node, and cause: the
    line that names it): a node fault in exactly one node's own log (Slurm's %N per-node logs), else
    srun's lost node, else the one peer NCCL's remote errors name, mapped to a node of the
    allocation by name or address."""
    fault, lost, peer = q(NODE_FAULT), q(LOST_NODE), q(NCCL_PEER)
    return [
        'culprit_node="" cause=""',
        'hits=""',
        'for f in "$logs/$SLURM_JOB_ID"-*.log; do',
        '    [ -e "$f" ] || continue',
        f'    if grep -qE {fault} "$f"; then n=${{f##*/"$SLURM_JOB_ID"-}}; hits="$hits ${{n%.log}}"; fi',
        "done",
        "set -- $hits",
        'if [ "$#" -eq 1 ]; then',
        f'    culprit_node=$1; cause="$1: $(grep -hE {fault} "$logs/$SLURM_JOB_ID-$1.log" | head -n 1 | cut -c 1-200)"',
        "else",
        f'    n=$(grep -hoE {lost} "$logs/sbatch-$SLURM_JOB_ID.out" 2>/dev/null | head -n 1)',
        "    n=${n#Node failure on }",
        '    case $n in ""|*[][,]*) ;; *) culprit_node=$n; cause="srun: error: Node failure on $n";; esac',
        "fi",
        'if [ -z "$culprit_node" ]; then',
        f'    set -- $(grep -hoE {peer} "$logs/$SLURM_JOB_ID"-*.log 2>/dev/null | sed "s/^.* //; s/<$//" | sort -u)',
        '    if [ "$#" -eq 1 ]; then',
        '        for n in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do',
        '            a=$(scontrol show node "$n" 2>/dev/null | '
        "sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p' | head -n 1)",
        '            if [ "${1%%.*}" = "$n" ] || [ "$1" = "$a" ] || getent ahosts "${a:-$n}" 2>/dev/null | '
        "awk '{print $1}' | grep -qxF \"$1\"; then",
        '                culprit_node=$n; cause="NCCL remote errors name the peer $1 ($n)"; break',
        "            fi",
        "        done",
        "    fi",
        "fi",
    ]


def parse(text: str) -> dict:
    """{job id: record} from an outcomes file (the last record of a job id wins: a requeued rerun)."""
    out = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != len(FIELDS) or not parts[0].isdigit():
            continue
        rec = dict(zip(FIELDS, parts, strict=True))
        for k in ("attempt", "from", "to"):
            rec[k] = int(rec[k]) if rec[k].isdigit() else None
        rec["bad"] = [] if rec["bad"] in ("", "-") else rec["bad"].split(",")
        out[rec["job_id"]] = rec
    return out
