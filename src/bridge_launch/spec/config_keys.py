"""Megatron-Bridge ConfigContainer keys that plan and resolve both read, and the small readers of
their values (an unset key, a null and an interpolation each read as what Megatron would do)."""

from __future__ import annotations

from bridge_launch.core import upstream

TP = "model.tensor_model_parallel_size"
PP = "model.pipeline_model_parallel_size"
CP = "model.context_parallel_size"
EP = "model.expert_model_parallel_size"
ETP = "model.expert_tensor_parallel_size"
VPP = "model.virtual_pipeline_model_parallel_size"
EVAL_CP = "dist.eval_context_parallel_size"
SP = "model.sequence_parallel"
GBS = "train.global_batch_size"
MBS = "train.micro_batch_size"
MODEL_SEQ = "model.seq_length"
DATA_SEQ = "dataset.seq_length"
# megatron-core 458c8d0e's GPTDatasetConfig field (the r0.5.0 pins): Megatron-Bridge there keeps
# dataset.seq_length only as a property alias (training/config.py:410-416), which overrides cannot set
DATA_SEQUENCE = "dataset.sequence_length"
SEQ_KEYS = (DATA_SEQ, DATA_SEQUENCE, MODEL_SEQ)
PRECISION = "mixed_precision"
FP8_RECIPE = "mixed_precision.fp8_recipe"
# Native sequence packing of the VLM/Energon path: a packing buffer turns it on
# (config.py:1270-1272: EnergonDatasetConfig with packing_buffer_size is not None).
PACKING_BUFFER = "dataset.packing_buffer_size"


def int_value(cfg: dict, key: str, default=None):
    """An integer value: the default when unset or null, None when not an integer (an interpolation)."""
    v = cfg.get(key, default)
    if v is None:
        return default
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def bool_value(cfg: dict, key: str):
    v = cfg.get(key)
    return v if isinstance(v, bool) else None


def sizes(cfg: dict, bridge_commit: str | None = None) -> tuple:
    """(TP, PP, CP, EP, expert TP) as Megatron reads them; None where a value is not an integer.
    An unset expert TP is what the job's Megatron-Bridge revision makes of it (`bridge_commit`; None: a
    job that is not Megatron-Bridge's, megatron-core's own default)."""
    tp, pp, cp = int_value(cfg, TP, 1), int_value(cfg, PP, 1), int_value(cfg, CP, 1)
    ep = int_value(cfg, EP, 1)
    etp = int_value(cfg, ETP, None)
    if cfg.get(ETP) is None:
        one = bridge_commit is not None and upstream.revision(bridge_commit).etp_one_with_ep
        # Megatron-Bridge 067f987 models/transformer_config.py:80-88: 1 with EP > 1; else megatron-core
        # model_parallel_config.py:506-507: expert TP defaults to TP
        etp = 1 if one and isinstance(ep, int) and ep > 1 else tp
    return tp, pp, cp, ep, etp
