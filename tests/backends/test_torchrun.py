"""The per-node torchrun command each backend renders, checked on the rendered artifacts and, where
a shell decides, by running that shell: torchrun's log dir, rendezvous timeouts and store host, the
head node resolved once, the rendezvous port, srun --cpu-bind and the NCCL flight recorder. The real
cluster runs them in tests/e2e/test_slurm_e2e.py, test_containers_e2e.py, test_until_done_e2e.py and
test_rendezvous_e2e.py."""

import os
import shlex
import stat
import subprocess

import pytest

from bridge_launch import backends
from bridge_launch.backends import torchrun as torchrun_opts
from bridge_launch.backends.slurm import render as slurm
from bridge_launch.core.ports import EPHEMERAL_PORTS
from launch_jobs import _job, _profile, step_words


def _fake_bin(tmp_path, name, body):
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    p = d / name
    p.write_text("#!/bin/bash\n" + body)
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return d


def _node_args(job, tmp_path, node_id):
    """Run the task's own command (the staged per-node launcher, plain or --until-done) with a
    fake torchrun that prints its arguments: what torchrun really receives on node `node_id`."""
    bindir = _fake_bin(tmp_path, "torchrun", 'printf "%s\\n" "$@"\n')
    job = job.with_run_id("r-1")
    launcher = tmp_path / "node-launch.sh"
    launcher.write_text(slurm.library(slurm.NODE_LAUNCH))
    staged = f"{job.run_dir}/{slurm.node_launcher_path(job)}"
    words = [str(launcher) if w == staged else w for w in slurm.torchrun_command(job)]
    script = "\n".join(
        ["rdzv_host=10.0.0.5 rdzv_port=21234 stop_file=/nonexistent", " ".join(slurm._arg(w) for w in words)]
    )
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "SLURM_NODEID": str(node_id), "SLURM_JOB_ID": "77"}
    out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


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
    assert "join_timeout=3600,read_timeout=3600" in art.text
    for c in ("lepton-gb200", "dgxc-gb200"):  # pods pull the image too
        assert "join_timeout=1800,read_timeout=1800" in backends.render(_job("smoke", c, nodes=2)).text


def test_a_negative_join_timeout_is_one_clear_error(cli, home):
    _profile(home, "bad", 'extends = "gb200-8"\nrdzv_join_timeout = -1\n')
    r = cli("submit", "smoke", "-c", "bad", "--dry-run")
    assert r.code == 2 and "rdzv_join_timeout must be >= 0" in r.err and "Traceback" not in r.err


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


def test_srun_does_not_let_a_site_bind_the_one_task_to_a_core(home, cli):
    assert "--cpu-bind=none" in step_words(backends.render(_job()).text)
    _profile(home, "cores", 'extends = "gb200-8"\n[slurm]\ncpu_bind = "verbose,cores"\n')
    assert "--cpu-bind=verbose,cores" in step_words(backends.render(_job("smoke", "cores")).text)
    _profile(home, "site", 'extends = "gb200-8"\n[slurm]\ncpu_bind = ""\n')
    assert not any(w.startswith("--cpu-bind") for w in step_words(backends.render(_job("smoke", "site")).text))
    _profile(home, "twice", 'extends = "gb200-8"\n[slurm]\nsrun_args = ["--cpu-bind=cores"]\n')
    r = cli("submit", "smoke", "-c", "twice", "--dry-run")
    assert r.code == 2 and "cpu_bind" in r.err and "Traceback" not in r.err


@pytest.mark.usefixtures("home")
def test_the_flight_recorder_is_on_and_dumps_into_the_run_dir():
    job = _job("qwen35-vl-sft", "gb200-32", "dataset.path=/d", "checkpoint.pretrained_checkpoint=/c")
    text = backends.render(job).text
    assert "\nexport TORCH_FR_BUFFER_SIZE=2000\n" in text and "\nexport TORCH_NCCL_DUMP_ON_TIMEOUT=1\n" in text
    assert f'\nexport TORCH_NCCL_DEBUG_INFO_TEMP_FILE={job.run_dir}/nccl-trace/"$SLURM_JOB_ID"/rank_\n' in text
    assert f'{job.run_dir}/nccl-trace/"$SLURM_JOB_ID"\n' in text  # created before the step starts
    env = next(w for w in step_words(text) if w.startswith("--container-env=")).split("=", 1)[1].split(",")
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
