#!/bin/bash
# bridge-launch's container housekeeping on one node, run by srun on the node itself (not in the
# image: it drives the node's enroot, as pyxis does). Needs bash, coreutils, enroot; squeue for the
# sweep. A GB200 batch host and its compute nodes have these wherever pyxis runs.
#
# Usage: node-containers.sh prepare NAME NEED_GB   before the image step: remove stale containers
#                                                    of bridge-launch jobs that no longer run (this
#                                                    one's too: a requeued job creates it afresh), and
#                                                    check that enroot's data path has NEED_GB free
#        node-containers.sh remove NAME              at the job's end: remove this job's container
#
# Facts relied on (pyxis 0.24.0, enroot 8ea147d; docs/research/pyxis-enroot.md):
# - `--container-name=NAME` is the container pyxis_NAME under container_scope=global (pyxis'
#   default, config.c:37) and pyxis_<jobid>_NAME under scope=job (pyxis_slurmstepd.c:1305-1310);
#   pyxis never removes a named container (:1753-1761) except, under scope=job, in the epilog
#   (pyxis_slurmd.c:173-222): a job killed at its limit leaves its container behind.
# - pyxis runs enroot with the job's environment minus ENROOT_DATA_PATH and the other path
#   variables (pyxis_slurmstepd.c:364-390), so enroot.conf decides where containers live; this
#   script withholds the same variables to see what pyxis sees.
# - `enroot list` lists the data path (runtime.sh:548-558); `enroot remove -f` removes a container
#   (enroot.in:727-753); `enroot create` unpacks the whole image there (runtime.sh:425-439).
set -uo pipefail
unset ENROOT_LIBRARY_PATH ENROOT_SYSCONF_PATH ENROOT_RUNTIME_PATH ENROOT_CACHE_PATH ENROOT_DATA_PATH \
    ENROOT_TEMP_PATH ENROOT_ZSTD_OPTIONS ENROOT_TRANSFER_RETRIES ENROOT_CONNECT_TIMEOUT \
    ENROOT_MAX_CONNECTIONS ENROOT_ALLOW_HTTP
host=$(hostname -s 2>/dev/null || hostname)
say() { echo "bridge-launch: $host: $*" >&2; }

# Containers bridge-launch named (bridge-launch.RUN.JOB), either scope: "NAME JOB" lines.
ours() {
    enroot list 2>/dev/null | sed -nE 's/^pyxis_([0-9]+_)?(bridge-launch\.[A-Za-z0-9_-]+\.([0-9]+))$/\2 \3 &/p'
}

# enroot's data path as enroot computes it: `enroot info` prints its configuration (enroot.in's info
# command, 4.x); where an older enroot has none, its default (enroot.in:73-84)
data_path() {
    local path
    path=$(enroot info 2>/dev/null | sed -n 's/^ *ENROOT_DATA_PATH=//p' | head -n 1)
    echo "${path:-${XDG_DATA_HOME:-$HOME/.local/share}/enroot}"
}

case ${1:-} in
    prepare)
        name=$2 need_gb=$3
        # without squeue's answer, only this job's own name is known to be stale
        running=$(squeue -h -t RUNNING,COMPLETING -o %A 2>/dev/null) && running=" $(echo "$running" | tr '\n' ' ') " ||
            running=""
        stale=()
        while read -r ours_name job full; do
            # this job's own name: a requeue's leftover, perhaps half unpacked (runtime.sh:425-438)
            if [ "$ours_name" = "$name" ] || { [ -n "$running" ] && [[ $running != *" $job "* ]]; }; then
                stale+=("$full")
            fi
        done < <(ours)
        if [ "${#stale[@]}" -gt 0 ]; then
            enroot remove -f "${stale[@]}" > /dev/null 2>&1
            say "removed ${#stale[@]} stale container(s) of jobs that no longer run: ${stale[*]}"
        fi
        dir=$(data_path)
        probe=$dir
        while [ ! -d "$probe" ] && [ "$probe" != / ]; do probe=$(dirname "$probe"); done
        free_kb=$(df -Pk "$probe" 2>/dev/null | awk 'NR == 2 {print $4}')
        need_kb=$(awk -v g="$need_gb" 'BEGIN {printf "%d", g * 1048576}')
        if [ -n "$free_kb" ] && [ "$free_kb" -lt "$need_kb" ]; then
            say "FAIL space: enroot's data path $dir has $((free_kb / 1048576)) GB free, the image needs about $need_gb GB (profile key image_space_gb)"
            exit 1
        fi
        ;;
    remove)
        name=$2
        mapfile -t mine < <(ours | awk -v want="$name" '$1 == want {print $3}')
        if [ "${#mine[@]}" -gt 0 ]; then enroot remove -f "${mine[@]}" > /dev/null 2>&1 || say "could not remove ${mine[*]}"; fi
        ;;
    *)
        echo "usage: node-containers.sh prepare NAME NEED_GB | remove NAME" >&2
        exit 2
        ;;
esac
