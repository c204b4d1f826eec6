"""--until-done on the local Slurm cluster: segment chains across 1-minute time limits,
retries of flaky failures, a stop on deterministic ones, cancel, and the checkpoint rule.
Slurm checks time limits and signals only about every 30 s, so bounds here are wide."""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import run_cli
from test_slurm_e2e import FAST, cluster  # noqa: F401  (the module-scoped cluster fixture)
from test_slurm_e2e import _wait_state as _wait

pytestmark = pytest.mark.slow


def _chain(*args, timeout=120):
    r = run_cli("submit", "smoke", "-c", "local-slurm", "--until-done", "-o", "json", *FAST, *args, timeout=timeout)
    assert r.code == 0, r.err
    return r.json()


def _segments(sub):
    path = Path(sub["run_dir"]) / "chain" / sub["run_id"] / "segments"
    rows = [line.split() for line in path.read_text().splitlines()]
    spans = {}
    for jid, seg, what, ts in rows:
        spans.setdefault((int(seg), jid), {})[what] = int(ts)
    return [dict(segment=k[0], job_id=k[1], **v) for k, v in sorted(spans.items())]


def _steps_by_job(sub, job_ids):
    out = []
    for jid in job_ids:
        text = "".join(p.read_text(errors="replace") for p in (Path(sub["run_dir"]) / "logs").glob(f"{jid}-*.log"))
        steps = [int(m) for m in re.findall(r"iteration\s+(\d+)/", text)]
        if steps:
            out.append((jid, steps))
    return out


def test_time_limited_segments_reach_the_target(cluster, home):
    sub = _chain("--time", "00:01:00", "--signal-lead", "30", "train.train_iters=110", "smoke.step_sleep=1.0",
                 "checkpoint.save_interval=5")
    st = _wait(sub["run_id"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=900)
    assert st["state"] == "COMPLETED", st
    segs = _segments(sub)
    ran = [s for s in segs if "end" in s]
    assert len(ran) >= 3, segs
    for a, b in zip(ran, ran[1:]):  # never two segments at once
        assert a["end"] <= b["start"], (a, b)
    runs = _steps_by_job(sub, [s["job_id"] for s in ran])
    assert runs[-1][1][-1] == 110
    for (_, before), (_, after) in zip(runs, runs[1:]):  # resumes lose at most one checkpoint interval
        assert 0 <= before[-1] - (after[0] - 1) <= 5, (before[-1], after[0])
    assert st["info"]["restarts"] == 0
    states = [s["state"] for s in st["info"]["segments"]]
    assert states[-1] == "CANCELLED"  # the spare successor is cancelled once the target is reached


def _pids_of(job_id: str, node_id: str):
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"SLURM_JOB_ID={job_id}".encode() in env and f"SLURM_NODEID={node_id}".encode() in env \
                and b"smoke.py" in (proc / "cmdline").read_bytes():
            yield int(proc.name)


def test_killed_node_is_retried_and_resumes(cluster, home):
    sub = _chain("--time", "00:05:00", "--max-restarts", "2", "train.train_iters=40", "smoke.step_sleep=0.3",
                 "checkpoint.save_interval=5")
    first = sub["job_ids"][0]
    log = Path(sub["run_dir"]) / "logs"
    deadline = time.time() + 180
    while time.time() < deadline:
        text = "".join(p.read_text(errors="replace") for p in log.glob(f"{first}-*.log"))
        if re.search(r"iteration\s+1[2-9]/", text):
            break
        time.sleep(0.5)
    killed = list(_pids_of(first, "1"))
    assert killed, "no training processes of node 2 found"
    for pid in killed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    st = _wait(sub["run_id"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=600)
    assert st["state"] == "COMPLETED", st
    assert st["info"]["restarts"] == 1
    runs = _steps_by_job(sub, st["job_ids"])
    assert len(runs) >= 2 and runs[1][1][0] > 1  # the retry resumed, it did not start over
    assert runs[0][1][-1] - (runs[1][1][0] - 1) <= 5


def test_deterministic_failure_stops_the_chain(cluster, home):
    sub = _chain("--time", "00:05:00", "train.train_iters=20", "+smoke.fail_at_step=3",
                 "+smoke.fail_message='torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB'")
    st = _wait(sub["run_id"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=300)
    assert st["state"] == "FAILED"
    assert st["reason"].startswith("deterministic failure in segment 1: ") and "CUDA out of memory" in st["reason"]
    assert st["info"]["restarts"] == 0
    assert [s["state"] for s in st["info"]["segments"]][1:] == ["CANCELLED"]  # its successor never ran
    assert len([s for s in _segments(sub) if "end" in s]) == 1
    text = run_cli("status", sub["run_id"]).out
    assert "CUDA out of memory" in text


def test_cancel_cancels_pending_segments(cluster, home):
    sub = _chain("--time", "00:05:00", "train.train_iters=500", "smoke.step_sleep=0.2")
    st = _wait(sub["run_id"], {"RUNNING"}, timeout=120)
    deadline = time.time() + 60
    while time.time() < deadline and len(st["job_ids"]) < 2:
        time.sleep(1)
        st = run_cli("status", sub["run_id"], "-o", "json").json()[0]
    assert len(st["job_ids"]) == 2
    r = run_cli("cancel", sub["run_id"])
    assert r.code == 0
    st = _wait(sub["run_id"], {"CANCELLED"}, timeout=60)
    ids = ",".join(st["job_ids"])
    deadline = time.time() + 30
    while time.time() < deadline:
        q = subprocess.run(["squeue", "-h", "-j", ids, "-t", "PD,R,CG", "-o", "%i"], capture_output=True, text=True,
                           env=dict(os.environ, SLURM_CONF=cluster))
        if not q.stdout.strip():
            break
        time.sleep(1)
    assert q.stdout.strip() == "", q.stdout  # neither the running segment nor its successor is left
    assert (Path(sub["run_dir"]) / "chain" / sub["run_id"] / "stopped").read_text().strip() == "cancelled by user"


def test_a_tracker_without_its_checkpoint_is_never_loaded(cluster, home, tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "latest_checkpointed_iteration.txt").write_text("10\n")  # published, but iter_0000010 is missing
    sub = _chain("--time", "00:05:00", "train.train_iters=20", f"checkpoint.save={ckpt}", f"checkpoint.load={ckpt}")
    st = _wait(sub["run_id"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=180)
    assert st["state"] == "FAILED" and "names iteration 10" in st["reason"], st
    assert not list((Path(sub["run_dir"]) / "logs").glob("*-node*.log"))  # training never started


def test_until_done_needs_slurm(home):
    r = run_cli("submit", "smoke", "--until-done", "--dry-run")
    assert r.code == 2 and "--until-done runs a chain of Slurm jobs" in r.err
