# shellcheck shell=bash disable=SC2154,SC2034 # a library: the batch script sets its inputs, reads its outputs
# The resume point: which checkpoint the trainer will load, decided on the batch host by
# trainer_protocol's publication rule (a chain's segment and a retried attempt alike). Sourced by
# the batch script (backends/slurm/resume_point.py sets its inputs).
#
# In:  save_dir (checkpoint.save), np_dir (the non-persistent dir, '' for none), tracker (the
#      tracker file's name), complete_files (array: what a complete iteration always holds),
#      ckpt_step_key (the override that loads a given iteration).
# resume_point sets resume_it (0: none), resume_args and resume_note; it returns 1 when a tracker
# exists but nothing complete does.

# missing DIR: the complete_files DIR lacks, space-separated
missing() {
    local f out=""
    for f in "${complete_files[@]}"; do [ -e "$1/$f" ] || out="$out $f"; done
    echo "${out# }"
}

complete() { [ -d "$1" ] && [ -z "$(missing "$1")" ]; }

# tracked DIR: the iteration DIR's tracker names (fails without a readable number)
tracked() {
    local t
    t=$(cat "$1/$tracker" 2>/dev/null) || return 1
    t=${t//[[:space:]]/}
    case $t in "" | *[!0-9]*) return 1 ;; esac
    echo $((10#$t))
}

iter_of() { printf "%s/iter_%07d" "$1" "$2"; }

# newest_complete DIR MAX: the newest complete iteration in DIR not above MAX ('' for none)
newest_complete() {
    local d it best=""
    for d in "$1"/iter_*; do
        it=${d##*/iter_}
        case $it in "" | *[!0-9]*) continue ;; esac
        it=$((10#$it))
        [ "$it" -le "$2" ] || continue
        complete "$d" || continue
        if [ -z "$best" ] || [ "$it" -gt "$best" ]; then best=$it; fi
    done
    echo "$best"
}

# The iteration the trainer will load is the one its trackers name (the non-persistent one when at
# least as new), if that iteration holds every file a complete checkpoint always has; else the
# newest complete persistent iteration, loaded with ckpt_step_key.
resume_point() {
    resume_it=0
    resume_args=()
    resume_note=""
    local p np choice dir m
    p=$(tracked "$save_dir") || p=""
    np=""
    if [ -n "$np_dir" ]; then np=$(tracked "$np_dir") || np=""; fi
    [ -n "$p$np" ] || return 0
    if [ -n "$np" ] && { [ -z "$p" ] || [ "$np" -ge "$p" ]; }; then
        choice=$np
        dir=$(iter_of "$np_dir" "$np")
    else
        choice=$p
        dir=$(iter_of "$save_dir" "$p")
    fi
    if complete "$dir"; then
        resume_it=$choice
        return 0
    fi
    m=$(newest_complete "$save_dir" "${p:-0}")
    if [ -z "$m" ]; then
        resume_note="the checkpoint tracker names iteration $choice, but $dir is incomplete (missing: $(missing "$dir")); no earlier complete checkpoint"
        return 1
    fi
    resume_it=$m
    resume_args=("$ckpt_step_key=$m")
    resume_note="iteration $choice is incomplete ($dir is missing: $(missing "$dir")); loading iteration $m"
}
