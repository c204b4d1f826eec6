"""Keys and values for the property tests of submit, plan, diff and the config keys."""

import contextlib
import io

from bridge_launch.core.errors import BridgeLaunchError

KEYS = [
    "model.tensor_model_parallel_size",
    "model.pipeline_model_parallel_size",
    "model.context_parallel_size",
    "model.expert_model_parallel_size",
    "model.expert_tensor_parallel_size",
    "model.virtual_pipeline_model_parallel_size",
    "dist.eval_context_parallel_size",
    "model.sequence_parallel",
    "train.global_batch_size",
    "train.micro_batch_size",
    "validation.eval_global_batch_size",
    "validation.eval_micro_batch_size",
    "dataset.micro_batch_size",
    "model.seq_length",
    "dataset.seq_length",
    "model.num_layers",
    "model.hidden_size",
    "model.ffn_hidden_size",
    "model.num_attention_heads",
    "model.num_query_groups",
    "model.kv_channels",
    "model.num_moe_experts",
    "model.moe_router_topk",
    "model.moe_ffn_hidden_size",
    "model.moe_shared_expert_intermediate_size",
    "model.mtp_num_layers",
    "model.vocab_size",
    "model.linear_num_key_heads",
    "model.linear_num_value_heads",
    "model.mamba_num_heads",
    "model.mamba_num_groups",
    "model.make_vocab_size_divisible_by",
    "model.recompute_granularity",
    "model.recompute_method",
    "model.recompute_num_layers",
    "model.recompute_modules",
    "model.microbatch_group_size_per_vp_stage",
    "model.account_for_embedding_in_pipeline_split",
    "model.num_layers_in_first_pipeline_stage",
    "mixed_precision",
    "mixed_precision.fp8",
    "mixed_precision.fp8_recipe",
    "mixed_precision.fp4",
    "mixed_precision.fp8_param_gather",
    "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag",
    "dataset.packing_buffer_size",
    "model.calculate_per_token_loss",
    "ddp.average_in_collective",
    "model.cuda_graph_impl",
    "model.moe_token_dispatcher_type",
    "model.moe_flex_dispatcher_backend",
    "model.overlap_moe_expert_parallel_comm",
    "dataset.path",
    "dataset.data_path",
    "dataset.blend",
    "checkpoint.pretrained_checkpoint",
    "checkpoint.save",
    "checkpoint.load",
    "train.train_iters",
    "ddp.use_distributed_optimizer",
    "ddp.grad_reduce_in_fp32",
    "dataset.task_encoder.max_visual_tokens",
    "model.hybrid_layer_pattern",
    "model.pipeline_model_parallel_layout",
    "smoke.busbw_iters",
    "model.not_a_key",
    "dataset.seq_lenght",
    "train",
]


NUMBERS = [
    "0",
    "-1",
    "-7",
    "1",
    "2",
    "3",
    "4",
    "8",
    "16",
    "24",
    "72",
    "128",
    "4096",
    "131088",
    "524288",
    "1000000007",
    "99999999999",
    "1" + "0" * 40,
    str(2**63),
    "-" + "9" * 30,
]


VALUES = NUMBERS * 3 + [  # numbers most often, so that most sets get past the type checks into the rules
    "1e400",
    "1.5",
    "-0.0",
    "nan",
    "inf",
    "abc",
    "'8'",
    '"16"',
    "'abc'",
    "null",
    "true",
    "false",
    "[]",
    "[1,2]",
    "[core_attn,mlp]",
    "{a: 1}",
    "${oc.env:X}",
    "${oc.env:X,8}",
    "",
    "' '",
    "/home/me/data",
    "/lustre/fsw/data",
    "s3://bucket/x",
    "full",
    "selective",
    "uniform",
    "block",
    "flex",
    "alltoall",
    "deepep",
    "hybridep",
    "ncclep",
    "none",
    "transformer_engine",
    "bf16_mixed",
    "bf16_with_mxfp8_mixed",
    "bf16_with_nvfp4_mixed",
    "fp16_with_fp8_delayed_scaling_mixed",
    "bf16_with_fp8_subchannel_scaling_mixed",
    "e4m3",
    "mxfp8",
    "delayed",
    "blockwise",
    "M*M*|M*M*",
    "héllo",
    "1,2",
]


def _fitting(key: str) -> list:
    """Values of the key's own type (the schema's), so that most sets reach the rules."""
    from bridge_launch.spec import schema

    spec = schema.lookup(key) or {}
    if spec.get("choices"):
        return list(spec["choices"]) + ["null"] * bool(spec.get("nullable"))
    return {
        "int": NUMBERS,
        "bool": ["true", "false"],
        "float": NUMBERS + ["1.5", "1e400", "nan"],
        "list": ["[]", "[1,2]", "[core_attn,mlp]", "[/lustre/fsw/a,/home/b]"],
        "str": ["/home/me/data", "/lustre/fsw/data", "s3://bucket/x", "abc", "M*M*|M*M*"],
    }.get(spec.get("type"), VALUES)


def _quiet(fn, *args, **kw):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            return fn(*args, **kw)
        except BridgeLaunchError as exc:  # what the CLI turns into one line and exit 2
            assert "\n" not in str(exc).strip(), str(exc)
            return exc.exit_code
