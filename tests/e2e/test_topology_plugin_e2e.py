"""The --segment / TopologyPlugin checks at submit, against the real local Slurm cluster (22.05:
TopologyPlugin topology/none, and an sbatch without --segment)."""

import json
import os
from pathlib import Path

import pytest

from conftest import FAST, run_cli, write

pytestmark = [pytest.mark.slow, pytest.mark.slurm]


def _nvl_sim(home, extra=""):
    """local-slurm as if its two nodes shared one NVLink domain (a GB200 NVL72 rack in small)."""
    from bridge_launch.spec import clusters

    write(
        home / "clusters" / "nvl-sim.toml",
        f'name = "nvl-sim"\nextends = "local-slurm"\nnvlink_domain_nodes = 2\n{extra}',
    )
    clusters.catalog.cache_clear()


def _cancel(out):
    if out.code == 0:
        run_cli("cancel", json.loads(out.out)["run_id"])


@pytest.mark.usefixtures("cluster")
def test_no_segment_guarantee_is_warned_once_the_plugin_is_read_and_then_cached(home):
    _nvl_sim(home)
    args = ("submit", "smoke", "-c", "nvl-sim", "-o", "json", *FAST, "model.tensor_model_parallel_size=4")
    first = run_cli(*args)
    try:
        assert first.code == 0, first.err
        assert "bridge-launch: warning: cluster 'nvl-sim' requests no --segment" in first.err
        assert "TP groups of 4 ranks span 2 nodes" in first.err
        assert "TopologyPlugin is topology/none (scontrol show config)" in first.err  # Slurm 22.05's own answer
    finally:
        _cancel(first)
    cache = json.loads((Path(os.environ["BRIDGE_LAUNCH_HOME"]) / "slurm-topology.json").read_text())
    assert [v["plugin"] for k, v in cache.items() if k.startswith("nvl-sim|")] == ["topology/none"]
    second = run_cli(*args)
    try:
        assert second.code == 0 and "TopologyPlugin is topology/none (cached)" in second.err, second.err
    finally:
        _cancel(second)
    # TP inside a node: nothing needs the domain, no warning (and no question to Slurm)
    quiet = run_cli("submit", "smoke", "-c", "nvl-sim", "-o", "json", *FAST, "model.tensor_model_parallel_size=2")
    try:
        assert quiet.code == 0 and "warning" not in quiet.err, quiet.err
    finally:
        _cancel(quiet)


@pytest.mark.usefixtures("cluster")
def test_segment_is_refused_by_an_sbatch_without_it(home):
    _nvl_sim(home, "[slurm]\nsegment = true\n")
    tp4 = "model.tensor_model_parallel_size=4"  # TP groups span the two nodes: a segment of 2 holds them
    shown = run_cli("submit", "smoke", "-c", "nvl-sim", "--dry-run", *FAST, tp4)
    assert "#SBATCH --segment=2" in shown.out
    r = run_cli("submit", "smoke", "-c", "nvl-sim", *FAST, tp4)
    assert r.code == 2, r.err
    assert "runs slurm-wlm 22.05.8, whose sbatch has no working --segment (needs 24.05.3 with topology/block)" in r.err
    assert "Traceback" not in r.err
    assert json.loads(run_cli("status", "--all", "-o", "json").out) == []  # nothing was left reserved
