"""Each validation rule: a job that breaks it is refused with one line naming the values,
and the same job with the value fixed passes."""

import os

import pytest

from bridge_launch.core.errors import UsageError
from bridge_launch.plan import rules as validate
from bridge_launch.resolve import resolver as resolve
from conftest import GOLDEN, REPO, write

RECIPE = """
name = "moe-test"
upstream = "test_pretrain_config"
mode = "pretrain"
container = "nvcr.io/nvidia/nemo:26.10"
gpus = 16
required = ["dataset.path"]

[config]
model.tensor_model_parallel_size = 2
model.pipeline_model_parallel_size = 1
model.context_parallel_size = 2
model.expert_model_parallel_size = 4
model.expert_tensor_parallel_size = 1
model.sequence_parallel = true
model.num_moe_experts = 8
dataset.seq_length = 4096
train.global_batch_size = 64
train.micro_batch_size = 2
mixed_precision = "bf16_mixed"
"""


CLUSTERS = {
    "b200-16": """
        backend = "slurm"
        gpu_type = "b200"
        gpus_per_node = 8
        nodes = 2
        job_root = "/shared/runs"
    """,
    "h100-16": """
        backend = "slurm"
        gpu_type = "h100"
        gpus_per_node = 8
        nodes = 2
        job_root = "/shared/runs"
    """,
    "a100-16": """
        backend = "slurm"
        gpu_type = "a100"
        gpus_per_node = 8
        nodes = 2
        job_root = "/shared/runs"
    """,
    "b200-any": """
        backend = "slurm"
        gpu_type = "b200"
        gpus_per_node = 8
        max_nodes = 4
        job_root = "/shared/runs"
    """,
}


@pytest.fixture
def cfg(home):
    write(home / "recipes" / "moe-test.toml", RECIPE)
    for name, text in CLUSTERS.items():
        write(home / "clusters" / f"{name}.toml", text)
    return home


def job(*overrides, cluster="b200-16", nodes=None, overlays=()):
    opts = resolve.Options(
        cluster=cluster, overrides=tuple(overrides) + ("dataset.path=/data",), nodes=nodes, overlays=tuple(overlays)
    )
    return resolve.resolve("moe-test", opts)


CASES = [
    # (overrides, cluster, nodes, expected fragment)
    (
        ["model.tensor_model_parallel_size=4", "model.context_parallel_size=3"],
        "b200-16",
        None,
        "not divisible by TP*PP*CP = 4*1*3 = 12",
    ),
    (["model.expert_model_parallel_size=32"], "b200-16", None, "not divisible by ETP*EP*PP = 1*32*1 = 32"),
    (
        ["model.expert_tensor_parallel_size=2", "model.expert_model_parallel_size=16"],
        "b200-16",
        None,
        "ETP*EP*PP = 2*16*1 = 32",
    ),
    (
        ["model.expert_model_parallel_size=16", "model.num_moe_experts=24"],
        "b200-16",
        None,
        "model.num_moe_experts=24 (job config: cli) is not divisible by EP=16",
    ),
    (
        ["train.global_batch_size=60"],
        "b200-16",
        None,
        "train.global_batch_size=60 is not divisible by train.micro_batch_size*DP = 2*4 = 8",
    ),
    (
        ["dataset.seq_length=4098", "model.seq_length=4098"],
        "b200-16",
        None,
        "dataset.seq_length = model.seq_length = 4098 is not divisible by 2*CP = 4; use a multiple of 4",
    ),
    # lcm(2*CP, TP*CP) = 4 with TP2 CP2 SP: 4100 passes (it used to be refused for not dividing by 2*CP*TP = 8)
    (["dataset.seq_length=4100", "model.seq_length=4100"], "b200-16", None, None),
    (
        ["model.tensor_model_parallel_size=4", "dataset.seq_length=4100", "model.seq_length=4100"],
        "b200-16",
        None,
        "dataset.seq_length = model.seq_length = 4100: with sequence parallelism each rank's 4100/CP tokens are split "
        "over TP=4, so the length must be a multiple of TP*CP = 8",
    ),
    (
        ["model.context_parallel_size=1", "model.sequence_parallel=false", "dataset.seq_length=4097"],
        "b200-16",
        None,
        None,
    ),
    (
        [
            "model.context_parallel_size=4",
            "model.sequence_parallel=false",
            "dataset.seq_length=4100",
            "model.seq_length=4100",
        ],
        "b200-16",
        None,
        "dataset.seq_length = model.seq_length = 4100 is not divisible by 2*CP = 8",
    ),
    (["model.tensor_model_parallel_size=1"], "b200-16", None, "model.sequence_parallel=true needs TP > 1"),
    (["mixed_precision=bf16_with_mxfp8_mixed"], "h100-16", None, "MXFP8 needs compute capability 10.x or 11.x"),
    (
        ["mixed_precision=bf16_with_nvfp4_mixed"],
        "h100-16",
        None,
        "NVFP4 needs compute capability 10.0 (Blackwell) or newer",
    ),
    (
        ["mixed_precision=bf16_with_fp8_current_scaling_mixed"],
        "a100-16",
        None,
        "FP8 (current scaling) needs compute capability 8.9 (Ada) or newer, but cluster 'a100-16' has gpu_type a100 "
        "(compute capability 8.0)",
    ),
    (["mixed_precision=bf16_with_fp8_current_scaling_mixed"], "h100-16", None, None),
    (["mixed_precision=bf16_with_mxfp8_mixed"], "b200-16", None, None),
    ([], "b200-any", 5, "5 nodes exceeds cluster 'b200-any' maximum of 4"),
    (
        ["++dataset.packing_buffer_size=8"],
        "b200-16",
        None,
        "native packing, which needs train.micro_batch_size=1 (got 2)",
    ),
    (["++dataset.packing_buffer_size=8", "train.micro_batch_size=1"], "b200-16", None, None),
]


VL_IN = ("dataset.path=/lustre/fsw/clevr2", "checkpoint.pretrained_checkpoint=/lustre/fsw/ckpt")


SHIPPED_TEST_CLUSTERS = {
    "b200-8x1": 'backend = "slurm"\ngpu_type = "b200"\ngpus_per_node = 8\nnodes = 1\njob_root = "/lustre/fsw/runs"\n'
    'container_mounts = ["/lustre/fsw:/lustre/fsw"]\n',
    "rtx-8x1": 'backend = "slurm"\ngpu_type = "rtx-pro-6000"\ngpus_per_node = 8\nnodes = 1\njob_root = '
    '"/lustre/fsw/runs"\n'
    'container_mounts = ["/lustre/fsw:/lustre/fsw"]\n',
    "a100-8x1": 'backend = "slurm"\ngpu_type = "a100"\ngpus_per_node = 8\nnodes = 1\njob_root = "/lustre/fsw/runs"\n'
    'container_mounts = ["/lustre/fsw:/lustre/fsw"]\n',
}


Q9 = ("qwen35-9b-pretrain", "gb200-8", None)


NANO = ("nemotron-3-nano-pretrain", "gb200-8", None)


VL = ("qwen35-vl-sft", "gb200-32", None)


VL8 = ("qwen35-vl-sft-mxfp8", "gb200-32", None)


REAL = ("dataset.data_path=/lustre/fsw/data/rp2_text_document",)  # no mock-data warning


# (rule id, (recipe, cluster, nodes), overrides that break it, fragment of its message, overrides that just pass)
RULE_CASES = [
    (
        "parallel-sizes",
        Q9,
        ["model.pipeline_model_parallel_size=0"],
        "model.pipeline_model_parallel_size=0: parallel sizes must be integers >= 1",
        ["model.pipeline_model_parallel_size=1"],
    ),
    (
        "parallel-sizes",
        Q9,
        ["model.tensor_model_parallel_size=-2"],
        "model.tensor_model_parallel_size=-2:",
        ["model.tensor_model_parallel_size=1"],
    ),
    (
        "parallel-sizes",
        Q9,
        ["model.context_parallel_size=0"],
        "model.context_parallel_size=0:",
        ["model.context_parallel_size=1"],
    ),
    (
        "parallel-sizes",
        Q9,
        ["model.virtual_pipeline_model_parallel_size=0"],
        "model.virtual_pipeline_model_parallel_size=0:",
        ["model.virtual_pipeline_model_parallel_size=null"],
    ),
    (
        "world-tp-pp-cp",
        Q9,
        ["model.tensor_model_parallel_size=3"],
        "not divisible by TP*PP*CP = 3*1*1 = 3",
        ["model.tensor_model_parallel_size=4"],
    ),
    (
        "world-expert",
        NANO,
        ["model.expert_model_parallel_size=16"],
        "not divisible by ETP*EP*PP = 1*16*1 = 16",
        ["model.expert_model_parallel_size=8"],
    ),
    (
        "batch-divisible",
        Q9,
        ["train.global_batch_size=24"],
        "train.global_batch_size=24 is not divisible by train.micro_batch_size*DP = 2*8 = 16",
        ["train.global_batch_size=16"],
    ),
    (
        "eval-batch-divisible",
        Q9,
        ["++validation.eval_global_batch_size=24"],
        "eval global batch 24 is not divisible by eval micro batch * eval DP = 2*8 = 16",
        ["++validation.eval_global_batch_size=32"],
    ),
    (
        "model-sizes",
        Q9,
        ["model.num_attention_heads=0"],
        "model.num_attention_heads=0 (job config: cli) must be >= 1",
        ["model.num_attention_heads=4"],
    ),
    (
        "heads-tp",
        Q9,
        ["model.tensor_model_parallel_size=4", "model.num_attention_heads=6", "model.num_query_groups=2"],
        "model.num_attention_heads=6 (job config: cli) is not a multiple of TP=4",
        ["model.tensor_model_parallel_size=4", "model.num_attention_heads=8", "model.num_query_groups=2"],
    ),
    (
        "heads-tp",
        Q9,
        ["model.tensor_model_parallel_size=8", "model.num_attention_heads=12"],
        "model.num_attention_heads=12 (job config: cli) is not a multiple of TP=8",
        ["model.tensor_model_parallel_size=4"],
    ),
    (
        "query-groups-tp",
        Q9,
        ["model.tensor_model_parallel_size=4", "model.num_query_groups=6"],
        "model.num_query_groups=6 (job config: cli) is neither a multiple nor a divisor of TP=4",
        ["model.tensor_model_parallel_size=4", "model.num_query_groups=2"],
    ),
    (
        "gdn-heads-tp-cp",
        VL,
        ["model.tensor_model_parallel_size=4", *VL_IN],
        "model.linear_num_key_heads=16 (models.toml qwen35-35b-a3b [slime]) (Gated DeltaNet key heads) is not a "
        "multiple of TP*CP = 4*8 = 32",
        [*VL_IN],
    ),
    (
        "gdn-heads-tp-cp",
        Q9,
        ["model.linear_num_value_heads=24"],
        "model.linear_num_value_heads=24 (job config: cli) (Gated DeltaNet value heads) is not a multiple of "
        "model.linear_num_key_heads=16",
        ["model.linear_num_value_heads=48"],
    ),
    (
        "mamba-heads-tp-cp",
        NANO,
        ["model.tensor_model_parallel_size=2", "model.mamba_num_groups=3"],
        "model.mamba_num_groups=3 (job config: cli) is not a multiple of TP=2",
        ["model.tensor_model_parallel_size=2", "model.mamba_num_groups=4"],
    ),
    (
        "mamba-heads-tp-cp",
        NANO,
        ["model.context_parallel_size=2", "model.mamba_num_groups=3"],
        "Mamba groups per TP rank (3 / TP 1 = 3) and CP=2: one must divide the other",
        ["model.context_parallel_size=2", "model.mamba_num_groups=4"],
    ),
    (
        "ep-needs-experts",
        Q9,
        ["model.expert_model_parallel_size=2"],
        "model.expert_model_parallel_size=2 but the model has no experts",
        ["model.expert_model_parallel_size=1"],
    ),
    (
        "experts-ep",
        ("nemotron-3-nano-pretrain", "gb200-64", 36),
        ["model.expert_model_parallel_size=72", "train.global_batch_size=2880"],
        "model.num_moe_experts=128 (models.toml nemotron-3-nano-30b-a3b [mb] [paper]) is not divisible by EP=72",
        ["model.expert_model_parallel_size=16", "train.global_batch_size=2880"],
    ),
    (
        "expert-ffn-etp",
        NANO,
        ["model.expert_model_parallel_size=1", "model.expert_tensor_parallel_size=8", "model.moe_ffn_hidden_size=1860"],
        "model.moe_ffn_hidden_size=1860 (job config: cli) (the expert FFN) is not divisible by ETP=8",
        ["model.expert_model_parallel_size=1", "model.expert_tensor_parallel_size=8"],
    ),
    (
        "sp-needs-tp",
        Q9,
        ["model.sequence_parallel=true"],
        "model.sequence_parallel=true needs TP > 1",
        ["model.sequence_parallel=true", "model.tensor_model_parallel_size=2"],
    ),
    (
        "seq-cp",
        Q9,
        ["model.context_parallel_size=2", "model.seq_length=4098", "dataset.sequence_length=4098"],
        "dataset.sequence_length = model.seq_length = 4098 is not divisible by 2*CP = 4",
        ["model.context_parallel_size=2", "model.seq_length=4100", "dataset.sequence_length=4100"],
    ),
    (
        "seq-collate-sft",
        VL,
        ["model.seq_length=131080", "dataset.seq_length=131080", *VL_IN],
        "dataset.seq_length=131080 is not divisible by the CP/SP collate padding multiple 16 (lcm of 2*CP = 16, TP*CP "
        "= 16",
        ["model.seq_length=131088", "dataset.seq_length=131088", *VL_IN],
    ),  # refused before issue 12 (2*CP*TP = 32)
    (
        "seq-sp-gpt",
        Q9,
        [
            "model.tensor_model_parallel_size=4",
            "model.context_parallel_size=2",
            "model.sequence_parallel=true",
            "model.seq_length=4100",
            "dataset.sequence_length=4100",
        ],
        "dataset.sequence_length = model.seq_length = 4100: with sequence parallelism each rank's 4100/CP tokens "
        "are split "
        "over TP=4",
        [
            "model.tensor_model_parallel_size=4",
            "model.context_parallel_size=2",
            "model.sequence_parallel=true",
            "model.seq_length=4104",
            "dataset.sequence_length=4104",
        ],
    ),
    (
        "seq-equal",
        Q9,
        ["dataset.sequence_length=8192", "model.seq_length=4096"],
        "model.seq_length=4096 and dataset.sequence_length=8192 differ",
        ["dataset.sequence_length=8192", "model.seq_length=8192"],
    ),
    (
        "vpp-needs-pp",
        Q9,
        ["model.virtual_pipeline_model_parallel_size=2"],
        "model.virtual_pipeline_model_parallel_size=2 needs model.pipeline_model_parallel_size > 1",
        ["model.virtual_pipeline_model_parallel_size=2", "model.pipeline_model_parallel_size=2"],
    ),
    (
        "layers-pp-vpp",
        Q9,
        ["model.pipeline_model_parallel_size=4", "model.num_layers=30"],
        "model.num_layers=30 (job config: cli) is not divisible by PP=4",
        ["model.pipeline_model_parallel_size=4", "model.num_layers=28"],
    ),
    (
        "layers-pp-vpp",
        Q9,
        ["model.pipeline_model_parallel_size=2", "model.virtual_pipeline_model_parallel_size=3"],
        "model.num_layers=32 (models.toml qwen35-9b [gguf] [apr]) gives 16 layers per pipeline stage, not divisible "
        "by VPP=3",
        ["model.pipeline_model_parallel_size=2", "model.virtual_pipeline_model_parallel_size=4"],
    ),
    (
        "layers-pp-vpp",
        NANO,
        ["model.expert_model_parallel_size=1", "model.pipeline_model_parallel_size=8"],
        "model.num_layers=52 (models.toml nemotron-3-nano-30b-a3b [mb]) is not divisible by PP=8",
        ["model.expert_model_parallel_size=1", "model.pipeline_model_parallel_size=4"],
    ),
    (
        "layers-pp-vpp",
        NANO,
        [
            "model.expert_model_parallel_size=1",
            "model.pipeline_model_parallel_size=2",
            "model.virtual_pipeline_model_parallel_size=2",
        ],
        "the hybrid (Mamba) model's layer pattern has no '|' stage separators",
        ["model.expert_model_parallel_size=1", "model.pipeline_model_parallel_size=2"],
    ),
    (
        "vpp-microbatches",
        Q9,
        [
            "model.pipeline_model_parallel_size=2",
            "model.virtual_pipeline_model_parallel_size=2",
            "train.global_batch_size=8",
        ],
        "interleaved pipeline: 1 microbatches per step",
        [
            "model.pipeline_model_parallel_size=2",
            "model.virtual_pipeline_model_parallel_size=2",
            "train.global_batch_size=16",
        ],
    ),
    (
        "vpp-microbatches",
        Q9,
        [
            "model.pipeline_model_parallel_size=2",
            "model.virtual_pipeline_model_parallel_size=2",
            "train.global_batch_size=24",
        ],
        "interleaved pipeline: 3 microbatches leave a last group of 1 (< PP=2)",
        [
            "model.pipeline_model_parallel_size=2",
            "model.virtual_pipeline_model_parallel_size=2",
            "train.global_batch_size=32",
        ],
    ),
    (
        "precision-gpu",
        ("qwen35-9b-pretrain", "rtx-8x1", None),
        ["mixed_precision=bf16_with_mxfp8_mixed"],
        "MXFP8 needs compute capability 10.x or 11.x",
        ["mixed_precision=bf16_with_nvfp4_mixed"],
    ),
    (
        "precision-gpu",
        ("qwen35-9b-pretrain", "a100-8x1", None),
        ["mixed_precision=bf16_with_fp8_subchannel_scaling_mixed"],
        "FP8 (block scaling) needs compute capability 9.0 (Hopper) or newer",
        ["mixed_precision=bf16_mixed"],
    ),
    ("precision-gpu", VL8, ["mixed_precision.fp8_recipe=delayed", *VL_IN], None, [*VL_IN]),  # GB200 runs every recipe
    (
        "mxfp8-param-gather",
        VL8,
        ["mixed_precision.fp8_param_gather=true", *VL_IN],
        "mixed_precision.fp8_param_gather=true with the MXFP8 recipe needs "
        "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag=true",
        ["mixed_precision.fp8_param_gather=true", "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag=true", *VL_IN],
    ),
    (
        "flex-dispatcher-gpu",
        NANO,
        ["model.moe_flex_dispatcher_backend=deepep"],
        "model.moe_flex_dispatcher_backend=deepep runs on Ampere, Hopper, B200 and B300 GPUs, not on gb200",
        ["model.moe_flex_dispatcher_backend=hybridep"],
    ),
    (
        "flex-dispatcher-gpu",
        ("nemotron-3-nano-pretrain", "rtx-8x1", None),
        [],
        "model.moe_flex_dispatcher_backend=hybridep runs on compute capability 8.x-10.x GPUs, not on rtx-pro-6000",
        ["model.moe_token_dispatcher_type=alltoall"],
    ),
    (
        "flex-dispatcher-gpu",
        ("nemotron-3-nano-pretrain", "b200-8x1", None),
        ["model.moe_flex_dispatcher_backend=hybridep"],
        None,
        ["model.moe_flex_dispatcher_backend=deepep"],
    ),  # DeepEP runs on B200
    (
        "mtp-packing",
        VL,
        ["model.mtp_num_layers=1", *VL_IN],
        "MTP (model.mtp_num_layers=1, cli) with Energon native packing",
        [*VL_IN],  # the shipped function's own mtp_num_layers=0
    ),
    (
        "mtp-a2a-overlap",
        Q9,
        ["model.overlap_moe_expert_parallel_comm=true", "model.mtp_num_layers=2"],
        "overlap_moe_expert_parallel_comm allows at most one MTP layer, the model has 2",
        ["model.overlap_moe_expert_parallel_comm=true", "model.mtp_num_layers=1"],
    ),
    (
        "packing",
        VL,
        [
            "train.micro_batch_size=2",
            "dataset.micro_batch_size=2",
            "validation.eval_micro_batch_size=2",
            "train.global_batch_size=64",
            *VL_IN,
        ],
        "dataset.packing_buffer_size=8 turns on Energon native packing, which needs train.micro_batch_size=1 (got 2)",
        [*VL_IN],
    ),
    (
        "packing",
        VL,
        ["model.cuda_graph_impl=transformer_engine", *VL_IN],
        "which needs no CUDA graphs; set model.cuda_graph_impl=none",
        ["model.cuda_graph_impl=none", *VL_IN],
    ),
    (
        "packing",
        VL,
        [
            "model.context_parallel_size=1",
            "model.calculate_per_token_loss=false",
            "model.seq_length=16384",
            "dataset.seq_length=16384",
            *VL_IN,
        ],
        # CP 1: run_recipe.py does not set it (rule runner-cp-loss-sync)
        "which needs model.calculate_per_token_loss=true",
        ["model.context_parallel_size=1", "model.seq_length=16384", "dataset.seq_length=16384", *VL_IN],
    ),
    (
        "energon-micro-batch",
        VL,
        ["dataset.micro_batch_size=2", *VL_IN],
        "dataset.micro_batch_size=2 must equal train.micro_batch_size=1 for Energon data",
        ["dataset.micro_batch_size=1", *VL_IN],
    ),
    (
        "runner-cp-loss-sync",
        VL,
        ["ddp.average_in_collective=true", *VL_IN],
        "ddp.average_in_collective=true will be replaced: run_recipe.py sets",
        ["ddp.average_in_collective=false", *VL_IN],
    ),
    (
        "train-length",
        Q9,
        ["train.train_samples=1000000"],
        "train.train_iters=300000 and train.train_samples=1000000: Megatron-Bridge takes exactly one",
        ["train.train_samples=1000000", "~train.train_iters"],
    ),
    (
        "lr-warmup",
        Q9,
        ["scheduler.lr_warmup_fraction=0.01"],
        "scheduler.lr_warmup_fraction=0.01 with scheduler.lr_warmup_iters=500: Megatron-Bridge takes one warmup",
        ["scheduler.lr_warmup_fraction=0.01", "scheduler.lr_warmup_iters=0"],
    ),
    (
        "lr-warmup",
        Q9,
        ["scheduler.lr_warmup_samples=1000"],
        "scheduler.lr_warmup_samples=1000 with scheduler.lr_warmup_iters=500: Megatron-Bridge refuses iteration- and",
        ["scheduler.lr_warmup_iters=700"],
    ),
    (
        "main-params-load",
        Q9,
        ["checkpoint.load_main_params_from_ckpt=true"],
        "checkpoint.load_main_params_from_ckpt=true loads no optimizer state",
        ["checkpoint.load_main_params_from_ckpt=true", "checkpoint.load_optim=false"],
    ),
    (
        "logger-names",
        Q9,
        ["logger.mlflow_experiment=x", "logger.comet_project=p"],
        "logger.comet_project=p turns Comet ML logging on without logger.comet_experiment_name",
        ["logger.mlflow_experiment=x", "logger.mlflow_run_name=r"],
    ),
    (
        "async-save",
        VL,
        ["checkpoint.async_save=true", "checkpoint.ckpt_format=torch", *VL_IN],
        "checkpoint.async_save=true needs checkpoint.ckpt_format torch_dist or fsdp_dtensor, not torch",
        ["checkpoint.async_save=true", *VL_IN],
    ),
    (
        "mock-data",
        Q9,
        ["dataset.data_path=null"],
        "qwen35-9b-pretrain trains on mock data (random tokens) for 300,000 steps",
        list(REAL),
    ),
    (
        "unmounted-paths",
        VL,
        ["dataset.path=/home/me/clevr2", "checkpoint.pretrained_checkpoint=/lustre/fsw/ckpt"],
        "dataset.path=/home/me/clevr2 is outside every container mount (/lustre/fsw)",
        [*VL_IN],
    ),
    (
        "relative-paths",
        VL,
        ["dataset.path=clevr2", "checkpoint.pretrained_checkpoint=/lustre/fsw/ckpt"],
        "dataset.path=clevr2 is a relative path: the job resolves it in its own working directory",
        [*VL_IN],
    ),
]


def _resolve(where, overrides):
    recipe, cluster, nodes = where
    extra = (
        ()
        if recipe != "qwen35-9b-pretrain"
        and recipe != "nemotron-3-nano-pretrain"
        or any(o.startswith("dataset.data_path") for o in overrides)
        else REAL
    )
    return resolve.resolve(recipe, resolve.Options(cluster=cluster, nodes=nodes, overrides=tuple(overrides) + extra))


def test_preflight_lines_on_gpus_golden(preflight_mod, monkeypatch):
    """GPU-only paths (no GPU here): the IMEX line and the multi-node NVLink verdict for an NVL72
    pair with channels, the same pair under enroot 3.x (no channel in the container), and H100s
    without an NVLink fabric, as the smoke workload prints them."""
    monkeypatch.delenv("NCCL_MNNVL_ENABLE", raising=False)
    reg = {
        "state": "Completed",
        "status": "Success",
        "clique_id": "7",
        "cluster_uuid": "abc",
        "uniform": True,
        "gpus": 4,
    }
    chan = {"visible": True, "channels": ["channel0"]}
    gone = {"visible": False, "channels": []}
    cases = {
        "nvl72, enroot 4": ({"n1": reg, "n2": reg}, {"n1": chan, "n2": chan}),
        "nvl72, enroot 3": ({"n1": reg, "n2": reg}, {"n1": gone, "n2": gone}),
        "nvl72, one node without channels": (
            {"n1": reg, "n2": reg},
            {"n1": chan, "n2": {"visible": True, "channels": []}},
        ),
        "h100": (
            {"n1": {"state": "N/A", "status": "N/A"}, "n2": {"state": "N/A", "status": "N/A"}},
            {"n1": gone, "n2": gone},
        ),
    }
    lines = []
    for name, (fabric, imex) in cases.items():
        status, reason = preflight_mod.mnnvl_status(fabric, 2, imex)
        lines += [f"## {name}", f"[smoke] {preflight_mod.imex_line(imex)}", f"[smoke] mnnvl={status} ({reason})"]
    text = "\n".join(lines) + "\n"
    path = GOLDEN / "preflight.gpu.txt"
    if os.environ.get("BRIDGE_LAUNCH_UPDATE_GOLDEN") or not path.exists():
        path.write_text(text)
        if not os.environ.get("BRIDGE_LAUNCH_UPDATE_GOLDEN"):
            pytest.fail(f"golden file {path.name} was missing and has been written; review and commit it")
    assert text == path.read_text(), f"{path.name} differs; if intended, rerun with BRIDGE_LAUNCH_UPDATE_GOLDEN=1"
    assert "mnnvl=likely" in lines[2] and "mnnvl=no" in lines[5] and "enroot mounts it only from 4.0" in lines[4]
    assert "IMEX daemon made none" in lines[7] and "4.0" not in lines[7]


@pytest.mark.usefixtures("cfg")
def test_baseline_is_valid():
    j = job()
    assert j.errors == [], j.errors
    assert (j.nodes, j.gpus_per_node, j.world_size) == (2, 8, 16)


@pytest.mark.usefixtures("cfg")
@pytest.mark.parametrize("overrides,cluster,nodes,fragment", CASES)
def test_rule(overrides, cluster, nodes, fragment):
    j = job(*overrides, cluster=cluster, nodes=nodes)
    if fragment is None:
        assert j.errors == []
    else:
        assert any(fragment in e for e in j.errors), j.errors
        assert all("\n" not in e for e in j.errors)


def test_gpu_count_must_match_a_fixed_size_cluster(cfg):
    write(cfg / "clusters" / "b200-8.toml", CLUSTERS["b200-16"].replace("nodes = 2", "nodes = 1"))
    j = job(cluster="b200-8")
    assert any("moe-test needs 16 GPUs (recipe) but cluster 'b200-8' has 8 (1 node x 8)" in e for e in j.errors), (
        j.errors
    )
    assert any("--cluster b200-16" in e for e in j.errors)  # names a cluster of the right size
    assert len(j.errors) == 1  # not also every rule that restates the wrong GPU count


@pytest.mark.usefixtures("cfg")
def test_nodes_flag_changes_the_gpu_count():
    j = job("train.global_batch_size=128", cluster="b200-any", nodes=4)
    assert j.errors == []
    assert j.world_size == 32 and j.provenance["job"]["nodes"] == "cli"
    assert any("32 GPUs" in w for w in j.warnings)


@pytest.mark.usefixtures("cfg")
def test_elastic_cluster_takes_node_count_from_recipe():
    j = job(cluster="b200-any")
    assert j.nodes == 2 and j.provenance["job"]["nodes"] == "recipe"


def test_overlay_changes_the_gpu_count(cfg):
    write(
        cfg / "recipes" / "overlays" / "wide.toml",
        """
        gpus = 32
        [config]
        train.global_batch_size = 128
    """,
    )
    assert any("needs 32 GPUs (overlay:wide)" in e for e in job(overlays=["wide"]).errors)
    j = job(cluster="b200-any", overlays=["wide"])
    assert j.errors == [] and j.nodes == 4


@pytest.mark.usefixtures("cfg")
def test_required_inputs_warn_in_dry_run_and_fail_submit():
    opts = resolve.Options(cluster="b200-16")
    dry = resolve.resolve("moe-test", opts)
    assert dry.missing_inputs == ["dataset.path"]
    assert any("required input dataset.path is not set" in w for w in dry.warnings) and dry.errors == []
    # the submit gets the same job, and refuses it on the finding that blocks it
    assert resolve.resolve("moe-test", opts) == dry
    assert any("required input dataset.path is not set" in e for e in dry.refusals)


@pytest.mark.usefixtures("cfg")
def test_interpolated_values_skip_numeric_rules():
    j = job("train.global_batch_size=${oc.env:GBS}")
    assert j.errors == []
    assert j.args[list(j.config).index("train.global_batch_size")] == "train.global_batch_size=${oc.env:GBS}"


def test_bad_profile_value_is_one_line(cfg):
    write(cfg / "clusters" / "broken.toml", 'backend = "slurm"\ngpus_per_node = "four"\n')
    with pytest.raises(UsageError) as exc:
        job(cluster="broken")
    assert "'gpus_per_node' must be int" in str(exc.value) and "\n" not in str(exc.value)


@pytest.fixture
def test_clusters(home):
    for name, text in SHIPPED_TEST_CLUSTERS.items():
        write(home / "clusters" / f"{name}.toml", text)
    return home


@pytest.mark.usefixtures("test_clusters")
@pytest.mark.parametrize(
    "rule_id,where,bad,fragment,good", RULE_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(RULE_CASES)]
)
def test_megatron_rule_breaks_and_just_passes(rule_id, where, bad, fragment, good):
    rule = next(r for r in validate.RULES if r.id == rule_id)
    broken = _resolve(where, bad)
    own = rule.fn(validate.context(broken))
    if fragment is None:
        assert own == [], own
    else:
        assert any(fragment in m for m in own), own
        assert all("\n" not in m for m in own)
        assert any(fragment in m for m in (broken.errors if rule.level == "error" else broken.warnings))
    passing = _resolve(where, good)
    assert rule.fn(validate.context(passing)) == []
    assert passing.errors == [], passing.errors  # the passing job is valid as a whole


def test_every_rule_has_a_breaking_and_a_passing_job():
    covered = {c[0] for c in RULE_CASES if c[3] is not None}
    assert covered == {r.id for r in validate.RULES}


def test_rules_cite_their_source_lines():
    for r in validate.RULES:
        assert r.source and (":" in r.source or "mounts" in r.source), r.id


def test_every_rule_is_in_the_rule_table():
    doc = (REPO / "docs" / "validation_rules.md").read_text()
    for r in validate.RULES:
        row = next((line for line in doc.splitlines() if line.startswith(f"| `{r.id}` |")), None)
        assert row, f"docs/validation_rules.md has no row for rule {r.id}"
        assert r.level in row, (r.id, r.level)


@pytest.mark.usefixtures("test_clusters")
def test_issue_12_examples():
    # 72 does not divide the model's 128 experts though the recipe sets no model.num_moe_experts
    j = _resolve(
        ("nemotron-3-nano-pretrain", "gb200-64", 36),
        ["model.expert_model_parallel_size=72", "train.global_batch_size=2880"],
    )
    assert "model.num_moe_experts" not in j.config and any("is not divisible by EP=72" in e for e in j.errors)
    assert any(
        "--nodes 36 overrides the fixed size of cluster 'gb200-64' (16 nodes, 64 GPUs): this job asks for "
        "144 GPUs (36 x 4)" in w
        for w in j.warnings
    )
    # a 524288-token VL job does not fit; --no-memory-check makes it a warning
    over = ("model.seq_length=524288", "dataset.seq_length=524288", *VL_IN)
    j = resolve.resolve("qwen35-vl-sft", resolve.Options(cluster="gb200-32", overrides=over))
    mem = [e for e in j.errors if e.startswith("memory: about 262 of 186 GiB per GPU")]
    assert len(mem) == 1 and "would fit: model.recompute_granularity=full" in mem[0], j.errors
    j = resolve.resolve("qwen35-vl-sft", resolve.Options(cluster="gb200-32", overrides=over, memory_check=False))
    assert j.errors == [] and any(w.startswith("memory: about 262") and "--no-memory-check" in w for w in j.warnings)
    # parallel sizes of 0 are one line each, not a ZeroDivisionError
    for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size"):
        j = _resolve(Q9, [f"model.{key}=0"])
        assert j.errors == [
            f"model.{key}=0: parallel sizes must be integers >= 1 (Megatron divides the world size by "
            f"them); use 1 to turn this parallelism off"
        ]


@pytest.mark.usefixtures("test_clusters")
def test_interpolated_model_values_skip_the_model_rules():
    j = _resolve(NANO, ["model.expert_model_parallel_size=8", "model.num_moe_experts=${oc.env:EXPERTS}"])
    assert j.errors == []
    facts = validate.context(j).facts
    assert facts.get("moe.num_experts") is None and "interpolation" in facts.source("moe.num_experts")


@pytest.mark.usefixtures("test_clusters")
def test_home_is_covered_when_pyxis_mounts_it(home):
    write(home / "clusters" / "with-home.toml", 'extends = "gb200-32"\n[slurm]\nsrun_args = ["--container-writable"]\n')
    inside = os.path.join(os.path.expanduser("~"), "clevr2")
    j = resolve.resolve(
        "qwen35-vl-sft",
        resolve.Options(
            cluster="with-home",
            overrides=(f"dataset.path={inside}", "checkpoint.pretrained_checkpoint=/lustre/fsw/ckpt"),
        ),
    )
    assert not any("outside every container mount" in w for w in j.warnings)
    j = resolve.resolve(
        "qwen35-vl-sft",
        resolve.Options(
            cluster="gb200-32",
            overrides=(f"dataset.path={inside}", "checkpoint.pretrained_checkpoint=/lustre/fsw/ckpt"),
        ),
    )
    assert any(f"dataset.path={inside} is outside every container mount" in w for w in j.warnings)


@pytest.mark.usefixtures("home")
def test_bare_processes_see_every_path():
    j = resolve.resolve(
        "smoke", resolve.Options(cluster="local", overrides=("++checkpoint.pretrained_checkpoint=/nowhere",))
    )
    assert not any("container mount" in w for w in j.warnings)
