#!/bin/bash
# bridge-launch's per-node launcher: srun starts one per node (in the container when there is one).
# Usage: node-launch.sh [OPTION VALUE]... STOP_FILE SIGNAL TORCHRUN-ARGUMENTS...
#
# Options (backends/slurm/render.py gives them):
#   --python PY             run torchrun as `PY -m torch.distributed.run` (bare processes; default:
#                           the image's torchrun, and python3 for the revision check)
#   --log-dir DIR           torchrun's --log-dir is DIR/JOB/nodeN (--tee files and error.json
#                           survive the container)
#   --rdzv-conf TEXT        torchrun's --rdzv-conf, {is_host} in it 1 on the allocation's first
#                           node (the batch host, whose address the script resolved) and 0 elsewhere
#   --cache-dir DIR         compile caches that outlive the container (below)
#   --bridge-src DIR        a mounted Megatron-Bridge checkout, ahead of the image's install
#   --revision-check FILE   node 0 runs FILE (workloads/image_revision.py) first ...
#   --revision-pins B:C     ... against these Megatron-Bridge and Megatron-LM commits ...
#   --revision-report DIR   ... and writes its findings to DIR/JOB.json; it never fails the job
#   --node-line TEXT        the line that names this node in its log ({host}: its name)
#
# torchrun runs as a child, not exec'ed, so that when the batch shell asks for a save (STOP_FILE
# appears) SIGNAL goes to the training processes themselves (torchrun's children) and never to
# torchrun: a signalled torchrun forwards it to each worker's whole process group, DataLoader
# workers included, waits only its shutdown timeout (30 s) before SIGKILL, and exits non-zero even
# when every worker saved, which sets off srun --kill-on-bad-exit on the other nodes
# (trainer_protocol.py, torchrun). Finding children through /proc works for every torch version and
# needs neither procps nor torchrun flags; a pyxis container shares the host's PID namespace, so the
# same holds inside it. Before torchrun has started its workers, a cancel (a STOP_FILE that says
# "cancel") waits for them and stops them; a time-limit stop (an empty STOP_FILE) leaves them be: a
# trainer signalled before its exit-signal handler is installed would die without saving, and there
# is nothing new to save yet.
python="" log_dir="" rdzv_conf="" cache="" bridge_src="" revision_check="" revision_pins="" revision_report=""
node_line="bridge-launch: node {host} starts torchrun"
while [ "$#" -gt 2 ] && [ "${1#--}" != "$1" ]; do
    case $1 in
        --python) python=$2 ;;
        --log-dir) log_dir=$2 ;;
        --rdzv-conf) rdzv_conf=$2 ;;
        --cache-dir) cache=$2 ;;
        --bridge-src) bridge_src=$2 ;;
        --revision-check) revision_check=$2 ;;
        --revision-pins) revision_pins=$2 ;;
        --revision-report) revision_report=$2 ;;
        --node-line) node_line=$2 ;;
        *)
            echo "node-launch.sh: unknown option $1" >&2
            exit 2
            ;;
    esac
    shift 2
done
stop=$1 sig=$2
shift 2

# Triton's kernels and autotuning (the Gated DeltaNet kernels autotune cold otherwise) and
# TorchInductor's, one directory per node index under the run dir, so every segment of a chain
# reuses them and no two nodes write one (--no-container-mount-home leaves ~/.triton in the
# container); a value the environment already sets wins.
if [ -n "$cache" ]; then
    export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-$cache/triton/node$SLURM_NODEID}"
    export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$cache/inductor/node$SLURM_NODEID}"
fi
# the checkout's src and Megatron-LM ahead of the image's install (as Megatron-Bridge's own NeMo-Run
# launchers set PYTHONPATH)
if [ -n "$bridge_src" ]; then
    export PYTHONPATH="$bridge_src/src:$bridge_src/3rdparty/Megatron-LM${PYTHONPATH:+:$PYTHONPATH}"
fi
# what this image (or --bridge-src) runs against the recipe's pins, said first
if [ -n "$revision_check" ] && [ "$SLURM_NODEID" = 0 ]; then
    "${python:-python3}" "$revision_check" --bridge="${revision_pins%%:*}" --core="${revision_pins#*:}" \
        --report="$revision_report/$SLURM_JOB_ID.json" >&2 || true
fi
echo "${node_line//\{host\}/$(hostname)}" # whose ranks this log holds (node_facts)

if [ -n "$python" ]; then launcher=("$python" -m torch.distributed.run); else launcher=(torchrun); fi
node=(--node-rank="$SLURM_NODEID")
[ -z "$log_dir" ] || node+=(--log-dir="$log_dir/$SLURM_JOB_ID/node$SLURM_NODEID")
if [ -n "$rdzv_conf" ]; then
    is_host=0
    [ "$SLURM_NODEID" = 0 ] && is_host=1
    node+=(--rdzv-conf="${rdzv_conf//\{is_host\}/$is_host}")
fi

"${launcher[@]}" "${node[@]}" "$@" &
tr=$!
while kill -0 "$tr" 2>/dev/null; do
    if [ -e "$stop" ]; then
        pids=()
        for p in /proc/[0-9]*; do
            s=$(cat "$p/stat" 2>/dev/null) || continue
            s=${s##*) }
            read -r _ ppid _ <<< "$s"
            [ "$ppid" = "$tr" ] && pids+=("${p#/proc/}")
        done
        if [ "${#pids[@]}" -gt 0 ]; then
            echo "bridge-launch: $(hostname): SIG$sig to the training processes ${pids[*]} (torchrun $tr is left alone)" >&2
            kill -s "$sig" "${pids[@]}"
            break
        fi
        if [ ! -s "$stop" ]; then
            echo "bridge-launch: $(hostname): no training process has started yet; none signalled" >&2
            break
        fi
    fi
    sleep 1
done
wait "$tr"
