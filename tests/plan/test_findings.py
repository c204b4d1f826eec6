"""plan's findings at submit: memory above the GPU is an error (with what would fit), TP across
nodes and EP across NVLink domains are warnings, in --dry-run and at submit alike; and plan
(megatron-core's rank groups) and submit (topology.py's arithmetic) never disagree on a job."""

import itertools

import pytest

from bridge_launch.core.errors import UsageError
from bridge_launch.plan import estimate as plan
from bridge_launch.plan import findings as preflight
from bridge_launch.plan import report, topology
from bridge_launch.resolve import resolver as resolve

pytest.importorskip("megatron.core")


VL_IN = ("dataset.path=/lustre/fsw/clevr2", "checkpoint.pretrained_checkpoint=/lustre/fsw/ckpt")


JOBS = [  # (recipe, cluster, nodes, base overrides)
    ("qwen35-vl-sft", "gb200-32", None, VL_IN),
    ("qwen35-vl-sft-mxfp8", "gb200-32", None, VL_IN),
    ("qwen35-vl-sft", "gb200-nvl72", 18, VL_IN),
    ("qwen35-9b-pretrain", "gb200-8", None, ()),
    ("qwen35-35b-a3b-pretrain", "gb200-8", None, ()),
    ("qwen35-35b-a3b-pretrain", "gb200-nvl72", 36, ("train.global_batch_size=576",)),
    ("nemotron-3-nano-pretrain", "gb200-64", None, ("train.global_batch_size=512",)),
    ("nemotron-3-nano-pretrain", "gb200-nvl72", 36, ("train.global_batch_size=2880",)),
    ("smoke", "local", None, ()),
]


VARIANTS = [
    (),
    ("model.tensor_model_parallel_size=8",),
    ("model.tensor_model_parallel_size=4",),
    ("model.expert_model_parallel_size=16",),
    ("model.expert_model_parallel_size=32",),
    ("model.expert_model_parallel_size=144",),
    ("train.micro_batch_size=8",),
    ("model.seq_length=524288", "dataset.seq_length=524288"),
    ("model.context_parallel_size=2",),
    ("model.pipeline_model_parallel_size=2",),
    ("model.recompute_granularity=full", "model.recompute_method=uniform", "model.recompute_num_layers=1"),
    ("model.moe_token_dispatcher_type=alltoall",),
]


def _pairs():
    for (recipe, cluster, nodes, base), extra in itertools.product(JOBS, VARIANTS):
        if recipe == "smoke" and extra:
            continue
        yield pytest.param(
            recipe, cluster, nodes, base + extra, id=f"{recipe}-{cluster}-{nodes}-{'-'.join(extra) or 'as-is'}"
        )


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize("recipe,cluster,nodes,overrides", list(_pairs()))
def test_plan_and_submit_never_disagree(recipe, cluster, nodes, overrides):
    try:
        job = resolve.resolve(recipe, resolve.Options(cluster=cluster, nodes=nodes, overrides=overrides))
    except UsageError:
        return  # an override this recipe does not take: refused the same way by both commands
    try:
        result = report.plan(job)
    except UsageError:
        assert job.errors, "plan refused a job that submit would accept"
        return
    # plan reports what submit reports ...
    assert result["errors"] == job.errors and result["warnings"] == job.warnings
    # ... and its own findings on megatron-core's groups are the ones submit computed with the arithmetic
    groups, _ = plan.rank_groups(topology.parallel_of(job))
    theirs = preflight.findings(job, groups=groups)
    ours = preflight.findings(job)
    for key in ("errors", "warnings", "notes", "spans", "domains", "memory"):
        assert theirs[key] == ours[key], key
    if not any("GPUs (recipe) but cluster" in e or "GPUs (overlay" in e for e in job.errors):  # resolve ran them
        assert set(ours["errors"]) <= set(job.errors) and set(ours["warnings"]) <= set(job.warnings)
    assert result["memory"] == ours["memory"] and result["spans"] == ours["spans"]


def test_memory_above_the_gpu_is_an_error_in_dry_run_and_submit(cli):
    args = ("submit", "qwen35-vl-sft", "-c", "gb200-32", "model.seq_length=524288", "dataset.seq_length=524288", *VL_IN)
    for extra in (("--dry-run",), ()):  # submit stops before anything is sent (exit 2)
        r = cli(*args, *extra)
        assert r.code == 2, r.err
        line = r.err.strip().splitlines()
        assert line == [ln for ln in line if ln.startswith("bridge-launch: error: ")]
        assert any(
            "memory: about 262 of 186 GiB per GPU (141%)" in ln
            and "would fit: " in ln
            and "--no-memory-check submits anyway" in ln
            for ln in line
        ), r.err
    r = cli(*args, "--dry-run", "--no-memory-check")
    assert r.code == 0, r.err
    assert "memory: about 262 of 186 GiB per GPU (141%)" in r.out and "(--no-memory-check: submitting anyway)" in r.out
    d = cli(*args, "--dry-run", "--no-memory-check", "-o", "json").json()
    assert d["errors"] == [] and d["provenance"]["job"]["memory_check"] == "off (--no-memory-check)"


def test_placement_warnings_in_dry_run(cli):
    r = cli("submit", "qwen35-9b-pretrain", "-c", "gb200-8", "model.tensor_model_parallel_size=8", "--dry-run")
    assert r.code == 0, r.err
    assert "! TP groups of 8 span 2 nodes (ranks 0-7 on nodes 0-1) but a node has 4 GPUs" in r.out
    r = cli(
        "submit",
        "qwen35-35b-a3b-pretrain",
        "-c",
        "gb200-nvl72",
        "--nodes",
        "36",
        "--dry-run",
        "model.expert_model_parallel_size=16",
        "train.global_batch_size=576",
    )
    assert r.code == 0, r.err
    # Megatron-Bridge's rule gives 36 nodes a segment of 18, which puts EP ranks 64-79 (nodes 16-19)
    # across two racks; the segment rule picks 12, a multiple of the 4 nodes an EP group spans
    assert "#SBATCH --segment=12" in r.out and "cross NVLink domains" not in r.out


@pytest.mark.usefixtures("home")
def test_memory_between_90_and_100_percent_warns():
    # qwen35-9b on 8 GB200 at micro batch 4 (half of the micro batch that does not fit)
    job = resolve.resolve(
        "qwen35-9b-pretrain",
        resolve.Options(cluster="gb200-8", overrides=("train.micro_batch_size=4", "train.global_batch_size=128")),
    )
    mem = report.plan(job)["memory"]
    assert 0.9 < mem["fraction"] <= 1, f"the estimate moved ({mem['fraction']:.0%}): pick a job between 90% and 100%"
    assert job.errors == [] and any(w.startswith("memory: about") and "is above 90%" in w for w in job.warnings)


@pytest.mark.usefixtures("home")
def test_resume_keeps_no_memory_check():
    over = ("model.seq_length=524288", "dataset.seq_length=524288", *VL_IN)
    job = resolve.resolve("qwen35-vl-sft", resolve.Options(cluster="gb200-32", overrides=over, memory_check=False))
    assert job.errors == []
    again = resolve.amend(job, ("train.train_iters=10",))
    assert again.errors == [] and any("--no-memory-check" in w for w in again.warnings)
    strict = resolve.resolve("qwen35-vl-sft", resolve.Options(cluster="gb200-32", overrides=over))
    assert any(
        e.startswith("memory:")
        for e in resolve.amend(strict.__class__.from_dict({**strict.to_dict(), "findings": []}), ()).errors
    )


def test_a_relative_data_path_is_warned_about(cli):
    r = cli("submit", "smoke", "dataset.path=clevr2", "--dry-run")
    assert r.code == 0 and "dataset.path=clevr2 is a relative path" in r.out + r.err, r.out + r.err
    r = cli("submit", "smoke", "dataset.path=/data/clevr2", "--dry-run")
    assert "is a relative path" not in r.out + r.err
