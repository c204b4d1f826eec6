#!/usr/bin/env bash
# bridge-launch 0.1.0: run @RUN_ID@, recipe smoke on cluster local (1 node x 2)
# Secrets named by the profile come from the submitting environment; none is written here.
set -uo pipefail
cd <STATE>/runs/@RUN_ID@
mkdir -p exit
export OMP_NUM_THREADS=1
export BRIDGE_LAUNCH_RUN_DIR=<STATE>/runs/@RUN_ID@
export BRIDGE_LAUNCH_RUN_ID=@RUN_ID@
export TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[rank${rank}]: '
trap 'echo "bridge-launch: SIGTERM received; waiting for the workers to exit" >&2' TERM
<PYTHON> \
    -m \
    torch.distributed.run \
    --standalone \
    --nnodes=1 \
    --nproc-per-node=2 \
    --tee=3 \
    <STATE>/runs/@RUN_ID@/workload/smoke.py \
    model.num_layers=2 \
    model.hidden_size=64 \
    model.num_attention_heads=4 \
    model.vocab_size=256 \
    dataset.seq_length=64 \
    train.micro_batch_size=4 \
    train.train_iters=50 \
    optimizer.lr=0.003 \
    rng.seed=1234 \
    checkpoint.save_interval=10 \
    logger.log_interval=1 \
    'smoke.busbw_sizes=[1024,65536,1048576,8388608]' \
    smoke.busbw_iters=5 \
    smoke.step_sleep=0.0 \
    checkpoint.save=<STATE>/runs/@RUN_ID@/checkpoints \
    checkpoint.load=<STATE>/runs/@RUN_ID@/checkpoints
rc=$?
printf '%s\n' "$rc" > exit/@RUN_ID@.tmp && mv -f exit/@RUN_ID@.tmp exit/@RUN_ID@
exit "$rc"
