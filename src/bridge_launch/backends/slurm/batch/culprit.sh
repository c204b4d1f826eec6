# shellcheck shell=bash disable=SC2154,SC2034 # a library: the batch script sets its inputs, reads its outputs
# What a failed step's logs say, for a retry (attempts.sh) or a chain's next segment (segment.sh):
# whether the failure is deterministic, the node at fault, the nodes to leave out. Sourced by the
# batch script.
#
# In:  logs (the run's log dir), failures (logs/failures.py's table as this job reads it:
#      CLASS<TAB>WHAT<TAB>ERE, a row a line, in order of class), node_fault, lost_node, nccl_peer
#      (EREs: its NODE_FAULT, LOST_NODE, NCCL_PEER), own_exclude (array: the job's own --exclude,
#      repeated since a command-line --exclude replaces the script's).

# failure_class: the class of this job's failure, from its logs: the first row of the table (in
# order of class: deterministic, node, flaky, hang) that matches a line. Sets fclass (the class, or
# unknown), fwhat (the row's name) and fline (the first line it matched, 240 characters at most).
failure_class() {
    local cls what re line
    fclass=unknown fwhat="" fline=""
    while IFS=$'\t' read -r cls what re; do
        line=$(grep -hE -m 1 -- "$re" "$logs/sbatch-$SLURM_JOB_ID.out" "$logs/$SLURM_JOB_ID"-*.log 2>/dev/null |
            head -n 1 | cut -c 1-240)
        if [ -n "$line" ]; then
            fclass=$cls fwhat=$what fline=$line
            return 0
        fi
    done < "$failures"
}

# exclusions FILE: the nodes the next job must leave out, one a line (the job's own and FILE's)
exclusions() { { printf '%s\n' "${own_exclude[@]}"; cat "$1" 2>/dev/null; } | grep -v '^$' | sort -u; }

# find_culprit sets culprit_node ('' for none) and cause (the line that names it): a node fault in
# exactly one node's own log (Slurm's %N per-node logs), else srun's lost node, else the one peer
# NCCL's remote errors name, mapped to a node of the allocation by name or address.
find_culprit() {
    culprit_node=""
    cause=""
    local f n a hits=()
    for f in "$logs/$SLURM_JOB_ID"-*.log; do
        [ -e "$f" ] || continue
        if grep -qE "$node_fault" "$f"; then
            n=${f##*/"$SLURM_JOB_ID"-}
            hits+=("${n%.log}")
        fi
    done
    if [ "${#hits[@]}" -eq 1 ]; then
        culprit_node=${hits[0]}
        cause="$culprit_node: $(grep -hE "$node_fault" "$logs/$SLURM_JOB_ID-$culprit_node.log" | head -n 1 | cut -c 1-200)"
        return 0
    fi
    n=$(grep -hoE "$lost_node" "$logs/sbatch-$SLURM_JOB_ID.out" 2>/dev/null | head -n 1)
    n=${n#Node failure on }
    case $n in "" | *[][,]*) ;; *)
        culprit_node=$n
        cause="srun: error: Node failure on $n"
        return 0
        ;;
    esac
    local peers
    mapfile -t peers < <(grep -hoE "$nccl_peer" "$logs/$SLURM_JOB_ID"-*.log 2>/dev/null | sed "s/^.* //; s/<$//" | sort -u)
    [ "${#peers[@]}" -eq 1 ] || return 0
    for n in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
        a=$(scontrol show node "$n" 2>/dev/null | sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p' | head -n 1)
        if [ "${peers[0]%%.*}" = "$n" ] || [ "${peers[0]}" = "$a" ] ||
            getent ahosts "${a:-$n}" 2>/dev/null | awk '{print $1}' | grep -qxF "${peers[0]}"; then
            culprit_node=$n
            cause="NCCL remote errors name the peer ${peers[0]} ($n)"
            return 0
        fi
    done
}
