# shellcheck shell=bash disable=SC2154,SC2034 # a library: the batch script sets its inputs, reads its outputs
# Retries for a Slurm job that is not a chain, decided by its own batch script (the launcher is not
# running then): a flaky failure is resubmitted without the node the health step or the logs name
# (--exclude), an attempt that saved a newer complete checkpoint does not use up max_restarts and
# the next one loads it, a deterministic failure never retries. Sourced by the batch script after
# job.sh, resume-point.sh and culprit.sh (find_culprit, exclusions, deterministic_cause);
# backends/slurm/attempts.py holds the record's format.
#
# In:  attempts (the record dir), logs (the run's log dir), script (this batch script: the next
#      attempt), max_restarts, load_from_save (1: an attempt after the first loads save_dir),
#      nodes (the job's), retry_unknown (1: the profile retries unknown failures too).
#
# Each attempt appends one record to $attempts/outcomes, tab-separated:
#     JOB  ATTEMPT  OUTCOME  FROM  TO  NODES  BAD  DETAIL

# Before the health step: this attempt's number, its resume point and what it loads.
attempt_begin() {
    attempt=${BRIDGE_LAUNCH_ATTEMPT:-1}
    mkdir -p "$attempts"
    if ! resume_point; then echo "bridge-launch: $resume_note" >&2; fi
    before=$resume_it
    after=$resume_it
    if [ "$load_from_save" = 1 ]; then
        if [ "$attempt" -gt 1 ] && [ "$resume_it" -gt 0 ]; then
            resume_args=("checkpoint.load=$save_dir" "${resume_args[@]}")
        elif [ "$attempt" = 1 ]; then
            resume_args=()
        fi
    fi
    if [ "$attempt" -gt 1 ]; then
        local from=""
        [ "$resume_it" -gt 0 ] && from=", from iteration $resume_it"
        echo "bridge-launch: attempt $attempt on $SLURM_JOB_NODELIST$from" >&2
    fi
}

# attempt_end OUTCOME BAD DETAIL...: this attempt's record (status reads it)
attempt_end() {
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$SLURM_JOB_ID" "$attempt" "$1" "$before" "$after" \
        "$SLURM_JOB_NODELIST" "${2:--}" "${*:3}" >> "$attempts/outcomes"
}

# retry RC WHY BAD PROGRESS: resubmit this script without the BAD nodes (comma-separated), or say
# why not; exits RC either way. PROGRESS 1: it saved a newer checkpoint, which uses up no restart.
retry() {
    local rc=$1 why=$2 bad=$3 n out excl what
    if [ -e "$attempts/stopped" ]; then
        attempt_end failed "$bad" "$why; not retried: the run was cancelled"
        exit "$rc"
    fi
    # one retry per attempt's job, however often Slurm runs this script under its id (a requeue)
    if ! mkdir "$attempts/retry-$SLURM_JOB_ID.claim" 2>/dev/null; then
        echo "bridge-launch: attempt $attempt ran again as job $SLURM_JOB_ID (requeued): its retry was submitted before" >&2
        exit "$rc"
    fi
    n=$(cat "$attempts/restarts" 2>/dev/null || echo 0)
    if [ "$4" = 0 ]; then n=$((n + 1)); fi
    if [ "$n" -gt "$max_restarts" ]; then
        attempt_end failed "$bad" "$why; not retried: --max-restarts $max_restarts used up"
        exit "$rc"
    fi
    if [ -n "$bad" ]; then echo "$bad" | tr , "\n" >> "$attempts/excluded"; fi
    excl=$(exclusions "$attempts/excluded" | paste -sd, -)
    if ! out=$(BRIDGE_LAUNCH_ATTEMPT=$((attempt + 1)) sbatch --parsable ${excl:+--exclude="$excl"} "$script" 2>&1); then
        attempt_end failed "$bad" "$why; not retried: sbatch refused the next attempt${excl:+ without $excl}: $(echo "$out" | tail -n 1)"
        echo "bridge-launch: no retry: $(echo "$out" | tail -n 1)" >&2
        exit "$rc"
    fi
    out=$(echo "$out" | tail -n 1)
    out=${out%%;*}
    echo "$n" > "$attempts/restarts"
    echo "$out" >> "$attempts/jobs"
    what="retry $n of $max_restarts"
    if [ "$4" = 1 ]; then what="retry (it saved iteration $after: no restart used, $n of $max_restarts so far)"; fi
    attempt_end retried "$bad" "$why; $what as job $out${excl:+ without $excl}"
    echo "bridge-launch: attempt $attempt failed ($why); $what as job $out${excl:+ without $excl}" >&2
    exit "$rc"
}

# The image or the health step failed (job.sh): the nodes with a fault of their own are left out of a
# retry (own_fault); otherwise no retry would get past it.
prepare_failed() {
    record 1
    if own_fault "$2" "$3"; then retry 1 "$1" "$2" 0; fi
    attempt_end failed - "$1; not retried: no node of its own is at fault"
    exit 1
}

# After the training step (job.sh: rc): the record, and a retry unless it completed, was stopped (a
# cancel, the time limit), failed deterministically, or failed for an unknown reason without saving a
# newer checkpoint (failure_class names the class; the record says which rule decided); exits.
attempt_after_step() {
    local why progress=0
    resume_point > /dev/null 2>&1 || true
    after=$resume_it
    if [ -e "$stop_file" ]; then
        if [ -s "$stop_file" ]; then
            attempt_end stopped - "cancelled"
        else
            attempt_end stopped - "the time limit (saved, resume continues)"
        fi
        exit "$rc"
    fi
    if [ "$rc" -eq 0 ]; then
        attempt_end completed - ""
        exit 0
    fi
    failure_class
    if [ "$fclass" = deterministic ]; then
        attempt_end failed - "exit $rc; deterministic, not retried: $fwhat: $fline"
        exit "$rc"
    fi
    find_culprit
    [ "$after" -gt "$before" ] && progress=1
    # unknown: retried only on evidence, a newer checkpoint (progress) or a node named; or by the profile
    if [ "$fclass" = unknown ] && [ "$progress" = 0 ] && [ -z "$culprit_node" ] && [ "$retry_unknown" != 1 ]; then
        attempt_end failed - "exit $rc; unknown failure (no failure class matches its logs), not retried: it saved no newer checkpoint"
        exit "$rc"
    fi
    retry "$rc" "exit $rc${cause:+: $cause} (${fclass}${fwhat:+: $fwhat})" "$culprit_node" "$progress"
}
