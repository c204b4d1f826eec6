"""topology.py places the rank groups with plain arithmetic (the --dry-run path cannot import
megatron-core); here it is held equal to megatron-core's own RankGenerator over many layouts,
and the arithmetic path is shown to import neither megatron nor torch."""

import dataclasses
import itertools
import json
import subprocess
import sys
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge_launch.backends.slurm import topology_plugin as slurm_topology
from bridge_launch.core.errors import UsageError
from bridge_launch.plan import estimate as plan
from bridge_launch.plan import report, topology
from conftest import run_cli
from launch_jobs import _job
from plan_jobs import job, par

pytest.importorskip("megatron.core")


# every dense layout (EP 1) and expert layout (CP 1) of up to 64 ranks with sizes from {1, 2, 3, 4, 8}
SIZES = (1, 2, 3, 4, 8)


LAYOUTS = [
    (tp, ep, dp, pp, cp)
    for tp, ep, dp, pp, cp in itertools.product(SIZES, repeat=5)
    if (ep == 1 or cp == 1) and tp * ep * dp * pp * cp <= 64
]


@pytest.mark.usefixtures("home")
def test_nvlink_spans_come_from_plan():
    job = _job("qwen35-vl-sft", "gb200-32", "dataset.path=/d", "checkpoint.pretrained_checkpoint=/c")
    assert slurm_topology.nvlink_spans(job) == [{"label": "EP (HybridEP)", "size": 16, "nodes": 4}]
    assert slurm_topology.nvlink_spans(_job("smoke", "gb200-8")) == []


def test_groups_tp2_cp2_world8():
    g, source = plan.rank_groups(par(8, tp=2, cp=2))
    assert g["tp"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert g["cp"] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert g["dp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert g["dp_cp"] == [[0, 2, 4, 6], [1, 3, 5, 7]]  # the distributed optimizer's dense group
    assert g["pp"] == [[r] for r in range(8)]
    assert source.startswith("megatron-core ") and "RankGenerator" in source


def test_groups_tp2_pp2_world8():
    # Megatron's own docstring example scaled down: TP pairs, DP strides over TP, PP over TP*DP.
    g, _ = plan.rank_groups(par(8, tp=2, pp=2))
    assert g["tp"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert g["dp"] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert g["pp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_expert_groups_ep4_etp1_world8():
    g, _ = plan.rank_groups(par(8, tp=2, ep=4, etp=1))
    assert g["ep"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert g["etp"] == [[r] for r in range(8)]
    assert g["edp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_expert_groups_ep2_etp2_world8():
    g, _ = plan.rank_groups(par(8, tp=2, ep=2, etp=2))
    assert g["etp"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert g["ep"] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert g["edp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_spans_count_nodes_and_domains():
    groups = {"x": [[0, 1, 2, 3, 4, 5, 6, 7]], "y": [[0, 1], [2, 3]]}
    s = topology.spans(groups, gpus_per_node=4, domain_nodes=1)
    assert s["x"]["max_nodes"] == 2 and s["x"]["crosses_nodes"] and s["x"]["crosses_domains"]
    assert s["x"]["widest"]["ranks"] == "0-7"
    assert s["y"]["max_nodes"] == 1 and not s["y"]["crosses_nodes"]
    assert not topology.spans(groups, gpus_per_node=4, domain_nodes=2)["x"]["crosses_domains"]


@pytest.mark.usefixtures("home")
def test_vl_sft_on_gb200_32_stays_inside_nodes_and_one_domain():
    j = job(
        "qwen35-vl-sft",
        "gb200-32",
        "dataset.path=/lustre/fsw/clevr2",
        "checkpoint.pretrained_checkpoint=/lustre/fsw/ckpt",
    )
    result = report.plan(j)
    assert result["parallel"] == {
        "tp": 2,
        "pp": 1,
        "cp": 8,
        "ep": 16,
        "etp": 1,
        "dp": 2,
        "edp": 2,
        "vpp": None,
        "sp": True,
    }
    assert result["world_size"] == 32 and result["nodes"] == 8
    assert result["spans"]["tp"]["max_nodes"] == 1 and not result["spans"]["tp"]["crosses_nodes"]
    assert result["spans"]["ep"]["max_nodes"] == 4  # 16 ranks on 4-GPU nodes
    # the NVLink-bound groups stay inside a segment; data and context parallel traffic may cross
    assert not any(result["spans"][k]["crosses_domains"] for k in ("tp", "etp", "ep"))
    # Megatron-Bridge's rule: a job that fits one 18-node domain stays in it (data-parallel collectives on
    # NVLink); --segment-size smallest: an EP group's 4 nodes, not forced into one rack
    assert result["segment"] == 8 == topology.segment_of(j)
    assert topology.segment_of(dataclasses.replace(j, scheduler={**j.scheduler, "segment_size": "smallest"})) == 4
    assert result["domains"]["hybrid_ep"] and result["domains"]["segment_requested"]
    assert result["groups"]["ep"] == [list(range(16)), list(range(16, 32))]
    # no placement warning, and none of Megatron-Bridge's MTP-with-packing rule: the shipped function
    # turns MTP off (mtp_num_layers 0), the one it would warn of; the recipe says where that differs
    # from the seed's run (seed_differences)
    seed = [w for w in result["warnings"] if " differs from the seed's run: " in w]
    assert len(seed) == 2 and [w for w in result["warnings"] if w not in seed] == []
    assert result["errors"] == []
    json.dumps(result)  # JSON-able as --output json prints it
    text = report.render_text(result)
    assert "segment 8 nodes" in text and "HybridEP" in text and "warning: TP" not in text and "error" not in text


@pytest.mark.usefixtures("home")
def test_tp_across_nodes_warns():
    # TP8 on 4-GPU nodes (16 heads, 4 query groups and 16 GDN key heads all allow TP8)
    result = report.plan(job("qwen35-9b-pretrain", "gb200-8", "model.tensor_model_parallel_size=8"))
    assert result["spans"]["tp"]["max_nodes"] == 2
    assert any(w.startswith("TP groups of 8 span 2 nodes") for w in result["warnings"])
    assert "warning: TP groups of 8" in report.render_text(result)


@pytest.mark.usefixtures("home")
def test_hybrid_ep_groups_get_a_segment_that_keeps_them_inside_a_domain():
    # 36 GB200 nodes are two 18-node NVLink domains; EP16 groups cover 4 nodes. Megatron-Bridge's
    # rule (18) would put the group on nodes 16-19 across the boundary; 12 is a multiple of 4.
    j = job(
        "qwen35-35b-a3b-pretrain",
        "gb200-nvl72",
        "model.expert_model_parallel_size=16",
        "train.global_batch_size=576",
        nodes=36,
    )
    result = report.plan(j)
    assert topology.segment_size(36, 18) == 18 and result["segment"] == 12 == topology.segment_of(j)
    assert not result["spans"]["ep"]["crosses_domains"] and result["spans"]["ep"]["max_domains"] == 1
    assert not [w for w in result["warnings"] if "cross NVLink domains" in w] and j.errors == []


@pytest.mark.usefixtures("home")
def test_ep_wider_than_a_domain_has_no_segment_fix():
    result = report.plan(
        job(
            "qwen35-35b-a3b-pretrain",
            "gb200-nvl72",
            "model.expert_model_parallel_size=144",
            "train.global_batch_size=576",
            nodes=36,
        )
    )
    assert any(
        "a group of 144 ranks needs 36 nodes, more than one 18-node NVLink domain; keep EP <= 72" in w
        for w in result["warnings"]
    )


@pytest.mark.usefixtures("home")
def test_ep_without_hybridep_may_cross_domains():
    result = report.plan(
        job(
            "qwen35-35b-a3b-pretrain",
            "gb200-nvl72",
            "model.expert_model_parallel_size=16",
            "train.global_batch_size=576",
            "model.moe_token_dispatcher_type=alltoall",
            nodes=36,
        )
    )
    assert not result["domains"]["hybrid_ep"]
    assert not any("EP" in w for w in result["warnings"])


def _generator():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.parallel_state import RankGenerator
    return RankGenerator


TOKENS = ("tp", "cp", "ep", "dp", "pp", "tp-cp", "dp-cp", "tp-dp", "tp-pp", "tp-cp-ep-dp-pp", "cp-dp-pp", "ep-dp")


def _compare(tp, ep, dp, pp, cp, order=topology.ORDER):
    RankGenerator = _generator()
    theirs = RankGenerator(tp=tp, ep=ep, dp=dp, pp=pp, cp=cp, order=order)
    for token in TOKENS:
        assert topology.generator_groups(tp, ep, dp, pp, cp, token, order) == theirs.get_ranks(token), (
            tp,
            ep,
            dp,
            pp,
            cp,
            token,
        )


def test_arithmetic_equals_rank_generator_on_the_whole_grid():
    for layout in LAYOUTS:
        _compare(*layout)
    assert len(LAYOUTS) > 500


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 16),
    st.integers(1, 16),
    st.integers(1, 16),
    st.integers(1, 8),
    st.integers(1, 16),
    st.booleans(),
    st.sampled_from(["tp-cp-ep-dp-pp", "tp-dp-pp", "tp-pp-dp", "tp-cp-ep-pp-dp"]),
)
def test_arithmetic_equals_rank_generator_random(tp, ep, dp, pp, cp, expert, order):
    if expert:
        cp = 1
    else:
        ep = 1
    if tp * ep * dp * pp * cp > 4096 or (("cp" not in order and cp > 1) or ("ep" not in order and ep > 1)):
        return
    _compare(tp, ep, dp, pp, cp, order)


def test_rank_groups_of_a_job_layout_match_plans_megatron_groups():
    for world, tp, pp, cp, ep, etp in [
        (32, 2, 1, 8, 16, 1),
        (144, 1, 1, 1, 16, 1),
        (64, 2, 2, 2, 4, 2),
        (2304, 4, 4, 2, 64, 1),
    ]:
        layout = par(world, tp, pp, cp, ep, etp)
        assert topology.rank_groups(layout) == plan.rank_groups(layout)[0]


@pytest.mark.usefixtures("home")
def test_the_arithmetic_path_imports_no_megatron_or_torch():
    code = (
        "import sys; from bridge_launch.resolve import resolver as resolve; "
        "j = resolve.resolve('qwen35-vl-sft', resolve.Options(cluster='gb200-32')); "
        "from bridge_launch import backends; backends.render(j); "
        "assert j.errors == [], j.errors; "
        "print(sorted(m for m in ('megatron', 'megatron.core', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


SHIPPED = (
    ("qwen35-vl-sft", ("dataset.path=/lustre/fsw/clevr2", "checkpoint.pretrained_checkpoint=/lustre/fsw/ckpt")),
    ("qwen35-vl-sft-mxfp8", ("dataset.path=/lustre/fsw/clevr2", "checkpoint.pretrained_checkpoint=/lustre/fsw/ckpt")),
    ("qwen35-35b-a3b-pretrain", ()),
    ("nemotron-3-nano-pretrain", ()),
    ("qwen35-9b-pretrain", ()),
)


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize("recipe,overrides", SHIPPED, ids=[r for r, _ in SHIPPED])
def test_the_segment_rule_over_1_to_72_nodes_keeps_every_nvlink_group_in_a_rack(recipe, overrides):
    """For each shipped recipe's parallel sizes and every node count 1-72 with a rank layout: the
    segment divides the nodes, fits an 18-node domain and holds every NVLink-bound group whole; it is
    the largest such (at or below 18 nodes all of them, Megatron-Bridge's rule), and with
    segment_size "smallest" the smallest (a job whose groups span 2 nodes is not forced into one
    rack). Checked against the groups themselves, rank by rank."""
    base = job(recipe, "gb200-nvl72", *overrides)
    gpn, checked, spread = base.gpus_per_node, 0, 0
    for n in range(1, 73):
        j = dataclasses.replace(base, nodes=n, world_size=n * gpn)
        try:
            p = topology.parallel_of(j)
        except UsageError:  # no rank layout on this many GPUs
            continue
        groups = topology.rank_groups(p)
        critical = topology.nvlink_bound(j, p)
        seg = topology.segment_of(j)
        if n == 1:
            assert seg is None
            continue
        assert n % seg == 0 and seg <= 18, (n, seg)
        for k in critical:  # every group inside one segment: the ranks' nodes // seg agree
            for g in groups[k]:
                assert len({(r // gpn) // seg for r in g}) == 1, (recipe, n, seg, k, g)
        fits = [
            d
            for d in range(1, min(18, n) + 1)
            if n % d == 0 and all(topology._fits(groups[k], gpn, d) for k in critical)
        ]
        assert seg == max(fits), (n, seg, fits)  # Megatron-Bridge's rule: n itself when n <= 18
        assert seg == n or n > 18, (n, seg)
        smallest = topology.segment_of(dataclasses.replace(j, scheduler={**j.scheduler, "segment_size": "smallest"}))
        assert smallest == min(fits), (n, smallest, fits)
        spread += n <= 18 and smallest < n
        checked += 1
    assert checked >= 4 and spread >= 1


def test_no_segment_that_keeps_the_groups_whole_is_refused_with_what_works(home):
    """EP16 under HybridEP spans 4 nodes; in 2-node NVLink domains no segment holds a group:
    refused, with the EP size that fits a domain (node counts do not help here)."""
    (home / "clusters" / "nvl8.toml").write_text('extends = "gb200-nvl72"\nnvlink_domain_nodes = 2\n')
    wide = ("model.expert_model_parallel_size=16", "train.global_batch_size=576")
    j = job("qwen35-35b-a3b-pretrain", "nvl8", *wide, nodes=8)
    (err,) = [e for e in j.errors if e.startswith("no segment of <= 2 nodes that divides 8")]
    assert "keeps every EP (HybridEP) group (16 ranks over 4 nodes) inside one NVLink domain" in err
    assert err.endswith("no node count does: keep EP <= 8 (2 nodes x 4 GPUs)")
    ok = job("qwen35-35b-a3b-pretrain", "nvl8", "model.expert_model_parallel_size=8", wide[1], nodes=8)
    assert not [e for e in ok.errors if e.startswith("no segment")] and topology.segment_of(ok) == 2
    r = run_cli("submit", "qwen35-35b-a3b-pretrain", "-c", "nvl8", "-N", "8", *wide, "--dry-run")
    assert r.code == 2 and "no segment of <= 2 nodes" in r.err and "Traceback" not in r.err


def test_the_segment_choice_is_the_profiles_or_the_command_lines_and_the_dry_run_says_what_it_costs(home):
    """issue 38: the 8-node VL SFT gets one NVLink domain by default (Megatron-Bridge's rule, was 4);
    `--segment-size smallest` or the profile's [slurm] segment_size gives the segments of its EP
    groups; the dry run's Placement line says which, why, and what the other choice would give; a
    bad value is one line and exit 2, on the command line and in a profile."""
    args = ["submit", "qwen35-vl-sft", "-c", "gb200-32", "--dry-run"]
    r = run_cli(*args)
    assert r.code == 0 and "#SBATCH --segment=8\n" in r.out, r.err
    (line,) = [x for x in r.out.splitlines() if x.startswith("Placement  ")]
    assert line.startswith("Placement  --segment=8: all 8 nodes in one NVLink domain of 18") and line.endswith(
        "(segment_size smallest: segments of 4)  [segment_size domain: cluster:gb200-32]"
    ), line
    r = run_cli(*args, "--segment-size", "smallest")
    assert r.code == 0 and "#SBATCH --segment=4\n" in r.out, r.err
    (line,) = [x for x in r.out.splitlines() if x.startswith("Placement  ")]
    assert "8 nodes in 2 segments of 4" in line and "(segment_size domain: segments of 8)" in line, line
    assert line.endswith("[segment_size smallest: cli]"), line
    (home / "clusters" / "racks.toml").write_text('extends = "gb200-32"\n[slurm]\nsegment_size = "smallest"\n')
    r = run_cli("submit", "qwen35-vl-sft", "-c", "racks", "--dry-run")
    assert r.code == 0 and "#SBATCH --segment=4\n" in r.out and "[segment_size smallest: cluster:racks]" in r.out
    r = run_cli(*args, "--segment-size", "small")
    assert r.code == 2 and r.err.strip() == (
        "bridge-launch: error: --segment-size must be one of domain, smallest, got 'small'"
    ), r.err
    (home / "clusters" / "bad.toml").write_text('extends = "gb200-32"\n[slurm]\nsegment_size = "tiny"\n')
    r = run_cli("submit", "qwen35-vl-sft", "-c", "bad", "--dry-run")
    assert r.code == 2 and "[slurm] segment_size must be one of domain, smallest, got 'tiny'" in r.err, r.err
    assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err
    r = run_cli("submit", "smoke", "--segment-size", "smallest", "--dry-run")
    assert r.code == 2 and "--segment-size applies to Slurm and Lepton clusters" in r.err
    r = run_cli("submit", "smoke", "-c", "local-slurm", "--segment-size", "smallest", "--dry-run")
    unused = "--segment-size smallest changes nothing: cluster 'local-slurm' sets no segment ([slurm] segment = false)"
    assert r.code == 0 and unused in r.out, r.err
    # Lepton takes no segment of one node (backends/lepton.segment_config): the line says so, the body has none
    r = run_cli("submit", "smoke", "-c", "lepton-gb200", "-N", "8", "--segment-size", "smallest", "--dry-run")
    assert r.code == 0 and "Placement  no segment_config: segments of one node" in r.out, r.err
    assert "count_per_segment" not in r.out
