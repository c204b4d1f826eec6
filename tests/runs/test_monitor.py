"""Experiments (sweeps, several recipes, the registry's new tables), status with metrics, and the
logs filters, on recorded runs whose logs lie where their backend reads them. The same on a real
Slurm cluster: tests/e2e/test_watch_e2e.py."""

from __future__ import annotations

import json
import re
import time

import pytest

from run_records import _record
from training_logs import training_log


@pytest.mark.usefixtures("home")
def test_status_of_a_finished_run_shows_its_metrics_from_the_log_tail(cli):
    from bridge_launch.runs.registry import Registry

    reg = Registry()
    text = "\n".join(["[rank0]: " + x for x in ["starting"]]) + "\n" + training_log(100, save_at={50, 100})
    text += '[rank1]: Traceback (most recent call last):\n[rank1]:   File "x", line 1\n[rank1]: ValueError: boom\n'
    run = _record(reg, "smoke", log=text, overrides=("dataset.seq_length=128",))
    r = cli("status", run.run_id)
    assert r.code == 0, r.err
    out = r.out
    assert "step        100/100 (100%)" in out and "ETA" not in out  # finished: no ETA
    assert "lm loss 1.82085   grad norm 1   lr 0.0003" in out
    # 16 sequences of 128 tokens every 0.5 s; CPU processes: no TFLOP/s/GPU (issue 42, item 12)
    assert "0.5 s/step   4,096 tokens/s" in out and "TFLOP" not in out
    assert "saved       iteration 100 (the last checkpoint saved)" in out
    assert "error       rank 1: ValueError: boom" in out
    d = cli("status", run.run_id, "-o", "json").json()[0]
    m = d["metrics"]
    assert (m["step"], m["train_iters"], m["saved"], m["tokens_per_s"]) == (100, 100, 100, 4096.0)
    assert m["error"] == "rank 1: ValueError: boom" and "tflops_per_gpu" not in m
    # the same log from GPUs: the trainer's own TFLOP/s/GPU
    path = reg.jobs_dir() / f"{run.run_id}.json"
    path.write_text(json.dumps(dict(json.loads(path.read_text()), gpu_type="gb200")))
    assert "0.5 s/step   123.4 TFLOP/s/GPU   4,096 tokens/s" in cli("status", run.run_id).out


@pytest.mark.usefixtures("home")
def test_logs_rank_grep_tail(cli):
    from bridge_launch.runs.registry import Registry

    reg = Registry()
    run = _record(reg, "smoke", log=training_log(30, save_at={30}), nodes=2)  # 4 ranks: rank 3 logs
    r = cli("logs", run.run_id, "--rank", "3", "--grep", r"iteration\s+\d+/", "--tail", "2")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert len(lines) == 2 and all(ln.startswith("[rank3]: ") for ln in lines)
    assert "iteration       29/" in lines[0] and "iteration       30/" in lines[1]
    r = cli("logs", run.run_id, "--rank", "0", "--grep", "Step Time")
    assert r.code == 0 and len(r.out.splitlines()) == 30
    r = cli("logs", run.run_id, "--tail", "2")
    assert r.out.splitlines()[0].startswith("[rank3]:  validation loss at iteration 30 on test set")
    r = cli("logs", run.run_id, "--grep", "(")
    assert r.code == 2 and "--grep '(' is not a regular expression" in r.err


@pytest.mark.usefixtures("home")
def test_status_watch_json_is_one_object_per_line():
    """A finished run: one refresh, one line, then the watch ends."""
    import subprocess
    import sys

    from bridge_launch.runs.registry import Registry
    from conftest import CLI, REPO

    reg = Registry()
    run = _record(reg, "smoke", log=training_log(20, save_at={20}))
    t0 = time.time()
    out = subprocess.run(
        [*CLI, "status", run.run_id, "--watch", "--interval", "0.2", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 1 and time.time() - t0 < 30
    frame = json.loads(lines[0])
    assert frame["runs"][0]["run_id"] == run.run_id and frame["runs"][0]["metrics"]["step"] == 20
    assert set(frame) == {"time", "runs"} and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", frame["time"])
    # the documented choice: a frame's runs are exactly what `status -o json` prints, one array
    once = json.loads(
        subprocess.run([*CLI, "status", run.run_id, "-o", "json"], capture_output=True, text=True, cwd=REPO).stdout
    )
    assert [sorted(x) for x in once] == [sorted(x) for x in frame["runs"]]
    assert sys.executable  # the same interpreter


def test_a_failed_runs_reason_leads_with_the_failing_ranks_error():
    from bridge_launch.runs.lifecycle import failure_reason

    err = "rank 3: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert failure_reason({"state": "FAILED", "reason": "exit code 1", "error": err}) == f"{err} (exit code 1)"
    assert failure_reason({"state": "FAILED", "reason": "", "error": err}) == err
    chain = "deterministic failure in segment 2: torch.OutOfMemoryError: CUDA out of memory"
    assert failure_reason({"state": "FAILED", "reason": chain, "error": err}) == chain  # the chain's own words stay
    assert failure_reason({"state": "RUNNING", "reason": "", "error": err}) == ""  # a warning line while running
    assert failure_reason({"state": "FAILED", "reason": "exit code 1"}) == "exit code 1"


@pytest.mark.usefixtures("home")
def test_a_cancelled_run_shows_no_error_from_the_signal_its_cancel_sent(cli):
    from bridge_launch.runs.registry import Registry

    reg = Registry()
    text = training_log(20, stop=12, test=False, validation=False)
    text += "[rank0]: torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
    run = _record(reg, "smoke", state="CANCELLED", log=text)
    reg.update(run.run_id, reason="cancelled by user", info=dict(run.info, cancelled=True))
    r = cli("status", run.run_id)
    assert r.code == 0 and "cancelled by user" in r.out, r.out
    assert "error " not in r.out and "ChildFailedError" not in r.out, r.out
    assert "error" not in cli("status", run.run_id, "-o", "json").json()[0]["metrics"]
    reg.update(run.run_id, state="FAILED", reason="exit code 1", info={})  # a failure still names it
    assert "ChildFailedError" in cli("status", run.run_id).out
