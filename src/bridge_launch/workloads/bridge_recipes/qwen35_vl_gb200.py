"""Qwen3.5-VL 35B-A3B long-context (128K-token) SFT on 32 GB200 GPUs, in BF16 and in MXFP8 with BF16
parameter communication: the two recipe functions the seed ("feat(recipe): add Qwen3.5 VL
long-context GB200 SFT recipes") names, which no Megatron-Bridge revision has. bridge-launch ships
them, written for this project against Megatron-Bridge's API at 067f987 (main): nothing here is
copied from the seed's code, which bridge-launch does not have; the values are the ones the seed's
description states, and everything it leaves out comes from _sft_common_vlm() and the model
provider.

Inside the job, workload/bridge_recipe_entry.py imports this file, sets each function of __all__ as
an attribute of megatron.bridge.recipes and runs the image's scripts/training/run_recipe.py, whose
recipe lookup finds them there (067f987 scripts/training/recipe_runner.py:191-197). The names keep
the `qwen35_vl_` prefix: with native Energon packing that prefix makes run_recipe.py select
vlm_step (scripts/training/recipe_metadata.py:79 QWEN_VL_RECIPE_PREFIXES, :192-193 recipe_step).

Megatron-Bridge facts relied on (067f987df03b8355b03192d88d70f1709fedf51a; paths under
src/megatron/bridge/ unless they start with scripts/):

- recipes/common.py:347-447 `_sft_common_vlm()`: the VLM SFT base (NullTokenizer, VLM DDP, train,
  optimizer, logger, checkpoint); its dataset (:411-422, DirectHFSFTDatasetConfig over CORD-v2) is
  replaced; its train.micro_batch_size is 2 (:379).
- data/builders/energon.py:61-96 `QwenVLEnergonTaskEncoderConfig` (hf_processor_revision pins the
  tokenizer and the processor, :264-273), :140-160 `EnergonDatasetConfig` (`path` from the caller:
  validate() refuses an empty one, :164-165); native packing is `packing_buffer_size` set (:233) and
  needs micro_batch_size 1 (:190-191).
- training/config.py:1319-1324: the Energon dataset's micro_batch_size must equal
  train.micro_batch_size; :1326-1345: native packing needs train.micro_batch_size 1 (:1327),
  model.calculate_per_token_loss (:1329), ddp.average_in_collective False (:1331), no MTP (:1334:
  "Energon native sequence packing does not support MTP"), no CUDA graphs (:1336-1339) and no
  pipeline parallelism (:1342); fixed-width padding (pad_to_max_length with EP > 1, :1347-1352)
  and the CP/SP collate multiple (:1354-1387) are derived there, not set here.
- models/conversion/auto_bridge.py:529-578 `AutoBridge.from_hf_pretrained(path, **kwargs)` passes
  `revision` to the config load; :364-366 and :2001-2002 record it as the provider's
  hf_model_revision.
- models/qwen_vl/modelling_qwen3_vl/transformer_config.py:80-82: the vision tower copies
  recompute_granularity, recompute_method and recompute_num_layers from the language model's
  config. At 067f987 there is no separate setting for the vision tower, so the seed's "full vision
  recomputation" cannot be expressed through this API: with selective decoder recompute the vision
  tower gets selective recompute too (of TransformerConfig's default recompute_modules). Stated
  here and in the recipe files, not worked around.
- training/mixed_precision.py:185-197 `bf16_mixed`, :254-266 `bf16_with_mxfp8_mixed` (it turns
  fp8_param_gather and reuse_grad_buf_for_mxfp8_param_ag on; the seed keeps BF16 parameter
  communication, so both are turned off: megatron-core 2a75ac12c refuses the reuse without the FP8
  gather, megatron/core/distributed/distributed_data_parallel_config.py:259-260).

Not from 067f987: the MTP head is off (mtp_num_layers 0) because config.py:1334 refuses MTP with
native packing; the seed's runs used MCore from NVIDIA/Megatron-LM#7611 for masked MTP, which
megatron-core 2a75ac12c (this revision's 3rdparty/Megatron-LM) does not have.
"""

from __future__ import annotations

from megatron.bridge import AutoBridge
from megatron.bridge.data.builders import EnergonDatasetConfig, QwenVLEnergonTaskEncoderConfig
from megatron.bridge.recipes.common import _sft_common_vlm
from megatron.bridge.training.config import ConfigContainer
from megatron.bridge.training.mixed_precision import bf16_with_mxfp8_mixed

HF_MODEL = "Qwen/Qwen3.5-35B-A3B"
# The model and processor revision the recipes pin. The seed pins one without printing it; this is
# the Qwen/Qwen3.5-35B-A3B revision upstream Megatron-Bridge pins for this model in PR #5098.
HF_REVISION = "59d61f3ce65a6d9863b86d2e96597125219dc754"  # pragma: allowlist secret
SEQ_LENGTH = 131072


def _qwen35_vl_35b_a3b_long_context_gb200_common() -> ConfigContainer:
    """What the BF16 and MXFP8 recipes share: the model at its pinned revision, the seed's
    topology, recompute and packed Energon data over _sft_common_vlm()."""
    cfg = _sft_common_vlm()

    # model, at the pinned revision; no weights are loaded here (checkpoint.pretrained_checkpoint
    # comes from the caller)
    bridge = AutoBridge.from_hf_pretrained(HF_MODEL, revision=HF_REVISION)
    cfg.model = bridge.to_megatron_provider(load_weights=False)
    cfg.model.seq_length = SEQ_LENGTH

    # parallelism: TP2 x CP8 = 16 ranks per replica, DP 2 on 32 GPUs; experts over 16 ranks
    cfg.model.tensor_model_parallel_size = 2
    cfg.model.context_parallel_size = 8
    cfg.model.expert_model_parallel_size = 16
    cfg.model.sequence_parallel = True
    cfg.model.moe_token_dispatcher_type = "flex"
    cfg.model.moe_flex_dispatcher_backend = "hybridep"

    # selective recompute of the decoder; see the module docstring for the vision tower
    cfg.model.recompute_granularity = "selective"

    # native Energon packing (config.py:1326-1345)
    cfg.model.calculate_per_token_loss = True
    cfg.ddp.average_in_collective = False
    cfg.train.micro_batch_size = 1
    cfg.model.mtp_num_layers = 0  # config.py:1334 refuses MTP with native packing (masked MTP: Megatron-LM#7611)

    # data: the caller's prepared Energon shards (dataset.path), the pinned Qwen-VL task encoder
    cfg.dataset = EnergonDatasetConfig(
        path=None,
        seq_length=SEQ_LENGTH,
        micro_batch_size=1,
        num_workers=1,
        shuffle_buffer_size=2,
        packing_buffer_size=8,
        task_encoder=QwenVLEnergonTaskEncoderConfig(
            hf_processor_path=HF_MODEL,
            hf_processor_revision=HF_REVISION,
            min_pixels=200704,
            max_pixels=401408,
            max_num_images=4,
            max_visual_tokens=2048,
        ),
    )

    # the seed's validation runs captured this in the process environment; run_recipe.py applies a
    # recipe's env_vars where the launcher has not set them (training/config.py:1971-1989)
    cfg.env_vars = {"CUDA_DEVICE_MAX_CONNECTIONS": 1}
    return cfg


def qwen35_vl_35b_a3b_sft_long_context_32gpu_gb200_bf16_config() -> ConfigContainer:
    """Qwen3.5-VL 35B-A3B 128K SFT on 32 GB200 GPUs in BF16."""
    cfg = _qwen35_vl_35b_a3b_long_context_gb200_common()
    cfg.mixed_precision = "bf16_mixed"
    return cfg


def qwen35_vl_35b_a3b_sft_long_context_32gpu_gb200_fp8mx_config() -> ConfigContainer:
    """Qwen3.5-VL 35B-A3B 128K SFT on 32 GB200 GPUs: MXFP8 compute, BF16 parameter communication."""
    cfg = _qwen35_vl_35b_a3b_long_context_gb200_common()
    cfg.mixed_precision = bf16_with_mxfp8_mixed()
    cfg.mixed_precision.fp8_param_gather = False
    # the grad buffer is reused only for an MXFP8 parameter all-gather, which megatron-core refuses
    # without one (2a75ac12c megatron/core/distributed/distributed_data_parallel_config.py:259-260)
    cfg.mixed_precision.reuse_grad_buf_for_mxfp8_param_ag = False
    return cfg


__all__ = [
    "qwen35_vl_35b_a3b_sft_long_context_32gpu_gb200_bf16_config",
    "qwen35_vl_35b_a3b_sft_long_context_32gpu_gb200_fp8mx_config",
]
