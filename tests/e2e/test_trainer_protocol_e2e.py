from __future__ import annotations

import ctypes
import os
import re
import signal
import struct
import threading
import time
from pathlib import Path

import pytest
from test_smoke_e2e import COMMON, Launched, _run, trainer_pids

from bridge_launch.workloads import trainer_protocol as P

# ----------------------------------------------------------------------------------------------
# the stand-in under real torchrun
# ----------------------------------------------------------------------------------------------
_IN_CREATE, _IN_CLOSE_WRITE, _IN_MOVED_TO = 0x100, 0x8, 0x80


class Inotify:
    """Kernel file events, in the order they happened (Linux inotify through libc)."""

    def __init__(self):
        self.libc = ctypes.CDLL("libc.so.6", use_errno=True)
        self.fd = self.libc.inotify_init()
        assert self.fd >= 0
        self.dirs: dict = {}

    def watch(self, path: Path) -> None:
        wd = self.libc.inotify_add_watch(self.fd, str(path).encode(), _IN_CREATE | _IN_CLOSE_WRITE | _IN_MOVED_TO)
        assert wd >= 0, ctypes.get_errno()
        self.dirs[wd] = path

    def events(self) -> list:
        data, out = os.read(self.fd, 65536), []
        while data:
            wd, mask, _, n = struct.unpack("iIII", data[:16])
            name = data[16 : 16 + n].rstrip(b"\0").decode()
            out.append((self.dirs[wd], name, mask))
            data = data[16 + n :]
        return out


def _slow_run(tmp_path, *extra, sleep="0.5"):
    ckpt = tmp_path / "ckpt"
    run = Launched(
        tmp_path / "run",
        [
            *COMMON,
            "train.train_iters=40",
            f"checkpoint.save={ckpt}",
            "logger.log_interval=1",
            f"smoke.step_sleep={sleep}",
            *extra,
        ],
    )
    run.wait_for(r"iteration +[2-9]/")
    return run, ckpt


@pytest.mark.slow
def test_write_order_is_bridges(tmp_path):
    """The stand-in's save, seen by the kernel: shards, then .metadata (renamed into place),
    metadata.json, train_state.pt, latest_train_state.pt, the tracker, then run_config.yaml."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    ino = Inotify()
    ino.watch(ckpt)
    seen: list = []
    stop = threading.Event()

    def pump():
        while not stop.is_set():
            for d, name, mask in ino.events():
                seen.append((d, name, mask))
                if d == ckpt and name.startswith("iter_") and mask & _IN_CREATE:
                    ino.watch(ckpt / name)  # before the shards: they come smoke.save_sleep later

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    proc = _run(
        tmp_path / "run",
        [*COMMON, "train.train_iters=2", "checkpoint.save_interval=2", f"checkpoint.save={ckpt}", "smoke.save_sleep=2"],
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    os.close(os.open(ckpt / "wake", os.O_CREAT | os.O_WRONLY))  # one last event to end the pump's read
    stop.set()
    t.join(timeout=10)
    it = ckpt / "iter_0000002"
    done = [
        (("" if d == ckpt else "iter_N/") + name)
        for d, name, mask in seen
        if mask & (_IN_CLOSE_WRITE | _IN_MOVED_TO) and d in (ckpt, it) and name != "wake"
    ]
    order = [n for n in dict.fromkeys(done)]
    shards = [n for n in order if n.endswith(".distcp")]
    assert sorted(shards) == ["iter_N/__0_0.distcp", "iter_N/__1_0.distcp"]
    rest = [n for n in order if not n.endswith(".distcp") and ".tmp" not in n]
    assert rest == [n for n in P.SAVE_ORDER if not n.endswith(("/", ".distcp"))], order  # the protocol's order
    assert rest == [
        "iter_N/.metadata",
        "iter_N/metadata.json",
        "iter_N/train_state.pt",
        "latest_train_state.pt",
        "latest_checkpointed_iteration.txt",
        "iter_N/run_config.yaml",
    ], order
    assert max(order.index(s) for s in shards) < order.index("iter_N/.metadata")


@pytest.mark.slow
def test_signalling_torchrun_kills_the_dataloader_workers(tmp_path):
    """torchrun forwards SIGTERM to each worker's process group, so Bridge's default DataLoader
    workers die and the trainer fails before it can save; torchrun exits non-zero."""
    run, ckpt = _slow_run(tmp_path, "train.exit_signal_handler=true")
    os.kill(run.proc.pid, signal.SIGTERM)
    rc, text = run.finish()
    assert rc != 0
    assert re.search(r"DataLoader worker \(pid[^)]*\) (is killed by signal: Terminated|exited unexpectedly)", text), (
        text[-3000:]
    )
    assert not (ckpt / P.TRACKER).exists()
    assert "SignalException" in text


@pytest.mark.slow
def test_torchrun_exits_non_zero_after_a_signal_even_when_every_worker_saved(tmp_path):
    """With train.exit_signal_handler_for_dataloader the DataLoader workers survive and the trainer
    saves and exits 0 - yet torchrun exits 1 (its SignalException is re-raised)."""
    run, ckpt = _slow_run(tmp_path, "train.exit_signal_handler=true", "train.exit_signal_handler_for_dataloader=true")
    os.kill(run.proc.pid, signal.SIGTERM)
    rc, text = run.finish()
    assert rc == 1
    assert "[exiting program after receiving SIGTERM.]" in text and P.TRACKER in os.listdir(ckpt)
    assert "Pretrain failed on rank=0 with SystemExit: 0" in text


@pytest.mark.slow
def test_torchrun_kills_a_save_that_outlasts_its_shutdown_timeout(tmp_path):
    """A signal save longer than torchrun's shutdown timeout (30 s) is SIGKILLed half-written."""
    run, ckpt = _slow_run(
        tmp_path,
        "train.exit_signal_handler=true",
        "train.exit_signal_handler_for_dataloader=true",
        "smoke.save_sleep=45",
    )
    t0 = time.monotonic()
    os.kill(run.proc.pid, signal.SIGTERM)
    rc, text = run.finish(timeout=120)
    assert rc == 1 and 25 < time.monotonic() - t0 < 45
    assert P.TORCHRUN_FORCED_KILL.search(text), text[-3000:]
    assert not (ckpt / P.TRACKER).exists()  # the tracker comes last: nothing was published


@pytest.mark.slow
def test_the_trainer_itself_gets_the_whole_lead(tmp_path):
    """Signalled directly (torchrun left alone), the trainer finishes its step, runs the evaluation
    that step owes, then saves for as long as the save takes, and every process exits 0."""
    run, ckpt = _slow_run(
        tmp_path,
        "train.exit_signal_handler=true",
        "smoke.save_sleep=35",
        "validation.eval_interval=1",
        "validation.eval_iters=1",
        sleep="1.0",
    )
    for pid in trainer_pids(run.proc.pid):
        os.kill(pid, signal.SIGTERM)
    rc, text = run.finish(timeout=180)
    assert rc == 0, text[-3000:]
    saved = int((ckpt / P.TRACKER).read_text())
    lines = text.splitlines()

    def first(pattern):
        return next(i for i, ln in enumerate(lines) if pattern in ln)

    # the step under way finishes and runs the evaluation it owes; then the save and the exit line
    got = first("Received signal 15, initiating graceful stop")
    val = first(f"validation loss at iteration {saved} |")
    sav = first(f"saving checkpoint at iteration {saved:7d}")
    assert got < sav and val < sav < first("successfully saved checkpoint") < first(
        "[exiting program after receiving SIGTERM.]"
    )
    assert not P.TORCHRUN_FORCED_KILL.search(text)


@pytest.mark.slow
def test_without_the_handler_sigterm_kills(tmp_path):
    """train.exit_signal_handler is off by default, as in Bridge: SIGTERM kills, nothing is saved."""
    run, ckpt = _slow_run(tmp_path)
    for pid in trainer_pids(run.proc.pid):
        os.kill(pid, signal.SIGTERM)
    rc, text = run.finish()
    assert rc != 0 and "Signal 15 (SIGTERM) received" in text
    assert not (ckpt / P.TRACKER).exists() and "exiting program" not in text


@pytest.mark.slow
def test_loading_follows_bridge(tmp_path):
    """ckpt_step picks an iteration; a tracker naming an incomplete iteration fails as Bridge fails."""
    ckpt = tmp_path / "ckpt"
    base = [
        *COMMON,
        f"checkpoint.save={ckpt}",
        f"checkpoint.load={ckpt}",
        "checkpoint.save_interval=2",
        "validation.eval_iters=0",
        "logger.log_interval=1",
    ]
    assert _run(tmp_path / "a", [*base, "train.train_iters=4"]).returncode == 0
    assert (ckpt / P.TRACKER).read_text() == "4"
    proc = _run(tmp_path / "b", [*base, "train.train_iters=6", "checkpoint.ckpt_step=2"])
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "Loading checkpoint from iteration 2 (specified via ckpt_step)" in proc.stdout
    assert re.search(r"iteration +3/ +6 \|", proc.stdout)  # it resumed at 2, not at the tracker's 4
    (ckpt / "iter_0000006" / "metadata.json").unlink()  # the tracker (6) now names an incomplete iteration
    proc = _run(tmp_path / "c", [*base, "train.train_iters=8"])
    assert proc.returncode != 0 and "NotImplementedError: Unknown checkpoint format in" in proc.stdout
    proc = _run(tmp_path / "d", [*base, "train.train_iters=8", "checkpoint.ckpt_step=5"])
    assert (
        proc.returncode != 0
        and "FileNotFoundError: ckpt_step=5 specified but checkpoint directory does not exist" in proc.stdout
    )
