# shellcheck shell=bash disable=SC2154,SC2034 # a library: the batch script sets its inputs, reads its outputs
# The job's image, materialised once per node and job in a step of its own, before the health step,
# so that no bound meant for the checks counts the import or the unpacking; the steps after it start
# the named container (pyxis: a name that exists is reused, its image never looked at again,
# pyxis_slurmstepd.c:1330-1337, :1355). Sourced by the batch script after job.sh.
#
# In:  host_step (array: srun's options for a step of one task a node on the node itself, outside
#      the image), image (array: the image step's srun command: --container-image, --container-name),
#      node_containers (the staged node-containers.sh), container (this job's container name),
#      image_space_gb (the space enroot's data path needs for the image).
#
# Why its own step: pyxis imports and unpacks the image inside the first task of a step
# (slurm_spank_task_init -> enroot_start_once, pyxis_slurmstepd.c:1484-1523), and slurmctld counts a
# step's time limit from the step's creation (step_mgr.c:3203, :5091-5113): a health step with
# --container-image and --time=2 dies in `enroot create` of a 30-50 GB image. This step has no
# --time of its own (the job's limit bounds it).

# The image step: stale containers swept and space checked on every node (node-containers.sh
# prepare), then the image imported and unpacked into this job's named container on every node.
# On failure: the nodes it names, the line pyxis or the check gave, prepare_failed (job.sh).
image_step() {
    local t0 err failed rc
    t0=$(date +%s)
    err="$exit_dir/image-$SLURM_JOB_ID.err"
    "${host_step[@]}" bash "$node_containers" prepare "$container" "$image_space_gb" 2> "$err"
    rc=$?
    cat "$err" >&2
    if [ "$rc" -eq 0 ]; then
        "${image[@]}" 2> "$err"
        rc=$?
        cat "$err" >&2
    fi
    trap containers_end EXIT
    if [ "$rc" -ne 0 ]; then
        # a node without the space is at fault of its own; pyxis' failures (a registry, the image) are the job's
        failed=$(sed -nE 's/^bridge-launch: ([^ :]+): FAIL space: .*/\1/p' "$err" | sort -u | paste -sd, -)
        why=$(grep -hoE "[^ :]+: FAIL space: .*|error: pyxis: +(\[ERROR\]|failed|curl|couldn't).*" "$err" |
            sed -E 's/^error: //' | head -n 3 | paste -sd ";" -)
        rm -f "$err"
        echo "bridge-launch: the image step failed: ${why:-srun exit $rc}" >&2
        prepare_failed "image step: ${why:-srun exit $rc}" "$failed" "$(echo "$failed" | tr , '\n' | grep -c .)"
    fi
    rm -f "$err"
    echo "bridge-launch: the image is in container $container on every node, in $(($(date +%s) - t0)) s (image step)" >&2
}

# At the job's end (the batch shell's EXIT: a completion, a failure, a retry's or a chain's exit):
# this job's container removed from every node, best effort; what a killed job leaves, the next
# job's image step sweeps.
containers_end() {
    timeout 120 "${host_step[@]}" bash "$node_containers" remove "$container" 2>&1 | grep -v '^srun: ' >&2
}
