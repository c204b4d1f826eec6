import subprocess

import pytest

from bridge_launch.backends.slurm import backend as slurm
from bridge_launch.backends.slurm import topology_plugin as slurm_topology
from launch_jobs import _job, _profile


class _Backend:
    """The backend's transport, answering `scontrol show config` with a given text (the real one
    answers in tests/e2e/test_topology_plugin_e2e.py)."""

    def __init__(self, text, rc=0):
        self.text, self.rc, self.calls = text, rc, 0

    def command(self, _s, argv, **_kw):
        assert argv == ["scontrol", "show", "config"]
        self.calls += 1
        return subprocess.CompletedProcess(argv, self.rc, self.text, "" if self.rc == 0 else "scontrol: error: down")

    @staticmethod
    def first_error(proc):
        return (proc.stderr or proc.stdout or "").strip() or f"exit code {proc.returncode}"


SPANS = [{"label": "EP (HybridEP)", "size": 16, "nodes": 4}]


@pytest.mark.usefixtures("home")
def test_segment_guarantee_warnings():
    job = _job("qwen35-vl-sft", "gb200-32", "dataset.path=/d", "checkpoint.pretrained_checkpoint=/c")
    w = slurm_topology.warning
    assert w(job, segment=8, plugin="topology/block", source="cached", spans=SPANS) is None
    text = w(job, segment=8, plugin="topology/tree", source="scontrol show config", spans=SPANS)
    assert (
        "--segment=8 may be ignored" in text
        and "topology/tree" in text
        and "EP (HybridEP) groups of 16 ranks span 4 nodes" in text
    )
    text = w(job, segment=None, plugin="topology/block", source="profile", spans=SPANS)
    assert "requests no --segment" in text and "set [slurm] segment = true" in text
    assert w(job, segment=None, plugin="topology/tree", source="x", spans=[]) is None  # nothing needs a domain
    text = w(job, segment=8, plugin=None, source="scontrol show config failed: down", spans=SPANS)
    assert "unknown" in text and "[slurm] topology_plugin" in text
    one = _job("smoke", "gb200-nvl72", nodes=1)
    assert w(one, segment=None, plugin="topology/tree", source="x", spans=SPANS) is None


def test_the_plugin_is_read_once_per_cluster_and_cached(home):
    job = _job("smoke", "gb200-8")
    be = _Backend(
        "Configuration data as of ...\nTopologyParam           = (null)\nTopologyPlugin          = topology/tree\n"
    )
    assert slurm_topology.topology_plugin(be, job) == ("topology/tree", "scontrol show config")
    assert slurm_topology.topology_plugin(be, job) == ("topology/tree", "cached")
    assert be.calls == 1
    other = _job("smoke", "gb200-32")  # another cluster: its own read
    assert slurm_topology.topology_plugin(be, other)[1] == "scontrol show config" and be.calls == 2
    _profile(home, "stated", 'extends = "gb200-8"\n[slurm]\ntopology_plugin = "block"\n')
    assert (
        slurm_topology.topology_plugin(be, _job("smoke", "stated")) == ("topology/block", "profile") and be.calls == 2
    )
    down = _Backend("", rc=1)
    plugin, source = slurm_topology.topology_plugin(down, _job("smoke", "gb200-64"))
    assert plugin is None and "scontrol: error: down" in source


def test_segment_needs_sbatch_24_05_3():
    assert slurm._version("slurm 24.05.2") < slurm._MIN_SEGMENT_VERSION <= slurm._version("slurm 24.05.3")
    assert slurm._version("slurm 22.05.8") < slurm._MIN_SEGMENT_VERSION <= slurm._version("slurm 25.11.0")
