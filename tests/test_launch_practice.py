"""What a GB200 practitioner's review of the rendered jobs asked for (issue 15), checked on the
rendered artifacts and, where a shell decides, by running that shell: the per-node torchrun flags
(log dir, rendezvous timeouts, store host), the head node resolved once, the rendezvous port, srun
--cpu-bind, the NCCL flight recorder, Lepton's NVL72 segments, the TopologyPlugin warning, the IMEX
channel line of the preflight and the upstream state of the VL recipes. The real cluster runs them
in tests/test_slurm_e2e.py, test_containers_e2e.py, test_until_done.py and test_topology_e2e.py."""

import json
import os
import re
import shlex
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bridge_launch import backends
from bridge_launch.backends import torchrun as torchrun_opts
from bridge_launch.backends.slurm import backend as slurm
from bridge_launch.backends.slurm import topology_plugin as slurm_topology
from bridge_launch.core.ports import EPHEMERAL_PORTS
from bridge_launch.resolve import resolver as resolve
from conftest import REPO, write

GOLDEN = Path(__file__).parent / "golden"
WORKLOADS = REPO / "src" / "bridge_launch" / "workloads"


def _job(recipe="smoke", cluster="gb200-8", *overrides, **opts):
    return resolve.resolve(recipe, resolve.Options(cluster=cluster, overrides=tuple(overrides), **opts))


def _profile(home, name, text):
    """A user profile, written and seen (the catalog is cached per process)."""
    from bridge_launch.spec import clusters

    write(home / "clusters" / f"{name}.toml", f'name = "{name}"\n' + text)
    clusters.catalog.cache_clear()


def _fake_bin(tmp_path, name, body):
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    p = d / name
    p.write_text("#!/bin/bash\n" + body)
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return d


# ---------------------------------------------------------------- the per-node torchrun flags


def _node_args(job, tmp_path, node_id):
    """Run the task's own command (the staged per-node launcher, plain or --until-done) with a
    fake torchrun that prints its arguments: what torchrun really receives on node `node_id`."""
    bindir = _fake_bin(tmp_path, "torchrun", 'printf "%s\\n" "$@"\n')
    job = job.with_run_id("r-1")
    launcher = tmp_path / "node-launch.sh"
    launcher.write_text(slurm.node_launcher(job))
    staged = f"{job.run_dir}/{slurm.node_launcher_path(job)}"
    words = [str(launcher) if w == staged else w for w in slurm.torchrun_command(job)]
    script = "\n".join(
        ["rdzv_host=10.0.0.5 rdzv_port=21234 stop_file=/nonexistent", " ".join(slurm._arg(w) for w in words)]
    )
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "SLURM_NODEID": str(node_id), "SLURM_JOB_ID": "77"}
    out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize("until_done", [False, True])
@pytest.mark.parametrize("node_id,is_host", [(0, "1"), (1, "0")])
def test_each_node_gets_its_log_dir_and_the_rendezvous_settings(tmp_path, until_done, node_id, is_host):
    opts = {"until_done": True} if until_done else {}
    job = _job("smoke", "gb200-8", **opts)
    args = _node_args(job, tmp_path, node_id)
    run_dir = job.with_run_id("r-1").run_dir
    assert f"--node-rank={node_id}" in args
    assert f"--log-dir={run_dir}/logs/torchrun/77/node{node_id}" in args
    # gb200-8 pulls nvcr.io/nvidia/nemo on every node: the first node up waits for the last
    assert f"--rdzv-conf=join_timeout=1800,read_timeout=1800,is_host={is_host}" in args
    assert "--rdzv-endpoint=10.0.0.5:21234" in args and "--rdzv-id=77" in args and "--tee=3" in args


def test_join_timeout_follows_the_image_source_and_the_profile(home):
    assert torchrun_opts.join_timeout(_job("smoke", "gb200-8")) == 1800  # a registry image: every node imports it
    _profile(home, "sq", 'extends = "gb200-8"\ncontainer_image = "/lustre/img.sqsh"\n')
    assert torchrun_opts.join_timeout(_job("smoke", "sq")) == 600  # a squashfs: mounted in seconds
    assert torchrun_opts.join_timeout(_job("smoke", "local-slurm")) == 600  # bare processes
    _profile(home, "slow", 'extends = "gb200-8"\nrdzv_join_timeout = 3600\n')
    art = backends.render(_job("smoke", "slow"))
    assert "join_timeout=3600,read_timeout=3600" in "".join(art.files.values())
    for c in ("lepton-gb200", "dgxc-gb200"):  # pods pull the image too
        assert "join_timeout=1800,read_timeout=1800" in backends.render(_job("smoke", c, nodes=2)).text


def test_a_negative_join_timeout_is_one_clear_error(cli, home):
    _profile(home, "bad", 'extends = "gb200-8"\nrdzv_join_timeout = -1\n')
    r = cli("submit", "smoke", "-c", "bad", "--dry-run")
    assert r.code == 2 and "rdzv_join_timeout must be >= 0" in r.err and "Traceback" not in r.err


# ---------------------------------------------------------------- head node and port


def _head(tmp_path, scontrol_node: str, getent: str, rc_node=0):
    bindir = _fake_bin(
        tmp_path,
        "scontrol",
        'if [ "$1 $2" = "show hostnames" ]; then echo nodeA; echo nodeB; exit 0; fi\n'
        f'[ "$1 $2" = "show node" ] || exit 9\nprintf "%s\\n" {shlex.quote(scontrol_node)}\nexit {rc_node}\n',
    )
    _fake_bin(
        tmp_path,
        "getent",
        f'[ "$1" = ahostsv4 ] || exit 9\nprintf "%s" {shlex.quote(getent)}\n'
        '[ -n "' + getent.replace('"', "") + '" ] || exit 2\n',
    )
    script = "\n".join([*slurm._HEAD_LINES, 'echo "$rdzv_host"'])
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "node[A-B]"}
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=True).stdout.strip()


def test_the_head_node_is_resolved_once_to_an_address_the_others_reach(tmp_path):
    # Slurm's NodeAddr, as an address
    assert (
        _head(
            tmp_path,
            "NodeName=nodeA Arch=x86_64 NodeAddr=10.1.2.3 NodeHostName=nodeA",
            "10.1.2.3        STREAM 10.1.2.3\n",
        )
        == "10.1.2.3"
    )
    # NodeAddr is the name, and this node's /etc/hosts maps its own name to 127.0.1.1: skipped
    assert (
        _head(tmp_path, "NodeName=nodeA NodeAddr=nodeA", "127.0.1.1 STREAM nodeA\n192.168.7.4 STREAM\n")
        == "192.168.7.4"
    )
    # nothing answers: the name, as before
    assert _head(tmp_path, "", "", rc_node=1) == "nodeA"


def test_the_rendezvous_port_stays_below_the_ephemeral_range(home, cli):
    text = backends.render(_job()).text
    line = next(ln for ln in text.splitlines() if ln.startswith("rdzv_port="))
    expr = line.split("=", 1)[1].split("#")[0].strip()
    for jid in (1, 12345, 32767, 987654321, 2**31 - 1):
        port = int(
            subprocess.run(
                ["bash", "-c", f"SLURM_JOB_ID={jid}; echo {expr}"], capture_output=True, text=True, check=True
            ).stdout
        )
        assert 20000 <= port < EPHEMERAL_PORTS[0], (jid, port)
    _profile(home, "eph", 'extends = "gb200-8"\n[slurm]\nrdzv_port = 45000\n')
    r = cli("submit", "smoke", "-c", "eph", "--dry-run")
    assert r.code == 2 and "rdzv_port 45000" in r.err and "32768-60999" in r.err and len(r.err.splitlines()) == 1
    _profile(home, "fixed", 'extends = "gb200-8"\n[slurm]\nrdzv_port = 29400\n')
    assert "\nrdzv_port=29400\n" in backends.render(_job("smoke", "fixed")).text


# ---------------------------------------------------------------- srun --cpu-bind


def _srun_words(text):
    body = re.split(r"\n(?:with_secrets )?srun ", text, maxsplit=1)[1].split("\nrc=$?", 1)[0].replace("\\\n", " ")
    return shlex.split(body)


def test_srun_does_not_let_a_site_bind_the_one_task_to_a_core(home, cli):
    assert "--cpu-bind=none" in _srun_words(backends.render(_job()).text)
    _profile(home, "cores", 'extends = "gb200-8"\n[slurm]\ncpu_bind = "verbose,cores"\n')
    assert "--cpu-bind=verbose,cores" in _srun_words(backends.render(_job("smoke", "cores")).text)
    _profile(home, "site", 'extends = "gb200-8"\n[slurm]\ncpu_bind = ""\n')
    assert not any(w.startswith("--cpu-bind") for w in _srun_words(backends.render(_job("smoke", "site")).text))
    _profile(home, "twice", 'extends = "gb200-8"\n[slurm]\nsrun_args = ["--cpu-bind=cores"]\n')
    r = cli("submit", "smoke", "-c", "twice", "--dry-run")
    assert r.code == 2 and "cpu_bind" in r.err and "Traceback" not in r.err


# ---------------------------------------------------------------- NCCL hang triage


@pytest.mark.usefixtures("home")
def test_the_flight_recorder_is_on_and_dumps_into_the_run_dir():
    job = _job("qwen35-vl-sft", "gb200-32", "dataset.path=/d", "checkpoint.pretrained_checkpoint=/c")
    text = backends.render(job).text
    assert "\nexport TORCH_FR_BUFFER_SIZE=2000\n" in text and "\nexport TORCH_NCCL_DUMP_ON_TIMEOUT=1\n" in text
    assert f'\nexport TORCH_NCCL_DEBUG_INFO_TEMP_FILE={job.run_dir}/nccl-trace/"$SLURM_JOB_ID"/rank_\n' in text
    assert f'{job.run_dir}/nccl-trace/"$SLURM_JOB_ID"\n' in text  # created before the step starts
    env = next(w for w in _srun_words(text) if w.startswith("--container-env=")).split("=", 1)[1].split(",")
    assert {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"} <= set(env)
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in text  # torch 2.13 warns on every rank for that name


@pytest.mark.usefixtures("home")
def test_the_jobs_own_flight_recorder_settings_win():
    job = _job(
        "qwen35-vl-sft",
        "gb200-32",
        "dataset.path=/d",
        "checkpoint.pretrained_checkpoint=/c",
        "dist.flight_recorder_trace_buffer_size=5000",
        "dist.flight_recorder_dump_on_timeout=false",
        "dist.flight_recorder_dump_path=/lustre/fr/rank_",
    )
    text = backends.render(job).text
    assert "export TORCH_FR_BUFFER_SIZE=5000\n" in text and "export TORCH_NCCL_DUMP_ON_TIMEOUT=0\n" in text
    assert "TORCH_NCCL_DEBUG_INFO_TEMP_FILE" not in text  # Megatron-Bridge exports its dist.flight_recorder_dump_path
    job = _job("smoke", "gb200-8", env=("TORCH_NCCL_DUMP_ON_TIMEOUT=0", "TORCH_NCCL_TRACE_BUFFER_SIZE=100"))
    text = backends.render(job).text
    assert text.count("TORCH_NCCL_DUMP_ON_TIMEOUT=") == 1 and "TORCH_NCCL_DUMP_ON_TIMEOUT=0" in text
    assert "TORCH_FR_BUFFER_SIZE" not in text


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize("cluster", ["lepton-gb200", "dgxc-gb200"])
def test_cloud_scripts_get_the_same_flags(cluster):
    job = _job("smoke", cluster, nodes=2).with_run_id("r-9")
    from bridge_launch.backends import cloud, dgxcloud, lepton

    script = cloud.job_script(job, (lepton if cluster.startswith("lepton") else dgxcloud).RANK_PRELUDE)
    assert f'--log-dir={job.run_dir}/logs/torchrun/r-9/"node$NODE_RANK"' in script
    assert (
        '--rdzv-conf="join_timeout=1800,read_timeout=1800,is_host=$([ "$NODE_RANK" = 0 ] && echo 1 || echo 0)"'
        in script
    )
    assert "export TORCH_FR_BUFFER_SIZE=2000\nexport TORCH_NCCL_DUMP_ON_TIMEOUT=1\n" in script
    assert (
        f"export TORCH_NCCL_DEBUG_INFO_TEMP_FILE={job.run_dir}/nccl-trace/r-9/rank_\nmkdir -p "
        f"{job.run_dir}/nccl-trace/r-9\n" in script
    )
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


# ---------------------------------------------------------------- Lepton NVL72 segments


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize("nodes,per", [(2, 2), (8, 8), (18, 18), (36, 18), (20, 10), (19, None), (1, None)])
def test_lepton_segments_follow_the_slurm_rule(nodes, per):
    from leptonai.api.v1.types.job import LeptonJob

    job = _job("smoke", "lepton-gb200", nodes=nodes)
    body = json.loads(backends.render(job).text.split("\n", 2)[2])
    assert body["spec"].get("segment_config") == ({"count_per_segment": per} if per else None)
    if per:
        assert slurm.segment_size(nodes, 18) == per
        count = nodes // per  # what `lep job create --segment-count` accepts: 1 <= count < workers, divides them
        assert 1 <= count < nodes and nodes % count == 0
    LeptonJob(**body)  # the SDK's own model takes it


def test_lepton_segments_can_be_turned_off(home):
    _profile(home, "lep-noseg", 'extends = "lepton-gb200"\n[lepton]\nsegment = false\n')
    assert "segment_config" not in backends.render(_job("smoke", "lep-noseg", nodes=8)).text


# ---------------------------------------------------------------- the TopologyPlugin check


class _Backend:
    """The backend's transport, answering `scontrol show config` with a given text (the real one
    answers in tests/test_topology_e2e.py)."""

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


@pytest.mark.usefixtures("home")
def test_nvlink_spans_come_from_plan():
    job = _job("qwen35-vl-sft", "gb200-32", "dataset.path=/d", "checkpoint.pretrained_checkpoint=/c")
    assert slurm_topology.nvlink_spans(job) == [{"label": "EP (HybridEP)", "size": 16, "nodes": 4}]
    assert slurm_topology.nvlink_spans(_job("smoke", "gb200-8")) == []


def test_segment_needs_sbatch_24_05_3():
    assert slurm._version("slurm 24.05.2") < slurm._MIN_SEGMENT_VERSION <= slurm._version("slurm 24.05.3")
    assert slurm._version("slurm 22.05.8") < slurm._MIN_SEGMENT_VERSION <= slurm._version("slurm 25.11.0")


# ---------------------------------------------------------------- the IMEX channel line


@pytest.fixture
def preflight_mod():
    sys.path.insert(0, str(WORKLOADS))
    try:
        import fabric_checks

        yield fabric_checks
    finally:
        sys.path.remove(str(WORKLOADS))


def test_imex_channels_as_the_container_sees_them(preflight_mod, tmp_path):
    root = tmp_path / "nvidia-caps-imex-channels"
    assert preflight_mod.imex_channels(str(root)) == {"visible": False, "channels": []}
    root.mkdir()
    assert preflight_mod.imex_channels(str(root)) == {"visible": True, "channels": []}
    (root / "channel0").touch()
    assert preflight_mod.imex_channels(str(root)) == {"visible": True, "channels": ["channel0"]}


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


# ---------------------------------------------------------------- the VL recipes' upstream state


def _git_checkout(path: Path, files: dict) -> Path:
    for rel, text in files.items():
        write(path / rel, text)
    for cmd in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "x"],
    ):
        subprocess.run(["git", "-C", str(path), *cmd], check=True, capture_output=True)
    return path


def test_recipes_show_and_dry_run_state_the_upstream_gap(cli):
    shown = cli("recipes", "show", "qwen35-vl-sft-mxfp8")
    assert shown.code == 0 and re.search(
        r"^upstream_status +not in upstream Megatron-Bridge: .*067f987", shown.out, re.M
    )
    r = cli(
        "submit",
        "qwen35-vl-sft",
        "-c",
        "gb200-32",
        "--dry-run",
        "dataset.path=/d",
        "checkpoint.pretrained_checkpoint=/c",
    )
    assert r.code == 0 and re.search(r"^Upstream   not in upstream Megatron-Bridge", r.out, re.M)
    assert "recipe function qwen35_vl_35b_a3b_sft_long_context_32gpu_gb200_bf16_config is not in upstream" in r.out
    j = cli(
        "submit",
        "qwen35-vl-sft",
        "-c",
        "gb200-32",
        "--dry-run",
        "-o",
        "json",
        "dataset.path=/d",
        "checkpoint.pretrained_checkpoint=/c",
    ).json()
    assert j["upstream_status"].startswith("not in upstream") and any("--bridge-src" in w for w in j["warnings"])
    plain = cli("submit", "qwen35-9b-pretrain", "-c", "gb200-8", "--dry-run", "-o", "json").json()
    assert plain["upstream_status"] is None


def test_bridge_src_must_carry_the_recipe_upstream_lacks(cli, tmp_path):
    name = "qwen35_vl_35b_a3b_sft_long_context_32gpu_gb200_bf16_config"
    has = _git_checkout(
        tmp_path / "mb-seed", {"src/megatron/bridge/recipes/qwen_vl/gb200/qwen35_vl.py": f"def {name}():\n    pass\n"}
    )
    lacks = _git_checkout(
        tmp_path / "mb-main", {"src/megatron/bridge/recipes/qwen_vl/h100/qwen35_vl.py": "def other():\n    pass\n"}
    )
    args = [
        "submit",
        "qwen35-vl-sft",
        "-c",
        "gb200-32",
        "--dry-run",
        "dataset.path=/d",
        "checkpoint.pretrained_checkpoint=/c",
    ]
    r = cli(*args, "--bridge-src", str(lacks))
    assert (
        r.code == 2 and f"no file under src/ names the recipe function {name}" in r.err and len(r.err.splitlines()) == 1
    )
    r = cli(*args, "--bridge-src", str(has))
    assert r.code == 0, r.err
    assert f"Runs from --bridge-src {has} (checked to have it)" in r.out and "is not in upstream" not in r.out


# ---------------------------------------------------------------- torchrun 2.13's rendezvous settings

_WORKER = "import os, sys; print('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], flush=True)\n"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(tmp_path, port, conf):
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes=2",
            "--nproc-per-node=1",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}",
            f"--rdzv-id=t-{port}",
            f"--rdzv-conf={conf}",
            "--monitor-interval=0.5",
            str(script),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )


@pytest.mark.slow
@pytest.mark.parametrize("read_timeout,ok", [(3, False), (None, True)])
def test_a_node_that_starts_before_the_store_host_waits_read_timeout(tmp_path, read_timeout, ok):
    """torch 2.13 (c10d_rendezvous_backend._create_tcp_store): a node that is not the store host
    gives up connecting after read_timeout (default 60 s), whatever join_timeout says; with the
    two timeouts equal, as rendered, it waits for a host that starts later. is_host chooses the
    host explicitly, as the Slurm script does for node 0."""
    from types import SimpleNamespace

    port = _free_port()
    # the string the renderers write (torchrun_opts.rdzv_conf), for a profile's rdzv_join_timeout
    job = SimpleNamespace(profile={"rdzv_join_timeout": 40}, backend="slurm", container=None)
    conf = torchrun_opts.rdzv_conf(job, is_host="0")
    assert conf == "join_timeout=40,read_timeout=40,is_host=0"
    if not ok:  # torch's own split: join_timeout alone, read_timeout short
        conf = f"join_timeout=60,read_timeout={read_timeout},is_host=0"
    early = _torchrun(tmp_path, port, conf)
    time.sleep(8)  # the store host starts late (its image was slower to arrive)
    host = _torchrun(tmp_path, port, torchrun_opts.rdzv_conf(job, is_host="1"))
    try:
        out_early, _ = early.communicate(timeout=120)
        if ok:
            out_host, _ = host.communicate(timeout=120)
            assert early.returncode == 0 and host.returncode == 0, out_early[-2000:] + out_host[-2000:]
            assert "rank 1 of 2" in out_early + out_host and "rank 0 of 2" in out_early + out_host
        else:
            assert early.returncode != 0 and "RendezvousConnectionError" in out_early, out_early[-2000:]
    finally:
        for p in (early, host):
            if p.poll() is None:
                p.kill()
                p.wait()
