"""Each validation rule: a job that breaks it is refused with one line naming the values,
and the same job with the value fixed passes."""

import pytest
from conftest import write

from bridge_launch import resolve
from bridge_launch.errors import UsageError

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


def job(*overrides, cluster="b200-16", nodes=None, overlays=(), submit=False):
    opts = resolve.Options(cluster=cluster, overrides=tuple(overrides) + ("dataset.path=/data",), nodes=nodes,
                           overlays=tuple(overlays))
    return resolve.resolve("moe-test", opts, for_submit=submit)


def test_baseline_is_valid(cfg):
    j = job()
    assert j.errors == [], j.errors
    assert (j.nodes, j.gpus_per_node, j.world_size) == (2, 8, 16)


CASES = [
    # (overrides, cluster, nodes, expected fragment)
    (["model.tensor_model_parallel_size=4", "model.context_parallel_size=3"], "b200-16", None,
     "not divisible by TP*PP*CP = 4*1*3 = 12"),
    (["model.expert_model_parallel_size=32"], "b200-16", None, "not divisible by ETP*EP*PP = 1*32*1 = 32"),
    (["model.expert_tensor_parallel_size=2", "model.expert_model_parallel_size=16"], "b200-16", None,
     "ETP*EP*PP = 2*16*1 = 32"),
    (["model.expert_model_parallel_size=16", "model.num_moe_experts=24"], "b200-16", None,
     "model.num_moe_experts=24 is not divisible by EP=16"),
    (["train.global_batch_size=60"], "b200-16", None, "train.global_batch_size=60 is not divisible by train.micro_batch_size*DP = 2*4 = 8"),
    (["dataset.seq_length=4100"], "b200-16", None, "dataset.seq_length=4100 is not divisible by 8 (2*CP=4 and TP=2 (sequence parallel))"),
    (["model.context_parallel_size=1", "model.sequence_parallel=false", "dataset.seq_length=4097"], "b200-16", None, None),
    (["model.context_parallel_size=4", "model.sequence_parallel=false", "dataset.seq_length=4100"], "b200-16", None,
     "dataset.seq_length=4100 is not divisible by 8 (2*CP=8)"),
    (["model.tensor_model_parallel_size=1"], "b200-16", None, "model.sequence_parallel=true needs TP > 1"),
    (["mixed_precision=bf16_with_mxfp8_mixed"], "h100-16", None, "MXFP8 needs a Blackwell GPU"),
    (["mixed_precision=bf16_with_nvfp4_mixed"], "h100-16", None, "NVFP4 needs a Blackwell GPU"),
    (["mixed_precision=bf16_with_fp8_current_scaling_mixed"], "a100-16", None, "FP8 needs a Hopper GPU"),
    (["mixed_precision=bf16_with_fp8_current_scaling_mixed"], "h100-16", None, None),
    (["mixed_precision=bf16_with_mxfp8_mixed"], "b200-16", None, None),
    ([], "b200-any", 5, "5 nodes exceeds cluster 'b200-any' maximum of 4"),
    (["++dataset.packing_buffer_size=8"], "b200-16", None, "native packing, which needs train.micro_batch_size=1 (got 2)"),
    (["++dataset.packing_buffer_size=8", "train.micro_batch_size=1"], "b200-16", None, None),
]


@pytest.mark.parametrize("overrides,cluster,nodes,fragment", CASES)
def test_rule(cfg, overrides, cluster, nodes, fragment):
    j = job(*overrides, cluster=cluster, nodes=nodes)
    if fragment is None:
        assert j.errors == []
    else:
        assert any(fragment in e for e in j.errors), j.errors
        assert all("\n" not in e for e in j.errors)


def test_gpu_count_must_match_a_fixed_size_cluster(cfg):
    write(cfg / "clusters" / "b200-8.toml", CLUSTERS["b200-16"].replace("nodes = 2", "nodes = 1"))
    j = job(cluster="b200-8")
    assert any("moe-test needs 16 GPUs (recipe) but cluster 'b200-8' has 8 (1 node x 8)" in e for e in j.errors), j.errors
    assert any("--cluster b200-16" in e for e in j.errors)  # names a cluster of the right size
    assert len(j.errors) == 1  # not also every rule that restates the wrong GPU count


def test_nodes_flag_changes_the_gpu_count(cfg):
    j = job("train.global_batch_size=128", cluster="b200-any", nodes=4)
    assert j.errors == []
    assert j.world_size == 32 and j.provenance["job"]["nodes"] == "cli"
    assert any("32 GPUs" in w for w in j.warnings)


def test_elastic_cluster_takes_node_count_from_recipe(cfg):
    j = job(cluster="b200-any")
    assert j.nodes == 2 and j.provenance["job"]["nodes"] == "recipe"


def test_overlay_changes_the_gpu_count(cfg):
    write(cfg / "recipes" / "overlays" / "wide.toml", """
        gpus = 32
        [config]
        train.global_batch_size = 128
    """)
    assert any("needs 32 GPUs (overlay:wide)" in e for e in job(overlays=["wide"]).errors)
    j = job(cluster="b200-any", overlays=["wide"])
    assert j.errors == [] and j.nodes == 4


def test_required_inputs_warn_in_dry_run_and_fail_submit(cfg):
    opts = resolve.Options(cluster="b200-16")
    dry = resolve.resolve("moe-test", opts)
    assert dry.missing_inputs == ["dataset.path"]
    assert any("required input dataset.path is not set" in w for w in dry.warnings) and dry.errors == []
    sub = resolve.resolve("moe-test", opts, for_submit=True)
    assert any("required input dataset.path is not set" in e for e in sub.errors)


def test_interpolated_values_skip_numeric_rules(cfg):
    j = job("train.global_batch_size=${oc.env:GBS}")
    assert j.errors == []
    assert j.args[list(j.config).index("train.global_batch_size")] == "train.global_batch_size=${oc.env:GBS}"


def test_bad_profile_value_is_one_line(cfg):
    write(cfg / "clusters" / "broken.toml", 'backend = "slurm"\ngpus_per_node = "four"\n')
    with pytest.raises(UsageError) as exc:
        job(cluster="broken")
    assert "'gpus_per_node' must be int" in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("text,seconds", [("30", 1800), ("01:30", 90), ("04:00:00", 14400), ("1-2", 93600),
                                          ("1-02:30", 95400), ("1-00:00:01", 86401), ("UNLIMITED", None)])
def test_slurm_time_formats(text, seconds):
    assert resolve.slurm_time_seconds(text) == seconds


@pytest.mark.parametrize("text", ["4h", "1:2:3:4", "-5", "", "1-"])
def test_bad_slurm_times(text):
    with pytest.raises(ValueError):
        resolve.slurm_time_seconds(text)
