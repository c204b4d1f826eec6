import pytest

from conftest import run_cli


@pytest.mark.usefixtures("home")
def test_size_hint_never_suggests_nodes_the_cluster_refuses_and_plan_agrees():
    r = run_cli("submit", "nemotron-3-nano-pretrain", "--dry-run")
    assert r.code == 2
    assert "--nodes" not in r.err and "allows at most 1 node" in r.err and "--cluster gb200-8" in r.err, r.err
    assert run_cli("submit", "nemotron-3-nano-pretrain", "--cluster", "gb200-8", "--dry-run").code == 0  # it works
    p = run_cli("plan", "nemotron-3-nano-pretrain")
    assert p.code == 2 and p.err == r.err  # the same answer as submit
    r = run_cli("submit", "nemotron-3-nano-pretrain", "-c", "gb200-32", "--dry-run")
    assert "use --cluster gb200-8 or --nodes 2" in r.err
    assert run_cli("submit", "nemotron-3-nano-pretrain", "-c", "gb200-32", "--nodes", "2", "--dry-run").code == 0
