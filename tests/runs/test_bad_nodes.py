"""The per-cluster bad-node list (runs/bad_nodes.py): recorded from a node's own fault, excluded from
later Slurm submits (resolve's input), shown and forgotten by `clusters`. On the local Slurm cluster:
tests/e2e/test_slurm_e2e.py::test_a_node_whose_gpu_fails_is_left_out_of_the_next_submit."""

from __future__ import annotations

import time

import pytest

from bridge_launch.logs.reader import failing_node
from bridge_launch.runs import bad_nodes
from conftest import run_cli

ECC = "[rank2]: smoke.InjectedFailure: uncorrectable ECC error encountered on GPU 0\n"
PEER = "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer\n"


def test_the_node_whose_own_log_holds_a_hardware_fault_is_named():
    assert failing_node({"node1": PEER, "node2": ECC}) == (
        "node2",
        "rank 2: smoke.InjectedFailure: uncorrectable ECC error encountered on GPU 0",
    )
    assert failing_node({"node1": ECC, "node2": ECC}) is None  # on every node: not one node's fault
    nccl = "[rank1]: torch.distributed.DistBackendError: NCCL error in: ncclRemoteError\n"
    assert failing_node({"node1": nccl, "node2": PEER}) is None  # a peer's symptom names no node


@pytest.mark.usefixtures("home")
def test_bad_nodes_expire_are_left_out_shown_and_forgotten():
    bad_nodes.record("local-slurm", "node2", "rank 2: uncorrectable ECC error", "smoke-1204-abcd", hours=1)
    bad_nodes.record("local-slurm", "node9", "old", "smoke-1203-aaaa", hours=1)
    assert set(bad_nodes.active("local-slurm")) == {"node2", "node9"}
    assert set(bad_nodes.active("local-slurm", now=time.time() + 7200)) == set()  # expired
    assert bad_nodes.active("gb200-8") == {}
    bad_nodes.forget("local-slurm", "node9")
    r = run_cli("submit", "smoke", "-c", "local-slurm", "--dry-run")
    assert r.code == 0 and "#SBATCH --exclude=node2\n" in r.out, r.err
    assert "node node2 is left out (--exclude): rank 2: uncorrectable ECC error (run smoke-1204-abcd" in r.out
    d = run_cli("submit", "smoke", "-c", "local-slurm", "--dry-run", "-o", "json").json()
    assert d["scheduler"]["exclude"] == ["node2"] and d["provenance"]["job"]["exclude"] == "bad-node list"
    assert "--exclude" not in run_cli("submit", "smoke", "-c", "local", "--dry-run").out  # that cluster's own list
    r = run_cli("clusters", "show", "local-slurm")
    assert "bad nodes (left out of submits" in r.out and "  node2 " in r.out and "node9" not in r.out
    assert run_cli("clusters", "show", "local-slurm", "-o", "json").json()["bad_nodes"]["node2"]["run"] == (
        "smoke-1204-abcd"
    )
    r = run_cli("clusters", "forget-node", "local-slurm", "node7")
    assert r.code == 2 and "is not on cluster 'local-slurm''s bad-node list (on it: node2)" in r.err
    r = run_cli("clusters", "forget-node", "local-slurm", "node2")
    assert r.code == 0 and "submits may use it again" in r.out
    assert "#SBATCH --exclude" not in run_cli("submit", "smoke", "-c", "local-slurm", "--dry-run").out
