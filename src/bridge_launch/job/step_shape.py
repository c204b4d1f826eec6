"""A job's step shape: everything its step and save times depend on, so that what one run measured
(time-limit.sh's figures) sizes the save of another with the same shape (plan/sizing.measured).

Two jobs have the same shape when they run the same recipe on the same cluster, nodes, GPUs and
image, with the same config in every key but those that only say how long, where to, how often or
what to log: the target, paths, intervals, the learning-rate schedule's values, the exit signal."""

from __future__ import annotations

import hashlib
import json

# keys that change neither a step nor a save
NEUTRAL_KEYS = frozenset(
    {
        "train.train_iters",
        "train.train_samples",
        "train.exit_signal",
        "train.exit_signal_handler",
        "train.exit_signal_handler_for_dataloader",
        "train.exit_duration_in_mins",
        "train.exit_interval",
        "checkpoint.save",
        "checkpoint.load",
        "checkpoint.pretrained_checkpoint",
        "checkpoint.save_interval",
        "checkpoint.most_recent_k",
        "checkpoint.non_persistent_save_interval",
        "checkpoint.non_persistent_ckpt_dir",
        "dataset.path",
        "validation.eval_interval",
        "rng.seed",
    }
)
NEUTRAL_PREFIXES = ("logger.", "scheduler.", "smoke.fail_")


def step_shape(job) -> str:
    """A short digest of the job's step shape."""
    config = {k: v for k, v in job.config.items() if k not in NEUTRAL_KEYS and not k.startswith(NEUTRAL_PREFIXES)}
    shape = [job.recipe, job.cluster, job.nodes, job.gpus_per_node, job.gpu_type, job.container, config]
    return hashlib.sha256(json.dumps(shape, sort_keys=True, default=str).encode()).hexdigest()[:16]
