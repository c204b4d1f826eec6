"""End to end against a real two-node Slurm cluster on this machine (scripts/local-slurm):
nodes in their own network namespaces, slurmdbd accounting, an sshd login host."""

import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import CLI, FAST, REPO, local_slurm, run_cli, write
from launch_checks import check_torchrun_artifacts

pytestmark = [pytest.mark.slow, pytest.mark.slurm]


if os.geteuid() != 0:
    pytest.skip("the local Slurm cluster needs root", allow_module_level=True)


def _wait_for(pattern: str, files, timeout: float = 180):
    deadline = time.time() + timeout
    while time.time() < deadline:
        for f in files():
            if re.search(pattern, f.read_text(errors="replace")):
                return
        time.sleep(0.5)
    raise AssertionError(f"{pattern!r} did not appear")


def _slurm_logs(run_dir: Path):
    # the run's log files (logs/torchrun/ is torchrun's own --log-dir, a tree)
    return lambda: sorted(f for f in (run_dir / "logs").glob("*") if f.is_file()) if (run_dir / "logs").is_dir() else []


def _submit(*args, timeout=120):
    r = run_cli("submit", "smoke", "-c", "local-slurm", "-o", "json", *FAST, *args, timeout=timeout)
    assert r.code == 0, r.err
    return r.json()


def _wait_state(run_id, states, timeout=600):
    deadline = time.time() + timeout
    while time.time() < deadline:
        r = run_cli("status", run_id, "-o", "json")
        assert r.out.strip(), f"status {run_id} printed nothing (exit {r.code}): {r.err}"
        st = r.json()[0]
        if st["state"] in states:
            return st
        time.sleep(2)  # each status is a process: ~0.4 s of CPU that the jobs need
    raise AssertionError(f"{run_id} did not reach {states}: {st}")


def _summary(run_dir):
    return json.loads((Path(run_dir) / "summary.json").read_text())


@pytest.mark.usefixtures("home", "cluster")
@pytest.mark.slow
@pytest.mark.parametrize("until_done", [False, True])
def test_slurm_cancel_signals_the_trainers_not_torchrun(until_done):
    args = [
        "submit",
        "smoke",
        "-c",
        "local-slurm",
        *FAST,
        "train.train_iters=400",
        "smoke.step_sleep=0.3",
        "-o",
        "json",
    ]
    r = run_cli(*args, *(["--until-done"] if until_done else []))
    assert r.code == 0, r.err
    sub = r.json()
    run_dir = Path(sub["run_dir"])
    _wait_for(r"iteration\s+12/", _slurm_logs(run_dir))  # past the checkpoint at 10
    r = run_cli("cancel", sub["run_id"], timeout=300)
    assert r.code == 0 and "CANCELLED" in r.out, r.err
    st = run_cli("status", sub["run_id"], "-o", "json").json()[0]
    assert st["state"] == "CANCELLED"
    text = "".join(p.read_text(errors="replace") for p in _slurm_logs(run_dir)())
    assert "SignalException" not in text  # torchrun was not signalled
    # each node's launcher signals its trainers once; a node whose trainers had already stopped (the
    # other node's signal agreed a stop among all ranks before this node polled the stop file) has
    # none left to signal
    signalled = re.findall(r"bridge-launch: (node\d): SIGTERM to the training processes \d+", text)
    assert signalled and len(signalled) == len(set(signalled)), text[-3000:]
    if until_done:  # the chain's trainers save on the way out
        saved = int((run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").read_text())
        assert saved >= 12 and "[exiting program after receiving SIGTERM.]" in text
        assert "bridge-launch: cancelled: the training processes are told to save and exit" in text


@pytest.mark.usefixtures("home")
def test_job_completes_across_two_hosts(cluster):
    shown = run_cli(
        "submit", "smoke", "-c", "local-slurm", "--dry-run", "-o", "json", *FAST, "train.train_iters=6"
    ).json()["artifact"]["text"]
    sub = _submit("train.train_iters=6")
    assert sub["state"] == "PENDING" and sub["job_ids"][0].isdigit()
    st = _wait_state(sub["run_id"], {"COMPLETED", "FAILED"})
    assert st["state"] == "COMPLETED", st
    s = _summary(sub["run_dir"])
    assert s["world_size"] == 4 and s["nodes"] == 2
    assert sorted(set(s["hosts"])) == ["node1", "node2"]
    assert os.uname().nodename not in s["hosts"]
    assert s["steps_completed"] == 6
    # the script shown by --dry-run is the one submitted, once the run id is filled in
    submitted = (Path(sub["run_dir"]) / "launch" / f"{sub['run_id']}.sbatch").read_text()
    assert shown.replace("@RUN_ID@", sub["run_id"]) == submitted
    # accounting knows the job
    acct = subprocess.run(
        ["sacct", "-n", "-P", "-X", "-j", sub["job_ids"][0], "-o", "State"],
        capture_output=True,
        text=True,
        env=dict(os.environ, SLURM_CONF=cluster),
    )
    assert acct.stdout.strip() == "COMPLETED"
    # logs from both nodes, rank-prefixed, after the job ended
    logs = run_cli("logs", sub["run_id"])
    assert logs.code == 0
    assert re.search(r"\[rank0\]: .*host=node1", logs.out) and re.search(r"\[rank[23]\]: .*host=node2", logs.out)
    check_torchrun_artifacts(sub["run_dir"], sub["job_ids"][0], cluster)


@pytest.mark.usefixtures("cluster", "home")
def test_logs_follow_shows_both_nodes_while_running():
    sub = _submit("train.train_iters=30", "smoke.step_sleep=0.3")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge_launch.cli.app", "logs", sub["run_id"], "-f"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=dict(os.environ),
    )
    seen, deadline = [], time.time() + 180
    try:
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            text = "".join(seen)
            if "host=node1" in text and "host=node2" in text and re.search(r"iteration\s+\d+/", text):
                break
        state = run_cli("status", sub["run_id"], "-o", "json").json()[0]["state"]
        assert state == "RUNNING"
    finally:
        run_cli("cancel", sub["run_id"])
        proc.kill()
    text = "".join(seen)
    assert "host=node1" in text and "host=node2" in text


def test_cancel_running_and_pending(cluster, home):
    write(home / "clusters" / "later.toml", 'extends = "local-slurm"\n[slurm]\nsbatch_args = ["--begin=now+1hour"]\n')
    pending = run_cli("submit", "smoke", "-c", "later", "-o", "json", *FAST).json()
    running = _submit("train.train_iters=500", "smoke.step_sleep=0.2")
    st = _wait_state(pending["run_id"], {"PENDING"})
    assert "BeginTime" in st["reason"]
    _wait_state(running["run_id"], {"RUNNING"})
    for run in (pending, running):
        r = run_cli("cancel", run["run_id"])
        assert r.code == 0 and "CANCELLED" in r.out
        assert run_cli("cancel", run["run_id"]).code == 0  # idempotent
    for run in (pending, running):
        assert _wait_state(run["run_id"], {"CANCELLED"}, timeout=60)["state"] == "CANCELLED"
    q = subprocess.run(
        ["squeue", "-h", "-j", f"{pending['job_ids'][0]},{running['job_ids'][0]}", "-t", "PD,R"],
        capture_output=True,
        text=True,
        env=dict(os.environ, SLURM_CONF=cluster),
    )
    assert q.stdout.strip() == ""


@pytest.mark.usefixtures("cluster", "home")
def test_resume_continues_from_the_checkpoint():
    first = _submit("train.train_iters=40", "smoke.step_sleep=0.25")
    log = Path(first["run_dir"]) / "logs"
    deadline = time.time() + 180
    while time.time() < deadline:
        text = "".join(p.read_text(errors="replace") for p in log.glob("*.log"))
        if re.search(r"iteration\s+1[2-9]/", text):
            break
        time.sleep(0.5)
    assert run_cli("cancel", first["run_id"]).code == 0
    # the smoke recipe saves every 10 steps; Bridge's exit handler is off by default, so a cancel
    # does not save: the run resumes from the periodic checkpoint
    tracker = Path(first["run_dir"]) / "checkpoints" / "latest_checkpointed_iteration.txt"
    saved = int(tracker.read_text())
    assert 10 <= saved < 40
    _wait_state(first["run_id"], {"CANCELLED"})
    r = run_cli("resume", first["run_id"], "smoke.step_sleep=0", "-o", "json")
    assert r.code == 0, r.err
    second = r.json()
    assert second["resumed_from"] == first["run_id"] and second["run_dir"] == first["run_dir"]
    assert _wait_state(second["run_id"], {"COMPLETED", "FAILED"})["state"] == "COMPLETED"
    s = _summary(first["run_dir"])
    assert s["start_step"] == saved + 1 and s["steps_completed"] == 40 and s["resumed_from"] == saved


@pytest.mark.slurm_alone  # slurmdbd is stopped while it runs
@pytest.mark.usefixtures("cluster", "home")
def test_status_without_and_with_accounting():
    local_slurm("stop-dbd")
    try:
        sub = _submit("train.train_iters=2")
        st = _wait_state(sub["run_id"], {"COMPLETED", "FAILED"})
        assert st["state"] == "COMPLETED"
        failed = _submit("train.train_iters=4", "+smoke.fail_at_step=2", "--max-restarts", "0")
        st = _wait_state(failed["run_id"], {"COMPLETED", "FAILED"})
        assert st["state"] == "FAILED"
    finally:
        local_slurm("start-dbd")
    # the exit marker the batch script writes agrees, for clusters where neither squeue nor sacct knows
    assert (Path(sub["run_dir"]) / "exit" / sub["job_ids"][0]).read_text().strip() == "0"
    assert (Path(failed["run_dir"]) / "exit" / failed["job_ids"][0]).read_text().strip() != "0"
    from bridge_launch.backends.slurm.backend import Backend
    from bridge_launch.spec.clusters import load

    s = load("local-slurm")["slurm"]
    jid = failed["job_ids"][0]
    deadline = time.time() + 60  # slurmctld hands records to slurmdbd in batches, seconds later
    while time.time() < deadline and Backend().sacct(s, [jid]).get(jid, {}).get("state") != "FAILED":
        time.sleep(1)
    assert Backend().sacct(s, [jid])[jid]["state"] == "FAILED"


@pytest.mark.slurm_alone  # 20 jobs fill the queue
@pytest.mark.usefixtures("home")
def test_twenty_concurrent_submits(cluster):
    def one(i):
        return run_cli(
            "submit",
            "smoke",
            "-c",
            "local-slurm",
            "-o",
            "json",
            *FAST,
            f"train.train_iters={i + 1}",
            "smoke.step_sleep=1",
            timeout=300,
        )

    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(one, range(20)))
    try:
        assert all(r.code == 0 for r in results), [r.err for r in results if r.code]
        subs = [r.json() for r in results]
        assert len({s["run_id"] for s in subs}) == 20 and len({s["job_ids"][0] for s in subs}) == 20
        records = {r["run_id"]: r for r in run_cli("status", "--all", "-o", "json").json()}
        assert set(records) == {s["run_id"] for s in subs}
        for s in subs:
            job = json.loads((Path(s["run_dir"]) / "launch" / f"{s['run_id']}.json").read_text())
            assert job["run_id"] == s["run_id"]
            assert records[s["run_id"]]["job_ids"] == s["job_ids"]
    finally:
        subprocess.run(
            ["scancel", *[r.json()["job_ids"][0] for r in results if r.code == 0]],
            env=dict(os.environ, SLURM_CONF=cluster),
        )


@pytest.mark.slurm_alone  # slurmctld is stopped while it runs
@pytest.mark.usefixtures("cluster", "home")
def test_submit_while_the_controller_is_down():
    local_slurm("stop-ctld")
    try:
        r = run_cli("submit", "smoke", "-c", "local-slurm", *FAST, timeout=180)
    finally:
        local_slurm("start-ctld")
    assert r.code != 0
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bridge-launch: error:"), r.err
    assert run_cli("status", "-o", "json").json() == []
    assert (
        not any((Path(os.environ["BRIDGE_LAUNCH_HOME"]) / "runs").glob("*"))
        if (Path(os.environ["BRIDGE_LAUNCH_HOME"]) / "runs").exists()
        else True
    )


@pytest.mark.usefixtures("cluster", "home")
def test_slurm_rejects_before_submitting():
    r = run_cli("submit", "smoke", "-c", "local-slurm", "-p", "nosuchpartition", *FAST)
    assert r.code == 2 and "Slurm would reject this job" in r.err
    assert run_cli("status", "-o", "json").json() == []


@pytest.mark.usefixtures("cluster", "home")
def test_quoted_values_arrive_byte_identical_and_nothing_runs(tmp_path):
    canary = tmp_path / "pwned"
    nasty = [
        f"+smoke.a='two words; $(touch {canary}) `touch {canary}` | cat * & echo'",
        "+smoke.b='it\\'s \"quoted\"'",
        "+smoke.c='line one\nline two'",
        '+smoke.d="${oc.env:HOME}"',
    ]
    sub = _submit("train.train_iters=1", *nasty)
    assert _wait_state(sub["run_id"], {"COMPLETED", "FAILED"})["state"] == "COMPLETED"
    argv = _summary(sub["run_dir"])["argv"]
    for token in nasty:
        assert token in argv, token
    assert not canary.exists()
    bad = run_cli("submit", "smoke", "-c", "local-slurm", f"+smoke.a=$(touch {canary})")
    assert bad.code == 2 and "invalid override" in bad.err
    assert not canary.exists()


@pytest.mark.usefixtures("cluster", "home")
def test_logs_and_status_over_ssh_read_the_login_host_not_local_files():
    """A client that cannot see the run dir (its own mount namespace, an empty tmpfs over the jobs
    root) still gets every node's log lines and the step reached: both come over SSH."""
    import shutil

    if not shutil.which("unshare"):
        pytest.skip("unshare is not installed")
    r = run_cli("submit", "smoke", "-c", "local-slurm-ssh", "-o", "json", *FAST, "train.train_iters=6")
    assert r.code == 0, r.err
    sub = r.json()
    assert _wait_state(sub["run_id"], {"COMPLETED", "FAILED"})["state"] == "COMPLETED"
    root = "/var/lib/bridge-launch-slurm/jobs"
    assert sub["run_dir"].startswith(root + "/")

    def hidden(*args):
        script = f'mount -t tmpfs bl-hidden {root} && test ! -e "$1" && shift && exec "$@"'
        return subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", sub["run_dir"], *CLI, *args],
            capture_output=True,
            text=True,
            timeout=120,
        )

    first = hidden("logs", sub["run_id"])
    assert first.returncode == 0, first.stderr
    assert re.search(r"\[rank0\]: .*host=node1", first.stdout) and re.search(
        r"\[rank[23]\]: .*host=node2", first.stdout
    )
    local = run_cli("logs", sub["run_id"])  # this process sees the dir, but an SSH profile reads remotely anyway
    assert local.code == 0 and sorted(local.out.splitlines()) == sorted(first.stdout.splitlines())
    again = hidden("logs", sub["run_id"])  # nothing new to fetch: the same lines, once each
    assert again.stdout == first.stdout
    st = hidden("status", sub["run_id"], "-o", "json")
    assert st.returncode == 0, st.stderr
    got = json.loads(st.stdout)[0]
    assert got["state"] == "COMPLETED" and got["info"]["step"] == 6, got


@pytest.mark.usefixtures("cluster", "home")
def test_submit_over_ssh_with_a_secret():
    value = "ssh-s3cr3t-" + os.urandom(6).hex()
    env = {"MY_TOKEN": value}
    r = run_cli(
        "submit",
        "smoke",
        "-c",
        "local-slurm-ssh",
        "--secret",
        "MY_TOKEN",
        "-o",
        "json",
        *FAST,
        "train.train_iters=6",
        "smoke.step_sleep=0.5",
        env=env,
    )
    assert r.code == 0, r.err
    sub = r.json()
    assert sub["run_dir"].startswith("/var/lib/bridge-launch-slurm/jobs/")
    # while it runs, no process has the value on its command line
    deadline = time.time() + 240
    while time.time() < deadline:
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                assert value.encode() not in cmdline.read_bytes(), cmdline
            except OSError:
                pass
        if run_cli("status", sub["run_id"], "-o", "json").json()[0]["state"] in ("COMPLETED", "FAILED"):
            break
        time.sleep(1)
    assert _wait_state(sub["run_id"], {"COMPLETED", "FAILED"})["state"] == "COMPLETED"
    assert _summary(sub["run_dir"])["secrets_present"] == {"MY_TOKEN": True}
    assert value not in r.out + r.err
    # no source on the cluster: the value went through sbatch's environment, and the warning says
    # exactly where Slurm keeps it (test_slurm_secrets_e2e.py has the way that keeps it out)
    jid = sub["job_ids"][0]
    kept = f"/var/lib/bridge-launch-slurm/spool/slurmctld/hash.{int(jid) % 10}/job.{jid}/environment"
    assert f"warning: MY_TOKEN went to the job through sbatch's environment: slurmctld keeps it in {kept}" in r.err
    assert f"MY_TOKEN={value}".encode() in Path(kept).read_bytes()
    for root in (sub["run_dir"], os.environ["BRIDGE_LAUNCH_HOME"]):
        for dirpath, _, files in os.walk(root):
            for f in files:
                path = os.path.join(dirpath, f)
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                assert value.encode() not in Path(path).read_bytes(), path


@pytest.mark.usefixtures("cluster")
def test_a_profile_that_asks_for_pmix_runs_on_two_nodes(home):
    """[slurm] mpi = "pmix": each node keeps PMIx's per-job directory in its own TmpFS (slurm.conf
    TmpFS=<state>/tmp/%n), so the two nodes on one filesystem do not collide (File exists)."""
    write(home / "clusters" / "pmix.toml", 'extends = "local-slurm"\n[slurm]\nmpi = "pmix"\n')
    r = run_cli("submit", "smoke", "-c", "pmix", "-o", "json", *FAST, "train.train_iters=3")
    assert r.code == 0, r.err
    sub = r.json()
    assert "--mpi=pmix" in (Path(sub["run_dir"]) / "launch" / f"{sub['run_id']}.sbatch").read_text()
    assert _wait_state(sub["run_id"], {"COMPLETED", "FAILED"})["state"] == "COMPLETED"
    logs = run_cli("logs", sub["run_id"]).out
    assert "File exists" not in logs and "launch failed" not in logs
    assert sorted(set(_summary(sub["run_dir"])["hosts"])) == ["node1", "node2"]
