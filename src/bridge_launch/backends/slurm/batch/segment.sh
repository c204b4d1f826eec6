# shellcheck shell=bash disable=SC2154,SC2034 # a library: the batch script sets its inputs, reads its outputs
# --until-done: one segment of a chain of Slurm jobs. It settles the previous segment if Slurm ended
# it before it could (a save that outlasts the time limit is SIGKILLed with its batch shell), submits
# its successor (afterany, so two never overlap), resumes from the newest complete checkpoint, runs
# training, and decides: done -> cancel the successor; a new checkpoint -> let it continue; no new
# checkpoint in max_no_progress segments in a row, a deterministic failure, an unknown one without
# a new checkpoint (unless retry_unknown) or no restarts left -> stop. Sourced by the batch script
# after job.sh, resume-point.sh, culprit.sh (find_culprit, exclusions, failure_class) and
# time-limit.sh (start_watch, stop_watch) (backends/slurm/render.py sets the inputs; backend.py reads
# the chain dir's records).
#
# In:  chain (the chain's dir), logs (the run's log dir), script (this batch script: the
#      successor), train_iters, signal_lead, max_restarts, max_no_progress, max_segments (0: no
#      limit), saving_grep and saved_grep (EREs: a save's start and end lines in the log),
#      nodes (the job's).
#
# Records in the chain dir: segments (JOB SEGMENT start|end EPOCH), outcomes (JOB WHAT FROM TO
# DETAIL), jobs (the successors), open (the segment still to be judged), done, stopped (why),
# no_progress and restarts (counts), left_out (JOB NODE CAUSE), stop-JOB (the save was asked for).

end() {
    echo "$SLURM_JOB_ID $segment end $(date +%s)" >> "$chain/segments"
    exit "$1"
}
# finish RC: cancel the successor, then end
finish() {
    if [ -n "${next:-}" ]; then scancel "$next" 2>/dev/null; fi
    end "$1"
}
stop() {
    printf '%s\n' "$1" > "$chain/stopped"
    echo "bridge-launch: chain stopped: $1" >&2
}
# outcome JOB WHAT FROM TO DETAIL...: the chain's account of a segment (status reads it)
outcome() {
    echo "$1 $2 $3 $4 ${*:5}" >> "$chain/outcomes"
    rm -f "$chain/open"
}

# judge JOB FROM TO ASKED RC ENDED: why a segment saved nothing new (why is empty when it did).
# ASKED: it was told to save (USR1); RC: the step's exit code, ? if unknown; ENDED: Slurm sent TERM
judge() {
    why=""
    [ "$3" -gt "$2" ] && return 0
    local started finished
    started=$(cat "$logs/sbatch-$1.out" "$logs/$1"-*.log 2>/dev/null | grep -cE "$saving_grep")
    finished=$(cat "$logs/sbatch-$1.out" "$logs/$1"-*.log 2>/dev/null | grep -cE "$saved_grep")
    if [ "$4" = 1 ] && [ "$started" -gt "$finished" ]; then
        why="the save did not finish within the signal lead of $signal_lead s"
    elif [ "$4" = 1 ] && { [ "$6" = 1 ] || [ "$5" = "?" ]; }; then
        why="the trainer did not finish its step and save within the signal lead of $signal_lead s"
    elif [ "$4" = 1 ] && [ "$5" != 0 ]; then
        why="the trainer exited with code $5 after the signal without saving"
    elif [ "$4" = 1 ]; then
        why="the trainer exited after the signal without saving"
    elif [ "$6" = 1 ] || [ "$5" = "?" ]; then
        why="Slurm ended the segment (time limit or a lost node) before a new checkpoint"
    else
        why="the trainer exited (code $5) below train_iters without a new checkpoint"
    fi
}

# no_progress JOB FROM WHY: count it; max_no_progress in a row stop the chain (returns 1)
no_progress() {
    local n
    n=$(($(cat "$chain/no_progress" 2>/dev/null || echo 0) + 1))
    echo "$n" > "$chain/no_progress"
    outcome "$1" no-progress "$2" "$2" "$3"
    if [ "$n" -ge "$max_no_progress" ]; then
        stop "no progress in $n segments in a row: $3"
        return 1
    fi
}

# The successor, submitted once per segment job, however often Slurm runs this script under the same
# job id (a requeue after a node failure, scontrol requeue): the first run claims the submission with
# an atomic mkdir and records it; a rerun finds the record and submits nothing. The nodes earlier
# segments left out (left_out) stay out of it. Sets next ('' for none).
submit_successor() {
    local ex
    if [ "$max_segments" -gt 0 ] && [ "$segment" -ge "$max_segments" ]; then return 0; fi
    if mkdir "$chain/successor-$SLURM_JOB_ID.claim" 2>/dev/null; then
        ex=$(exclusions <(cut -f 2 "$chain/left_out" 2>/dev/null) | paste -sd, -)
        next=$(BRIDGE_LAUNCH_SEGMENT=$((segment + 1)) sbatch --parsable ${ex:+--exclude="$ex"} \
            --dependency=afterany:"$SLURM_JOB_ID" "$script") || next=""
        next=${next%%;*}
        echo "$next" > "$chain/successor-$SLURM_JOB_ID"
        if [ -n "$next" ]; then echo "$next" >> "$chain/jobs"; fi
    else
        next=$(cat "$chain/successor-$SLURM_JOB_ID" 2>/dev/null) || next=""
        echo "bridge-launch: segment $segment runs again as job $SLURM_JOB_ID (requeued); its successor ${next:-(none)} was submitted before" >&2
    fi
}

# leave_out NODES CAUSE: the pending successor leaves NODES (comma-separated) out (scontrol update
# ExcNodeList: the segments' exclusions so far and the job's own), unless the partition would then
# have too few nodes for it; left_out records each (job, node, cause) for status and the bad-node
# list. Sets left to what the outcome says.
leave_out() {
    local excl have n
    left=""
    [ -n "$next" ] || return 0
    for n in ${1//,/ }; do printf '%s\t%s\t%s\n' "$SLURM_JOB_ID" "$n" "$2" >> "$chain/left_out"; done
    excl=$(exclusions <(cut -f 2 "$chain/left_out"))
    have=$(sinfo -h -N -p "$SLURM_JOB_PARTITION" -o %N 2>/dev/null | sort -u | grep -cvxF "$excl")
    if [ "${have:-0}" -lt "$nodes" ]; then
        left="; $next keeps $1: the partition has ${have:-0} other nodes, fewer than $nodes"
    elif scontrol update JobId="$next" ExcNodeList="$(echo "$excl" | paste -sd, -)" 2>/dev/null; then
        left="; $next leaves out $(echo "$excl" | paste -sd, -)"
    else
        left="; $next could not be told to leave out $1"
    fi
}

# A segment Slurm ended before it could judge itself (its 'open' record is still here): judge it now.
judge_previous() {
    local pjob pfrom psig=0
    [ -f "$chain/open" ] || return 0
    read -r pjob pfrom < "$chain/open"
    [ "$pjob" != "$SLURM_JOB_ID" ] || return 0
    [ -e "$chain/stop-$pjob" ] && psig=1
    judge "$pjob" "$pfrom" "$before" "$psig" "?" "?"
    if [ -z "$why" ]; then
        echo 0 > "$chain/no_progress"
        outcome "$pjob" continued "$pfrom" "$before"
    elif ! no_progress "$pjob" "$pfrom" "$why"; then
        end 1
    fi
}

# restart RC TO DETAIL SAID: this segment failed and its successor tries again (leave_out has set
# left): one restart counted and the outcome recorded (DETAIL, the restart, left); with --max-restarts
# used up the chain stops. Exits RC.
restart() {
    local n
    n=$(($(cat "$chain/restarts" 2>/dev/null || echo 0) + 1))
    echo "$n" > "$chain/restarts"
    outcome "$SLURM_JOB_ID" failed "$before" "$2" "$3, restart $n of $max_restarts$left"
    if [ "$n" -gt "$max_restarts" ]; then
        stop "failed $n times; --max-restarts $max_restarts used up"
        finish "$1"
    fi
    echo "bridge-launch: segment $segment failed ($4); retry $n of $max_restarts in ${next:-nothing}" >&2
    end "$1"
}

# The image or the health step failed (job.sh): with nodes at fault of their own, this segment counts
# as a failed one (a restart) and the successor leaves them out (leave_out), as after a failure in
# training; otherwise the chain stops, its next segment would fail the same way.
prepare_failed() {
    record 1
    if own_fault "$2" "$3" && [ -n "$next" ]; then
        leave_out "$2" "$1"
        restart 1 "$before" "$1" "before training: $1"
    fi
    stop "$1"
    outcome "$SLURM_JOB_ID" stopped "$before" "$before" "$1"
    finish 1
}

segment_run() {
    local restarts
    mkdir -p "$chain"
    segment=${BRIDGE_LAUNCH_SEGMENT:-1}
    echo "$SLURM_JOB_ID $segment start $(date +%s)" >> "$chain/segments"
    if [ -e "$chain/done" ] || [ -e "$chain/stopped" ]; then end 0; fi
    if ! resume_point; then
        stop "$resume_note"
        outcome "$SLURM_JOB_ID" stopped 0 0 "$resume_note"
        end 1
    fi
    before=$resume_it
    judge_previous
    if [ "$before" -ge "$train_iters" ]; then
        touch "$chain/done"
        end 0
    fi
    if [ -n "$resume_note" ]; then echo "bridge-launch: $resume_note" >&2; fi
    next=""
    submit_successor
    echo "$SLURM_JOB_ID $before" > "$chain/open"
    prepare
    asked=0
    ended=0
    trap 'asked=1; if [ -e "$chain/stopped" ]; then echo "bridge-launch: cancelled: the training processes are told to save and exit" >&2; echo cancel > "$stop_file"; else echo "bridge-launch: time limit in $(time_left)s: the training processes are told to save and exit" >&2; touch "$stop_file"; fi' USR1
    trap 'ended=1' TERM
    start_watch
    train_step
    stop_watch
    resume_point || true
    after=$resume_it
    # the spare successor goes before the chain says it is done, so no status shows it pending after
    if [ "$after" -ge "$train_iters" ]; then
        if [ -n "$next" ]; then
            scancel "$next" 2>/dev/null
            next=""
        fi
        touch "$chain/done"
        outcome "$SLURM_JOB_ID" "done" "$before" "$after"
        end 0
    fi
    if [ "$after" -gt "$before" ]; then echo 0 > "$chain/no_progress"; fi
    if [ "$rc" -ne 0 ] && [ "$asked" = 0 ] && [ "$ended" = 0 ]; then
        failure_class
        if [ "$fclass" = deterministic ]; then
            stop "deterministic failure in segment $segment: $fwhat: $fline"
            outcome "$SLURM_JOB_ID" failed "$before" "$after" "$fwhat: $fline"
            finish "$rc"
        fi
        find_culprit
        if [ "$fclass" = unknown ] && [ "$after" -le "$before" ] && [ -z "$culprit_node" ] && [ "$retry_unknown" != 1 ]; then
            stop "unknown failure in segment $segment (exit $rc; no failure class matches its logs) and no new checkpoint"
            outcome "$SLURM_JOB_ID" failed "$before" "$after" "exit $rc, unknown: not retried without a new checkpoint"
            finish "$rc"
        fi
        left=""
        if [ -n "$culprit_node" ]; then leave_out "$culprit_node" "$cause"; fi # the node the logs name
        restart "$rc" "$after" "exit $rc ($fclass${fwhat:+: $fwhat})${cause:+: $cause}" "exit $rc"
    fi
    judge "$SLURM_JOB_ID" "$before" "$after" "$asked" "$rc" "$ended"
    if [ -z "$why" ]; then
        outcome "$SLURM_JOB_ID" continued "$before" "$after"
        if [ -z "$next" ]; then
            stop "segment $segment ended at iteration $after, below train_iters, with no successor"
            finish 1
        fi
        echo "bridge-launch: segment $segment saved iteration $after (from $before); $next continues" >&2
        end 0
    fi
    no_progress "$SLURM_JOB_ID" "$before" "$why" || finish 1
    echo "bridge-launch: segment $segment made no progress: $why; ${next:-nothing} tries again" >&2
    if [ -z "$next" ]; then stop "segment $segment made no progress ($why) and has no successor"; fi
    end 1
}
