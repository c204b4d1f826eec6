"""End to end on the embedded `local` cluster: real torchrun, real checkpoints."""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import CLI, FAST, REPO, run_cli

pytestmark = pytest.mark.slow


def _wait_for(path: Path, pattern: str, timeout: float = 120) -> re.Match:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists():
            hits = list(re.finditer(pattern, path.read_text(errors="replace")))
            if hits:
                return hits[-1]
        time.sleep(0.2)
    raise AssertionError(
        f"{pattern!r} did not appear in {path} within {timeout}s:\n"
        + (path.read_text(errors="replace")[-3000:] if path.exists() else "(no file)")
    )


def _losses(log: Path) -> dict:
    return {
        int(m.group(1)): float(m.group(2))
        for m in re.finditer(r"iteration\s+(\d+)/\s*\d+ \|.*?lm loss: ([0-9.E+-]+)", log.read_text())
    }


@pytest.mark.slow
def test_secret_values_reach_no_file_of_a_local_run(cli):
    value = "s3cr3t-VALUE-do-not-print"
    env = {"MY_KEY": value}
    r = cli(
        "submit",
        "smoke",
        "--secret",
        "MY_KEY",
        "-o",
        "json",
        "train.train_iters=1",
        "smoke.busbw_sizes=[1024]",
        "--follow",
        env=env,
        timeout=300,
    )
    assert r.code == 0, r.err
    run_dir = json.loads(r.out.split("\n}\n", 1)[0] + "\n}")["run_dir"]
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    assert summary["secrets_present"] == {"MY_KEY": True}  # it reached the training processes
    state = os.environ["BRIDGE_LAUNCH_HOME"]
    for root, _, files in os.walk(state):
        for f in files:
            data = open(os.path.join(root, f), "rb").read()
            assert value.encode() not in data, os.path.join(root, f)


@pytest.mark.usefixtures("home")
def test_interrupted_run_resumes_from_its_checkpoint():
    r = run_cli(
        "submit",
        "smoke",
        "-o",
        "json",
        "train.train_iters=30",
        "smoke.step_sleep=0.25",
        "train.exit_signal_handler=true",
        *FAST,
    )
    assert r.code == 0, r.err
    first = r.json()
    assert first["state"] == "RUNNING" and first["run_id"].startswith("smoke-")
    run_dir = Path(first["run_dir"])
    log = run_dir / "logs" / f"{first['run_id']}.log"
    _wait_for(log, r"iteration\s+12/")  # past the checkpoint at 10

    r = run_cli("cancel", first["run_id"])
    assert r.code == 0 and "CANCELLED" in r.out, r.err
    assert run_cli("cancel", first["run_id"]).code == 0  # idempotent
    saved = int((run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").read_text())
    assert 12 <= saved < 30  # SIGTERM to the trainer, with its exit handler on -> it saved the step it was on
    assert (run_dir / "checkpoints" / f"iter_{saved:07d}" / "metadata.json").exists()
    text = log.read_text()
    assert "[exiting program after receiving SIGTERM.]" in text
    assert "SignalException" not in text  # torchrun itself was not signalled
    before = _losses(log)
    assert max(before) == saved

    r = run_cli("resume", first["run_id"], "smoke.step_sleep=0", "--follow", timeout=300)
    assert r.code == 0, r.out + r.err
    runs = {x["run_id"]: x for x in run_cli("status", "-o", "json").json()}
    assert len(runs) == 2
    second = next(x for x in runs.values() if x["run_id"] != first["run_id"])
    assert second["resumed_from"] == first["run_id"] and second["chain"] == first["chain"] == first["run_id"]
    assert second["run_dir"] == first["run_dir"] and second["state"] == "COMPLETED"
    assert runs[first["run_id"]]["state"] == "CANCELLED"

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["resumed_from"] == saved and summary["start_step"] == saved + 1
    assert summary["steps_completed"] == 30 and summary["exit_reason"] == "completed"
    after = _losses(run_dir / "logs" / f"{second['run_id']}.log")
    assert min(after) == saved + 1 and max(after) == 30
    # the loss continues from where it was, it does not restart from the untrained value
    assert abs(after[saved + 1] - before[saved]) < 0.5
    assert after[saved + 1] < before[1] - 1.0


@pytest.mark.usefixtures("home")
def test_resume_is_refused_while_the_run_is_active():
    r = run_cli("submit", "smoke", "-o", "json", "train.train_iters=200", "smoke.step_sleep=0.2", *FAST)
    run_id = r.json()["run_id"]
    try:
        r = run_cli("resume", run_id)
        assert r.code == 2 and f"run {run_id} of this chain is RUNNING" in r.err, r.err
    finally:
        run_cli("cancel", run_id)


@pytest.mark.usefixtures("home")
def test_failed_job_is_reported_with_exit_code_1():
    r = run_cli("submit", "smoke", "--follow", "train.train_iters=5", "+smoke.fail_at_step=2", *FAST, timeout=300)
    assert r.code == 1, r.out + r.err
    last = r.out.strip().splitlines()[-1]
    assert "FAILED" in last and "InjectedFailure: smoke.fail_at_step=2: injected failure on rank" in last, last
    state = run_cli("status", "-o", "json").json()[0]
    assert state["state"] == "FAILED" and "exit code" in state["reason"]
    # the failing rank's own error line leads the reason, not torchrun's traceback after it
    assert re.match(
        r"rank \d: InjectedFailure: smoke.fail_at_step=2: injected failure on rank \d \(exit code 1\)$", state["reason"]
    ), state["reason"]
    assert "injected failure" in run_cli("status").out


@pytest.mark.usefixtures("home")
def test_ctrl_c_while_following_detaches():
    env = dict(os.environ)
    proc = subprocess.Popen(
        [*CLI, "submit", "smoke", "--follow", "train.train_iters=200", "smoke.step_sleep=0.2", *FAST],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    first = proc.stdout.readline()
    run_id = re.search(r"submitted (\S+)", first).group(1)
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"bridge-launch cancel {run_id}" in err and "keeps running" in err
    status = run_cli("status", run_id, "-o", "json").json()[0]
    assert status["state"] == "RUNNING"  # detaching did not stop the job
    assert run_cli("cancel", run_id).code == 0
    assert run_cli("status", run_id, "-o", "json").json()[0]["state"] == "CANCELLED"


@pytest.mark.usefixtures("home")
@pytest.mark.slow
def test_local_run_follow_json_resume_refusals_prune_and_import():
    r = run_cli("submit", "smoke", *FAST, "train.train_iters=2", "--follow", "-o", "json", timeout=300)
    assert r.code == 0, r.err
    final = json.loads(r.out)  # stdout: one JSON object, the run in its final state
    assert final["state"] == "COMPLETED" and final["reason"] == ""
    assert "[rank0]: " in r.err and "iteration" in r.err  # the log lines went to stderr, rank-prefixed
    assert "Failed to initialize NumPy" not in r.err
    run_id, run_dir = final["run_id"], Path(final["run_dir"])
    row = run_cli("status", "-o", "json").json()[0]
    assert re.fullmatch(r"\d\d:\d\d:\d\d", row["info"]["elapsed"]) and row["info"]["nodes"]
    text = run_cli("status").out.splitlines()[1].split()
    assert row["info"]["elapsed"] in text and row["info"]["nodes"] in text

    summary = run_dir / "summary.json"
    stamp = summary.stat().st_mtime_ns
    r = run_cli("resume", run_id)
    assert r.code == 2 and "already reached iteration 2" in r.err
    r = run_cli("resume", run_id, "model.hidden_size=66")
    assert r.code == 2 and "changes the model's shape" in r.err
    assert summary.stat().st_mtime_ns == stamp and len(run_cli("status", "-o", "json").json()) == 1
    r = run_cli("resume", run_id, "train.train_iters=3", "--follow", "-o", "json", timeout=300)
    assert r.code == 0, r.err
    second = json.loads(r.out)
    assert second["resumed_from"] == run_id and second["state"] == "COMPLETED"

    r = run_cli("prune", "--older-than", "0s", "--yes")
    assert r.code == 0 and "forgot 2 finished runs" in r.out
    assert run_cli("status", "-o", "json").json() == []
    r = run_cli("import", str(run_dir))
    assert r.code == 0 and f"{run_id}: imported (COMPLETED)" in r.out and f"{second['run_id']}: imported" in r.out
    runs = {x["run_id"]: x for x in run_cli("status", "-o", "json").json()}
    assert runs[second["run_id"]]["resumed_from"] == run_id and runs[second["run_id"]]["chain"] == run_id
    assert runs[run_id]["job_ids"] == final["job_ids"] and runs[run_id]["run_dir"] == str(run_dir)
    assert "already registered" in run_cli("import", str(run_dir)).out
    assert run_cli("resume", second["run_id"]).code == 2  # lineage and checkpoints came back with it


@pytest.mark.usefixtures("home")
@pytest.mark.slow
def test_prune_then_import_brings_back_an_experiment_and_its_runs_ages():
    r = run_cli(
        "submit", "smoke", *FAST, "--sweep", "train.train_iters=1,2", "--experiment", "iters", "-o", "json", timeout=300
    )
    assert r.code == 0, r.err
    members = r.json()["runs"]
    deadline = time.time() + 240
    while time.time() < deadline:
        rows = run_cli("status", "iters", "-o", "json").json()
        if all(x["state"] == "COMPLETED" for x in rows):
            break
        time.sleep(2)
    before = {x["run_id"]: x["updated"] for x in rows}
    assert set(before) == {m["run_id"] for m in members}, rows
    time.sleep(1.5)
    assert "forgot 2 finished runs" in run_cli("prune", "--older-than", "0s", "--yes").out
    assert run_cli("status", "iters").code == 2
    for m in members:
        r = run_cli("import", m["run_dir"])
        assert r.code == 0 and f"{m['run_id']}: imported (COMPLETED)" in r.out, r.out + r.err
    r = run_cli("status", "iters")
    assert r.code == 0 and "\nexperiment  iters: 2 runs" in r.out, r.out + r.err
    assert r.out.splitlines()[0].split()[:2] == ["RUN", "MEMBER"] and "train.train_iters=2" in r.out
    after = {x["run_id"]: x["updated"] for x in run_cli("status", "iters", "-o", "json").json()}
    # the runs' own last update (their logs' last write), not the import's time
    assert all(after[i] <= before[i] + 0.5 for i in before), (before, after)


@pytest.mark.usefixtures("home")
def test_trainers_that_outlive_their_launcher_are_seen_cancelled_and_block_a_resume():
    from bridge_launch.backends.local import run_processes

    r = run_cli("submit", "smoke", "-o", "json", "train.train_iters=400", "smoke.step_sleep=0.2", *FAST)
    assert r.code == 0, r.err
    run = r.json()
    _wait_for(Path(run["run_dir"]) / "logs" / f"{run['run_id']}.log", r"iteration\s+3/")
    os.killpg(int(run["job_ids"][-1]), signal.SIGKILL)  # the launcher and torchrun; the workers have their own sessions
    time.sleep(1)
    trainers = run_processes(run["run_id"])
    try:
        assert len(trainers) >= 2, trainers  # the two ranks (and their data loader workers), still training
        row = run_cli("status", run["run_id"], "-o", "json").json()[0]
        assert row["state"] == "RUNNING" and "the launcher is gone" in row["reason"], row
        assert f"{len(run_processes(run['run_id']))} of its processes still run" in row["reason"]
        r = run_cli("resume", run["run_id"], "train.train_iters=500")
        assert r.code == 2 and "of this chain is RUNNING" in r.err, r.err
        r = run_cli("cancel", run["run_id"])
        assert r.code == 0 and "CANCELLED" in r.out, r.out + r.err
        assert run_processes(run["run_id"]) == []
        assert run_cli("status", run["run_id"], "-o", "json").json()[0]["state"] == "CANCELLED"
    finally:
        for p in run_processes(run["run_id"]):
            os.kill(p, signal.SIGKILL)
