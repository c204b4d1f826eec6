"""scripts/local-slurm: a real two-node Slurm cluster on this machine (network namespaces).

These tests start the cluster (idempotent: a no-op when it is already up) and leave it running
for the other end-to-end tests.
"""

import os
import shlex
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO

if os.geteuid() != 0:
    pytest.skip("scripts/local-slurm needs root (network namespaces, apt-get)", allow_module_level=True)


pytestmark = [pytest.mark.slow, pytest.mark.slurm_alone]  # it starts the cluster and reads its nodes' states


SCRIPT = REPO / "scripts" / "local-slurm"


def local_slurm(*args, timeout=900):
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def slurm_env():
    """The environment for Slurm client commands: os.environ plus what `local-slurm env` exports."""
    started = local_slurm("start")
    assert started.returncode == 0, started.stdout + started.stderr
    printed = local_slurm("env", timeout=30)
    assert printed.returncode == 0, printed.stderr
    env = dict(os.environ)
    for line in printed.stdout.splitlines():
        word, assignment = shlex.split(line)
        assert word == "export"
        key, _, value = assignment.partition("=")
        env[key] = value
    assert Path(env["SLURM_CONF"]).is_file()
    return env


def slurm(env, *args, timeout=60):
    return subprocess.run(list(args), capture_output=True, text=True, env=env, timeout=timeout)


def pid_files(env):
    run = Path(env["LOCAL_SLURM_HOME"]) / "run"
    return {p.name: p.read_text() for p in run.glob("*.pid")}


def test_status_reports_everything_up(slurm_env):
    status = local_slurm("status", timeout=60)
    assert status.returncode == 0, status.stdout + status.stderr
    for component in ("slurmctld", "slurmdbd", "slurmd-node1", "slurmd-node2", "sshd"):
        assert any(line.split()[:2] == [component, "up"] for line in status.stdout.splitlines()), status.stdout
    nodes = slurm(slurm_env, "sinfo", "-h", "-N", "-o", "%N %t")
    assert nodes.returncode == 0, nodes.stderr
    states = dict(line.split() for line in nodes.stdout.splitlines())
    assert set(states) == {"node1", "node2"}, nodes.stdout
    assert all(state in ("idle", "mix", "alloc") for state in states.values()), nodes.stdout


def test_two_node_job_runs_on_two_distinct_hosts_and_is_accounted(slurm_env, tmp_path):
    out = tmp_path / "hostnames.txt"
    sub = slurm(
        slurm_env,
        "sbatch",
        "--parsable",
        "--wait",
        "-N2",
        "-J",
        "local-slurm-hostnames",
        "-o",
        str(out),
        "--wrap",
        "srun --ntasks-per-node=1 hostname",
        timeout=120,
    )
    assert sub.returncode == 0, sub.stdout + sub.stderr
    job_id = sub.stdout.strip().split(";")[0]
    names = out.read_text().split()
    assert len(names) == 2 and len(set(names)) == 2, names
    assert socket.gethostname() not in names, names

    # the job-level sacct record can lag the job by up to ~5 s (slurmctld sends job starts
    # from a thread that runs every 5 s), so poll
    deadline = time.monotonic() + 30
    while True:
        acct = slurm(slurm_env, "sacct", "-n", "-X", "-P", "-j", job_id, "-o", "JobName,State,NNodes")
        assert acct.returncode == 0, acct.stderr
        if acct.stdout.strip() == "local-slurm-hostnames|COMPLETED|2" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert acct.stdout.strip() == "local-slurm-hostnames|COMPLETED|2"


def test_login_over_ssh_sees_the_cluster(slurm_env):
    ssh_config = slurm_env["LOCAL_SLURM_SSH_CONFIG"]
    env = {k: v for k, v in slurm_env.items() if k != "SLURM_CONF"}
    login = slurm(env, "ssh", "-F", ssh_config, "local-slurm-login", "sbatch --version && sinfo -h -o %P", timeout=60)
    assert login.returncode == 0, login.stderr
    version, partition = login.stdout.splitlines()
    assert version.startswith("slurm"), login.stdout
    assert partition == "debug*", login.stdout


def test_second_start_is_a_quick_no_op(slurm_env):
    before = pid_files(slurm_env)
    t0 = time.monotonic()
    again = local_slurm("start", timeout=120)
    elapsed = time.monotonic() - t0
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already up" in again.stdout, again.stdout
    assert elapsed < 5, f"second start took {elapsed:.1f} s"
    assert pid_files(slurm_env) == before
