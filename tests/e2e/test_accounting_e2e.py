"""GPU-hours, accounted (runs/accounting.py), on the local two-node Slurm cluster (scripts/local-slurm): a
chain with a canary whose first segment loses a node after its first checkpoint; its retry resumes
from that checkpoint and trains the steps after it again. The account must cover every job the
scheduler ran for the run (sacct's elapsed times x GPUs, read here on their own), and its parts must
match what the logs show: the canary lost whole, the failed segment's end lost, the steps run twice
counted as redone, the saves as checkpointing."""

import os
import re
import subprocess
from pathlib import Path

import pytest
from test_slurm_e2e import _wait_state as _wait
from test_until_done_e2e import _steps_by_job, kill_node_when

from conftest import FAST, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

if os.geteuid() != 0:
    pytest.skip("the local Slurm cluster needs root", allow_module_level=True)

CATEGORIES = ("startup", "training", "redone", "lost", "checkpointing")


def _sacct(cluster: str, ids: list[str]) -> dict:
    """{job id: (elapsed seconds, nodes)} as Slurm's accounting has them."""
    proc = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", ",".join(ids), "-o", "JobID,ElapsedRaw,NNodes"],
        capture_output=True,
        text=True,
        env=dict(os.environ, SLURM_CONF=cluster),
        check=True,
    )
    rows = [line.split("|") for line in proc.stdout.split()]
    return {jid: (int(elapsed), int(nodes)) for jid, elapsed, nodes in rows}


@pytest.mark.usefixtures("home")
def test_a_chain_with_a_canary_and_a_failed_segment_adds_up_to_the_schedulers_elapsed_times(cluster, tmp_path):
    r = run_cli(
        "submit",
        "smoke",
        "-c",
        "local-slurm",
        "--until-done",
        "--canary",
        "-o",
        "json",
        *FAST,
        "--time",
        "00:05:00",
        "--max-restarts",
        "2",
        "train.train_iters=16",
        "smoke.step_sleep=0.5",
        "checkpoint.save_interval=4",
        "smoke.save_sleep=0.5",
    )
    assert r.code == 0, r.err
    sub = r.json()
    kill_node_when(sub, sub["job_ids"][0], r"iteration\s+[5-7]/")  # after the save at 4, before the one at 8
    st = _wait(sub["run_id"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=600)
    assert st["state"] == "COMPLETED", (st, run_cli("logs", sub["run_id"]).out[-3000:])
    canary = st["info"]["canary"]["job_id"]

    acc = run_cli("report", sub["run_id"], "-o", "json").json()
    jobs = {j["job_id"]: j for j in acc["jobs"]}
    ran = [jid for jid in st["job_ids"] if jid in jobs and jobs[jid]["elapsed_s"] > 0]
    assert len(ran) == 2, acc["jobs"]  # the failed segment and its retry; the spare successor never ran
    first, second = ran

    # every job the scheduler ran for the run, the canary included, and nothing else
    sacct = _sacct(cluster, [canary, *st["job_ids"]])
    assert set(jobs) == {canary, *st["job_ids"]}
    gpu_hours = sum(elapsed * nodes * 2 for elapsed, nodes in sacct.values()) / 3600  # 2 processes a node
    assert acc["gpu_hours"]["total"] == pytest.approx(gpu_hours, abs=1e-5)
    assert sum(acc["gpu_hours"][k] for k in CATEGORIES) == pytest.approx(gpu_hours, abs=1e-5)
    for jid, j in jobs.items():  # each job's parts add up to its own elapsed time
        assert sum(j["seconds"][k] for k in CATEGORIES) == pytest.approx(sacct[jid][0], abs=0.01), j
        assert j["gpus"] == sacct[jid][1] * 2 and all(v >= 0 for v in j["seconds"].values()), j

    # the canary: lost whole
    assert jobs[canary]["kind"] == "canary" and jobs[canary]["seconds"]["lost"] == sacct[canary][0]
    assert acc["lost_by"]["canary"] == pytest.approx(sacct[canary][0] * 4 / 3600, abs=1e-6)
    # the failed segment: its start-up and what came after its last step lost, its steps trained
    assert jobs[first]["state"] == "FAILED" and jobs[first]["seconds"]["lost"] > 0
    assert jobs[first]["seconds"]["startup"] == 0 and jobs[first]["seconds"]["training"] > 0
    # the retry resumed from the checkpoint at 4 and ran again the steps the failed segment had printed
    steps = dict(_steps_by_job(sub, [first, second]))
    again = max(steps[first]) - (min(steps[second]) - 1)
    assert min(steps[second]) == 5 and again >= 1, steps
    assert jobs[second]["redone_steps"] == acc["redone_steps"] == again
    assert jobs[second]["seconds"]["redone"] > 0 and jobs[first]["seconds"]["redone"] == 0
    assert jobs[second]["state"] == "COMPLETED" and jobs[second]["seconds"]["startup"] > 0
    assert jobs[second]["seconds"]["lost"] == 0
    # the saves, by the trainer's own timer (smoke.save_sleep=0.5 s a save: at 4 in the first, 8, 12, 16 after)
    text = "".join(p.read_text(errors="replace") for p in (Path(sub["run_dir"]) / "logs").glob(f"{second}-*.log"))
    timed = [float(hi) for hi in re.findall(r"save-checkpoint \.*: \([\d.]+, ([\d.]+)\)", text)]
    assert len(timed) == 3 and jobs[second]["seconds"]["checkpointing"] == pytest.approx(sum(timed) / 1000, abs=0.01)

    shown = run_cli("status", sub["run_id"]).out
    assert "gpu-hours   " in shown and "lost to canary " in shown and f"{again} step(s) trained again" in shown, shown
    page = run_cli("report", sub["run_id"], "--plot", str(tmp_path / "split.png"))
    assert page.code == 0, page.err
    assert f"segment 1 (job {first})" in page.out and f"canary (job {canary})" in page.out, page.out
    assert (tmp_path / "split.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
