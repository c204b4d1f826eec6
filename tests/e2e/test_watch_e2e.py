"""Live metrics, the hardware gate, loss parity and experiments on the real two-node Slurm
cluster of this machine (scripts/local-slurm): the smoke workload prints Megatron-Bridge's lines
(trainer_protocol.py) from 4 ranks on 2 nodes, and bridge-launch reads them as it reads Bridge's."""

import json
import math
import os
import re
import secrets
import subprocess
import time
from pathlib import Path

import pytest

from conftest import CLI, FAST, REPO, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.slurm]


if os.geteuid() != 0:
    pytest.skip("the local Slurm cluster needs root", allow_module_level=True)


SCRIPT = REPO / "scripts" / "local-slurm"


@pytest.fixture(scope="module")
def cluster():
    subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, check=True, timeout=600)


def _submit(*args, cluster="local-slurm"):
    r = run_cli("submit", "smoke", "-c", cluster, "-o", "json", *FAST, *args, timeout=120)
    assert r.code == 0, r.err
    return r.json()


def _status(ref):
    r = run_cli("status", ref, "-o", "json")
    assert r.code == 0, r.err
    return r.json()


def _wait(ref, states, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        runs = _status(ref)
        if all(x["state"] in states for x in runs):
            return runs
        time.sleep(1)
    raise AssertionError(f"{ref} did not reach {states}: {runs}")


@pytest.mark.usefixtures("cluster", "home")
def test_live_metrics_watch_check_and_parity_on_slurm(tmp_path):
    sub = _submit("train.train_iters=40", "smoke.step_sleep=0.4", "dataset.seq_length=64")
    run_id = sub["run_id"]
    watch = subprocess.Popen(
        [*CLI, "status", run_id, "--watch", "--interval", "1", "-o", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        # while it runs: step/total, loss, grad norm, step time, tokens/s, ETA
        deadline, live = time.time() + 240, None
        while time.time() < deadline:
            (st,) = _status(run_id)
            m = st.get("metrics") or {}
            if st["state"] == "RUNNING" and 3 <= (m.get("step") or 0) <= 30:
                live = st
                break
            assert st["state"] in ("PENDING", "RUNNING"), st
            time.sleep(0.5)
        assert live, "no metrics while the run was running"
        m = live["metrics"]
        assert m["train_iters"] == 40 and math.isfinite(m["loss"]) and m["grad_norm"] >= 0
        # CPU processes: no TFLOP/s/GPU, which would read 0 (issue 42, item 12)
        assert m["step_time_s"] >= 0.4 and "tflops_per_gpu" not in m
        # 4 ranks x micro batch 4 = 16 sequences of 64 tokens per step
        assert m["global_batch"] == 16 and m["tokens_per_s"] == pytest.approx(16 * 64 / m["step_time_s"])
        assert m["eta_s"] == pytest.approx((40 - m["step"]) * m["step_time_s"])
        text = run_cli("status", run_id).out
        assert re.search(r"step        \d+/40 \(\d+%\)   ETA \d+s", text), text
        assert re.search(r"speed       [\d.]+ s/step   [\d,]+ tokens/s", text) and "TFLOP/s" not in text, text
        table = run_cli("status").out.splitlines()
        row = next(ln for ln in table if ln.startswith(run_id))
        assert re.search(r" \d+/40 +\d+\.\d{4} ", row), row  # the runs table: step and last loss
        out, err = watch.communicate(timeout=240)
    finally:
        if watch.poll() is None:
            watch.kill()
    assert watch.returncode == 0, err
    frames = [json.loads(line) for line in out.splitlines()]
    steps = [f["runs"][0]["metrics"].get("step") or 0 for f in frames]
    assert len(frames) >= 3 and steps == sorted(steps) and len(set(steps)) >= 2, steps
    assert frames[-1]["runs"][0]["state"] == "COMPLETED" and steps[-1] == 40
    (done,) = _status(run_id)
    assert done["info"]["step"] == 40 and done["metrics"]["saved"] == 40 and "eta_s" not in done["metrics"]

    # the seeds' hardware gate: 40/40, finite, no skipped/NaN, checkpoint at 40, validation and test
    r = run_cli("check", run_id, "--export-golden", tmp_path / "golden.json")
    assert r.code == 0 and f"{run_id}: PASSED (40/40)" in r.out, r.out + r.err
    assert "saved at iteration 40" in r.out and "iteration 40 on test set" in r.out
    golden = json.loads((tmp_path / "golden.json").read_text())
    assert sorted(int(k) for k in golden["lm loss"]["values"]) == list(range(1, 41))
    r = run_cli("compare", run_id, tmp_path / "golden.json", "--plot", tmp_path / "parity.svg")
    assert r.code == 0 and "PARITY" in r.out and (tmp_path / "parity.svg").stat().st_size > 20_000, r.out + r.err

    # logs of one rank, filtered and cut: the iteration lines come from the last rank (3)
    r = run_cli("logs", run_id, "--rank", "3", "--grep", r"iteration +\d+/", "--tail", "3")
    lines = r.out.splitlines()
    assert r.code == 0 and len(lines) == 3 and all(ln.startswith("[rank3]: ") for ln in lines), r.out
    assert "iteration       40/      40" in lines[-1]
    assert run_cli("logs", run_id, "--rank", "1", "--grep", r"iteration +\d+/").out == ""


@pytest.mark.usefixtures("cluster", "home")
def test_the_failing_ranks_first_error_line():
    sub = _submit(
        "train.train_iters=20",
        "+smoke.fail_at_step=3",
        "+smoke.fail_rank=2",
        "smoke.step_sleep=0.2",
        "--max-restarts",
        "0",
    )
    (st,) = _wait(sub["run_id"], {"FAILED", "COMPLETED"})
    assert st["state"] == "FAILED"
    err = st["metrics"]["error"]
    assert err.startswith("rank 2: InjectedFailure: smoke.fail_at_step=3: injected failure on rank 2"), err
    assert f"error       {err}" in run_cli("status", sub["run_id"]).out
    r = run_cli("check", sub["run_id"], "-o", "json")
    assert r.code == 1 and r.json()["results"][0]["criteria"][0]["evidence"] == "stopped early, 2/20 so far"


@pytest.mark.usefixtures("cluster", "home")
def test_metrics_and_check_over_ssh():
    sub = _submit("train.train_iters=8", cluster="local-slurm-ssh")
    (st,) = _wait(sub["run_id"], {"COMPLETED", "FAILED"})
    assert st["state"] == "COMPLETED" and st["metrics"]["step"] == 8 and st["metrics"]["saved"] == 8
    r = run_cli("check", sub["run_id"])
    assert r.code == 0 and "PASSED (8/8)" in r.out, r.out + r.err


@pytest.mark.usefixtures("cluster", "home")
def test_an_experiment_submitted_shown_and_compared_together(tmp_path):
    name = f"e2e-{secrets.token_hex(2)}"
    # step_sleep changes nothing the model sees: both runs train the same, loss for loss
    r = run_cli(
        "submit",
        "smoke",
        "-c",
        "local-slurm",
        "--sweep",
        "--experiment",
        name,
        *FAST,
        "train.train_iters=12",
        "smoke.step_sleep=0,0.05",
        "-o",
        "json",
        timeout=180,
    )
    assert r.code == 0, r.err
    d = r.json()
    assert d["experiment"] == name and [x["label"] for x in d["runs"]] == [
        "smoke.step_sleep=0",
        "smoke.step_sleep=0.05",
    ]
    runs = _wait(name, {"COMPLETED", "FAILED"})
    assert [x["state"] for x in runs] == ["COMPLETED", "COMPLETED"]
    assert all(x["info"]["experiment"] == name and x["metrics"]["step"] == 12 for x in runs)
    text = run_cli("status", name).out
    assert f"\nexperiment  {name}: 2 runs" in text and text.count("step        12/12") == 2, text
    table = run_cli("status").out.splitlines()
    assert table[0].split()[:2] == ["RUN", "EXPERIMENT"]
    rows = [ln for ln in table[1:] if name in ln]
    assert len(rows) == 2 and all(re.search(r" 12/12 +\d+\.\d{4} ", ln) for ln in rows), table
    r = run_cli("compare", name, "--plot", tmp_path / "experiment.png")
    assert r.code == 0 and "PARITY" in r.out, r.out + r.err
    data = (tmp_path / "experiment.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    r = run_cli("check", name)
    assert r.code == 0 and r.out.count("PASSED (12/12)") == 2, r.out + r.err
    assert Path(runs[0]["run_dir"]).is_dir()
