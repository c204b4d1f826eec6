"""Checks on src/bridge_launch/spec/schema/config_container-067f987.json (main's) against facts read in
upstream; tests/e2e/test_schema_e2e.py regenerates every revision's file from its sources.

Upstream revisions (see the file's "source" block):
  Megatron-Bridge 067f987df03b8355b03192d88d70f1709fedf51a ("Bridge" below)
  Megatron-LM     2a75ac12c54ba6a42b34024756820bf819a2e25f, the commit Bridge pins as its
                  3rdparty/Megatron-LM submodule ("MCore" / "MTrain" below)
"""

from __future__ import annotations

import ast
import json
import sys

import pytest

from conftest import REPO

ROOT = REPO


SCHEMA = ROOT / "src" / "bridge_launch" / "spec" / "schema" / "config_container-067f987.json"


GENERATOR = ROOT / "scripts" / "gen_schema.py"


TYPES = {"int", "float", "bool", "str", "list", "dict", "any"}


# Fields of ConfigContainer -- Bridge src/megatron/bridge/training/config.py, class ConfigContainer.
CONTAINER_FIELDS = {
    "env_vars",
    "rng",
    "rerun_state_machine",
    "train",
    "model",
    "optimizer",
    "optimizer_config_override_provider",
    "ddp",
    "validation",
    "scheduler",
    "dataset",
    "logger",
    "tokenizer",
    "checkpoint",
    "dist",
    "ft",
    "straggler",
    "nvrx_straggler",
    "profiling",
    "peft",
    "comm_overlap",
    "mixed_precision",
    "tensor_inspect",
    "inprocess_restart",
}


@pytest.fixture(scope="module")
def doc() -> dict:
    with open(SCHEMA, encoding="utf-8") as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def fields(doc) -> dict:
    return doc["fields"]


def test_top_level_layout(doc):
    assert set(doc) == {"source", "sections", "fields"}
    assert doc["source"]["megatron_bridge"].startswith("067f987df03b")
    assert doc["source"]["megatron_core"].startswith("2a75ac12c54b")
    assert doc["source"]["note"]


def test_every_field_has_a_valid_type(fields):
    assert len(fields) > 500
    for key, spec in fields.items():
        assert spec["type"] in TYPES, key
        assert set(spec) <= {"type", "nullable", "choices", "note", "only_in"}, key
        if "nullable" in spec:
            assert spec["nullable"] is True, key
        if "choices" in spec:
            assert spec["choices"], key
            expected = {"str": str, "int": int, "float": (int, float), "bool": bool}.get(spec["type"])
            if expected is not None:
                assert all(isinstance(c, expected) for c in spec["choices"]), key


def test_every_key_starts_with_a_container_section(fields, doc):
    for key in fields:
        assert key.split(".")[0] in CONTAINER_FIELDS, key
    assert set(doc["sections"]) == CONTAINER_FIELDS
    # Every top-level ConfigContainer field is itself a key (e.g. ++model={...}).
    assert CONTAINER_FIELDS <= set(fields)
    assert not any(part.startswith("_") for key in fields for part in key.split("."))


def test_keys_sorted(doc):
    assert list(doc["fields"]) == sorted(doc["fields"])
    assert list(doc["sections"]) == sorted(doc["sections"])


def test_nested_keys_have_dict_or_any_parents(fields):
    for key in fields:
        parts = key.split(".")
        for i in range(1, len(parts)):
            parent = ".".join(parts[:i])
            assert parent in fields, key
            assert fields[parent]["type"] in ("dict", "any") or parent == "mixed_precision", key


def test_union_sections(doc):
    model = set(doc["sections"]["model"])
    # Bridge src/megatron/bridge/models/gpt_provider.py, hybrid/hybrid_provider.py, mamba/mamba_provider.py,
    # qwen_vl/qwen3_vl_provider.py, qwen_vl/qwen35_vl_provider.py
    assert {
        "GPTModelProvider",
        "HybridModelProvider",
        "MambaModelProvider",
        "Qwen3VLModelProvider",
        "Qwen3VLMoEModelProvider",
        "Qwen35VLModelProvider",
        "Qwen35VLMoEModelProvider",
    } <= model
    dataset = set(doc["sections"]["dataset"])
    # Bridge training/config.py, data/builders/{gpt_sft,direct_hf_sft,energon,mock_vlm_sft}.py
    assert {
        "GPTDatasetConfig",
        "MockGPTDatasetConfig",
        "GPTSFTDatasetConfig",
        "FinetuningDatasetConfig",
        "DirectHFSFTDatasetConfig",
        "EnergonDatasetConfig",
        "MockVLMSFTDatasetConfig",
    } <= dataset
    # Bridge src/megatron/bridge/peft/lora.py (LoRA, VLMLoRA), dora.py, canonical_lora.py
    assert {"LoRA", "VLMLoRA", "DoRA", "CanonicalLoRA"} <= set(doc["sections"]["peft"])
    assert doc["sections"]["mixed_precision"] == ["MixedPrecisionConfig"]
    assert doc["sections"]["env_vars"] == []


def test_parallelism(fields):
    # MCore megatron/core/model_parallel_config.py: tensor_model_parallel_size: int = 1
    assert fields["model.tensor_model_parallel_size"] == {"type": "int"}
    # MCore megatron/core/model_parallel_config.py: sequence_parallel: bool = False
    assert fields["model.sequence_parallel"] == {"type": "bool"}
    # MCore megatron/core/model_parallel_config.py: expert_tensor_parallel_size: Optional[int] = None
    assert fields["model.expert_tensor_parallel_size"] == {"type": "int", "nullable": True}


def test_training_loop(fields):
    # MTrain megatron/training/config/training_config.py: global_batch_size: int | None = None
    assert fields["train.global_batch_size"] == {"type": "int", "nullable": True}
    # MTrain training_config.py TrainingConfig: exit_signal_handler: bool = False
    assert fields["train.exit_signal_handler"]["type"] == "bool"
    # MTrain training_config.py ValidationConfig: eval_iters / eval_interval: int | None
    assert fields["validation.eval_iters"] == {"type": "int", "nullable": True}
    assert fields["validation.eval_interval"] == {"type": "int", "nullable": True}
    # Bridge training/config.py TrainingConfig keeps deprecated eval_iters / eval_interval: int | None
    assert fields["train.eval_interval"] == {"type": "int", "nullable": True}
    # MTrain megatron/training/config/common_config.py DistributedInitConfig: distributed_timeout_minutes: int = 10
    assert fields["dist.distributed_timeout_minutes"] == {"type": "int"}


def test_dataset(fields):
    # Bridge training/config.py GPTDatasetConfig: seq_length: int = field(kw_only=True);
    # data/builders/energon.py EnergonDatasetConfig: seq_length: int
    assert fields["dataset.seq_length"]["type"] == "int"
    # Bridge src/megatron/bridge/data/base.py DataloaderConfig: num_workers: int = 2
    assert fields["dataset.num_workers"] == {"type": "int"}
    # Bridge data/builders/energon.py EnergonDatasetConfig: packing_buffer_size: int | None = None,
    # shuffle_buffer_size: int = 100, task_encoder: EnergonTaskEncoderConfig (union of dataclasses)
    assert fields["dataset.packing_buffer_size"]["type"] == "int"
    assert fields["dataset.packing_buffer_size"]["nullable"] is True
    assert fields["dataset.packing_buffer_size"]["only_in"] == ["EnergonDatasetConfig"]
    assert fields["dataset.shuffle_buffer_size"]["type"] == "int"
    assert fields["dataset.task_encoder"]["type"] == "dict"
    # Bridge data/builders/energon.py QwenVLEnergonTaskEncoderConfig: min_pixels: int = 200704,
    # max_pixels: int = 1003520, max_num_images: int | None = 10, max_visual_tokens: int | None = 16384
    for leaf in ("min_pixels", "max_pixels", "max_num_images", "max_visual_tokens"):
        assert fields[f"dataset.task_encoder.{leaf}"]["type"] == "int", leaf
    # Bridge data/base.py DataloaderConfig: dataloader_type: Literal["single", "cyclic", "batch", "external"] | None
    assert set(fields["dataset.dataloader_type"]["choices"]) == {"single", "cyclic", "batch", "external"}
    # MCore megatron/core/datasets/blended_megatron_dataset_config.py: split_matrix is field(init=False)
    # and recomputed in __post_init__, so it is not an override key.
    assert "dataset.split_matrix" not in fields


def test_checkpoint(fields):
    # Bridge training/config.py CheckpointConfig: pretrained_checkpoint: Optional[str] = None
    assert fields["checkpoint.pretrained_checkpoint"] == {"type": "str", "nullable": True}
    # MTrain training_config.py CheckpointConfig: load: str | None = None
    assert fields["checkpoint.load"] == {"type": "str", "nullable": True}


def test_moe_dispatch(fields):
    # MCore megatron/core/transformer/transformer_config.py:
    #   moe_token_dispatcher_type: Literal['allgather', 'alltoall', 'flex'] = "allgather"
    # (Qwen35VLMoEModelProvider re-annotates it as plain str; the MCore Literal still applies)
    assert "flex" in fields["model.moe_token_dispatcher_type"]["choices"]
    assert fields["model.moe_token_dispatcher_type"]["type"] == "str"
    #   moe_flex_dispatcher_backend: Literal['deepep', 'hybridep', 'ncclep'] = "deepep"
    assert fields["model.moe_flex_dispatcher_backend"] == {"type": "str", "choices": ["deepep", "hybridep", "ncclep"]}
    #   moe_hybridep_num_sms: Optional[int] = None
    assert fields["model.moe_hybridep_num_sms"] == {"type": "int", "nullable": True}
    #   moe_router_force_load_balancing: bool = False
    assert fields["model.moe_router_force_load_balancing"] == {"type": "bool"}


def test_recompute_and_cuda_graphs(fields):
    # MCore transformer_config.py: recompute_granularity: Optional[Literal['full', 'selective']] = None
    assert fields["model.recompute_granularity"] == {"type": "str", "nullable": True, "choices": ["full", "selective"]}
    # MCore transformer_config.py: recompute_modules: Optional[List[str]] = None
    assert fields["model.recompute_modules"] == {"type": "list", "nullable": True}
    # MCore transformer_config.py: cuda_graph_impl: Literal['none', 'local', 'transformer_engine', 'full_iteration']
    assert fields["model.cuda_graph_impl"]["type"] == "str"
    assert {"none", "local", "transformer_engine"} <= set(fields["model.cuda_graph_impl"]["choices"])
    # MCore transformer_config.py: cuda_graph_scope: Optional[Union[str, CudaGraphModule, CudaGraphScope, List[...]]]
    assert fields["model.cuda_graph_scope"]["type"] == "any"
    assert fields["model.cuda_graph_scope"]["nullable"] is True
    # Bridge models/qwen_vl/qwen3_vl_provider.py: vision_cuda_graph_scope: List[str]
    assert fields["model.vision_cuda_graph_scope"]["type"] == "list"
    # MCore transformer_config.py: attention_backend: AttnBackend (enum.Enum in megatron/core/transformer/enums.py)
    assert fields["model.attention_backend"]["type"] == "str"
    assert {"flash", "fused", "unfused", "local", "auto"} == set(fields["model.attention_backend"]["choices"])


def test_loss_and_ddp(fields):
    # MCore transformer_config.py: calculate_per_token_loss: bool = False
    assert fields["model.calculate_per_token_loss"] == {"type": "bool"}
    # MCore megatron/core/distributed/distributed_data_parallel_config.py: average_in_collective: bool = False
    assert fields["ddp.average_in_collective"] == {"type": "bool"}
    # MCore distributed_data_parallel_config.py: fp8_param_gather: bool = False;
    # Bridge training/mixed_precision.py MixedPrecisionConfig.setup copies its fp8_param_gather onto ddp.
    assert fields["ddp.fp8_param_gather"]["type"] == "bool"
    assert "mixed_precision.fp8_param_gather" in fields["ddp.fp8_param_gather"]["note"]


def test_optimizer(fields):
    # MCore megatron/core/optimizer/optimizer_config.py: lr: Optional[float] = None
    assert fields["optimizer.lr"] == {"type": "float", "nullable": True}
    # MCore optimizer_config.py: optimizer: str = 'adam'
    assert fields["optimizer.optimizer"]["type"] == "str"


def test_mixed_precision(fields):
    # Bridge training/config.py ConfigContainer: mixed_precision: Optional[Union[MixedPrecisionConfig, str]] = None
    mp = fields["mixed_precision"]
    assert mp["type"] == "str" and mp["nullable"] is True
    # Bridge training/mixed_precision.py: @register def bf16_mixed / bf16_with_mxfp8_mixed / ...
    # (register() also adds the hyphenated spelling)
    assert {
        "bf16_mixed",
        "bf16-mixed",
        "bf16_with_mxfp8_mixed",
        "bf16_with_fp8_current_scaling_mixed",
        "fp16_mixed",
    } <= set(mp["choices"])
    # Bridge training/mixed_precision.py MixedPrecisionConfig: fp8_param_gather: bool = False, fp8: Optional[str]
    assert fields["mixed_precision.fp8_param_gather"] == {"type": "bool"}
    assert fields["mixed_precision.fp8"] == {"type": "str", "nullable": True}
    # torch.dtype fields: MixedPrecisionConfig.params_dtype: Optional[torch.dtype]
    assert fields["mixed_precision.params_dtype"]["type"] == "any"


def test_model_families(fields):
    # Bridge models/hybrid/hybrid_provider.py: hybrid_override_pattern only on the hybrid providers
    spec = fields["model.hybrid_override_pattern"]
    assert spec["type"] == "str" and set(spec["only_in"]) == {"HybridModelProvider", "MambaModelProvider"}
    # Bridge models/qwen_vl/qwen35_vl_provider.py: freeze_vision_model: bool = False
    assert fields["model.freeze_vision_model"]["type"] == "bool"
    # MCore transformer_config.py: activation_func: Callable -> any (Bridge serializes it by name)
    assert fields["model.activation_func"]["type"] == "any"


def test_top_level_dicts(fields):
    # Bridge training/config.py ConfigContainer: env_vars: dict[str, str | int | float | bool]
    assert fields["env_vars"] == {"type": "dict"}
    # ConfigContainer: comm_overlap: Optional[CommOverlapConfig] = None; peft: Optional[PEFT] = None
    assert fields["comm_overlap"] == {"type": "dict", "nullable": True}
    assert fields["peft"] == {"type": "dict", "nullable": True}
    assert fields["model"]["type"] == "dict" and fields["dataset"]["type"] == "dict"
    # Bridge training/comm_overlap.py CommOverlapConfig: tp_comm_overlap_cfg: Optional[TransformerLayerTPOverlapCfg]
    assert fields["comm_overlap.tp_comm_overlap_cfg"] == {"type": "dict", "nullable": True}


def test_generator_is_stdlib_only():
    tree = ast.parse(GENERATOR.read_text(encoding="utf-8"))
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            mods.add(node.module.split(".")[0])
    assert mods <= set(sys.stdlib_module_names), mods - set(sys.stdlib_module_names)
