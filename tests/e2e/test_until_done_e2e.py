"""--until-done on the local Slurm cluster: segment chains across time limits with the smoke
workload speaking Megatron-Bridge's protocol (workloads/trainer_protocol.py), retries of flaky
failures, a stop on deterministic ones and on segments that save nothing, cancel, and the
checkpoint publication rule. Slurm checks time limits and signals only about every 30 s, so
bounds here are wide."""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from test_slurm_e2e import _wait_state as _wait

from conftest import FAST, run_cli, slurm_hold
from launch_checks import check_torchrun_artifacts

pytestmark = [pytest.mark.slow, pytest.mark.slurm]


def _submit(*args, timeout=120) -> dict:
    """submit's answer for the smoke workload on local-slurm with these options and overrides."""
    r = run_cli("submit", "smoke", "-c", "local-slurm", "-o", "json", *FAST, *args, timeout=timeout)
    assert r.code == 0, r.err
    return r.json()


def _chain(*args, timeout=120):
    return _submit("--until-done", *args, timeout=timeout)


ENDED = {"COMPLETED", "STOPPED", "FAILED", "TIMEOUT", "CANCELLED"}


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


def _pids_of(job_id: str, node_id: str):
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            f"SLURM_JOB_ID={job_id}".encode() in env
            and f"SLURM_NODEID={node_id}".encode() in env
            and b"smoke.py" in (proc / "cmdline").read_bytes()
        ):
            yield int(proc.name)


def kill_node_when(sub: dict, job_id: str, pattern: str, node_id: str = "1", timeout: float = 600) -> None:
    """Once `pattern` shows in job `job_id`'s node logs, SIGKILL that node's training processes (a lost node).
    The deadline is wide: the job may wait for a canary and for the other lane's jobs, and start-up on a
    loaded 2-core machine takes minutes (CI: more than 180 s)."""
    logs = Path(sub["run_dir"]) / "logs"
    deadline = time.time() + timeout
    text = ""
    while time.time() < deadline:
        text = "".join(p.read_text(errors="replace") for p in logs.glob(f"{job_id}-*.log"))
        if re.search(pattern, text):
            break
        time.sleep(0.5)
    else:
        state = run_cli("status", sub["run_id"]).out
        raise AssertionError(f"{pattern!r} not in job {job_id}'s logs after {timeout:.0f} s: {state}\n{text[-2000:]}")
    killed = list(_pids_of(job_id, node_id))
    assert killed, f"no training processes of node {int(node_id) + 1} found once {pattern!r} showed:\n{text[-2000:]}"
    for pid in killed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _segment_text(sub, job_id):
    logs = Path(sub["run_dir"]) / "logs"
    return "".join(
        p.read_text(errors="replace")
        for p in [logs / f"sbatch-{job_id}.out", *logs.glob(f"{job_id}-*.log")]
        if p.exists()
    )


@pytest.mark.usefixtures("home")
def test_time_limited_segments_reach_the_target(cluster):
    """2-minute segments told to save 60 s before their limit reach train_iters through two or more
    of them. slurmctld checks time limits every 30 s and signals at the first check within lead + 30 s
    of the limit, so a segment is signalled 30 to 60 s after its start: at most ~55 steps of 1 s
    after the trainer's start-up, fewer than the 70 asked, and never before a loaded machine's
    start-up is over (a 1-minute segment with a 30 s lead, signalled 0 to 30 s in, made no progress
    twice in a row on a loaded CI machine and stopped its chain)."""
    sub = _chain(
        "--time",
        "00:02:00",
        "--signal-lead",
        "60",
        "train.train_iters=70",
        "smoke.step_sleep=1.0",
        "checkpoint.save_interval=5",
    )
    st = _wait(sub["run_id"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=900)
    assert st["state"] == "COMPLETED", st
    segs = _segments(sub)
    ran = [s for s in segs if "end" in s]
    assert len(ran) >= 2, segs
    for a, b in zip(ran, ran[1:], strict=False):  # never two segments at once
        assert a["end"] <= b["start"], (a, b)
    runs = _steps_by_job(sub, [s["job_id"] for s in ran])
    assert runs[-1][1][-1] == 70
    for (_, before), (_, after) in zip(runs, runs[1:], strict=False):  # resumes lose at most one checkpoint interval
        assert 0 <= before[-1] - (after[0] - 1) <= 5, (before[-1], after[0])
    assert st["info"]["restarts"] == 0
    states = [s["state"] for s in st["info"]["segments"]]
    assert states[-1] == "CANCELLED"  # the spare successor is cancelled once the target is reached
    for s in ran:  # the per-node launcher passes torchrun the same log dir and rendezvous settings
        check_torchrun_artifacts(sub["run_dir"], s["job_id"], cluster)


@pytest.mark.usefixtures("cluster", "home")
def test_killed_node_is_retried_and_resumes():
    sub = _chain(
        "--time",
        "00:05:00",
        "--max-restarts",
        "2",
        "train.train_iters=40",
        "smoke.step_sleep=0.3",
        "checkpoint.save_interval=5",
    )
    kill_node_when(sub, sub["job_ids"][0], r"iteration\s+1[2-9]/")
    st = _wait(sub["run_id"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=600)
    assert st["state"] == "COMPLETED", st
    assert st["info"]["restarts"] == 1
    runs = _steps_by_job(sub, st["job_ids"])
    assert len(runs) >= 2 and runs[1][1][0] > 1  # the retry resumed, it did not start over
    assert runs[0][1][-1] - (runs[1][1][0] - 1) <= 5


@pytest.mark.usefixtures("cluster", "home")
def test_deterministic_failure_stops_the_chain():
    sub = _chain(
        "--time",
        "00:05:00",
        "train.train_iters=20",
        "+smoke.fail_at_step=3",
        "+smoke.fail_message='torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB'",
    )
    st = _wait(sub["run_id"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=600)
    assert st["state"] == "FAILED"
    assert st["reason"].startswith("deterministic failure in segment 1: ") and "CUDA out of memory" in st["reason"]
    assert st["info"]["restarts"] == 0
    assert [s["state"] for s in st["info"]["segments"]][1:] == ["CANCELLED"]  # its successor never ran
    assert len([s for s in _segments(sub) if "end" in s]) == 1
    text = run_cli("status", sub["run_id"]).out
    assert "CUDA out of memory" in text


@pytest.mark.usefixtures("home")
def test_cancel_cancels_pending_segments(cluster):
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
        q = subprocess.run(
            ["squeue", "-h", "-j", ids, "-t", "PD,R,CG", "-o", "%i"],
            capture_output=True,
            text=True,
            env=dict(os.environ, SLURM_CONF=cluster),
        )
        if not q.stdout.strip():
            break
        time.sleep(1)
    assert q.stdout.strip() == "", q.stdout  # neither the running segment nor its successor is left
    assert (Path(sub["run_dir"]) / "chain" / sub["run_id"] / "stopped").read_text().strip() == "cancelled by user"


@pytest.fixture(scope="module")
def long_steps(cluster, tmp_path_factory):  # noqa: ARG001 - the cluster is up
    """One chain for the two tests of steps and saves longer than a lead or a timeout allows (one
    run of ~4 minutes instead of two of ~3): --step-time says 1 s and --signal-lead 30 s, but every
    step takes 40 s and every save 32 s, both longer than torchrun's 30 s shutdown timeout. The
    first segment measures its steps and asks for the save itself ~90 s in (its 3-minute limit less
    the 60 s it then needs and its watcher's 30 s period), after step 2 or during step 3: it finishes
    that step and saves within the limit; the second resumes and reaches train_iters=4. Returns
    submit's answer, the chain's final status, and the environment naming its state dir."""
    root = tmp_path_factory.mktemp("long-steps")
    env = {"BRIDGE_LAUNCH_HOME": str(root / "state"), "XDG_CONFIG_HOME": str(root / "config")}
    for sub_dir in ("clusters", "recipes/overlays"):
        (root / "config" / "bridge-launch" / sub_dir).mkdir(parents=True)
    with slurm_hold(), pytest.MonkeyPatch.context() as mp:  # a module fixture: before the tests' own hold
        for name, value in env.items():
            mp.setenv(name, value)
        sub = _chain(
            "--time",
            "00:03:00",
            "--signal-lead",
            "30",
            "--step-time",
            "1",
            "train.train_iters=4",
            "smoke.step_sleep=40",
            "smoke.save_sleep=32",
            "~checkpoint.save_interval",
            "validation.eval_iters=1",
        )
        st = _wait(sub["run_id"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=1200)
    return sub, st, env


def test_steps_and_saves_longer_than_torchruns_timeout(long_steps):
    """Steps of 40 s and saves of 32 s (both longer than torchrun's 30 s shutdown timeout): every
    segment gets the whole lead it asked for to finish its step and save (the launcher signals the
    training processes, never torchrun), and the next one resumes exactly there (the chain of the
    long_steps fixture)."""
    sub, st, _ = long_steps
    assert st["state"] == "COMPLETED", st
    ran = [s for s in _segments(sub) if "end" in s]
    assert len(ran) >= 2, ran
    texts = [_segment_text(sub, s["job_id"]) for s in ran]
    for before, after in zip(texts, texts[1:], strict=False):
        saved = [int(x) for x in re.findall(r"successfully saved checkpoint from iteration +(\d+)", before)]
        loaded = [int(x) for x in re.findall(r"successfully loaded checkpoint from \S+ .*?at iteration (\d+)", after)]
        first = min(int(x) for x in re.findall(r"iteration +(\d+)/ +4 \|", after))
        assert saved and loaded == [saved[-1]] and first == saved[-1] + 1, (saved, loaded, first)
        assert "[exiting program after receiving SIGTERM.]" in before
        assert "to the training processes" in before  # the launcher signalled them, not torchrun
    for text in texts:
        assert not re.search(r"Unable to shutdown process|SignalException", text)
    outcomes = [s.get("outcome") for s in st["info"]["segments"]]
    assert outcomes[: len(ran) - 1] == ["continued"] * (len(ran) - 1) and outcomes[len(ran) - 1] == "done", outcomes
    assert st["info"]["checkpoint"] == 4


@pytest.mark.usefixtures("cluster", "home")
def test_a_save_that_cannot_finish_in_the_lead_stops_the_chain():
    """Each segment is told to save 30 s before its limit, but the save takes 300 s: no segment
    publishes a checkpoint, and the chain stops after two of them, saying why. Each segment lasts
    to its limit, 2 minutes: the signal must find the trainers in their loop (a trainer signalled
    during its setup dies without saving, which the chain reports as such), and slurmctld's 30 s
    time-limit check sends it once at most lead + 30 s remain, 60-90 s in (sbatch(1) allows 30 s
    in), while the trainers are in their loop ~10 s in."""
    sub = _chain(
        "--time",
        "00:02:00",
        "--signal-lead",
        "30",
        "train.train_iters=1000",
        "smoke.step_sleep=1",
        "smoke.save_sleep=300",
        "~checkpoint.save_interval",
    )
    st = _wait(sub["run_id"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=900)
    assert st["state"] == "FAILED", st
    assert (
        st["reason"] == "no progress in 2 segments in a row: the save did not finish within the signal lead of 30 s"
    ), st
    segs = st["info"]["segments"]
    assert [s.get("outcome") for s in segs[:2]] == ["no-progress", "no-progress"], segs
    assert all(s["state"] != "COMPLETED" for s in segs), segs
    # The two segments either judged themselves or (killed with their batch shell at the limit) were
    # judged by their successor; either way no third segment trained.
    assert len([s for s in _segments(sub) if "start" in s]) in (2, 3)
    assert not list((Path(sub["run_dir"]) / "logs").glob(f"{segs[2]['job_id']}-*.log")) if len(segs) > 2 else True
    shown = run_cli("status", sub["run_id"]).out
    assert "no progress: the save did not finish within the signal lead of 30 s" in shown


@pytest.mark.usefixtures("cluster", "home")
def test_a_half_written_checkpoint_is_refused(tmp_path):
    """The tracker names iter_6, which holds shards but no .metadata: the segment loads the newest
    complete earlier checkpoint (iter_4) with checkpoint.ckpt_step, instead of failing on iter_6."""
    ckpt = tmp_path / "ckpt"
    first = _chain("--time", "00:05:00", "train.train_iters=4", "checkpoint.save_interval=2", f"checkpoint.save={ckpt}")
    assert _wait(first["run_id"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=600)["state"] == "COMPLETED"
    half = ckpt / "iter_0000006"
    half.mkdir()
    for shard in (ckpt / "iter_0000004").glob("__*_0.distcp"):
        (half / shard.name).write_bytes(shard.read_bytes())
    (ckpt / "latest_checkpointed_iteration.txt").write_text("6")
    sub = _chain("--time", "00:05:00", "train.train_iters=8", "checkpoint.save_interval=2", f"checkpoint.save={ckpt}")
    st = _wait(sub["run_id"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=600)
    assert st["state"] == "COMPLETED", st
    text = _segment_text(sub, st["job_ids"][0])
    assert re.search(
        r"iteration 6 is incomplete \(\S+/iter_0000006 is missing: \.metadata metadata\.json "
        r"train_state\.pt\); loading iteration 4",
        text,
    ), text[-3000:]
    assert "Loading checkpoint from iteration 4 (specified via ckpt_step)" in text
    assert min(int(x) for x in re.findall(r"iteration +(\d+)/ +8 \|", text)) == 5
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == "8"


@pytest.mark.usefixtures("cluster", "home")
def test_a_tracker_without_its_checkpoint_is_never_loaded(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "latest_checkpointed_iteration.txt").write_text("10\n")  # published, but iter_0000010 is missing
    sub = _chain("--time", "00:05:00", "train.train_iters=20", f"checkpoint.save={ckpt}", f"checkpoint.load={ckpt}")
    st = _wait(sub["run_id"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=600)
    assert st["state"] == "FAILED" and "names iteration 10" in st["reason"] and "no earlier complete" in st["reason"], (
        st
    )
    assert not list((Path(sub["run_dir"]) / "logs").glob("*-node*.log"))  # training never started


@pytest.mark.usefixtures("home")
def test_until_done_needs_slurm():
    r = run_cli("submit", "smoke", "--until-done", "--dry-run")
    assert r.code == 2 and "--until-done runs a chain of Slurm jobs" in r.err


@pytest.mark.usefixtures("cluster", "home")
def test_a_plain_job_saves_at_its_time_limit_and_resume_continues():
    """No --until-done and no periodic save: the only save is the one Slurm's USR1 asks for
    before the limit (--signal=B:USR1@30, train.exit_signal_handler on). status says STOPPED at
    iteration N, not COMPLETED and not TIMEOUT; resume starts at N+1 with the samples consumed.
    Slurm may send the signal up to 60 s before lead (sbatch(1) 22.05, --signal: "due to the
    resolution of event handling"): with a 2-minute limit it comes 30-90 s in (60-90 s as
    slurmctld's 30 s time-limit check sends it, once at most lead + 30 s remain), after the
    trainer has started (~10 s in) even on a loaded machine (with 1 minute it could come before,
    and nothing saves)."""
    sub = _submit(
        "--time",
        "00:02:00",
        "--signal-lead",
        "30",
        "train.train_iters=400",
        "smoke.step_sleep=0.5",
        "~checkpoint.save_interval",
        "logger.log_interval=1",
    )
    st = _wait(sub["run_id"], ENDED, timeout=600)
    assert st["state"] == "STOPPED", st
    text = _segment_text(sub, sub["job_ids"][0])
    # Slurm's signal, 30-60 s before the limit (its 30 s check): the watch measured 0.5 s steps, asked nothing
    assert re.search(r"bridge-launch: time limit in \d+s: the training processes are told to save and exit", text)
    assert "asking for the save now" not in text
    ckpt = Path(sub["run_dir"]) / "checkpoints"
    saved = int((ckpt / "latest_checkpointed_iteration.txt").read_text())
    assert 0 < saved < 400 and sorted(p.name for p in ckpt.glob("iter_*")) == [f"iter_{saved:07d}"]
    assert re.fullmatch(rf"stopped at the time limit, iteration {saved} of 400; resume continues", st["reason"]), st
    r = run_cli("resume", sub["run_id"], f"train.train_iters={saved + 6}", "-o", "json")
    assert r.code == 0, r.err
    again = r.json()
    st = _wait(again["run_id"], ENDED, timeout=600)
    assert st["state"] == "COMPLETED", st
    resumed = _segment_text(again, again["job_ids"][0])
    counts = re.findall(r"iteration +(\d+)/ +\d+ \| consumed samples: +(\d+) \| .*global batch size: +(\d+)", resumed)
    first, consumed, gbs = (int(x) for x in counts[0])
    assert first == saved + 1 and consumed == (saved + 1) * gbs
    assert int((ckpt / "latest_checkpointed_iteration.txt").read_text()) == saved + 6


# a plain job whose steps and save need more than its lead (and one more of its step shape)
SHAPE = (
    "smoke.step_sleep=45",
    "smoke.save_sleep=20",
    "~checkpoint.save_interval",
    "validation.eval_iters=1",
    "logger.log_interval=1",
)


@pytest.mark.usefixtures("cluster")
def test_a_plain_job_measures_its_steps_and_asks_for_its_save_in_time():
    """A plain job (no --until-done) whose steps (45 s) and save (20 s) need more than its signal lead
    of 30 s: its time-limit watch (time-limit.sh, every 30 s) measures the steps from Megatron's
    iteration lines and asks for the save itself about 90 s before the 4-minute limit, before Slurm's
    own signal could come (at most lead + 30 s before it); the trainer finishes its step and saves
    before the limit, status says STOPPED there and shows what the job measured, and a new job of
    the same step shape is sized on those figures."""
    sub = _submit(
        "--time",
        "00:04:00",
        "--signal-lead",
        "30",
        "--step-time",
        "1",
        "train.train_iters=10",
        *SHAPE,
    )
    st = _wait(sub["run_id"], ENDED, timeout=420)
    text = _segment_text(sub, sub["job_ids"][0])
    assert st["state"] == "STOPPED", (st, text[-3000:])
    asked = re.search(r"bridge-launch: measured step ([\d.]+) s, save - s: they need a lead of (\d+) s, not 30 s", text)
    assert asked and float(asked.group(1)) >= 45 and int(asked.group(2)) >= 60, text[-3000:]
    first = re.search(r"bridge-launch: time limit in (\d+)s: the training processes are told to save", text)
    assert first and first.start() > asked.start() and int(first.group(1)) > 60, text[-3000:]  # before Slurm's
    ckpt = Path(sub["run_dir"]) / "checkpoints"
    saved = int((ckpt / "latest_checkpointed_iteration.txt").read_text())
    assert 2 <= saved < 10 and f"successfully saved checkpoint from iteration {saved:7d}" in text
    assert re.fullmatch(rf"stopped at the time limit, iteration {saved} of 10; resume continues", st["reason"]), st
    shown = run_cli("status", sub["run_id"]).out
    assert re.search(
        r"measured    step 4[5-9][.\d]* s, save (19|2\d)[.\d]* s \(the slowest so far\): they need a lead of \d+ s, "
        r"more than the job's 30 s: the job asks for its save that early",
        shown,
    ), shown
    # a new job of the same step shape (another target) is sized on these figures (runs/measured.py)
    again = run_cli(
        "submit", "smoke", "-c", "local-slurm", *FAST, "--time", "00:04:00", *SHAPE, "train.train_iters=20", "--dry-run"
    )
    by = f"measured by run {sub['run_id']}"
    assert again.code == 0 and re.search(
        rf"estimate: ~4[5-9] s a step \({by}\), ~(19|2\d) s a save \({by}, its slowest save\)", again.out
    ), again.out


@pytest.mark.usefixtures("home")
def test_a_requeued_segment_submits_no_second_successor(cluster):
    """scontrol requeue of a running segment (what Slurm does itself after a node failure,
    JobRequeue=1): the same job id runs the script again. It finds its successor already
    submitted and submits none; the successor still waits for it (afterany holds across the
    requeue), so no two segments ever train at once, and the chain completes."""
    sub = _chain("--time", "00:05:00", "train.train_iters=40", "smoke.step_sleep=0.3", "checkpoint.save_interval=5")
    first = sub["job_ids"][0]
    chain_dir = Path(sub["run_dir"]) / "chain" / sub["run_id"]
    logs = Path(sub["run_dir"]) / "logs"
    deadline = time.time() + 180
    while not re.search(r"iteration\s+8/", "".join(p.read_text(errors="replace") for p in logs.glob(f"{first}-*.log"))):
        assert time.time() < deadline, "the first segment did not reach iteration 8"
        time.sleep(0.5)
    successor = (chain_dir / f"successor-{first}").read_text().strip()
    assert successor.isdigit()
    env = dict(os.environ, SLURM_CONF=cluster)
    subprocess.run(["scontrol", "requeue", first], check=True, env=env, capture_output=True, text=True)
    st = _wait(sub["run_id"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=600)
    assert st["state"] == "COMPLETED", st
    assert (chain_dir / "jobs").read_text().split() == [successor]  # one successor, however often it ran
    text = _segment_text(sub, first)
    assert f"runs again as job {first} (requeued); its successor {successor} was submitted before" in text
    starts = [s for s in (chain_dir / "segments").read_text().splitlines() if s.split()[2] == "start"]
    assert [s.split()[0] for s in starts] == [first, first]  # the first segment twice, its successor never
    assert not list(logs.glob(f"{successor}-*.log"))  # cancelled before it could start: no second trainer
    assert {s["job_id"]: s["state"] for s in st["info"]["segments"]} == {first: "COMPLETED", successor: "CANCELLED"}


@pytest.mark.slurm_alone  # node2 is set DOWN while it runs
@pytest.mark.usefixtures("home")
def test_a_node_set_down_mid_segment_leaves_one_chain(cluster):
    """A node set DOWN under a running segment: Slurm ends the job on it and requeues it (NODE_FAIL,
    JobRequeue=1); once the node is back, the same job id resumes from the newest checkpoint and
    the chain continues: one successor per segment job, one chain to its target."""
    sub = _chain("--time", "00:05:00", "train.train_iters=40", "smoke.step_sleep=0.3", "checkpoint.save_interval=5")
    first = sub["job_ids"][0]
    chain_dir = Path(sub["run_dir"]) / "chain" / sub["run_id"]
    logs = Path(sub["run_dir"]) / "logs"
    deadline = time.time() + 180
    while not re.search(
        r"iteration\s+12/", "".join(p.read_text(errors="replace") for p in logs.glob(f"{first}-*.log"))
    ):
        assert time.time() < deadline, "the first segment did not reach iteration 12"
        time.sleep(0.5)
    env = dict(os.environ, SLURM_CONF=cluster)

    def scontrol(*args, check=True):
        return subprocess.run(["scontrol", *args], check=check, env=env, capture_output=True, text=True)

    scontrol("update", "NodeName=node2", "State=DOWN", "Reason=bridge-launch-test")
    time.sleep(10)
    # the cluster runs ReturnToService=2: a DOWN node whose slurmd registers comes back by itself,
    # and RESUME is refused then; elsewhere it is what brings the node back
    if "DOWN" in scontrol("show", "node", "node2").stdout.split("State=", 1)[1].split()[0]:
        scontrol("update", "NodeName=node2", "State=RESUME", check=False)
    st = _wait(sub["run_id"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=600)
    assert st["state"] == "COMPLETED", st
    jobs = (chain_dir / "jobs").read_text().split()
    ran = [s.split()[0] for s in (chain_dir / "segments").read_text().splitlines() if s.split()[2] == "start"]
    assert len(jobs) == len(set(ran)), (jobs, ran)  # one successor for each segment job that ran
    runs = _steps_by_job(sub, list(dict.fromkeys(ran)))
    assert runs[-1][1][-1] == 40
    assert int((Path(sub["run_dir"]) / "checkpoints" / "latest_checkpointed_iteration.txt").read_text()) == 40


def test_a_chain_measures_steps_far_longer_than_its_estimate_and_adapts(long_steps):
    """--step-time says 1 s and the lead is 30 s, but every step takes about 40 s: a trainer told
    30 s before the limit could be mid-step with no time to finish it and save. The segment reads
    its own step times from the log (workloads/step_times.py), finds it needs a lead of 60 s, asks
    for the save that early itself, and the chain reaches train_iters; status shows the figures
    (the chain of the long_steps fixture)."""
    sub, st, env = long_steps
    assert st["state"] == "COMPLETED", st
    first = st["job_ids"][0]
    out = (Path(sub["run_dir"]) / "logs" / f"sbatch-{first}.out").read_text()
    m = re.search(r"measured step ([\d.]+) s, save (\S+) s: they need a lead of (\d+) s, not 30 s", out)
    assert m, out
    assert 40 <= float(m.group(1)) < 60 and int(m.group(3)) >= 60, m.group(0)
    # the save it asked for landed: the first segment published a checkpoint below train_iters
    outcomes = [s.get("outcome") for s in st["info"]["segments"]]
    assert outcomes[0] == "continued" and "done" in outcomes, st["info"]["segments"]
    measured = st["info"]["measured"]
    assert measured["step_s"] >= 40 and measured["save_s"] > 0 and measured["lead_s"] >= 60, measured
    assert measured["job_lead_s"] == 30
    text = run_cli("status", sub["run_id"], env=env).out
    assert re.search(
        r"measured +step [\d.]+ s, save [\d.]+ s \(the slowest so far\): they need a lead of \d+ s, more "
        r"than the job's 30 s",
        text,
    ), text


@pytest.mark.usefixtures("home")
def test_a_chain_s_verdict_waits_for_its_last_running_segment_to_end(cluster):
    """A segment writes `done` (or `stopped`) and runs a moment longer: its last lines, the epilog,
    Slurm's COMPLETING. Until that job has ended the run is RUNNING, saying why, so its terminal
    record (never read again) holds every segment's final state. `done` is written here by hand
    while the first segment trains, which makes the moment as long as the test needs."""
    sub = _chain("--time", "00:05:00", "train.train_iters=400", "smoke.step_sleep=0.3")
    first = sub["job_ids"][0]
    chain_dir = Path(sub["run_dir"]) / "chain" / sub["run_id"]
    env = dict(os.environ, SLURM_CONF=cluster)
    try:
        _wait(sub["run_id"], {"RUNNING"}, timeout=180)
        (chain_dir / "done").write_text("")
        st = run_cli("status", sub["run_id"], "-o", "json").json()[0]
        assert st["state"] == "RUNNING" and st["reason"] == f"the chain is done; job {first} is ending", st
    finally:
        later = (chain_dir / "jobs").read_text().split() if (chain_dir / "jobs").exists() else []
        subprocess.run(["scancel", first, *later], env=env, check=False)
    st = _wait(sub["run_id"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=120)
    assert st["state"] == "COMPLETED", st
    assert all(s["state"] not in ("PENDING", "RUNNING") for s in st["info"]["segments"]), st["info"]["segments"]
