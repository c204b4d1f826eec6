# shellcheck shell=bash disable=SC2154,SC2034 # a library: the batch script sets its inputs, reads its outputs
# The time-limit watch of a Slurm job that saves before its limit (a chain's segment or a plain job):
# the job measures its own step and save times (step_times over its logs, every watch_period s, with
# the figures of the jobs of the run before it) and, when they need a longer lead than the job's
# signal, asks for the save itself (USR1 to the batch shell, the same path as Slurm's signal) early
# enough for them. The deadline is the job's EndTime as Slurm holds it (the start plus the time
# limit where squeue does not answer). The figures stay in measure_file (status shows them); with no
# python3 3.8 or newer on the batch host the lead stays as sized. Sourced by the batch script after
# job.sh (backends/slurm/render.py sets the inputs).
#
# In:  logs (the run's log dir), signal_lead, step_times (workloads/step_times.py), planned_save and
#      planned_eval (the estimate's seconds, - for none), time_limit_s, watch_period (seconds
#      between two reads of the log), measure_file (the figures so far, shared by the run's jobs).
# Out: deadline (epoch seconds), watcher (the watch's pid, '' for none).

measure() { python3 "$step_times" "$measure_file" "$planned_save" "$planned_eval" "$logs/$SLURM_JOB_ID"-*.log 2>/dev/null; }
watch_limit() {
    local fig need step_s save_s
    while sleep "$watch_period"; do
        fig=$(measure) || continue
        need=${fig%% *}
        if [ "$need" -gt "$signal_lead" ] && [ $(($(date +%s) + need + watch_period)) -ge "$deadline" ]; then
            read -r _ step_s save_s _ <<< "$fig"
            echo "bridge-launch: measured step $step_s s, save $save_s s: they need a lead of $need s, not $signal_lead s; asking for the save now" >&2
            kill -USR1 $$
            return
        fi
    done
}
start_watch() {
    local ends
    deadline=""
    ends=$(squeue -h -j "$SLURM_JOB_ID" -o %e 2>/dev/null)
    case $ends in [0-9][0-9][0-9][0-9]-*) deadline=$(date -d "$ends" +%s 2>/dev/null) || deadline="" ;; esac
    [ -n "$deadline" ] || deadline=$(($(date +%s) + time_limit_s))
    echo "bridge-launch: this job reaches its time limit at $(date -d "@$deadline" "+%F %T")" >&2
    watcher=""
    # the batch host's own python3 (a GB200 batch host is an aarch64 Grace node; its system python3
    # may be absent or older than step_times.py and trainer_protocol.py need)
    if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 8))' 2> /dev/null; then
        echo "bridge-launch: no python3 3.8 or newer on the batch host: the signal lead stays $signal_lead s, unmeasured" >&2
    else
        watch_limit &
        watcher=$!
    fi
}
# stop_watch: the watch ends; the last figures (the final save) are kept for the next job and status
stop_watch() {
    if [ -n "${watcher:-}" ]; then
        pkill -P "$watcher" 2>/dev/null # its sleep first: a killed subshell leaves its child running
        kill "$watcher" 2>/dev/null
        measure > /dev/null
    fi
}
