"""The health step's fabric check (workloads/fabric_health.py through node_health.py --fabric): which
figure an all-reduce is judged against, the verdict, and two real ranks over gloo on this machine.
On the local Slurm cluster: tests/e2e/test_retry_e2e.py (the health step of a two-node job)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from conftest import WORKLOADS

sys.path.insert(0, str(WORKLOADS))
pytest.importorskip("torch")
import fabric_health


def test_an_all_reduce_is_judged_by_the_domains_its_nodes_are_in():
    a, b = ("uuid", "1"), ("uuid", "2")
    assert fabric_health.expectation([a, a], 2, 18, 700, 40) == (700, "one NVLink domain")
    assert fabric_health.expectation([a, b], 2, 18, 700, 40) == (40, "across NVLink domains")
    # no clique information (no nvidia-smi): the job's size against the profile's domain size
    assert fabric_health.expectation([None, None], 18, 18, 700, 40) == (700, "one NVLink domain")
    assert fabric_health.expectation([None, None], 19, 18, 700, 40) == (40, "across NVLink domains")
    assert fabric_health.expectation([a, None], 2, 18, 700, 40)[0] == 700
    assert fabric_health.expectation([None, None], 2, 0, 700, 40) == (40, "no NVLink domain in the profile")


def test_a_figure_below_its_fraction_fails_and_gloo_is_never_judged():
    assert fabric_health.verdict(559.9, 700, 0.8, "nccl") == (False, "below 80% of the expected 700 GB/s")
    assert fabric_health.verdict(560.0, 700, 0.8, "nccl") == (True, "expected 700 GB/s")
    assert fabric_health.verdict(1.0, 0, 0.8, "nccl")[0] is True  # no expectation: reported only
    assert fabric_health.verdict(0.001, 700, 0.8, "gloo") == (True, "no verdict on gloo")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_measure_the_fabric_and_rank_0_reports_one_line(tmp_path):
    port = _free_port()
    procs = []
    for rank in (0, 1):
        env = dict(
            os.environ,
            PATH="/usr/bin:/bin",  # no nvidia-smi: the GPU check skips, no clique is known
            SLURM_PROCID=str(rank),
            SLURM_NTASKS="2",
            SLURMD_NODENAME=f"node{rank + 1}",
            SLURM_JOB_NODELIST="node[1-2]",
        )
        cmd = [
            sys.executable,
            str(WORKLOADS / "node_health.py"),
            f"--report={tmp_path / 'rep'}",
            f"--fabric=127.0.0.1:{port}",
            "--fabric-sizes=4096,65536",
            "--fabric-iters=2",
            "--expect-gbps=700",
            "--domain-nodes=18",
        ]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    first = outs[0][0].splitlines()
    assert first[0].startswith("bridge-launch health: node1 ok gpu: skipped (no nvidia-smi)")
    head = "bridge-launch health: node[1-2] ok fabric: all-reduce over 2 nodes (one NVLink domain): "
    assert first[1].startswith(head), first
    assert "GB/s busbw at 65536 B, no verdict on gloo; across racks: not measured" in first[1]
    assert len(outs[1][0].splitlines()) == 1  # the other rank reports its own node only
    report = json.loads((tmp_path / "rep" / "fabric.json").read_text())
    assert report["backend"] == "gloo" and report["ranks"] == ["node1", "node2"]
    assert [r["size_bytes"] for r in report["all"]] == [4096, 65536] and report["all"][-1]["busbw_gbps"] > 0
