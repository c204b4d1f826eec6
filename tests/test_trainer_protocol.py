"""Megatron-Bridge's trainer protocol (src/bridge_launch/workloads/trainer_protocol.py): the
facts the launcher relies on, held against the stand-in that writes by them, against the real
torchrun here (torch 2.13) and against the chain's own checkpoint rule.

Fast tests: the log formats against lines quoted from Bridge's source, and the chain's bash
publication rule on checkpoint directories laid out as Bridge leaves them. Slow tests: the
smoke workload under real torchrun (write order seen through inotify, signal handling, the
DataLoader workers, torchrun's shutdown timeout and exit status, loading)."""

from __future__ import annotations

import ctypes
import os
import re
import signal
import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest

from bridge_launch.workloads import trainer_protocol as P
from test_smoke_workload import COMMON, Launched, _run, trainer_pids


# ----------------------------------------------------------------------------------------------
# log formats: the protocol's lines equal Bridge's f-strings, evaluated by hand
# ----------------------------------------------------------------------------------------------
def test_log_lines_are_bridges():
    # MB training/utils/train_utils.py:1088-1136, with log_throughput off and no energy monitor
    line = P.iteration_line(
        iteration=5,
        train_iters=20,
        consumed=40,
        elapsed_ms=35000.04,
        lr=1e-4,
        global_batch=8,
        losses={"lm loss": 1.2345678, "load_balancing_loss": 0.5},
        loss_scale=1.0,
        grad_norm=0.1234,
        skipped=0,
        nan=0,
        stamp="2026-01-01 12:00:00",
    )
    assert line == (
        " [2026-01-01 12:00:00] iteration        5/      20 | consumed samples:           40 | "
        "elapsed time per iteration (ms): 35000.0 | learning rate: 1.000000E-04 | global batch size:     8 | "
        "lm loss: 1.234568E+00 | load_balancing_loss: 5.000000E-01 | loss scale: 1.0 | grad norm: 0.123 | "
        "number of skipped iterations:   0 | number of nan iterations:   0 |"
    )
    m = P.ITERATION_RE.search("[rank7]: " + line)
    assert m and m.group(1) == "5" and m.group(2) == "20"
    # MB training/checkpointing.py:1174 and :1502-1509
    assert P.saving_line(500, "/ckpt") == "saving checkpoint at iteration     500 to /ckpt in torch_dist format"
    assert (
        P.saved_line(500, "/ckpt") == "  successfully saved checkpoint from iteration     500 to /ckpt [ t 1/1, p 1/1 ]"
    )
    assert re.search(P.SAVING_GREP, P.saving_line(7, "/c")) and re.search(P.SAVED_GREP, P.saved_line(7, "/c"))
    assert P.SAVED_RE.search(P.saved_line(7, "/c")).group(1) == "7"
    # MB checkpointing.py:3263-3268, and Megatron-LM's 1-based form with gtp_remat (MC checkpointing.py:2900-2906)
    assert P.loaded_line("/ckpt", 12) == "  successfully loaded checkpoint from /ckpt [ t 0/1, p 0/1 ] at iteration 12"
    mc = "  successfully loaded checkpoint from /ckpt [ t 1/2, gtp_remat 1/1, p 1/1 ] at iteration 12"
    assert P.LOADED_RE.search(mc).groups() == ("/ckpt", "12")
    # MC training/utils/log_utils.py:139-148 (barrier_and_log): the trailing space is Bridge's
    assert (
        P.barrier_and_log(P.EXIT_SIGNAL, stamp="2026-01-01 12:00:00")
        == "[exiting program after receiving SIGTERM.] datetime: 2026-01-01 12:00:00 "
    )
    assert P.EXIT_RE.search(P.barrier_and_log(P.EXIT_INTERVAL.format(step=40)))
    # MB training/eval.py:462-466
    dashes, text, dashes2 = P.validation_lines("iteration 8 on test set", {"lm loss": 2.0})
    assert (
        text
        == " validation loss at iteration 8 on test set | lm loss value: 2.000000E+00 | lm loss PPL: 7.389056E+00 | "
    )
    assert dashes == dashes2 == "-" * (len(text) + 1)
    assert P.VALIDATION_RE.search(text).group(3) == "test"
    assert P.step_time_line(35.0, 210.4) == "Step Time : 35.00s GPU utilization: 210.4MODEL_TFLOP/s/GPU"


def test_a_complete_checkpoint_needs_no_common_pt():
    """megatron-core at the pin keeps the common state inside the shards (MC serialization.py:431-437)."""
    assert P.complete_files("torch_dist") == (".metadata", "metadata.json", "train_state.pt")
    assert P.complete_files(None) == P.complete_files("torch_dist")
    assert "common.pt" not in P.SAVE_ORDER and P.SAVE_ORDER.index(
        "latest_checkpointed_iteration.txt"
    ) < P.SAVE_ORDER.index("iter_N/run_config.yaml")


# ----------------------------------------------------------------------------------------------
# the chain's publication rule, as rendered into the batch script
# ----------------------------------------------------------------------------------------------
def _functions(*overrides) -> str:
    from conftest import run_cli

    r = run_cli("submit", "smoke", "-c", "local-slurm", "--until-done", "--dry-run", "-o", "json", *overrides)
    assert r.code == 0, r.err
    text = r.json()["artifact"]["text"]
    start = text.index("save_dir=")
    end = text.index("\n}\n", start) + 3
    return text[start:end]


def _resume_point(funcs: str, save: Path, np: Path | None = None) -> tuple[int, str, str, str]:
    script = (
        funcs + f"save_dir={save}\nnp_dir={np or ''}\n"
        'resume_point; rc=$?; printf "%s|%s|%s|%s" "$rc" "$resume_it" "${resume_args[*]}" "$resume_note"\n'
    )
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30).stdout
    rc, it, args, note = out.split("|", 3)
    return int(rc), it, args, note


def _ckpt(
    d: Path,
    it: int,
    files=("__0_0.distcp", "__1_0.distcp", ".metadata", "metadata.json", "train_state.pt", "run_config.yaml"),
    tracker: bool = True,
):
    """An iteration dir as Bridge leaves it after writing `files` (in its order), and the tracker."""
    it_dir = d / f"iter_{it:07d}"
    it_dir.mkdir(parents=True, exist_ok=True)
    for f in files:
        (it_dir / f).write_bytes(b"x")
    if tracker:
        (d / "latest_checkpointed_iteration.txt").write_text(str(it))  # no newline, as Bridge writes it


@pytest.mark.usefixtures("home")
def test_publication_rule(tmp_path):
    funcs = _functions()
    save = tmp_path / "ckpt"
    assert _resume_point(funcs, save) == (0, "0", "", "")  # nothing yet: start from scratch
    _ckpt(save, 100)
    # the tracker is written before run_config.yaml (MB checkpointing.py:1476-1497): a checkpoint
    # without it is complete, though every file in it is older than the tracker or not
    (save / "iter_0000100" / "run_config.yaml").unlink()
    assert _resume_point(funcs, save) == (0, "100", "", "")
    # a half-written iter_N (shards, no .metadata) named by the tracker: the newest complete earlier one, via ckpt_step
    _ckpt(save, 200, files=("__0_0.distcp", "__1_0.distcp"))
    rc, it, args, note = _resume_point(funcs, save)
    assert (rc, it, args) == (0, "100", "checkpoint.ckpt_step=100")
    assert "iteration 200 is incomplete" in note and "missing: .metadata metadata.json train_state.pt" in note
    # nothing complete at all: refused, with the reason
    for f in (save / "iter_0000100").iterdir():
        f.unlink()
    rc, it, args, note = _resume_point(funcs, save)
    assert rc == 1 and it == "0" and "names iteration 200" in note and "no earlier complete checkpoint" in note


@pytest.mark.usefixtures("home")
def test_publication_rule_non_persistent(tmp_path):
    funcs = _functions("checkpoint.non_persistent_ckpt_type=global")
    assert re.search(
        r"^np_dir=\S+/checkpoints/non_persistent$", funcs, re.M
    )  # default: <checkpoint.save>/non_persistent
    save = tmp_path / "ckpt"
    np = save / "non_persistent"
    _ckpt(save, 100)
    _ckpt(np, 150)
    assert _resume_point(funcs, save, np)[:3] == (0, "150", "")  # the newer one: non-persistent
    _ckpt(np, 100)
    assert _resume_point(funcs, save, np)[:3] == (0, "100", "")  # a tie goes to non-persistent (MB :3677-3697)
    _ckpt(np, 300, files=("__0_0.distcp",))
    rc, it, args, _ = _resume_point(funcs, save, np)
    assert (rc, it, args) == (0, "100", "checkpoint.ckpt_step=100")  # Bridge would take the incomplete 300


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
