"""The retry's choice of the node at fault (batch/culprit.sh), run by bash over logs written the way
Slurm writes them (srun --output=%j-%N.log per node, the batch output in sbatch-%j.out), with a stand-in
scontrol that answers `show hostnames` and `show node` as Slurm does (NodeAddr=...)."""

import os
import subprocess

import pytest

from bridge_launch.backends.slurm import attempts, render
from bridge_launch.logs.failures import LOST_NODE, NCCL_PEER, NODE_FAULT

SCONTROL = """#!/bin/bash
if [ "$1 $2" = "show hostnames" ]; then printf '%s\\n' node1 node2 node3; exit 0; fi
if [ "$1 $2" = "show node" ]; then
    case $3 in node1) a=10.0.0.1;; node2) a=10.0.0.2;; node3) a=10.0.0.3;; esac
    echo "NodeName=$3 Arch=x86_64 CoresPerSocket=1"
    echo "   NodeAddr=$a NodeHostName=$3 Version=24.05.4"
    exit 0
fi
exit 1
"""


def _culprit(tmp_path, logs: dict, batch: str = "") -> tuple[str, str]:
    d = tmp_path / "logs"
    d.mkdir()
    for node, text in logs.items():
        (d / f"42-{node}.log").write_text(text)
    (d / "sbatch-42.out").write_text(batch)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(SCONTROL)
    (bin_dir / "scontrol").chmod(0o755)
    inputs = render.assign(logs=str(d), node_fault=NODE_FAULT, lost_node=LOST_NODE, nccl_peer=NCCL_PEER)
    script = "\n".join(
        [*inputs, render.library(render.CULPRIT), "find_culprit", 'printf "%s|%s" "$culprit_node" "$cause"']
    )
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", SLURM_JOB_ID="42", SLURM_JOB_NODELIST="node[1-3]")
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, check=True).stdout
    node, _, cause = out.partition("|")
    return node, cause


def test_a_node_fault_in_one_nodes_own_log_names_that_node(tmp_path):
    node, cause = _culprit(
        tmp_path,
        {
            "node1": "[rank0]: iteration 3/10\n",
            "node2": "[rank2]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n",
            "node3": "[rank4]: torch.distributed.DistBackendError: NCCL error in: ...\n",
        },
    )
    assert node == "node2" and cause.startswith("node2: [rank2]: RuntimeError: CUDA error: uncorrectable ECC"), cause


def test_the_same_fault_on_two_nodes_names_neither(tmp_path):
    text = "NVRM: Xid (PCI:0000:1b:00): 79, pid=123, GPU has fallen off the bus.\n"
    assert _culprit(tmp_path, {"node1": text, "node2": text}) == ("", "")


def test_srun_s_lost_node(tmp_path):
    node, cause = _culprit(tmp_path, {"node1": "x\n"}, batch="srun: error: Node failure on node3\n")
    assert (node, cause) == ("node3", "srun: error: Node failure on node3")


def test_a_lost_node_list_is_not_one_node(tmp_path):
    assert _culprit(tmp_path, {"node1": "x\n"}, batch="srun: error: Node failure on node[2-3]\n") == ("", "")


@pytest.mark.parametrize(
    "peer",
    [
        "node2<43122>",  # ncclSocketToString without numericHostForm: the peer's name
        "node2.cluster.internal<43122>",
        "10.0.0.2<43122>",  # its address: Slurm's NodeAddr for node2
    ],
)
def test_the_one_peer_nccl_s_remote_errors_name(tmp_path, peer):
    line = f"node1:123:456 [0] NCCL WARN NET/IB: Got completion from peer {peer} with status=12 opcode=0\n"
    closed = f"node3:77:78 [1] NCCL WARN socketProgress: Connection closed by remote peer {peer}\n"
    node, cause = _culprit(tmp_path, {"node1": line, "node3": closed, "node2": "[rank2]: hang\n"})
    assert node == "node2" and cause == f"NCCL remote errors name the peer {peer.split('<')[0]} (node2)", cause


def test_two_peers_name_no_node(tmp_path):
    a = "NCCL WARN NET/IB: Got completion from peer 10.0.0.2<1> with status=12\n"
    b = "NCCL WARN NET/IB: Got completion from peer 10.0.0.3<1> with status=12\n"
    assert _culprit(tmp_path, {"node1": a + b}) == ("", "")


def test_records_parse_back_as_status_reads_them():
    text = (
        "12\t1\tretried\t0\t2\tnode2\tnode2\texit 1: node2: ECC; retry 1 of 3 as job 13 without node2\n"
        "garbage line\n"
        "13\t2\tcompleted\t2\t6\tnode1\t-\t\n"
    )
    got = attempts.parse(text)
    assert got["12"]["bad"] == ["node2"] and got["12"]["from"] == 0 and got["12"]["to"] == 2
    assert got["13"]["outcome"] == "completed" and got["13"]["bad"] == [] and set(got) == {"12", "13"}
