# shellcheck shell=bash disable=SC2154,SC2034 # a library: the batch script sets its inputs, reads its outputs
# The steps every bridge-launch batch script runs: the health step and the training step. Sourced by
# the batch script (backends/slurm/render.py), which sets the inputs and calls them.
#
# In:  has_image, has_health (1: the job has the image step (containers.sh), the health step),
#      health (array: the health step's srun command), health_out (its output file), health_mark
#      (node_health.py's line mark), node_own_checks (the health checks whose failure is a node's
#      own, an ERE alternation), nodes (the job's), train (array: the training step's srun command),
#      exit_dir (where each job's exit code is recorded), stop_file (its appearance asks the
#      training processes to save and exit; 'cancel' in it: stop), signal_lead (seconds; '' for
#      no save at the time limit), cancel_signal (what `bridge-launch cancel` sends this shell),
#      measure_file (set where time-limit.sh is sourced: the job measures its step and save times),
#      stripe and stripe_dir (set where the profile gives the checkpoint directory a Lustre layout).
#      attempts.sh and segment.sh redefine prepare_failed (what a failed image or health step does;
#      it exits).

resume_args=() # the resume point's overrides (resume-point.sh), for a chain's segment or a retried attempt

# record RC: this job's exit code, for clusters where neither squeue nor sacct knows it
record() { printf '%s\n' "$1" > "$exit_dir/$SLURM_JOB_ID"; }

# The steps before training, where the job has them: the checkpoint directory's layout, the image
# step (containers.sh), then the health step, whose bound so starts when its checks start.
prepare() {
    if [ -n "${stripe_dir:-}" ]; then stripe_checkpoints; fi
    if [ "$has_image" = 1 ]; then image_step; fi
    if [ "$has_health" = 1 ]; then health_step; fi
}

# The profile's Lustre layout for the checkpoint directory (`lfs setstripe` with the profile's
# checkpoint_stripe), set before the first save so that every checkpoint's files inherit it (files
# written before keep theirs); where lfs is missing or refuses, the job goes on and says so.
stripe_checkpoints() {
    mkdir -p "$stripe_dir" || return 0
    if ! command -v lfs > /dev/null; then
        echo "bridge-launch: no lfs on the batch host: $stripe_dir keeps its layout (checkpoint_stripe ${stripe[*]})" >&2
    elif lfs setstripe "${stripe[@]}" "$stripe_dir" >&2; then
        echo "bridge-launch: checkpoints in $stripe_dir are striped: lfs setstripe ${stripe[*]}" >&2
    else
        echo "bridge-launch: lfs setstripe ${stripe[*]} $stripe_dir failed: checkpoints keep the directory's layout" >&2
    fi
}

# The health step: each node checks its GPUs, IMEX channels and the paths of the job, then (several
# nodes) the fabric with all-reduces (node_health.py); a node that fails it stops the job before
# torchrun, its line naming the node and the check (bad). The nodes with a fault of their own
# (hbad) are the ones a retry or a chain's next segment leaves out, unless every node of a larger
# job failed (the same failure everywhere is the job's or the profile's).
health_step() {
    local fails hbad nfail
    "${health[@]}"
    health_rc=$?
    cat "$health_out" 2>/dev/null
    if [ "$health_rc" -ne 0 ]; then
        fails=$(grep -h " FAIL " "$health_out" 2>/dev/null | sed "s/^.*$health_mark //") # NODE FAIL check: ...
        bad=$(echo "$fails" | paste -sd "|" -)
        echo "bridge-launch: the health step failed: ${bad:-srun exit $health_rc}" >&2
        hbad=$(echo "$fails" | awk -v own="^($node_own_checks):" '$3 ~ own {print $1}' | sort -u | paste -sd, -)
        nfail=$(echo "$fails" | awk 'NF {print $1}' | sort -u | grep -c .)
        prepare_failed "health step: ${bad:-srun exit $health_rc}" "$hbad" "${nfail:-0}"
    fi
}

# prepare_failed WHY BAD NFAIL: the image or the health step failed (WHY: its line; BAD: the nodes at
# fault of their own, comma-separated, '' for none; NFAIL: how many nodes failed). A plain job: its
# exit code, and no training step.
prepare_failed() {
    record 1
    exit 1
}

# own_fault BAD NFAIL: whether BAD names nodes to leave out (some of a larger job's nodes, or a
# one-node job's node)
own_fault() { [ -n "$1" ] && { [ "$2" -lt "$nodes" ] || [ "$nodes" = 1 ]; }; }

# The training step in the background, waited for through the traps (a trap ends `wait` early; the
# step is waited for again until it has ended): sets rc, records it.
train_step() {
    "${train[@]}" "${resume_args[@]}" &
    step=$!
    while :; do
        wait "$step"
        rc=$?
        kill -0 "$step" 2>/dev/null || break
    done
    record "$rc"
}

# One job (not a chain): `bridge-launch cancel` sends cancel_signal to this shell alone (scancel
# --batch), which has the launcher on every node send SIGTERM to the training processes (torchrun
# left alone); with a time limit, Slurm's USR1 signal_lead seconds before it has them save and exit
# the same way (an empty stop file: status reads it as a stop at the time limit, not a completion),
# or the time-limit watch's USR1 earlier, when the step and save it measures need a longer lead
# (time-limit.sh, where it is sourced).
# time_left: seconds to the time limit (the watch's deadline; the signal lead where there is none)
time_left() { if [ -n "${deadline:-}" ]; then echo $((deadline - $(date +%s))); else echo "$signal_lead"; fi; }
single_step() {
    trap 'echo "bridge-launch: cancelled: SIGTERM to the training processes on every node (torchrun is left alone)" >&2; echo cancel > "$stop_file"' "$cancel_signal"
    if [ -n "$signal_lead" ]; then
        trap 'echo "bridge-launch: time limit in $(time_left)s: the training processes are told to save and exit" >&2; [ -e "$stop_file" ] || : > "$stop_file"' USR1
    fi
    if [ -n "${measure_file:-}" ]; then start_watch; fi
    train_step
    if [ -n "${measure_file:-}" ]; then stop_watch; fi
}
