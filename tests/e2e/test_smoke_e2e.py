from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from smoke_runs import TRICKY, TRICKY_EXPECTED, _child_env, _prepare

# Small, quick model; identical for the reference run and the interrupted/resumed runs.
TRAIN_ITERS = 30


COMMON = [
    f"train.train_iters={TRAIN_ITERS}",
    "train.micro_batch_size=2",
    "train.global_batch_size=8",  # grad-accum 2 on 2 ranks
    "dataset.seq_length=32",
    "model.num_layers=2",
    "model.hidden_size=32",
    "model.num_attention_heads=4",
    "model.vocab_size=64",
    "smoke.busbw_sizes=[1024,65536]",
    "smoke.busbw_iters=2",
    "validation.eval_iters=2",
]


ITERATION_COUNTS = re.compile(r"iteration +(\d+)/ +\d+ \| consumed samples: +(\d+) \|")
MEGATRON_LINE = re.compile(
    r"^ \[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] iteration +(\d+)/ +(\d+) \| consumed samples: +(\d+) \| "
    r"elapsed time per iteration \(ms\): [\d.]+ \| learning rate: [\d.]+E[+-]\d+ \| "
    r"global batch size: +(\d+) \| lm loss: ([\d.]+E[+-]\d+) \| loss scale: 1\.0 \| grad norm: [\d.]+ \| "
    r"number of skipped iterations: +\d+ \| number of nan iterations: +\d+ \|$"
)


def _torchrun_cmd(script: Path, args, tee: bool = False) -> list:
    """tee: every line prefixed with its rank, as the Slurm backend runs it ([rankN]: )."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        *(["--tee=3"] if tee else []),
        str(script),
        *args,
    ]


def _run(run_dir: Path, args, timeout=120, tee: bool = False) -> subprocess.CompletedProcess:
    script = _prepare(run_dir)
    env = dict(_child_env(run_dir), TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="[rank${rank}]: ")
    return subprocess.run(
        _torchrun_cmd(script, args, tee),
        cwd=run_dir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )


def _by_rank(out: str):
    """(rank, line) of torchrun --tee output."""
    for ln in out.splitlines():
        m = re.match(r"^\[rank(\d+)\]: (.*)$", ln)
        if m:
            yield int(m.group(1)), m.group(2)


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def _check_ckpt_layout(ckpt: Path, iterations, tracker: int, world: int = 2):
    """Megatron-Bridge's torch_dist layout (trainer_protocol.SAVE_ORDER)."""
    import torch

    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == str(tracker)  # no newline, as Bridge writes it
    assert int(torch.load(ckpt / "latest_train_state.pt", weights_only=True)["step"]) == tracker
    for it in iterations:
        d = ckpt / f"iter_{it:07d}"
        names = {p.name for p in d.iterdir()}
        assert names == {
            ".metadata",
            "metadata.json",
            "train_state.pt",
            "run_config.yaml",
            *(f"__{r}_0.distcp" for r in range(world)),
        }, names
        assert json.loads((d / "metadata.json").read_text()) == {
            "sharded_backend": "torch_dist",
            "sharded_backend_version": 1,
        }
        state = torch.load(d / "train_state.pt", weights_only=True)
        assert int(state["step"]) == it and int(state["consumed_train_samples"]) == it * 8
    shard = torch.load(ckpt / f"iter_{tracker:07d}" / "__0_0.distcp", map_location="cpu", weights_only=True)
    assert shard["iteration"] == tracker
    for key in ("model", "optimizer", "rng_state", "args", "checkpoint_version"):
        assert key in shard


# ----------------------------------------------------------------------------------------------
# torchrun end-to-end tests
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    """Uninterrupted run with periodic checkpoints and the tricky argv tokens."""
    run_dir = tmp_path_factory.mktemp("reference")
    ckpt = run_dir / "ckpt dir"  # space in the path, passed Hydra-quoted
    args = [
        *COMMON,
        f"checkpoint.save='{ckpt}'",
        f"checkpoint.load='{ckpt}'",
        "checkpoint.save_interval=10",
        "logger.log_interval=5",
        *TRICKY,
    ]
    proc = _run(run_dir, args, tee=True)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return run_dir, ckpt, args, proc.stdout


def trainer_pids(torchrun_pid: int) -> list:
    """torchrun's children: the training processes (the launcher finds them the same way)."""
    out = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == torchrun_pid:
            out.append(int(proc.name))
    return out


class Launched:
    """torchrun in its own session, its output read line by line in a thread."""

    def __init__(self, run_dir: Path, args, tee: bool = False, env: dict | None = None):
        script = _prepare(run_dir)
        env = dict(_child_env(run_dir), TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="[rank${rank}]: ", **(env or {}))
        self.proc = subprocess.Popen(
            _torchrun_cmd(script, args, tee),
            cwd=run_dir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue = queue.Queue()
        self.out: list = []
        self.reader = threading.Thread(target=lambda: [self.lines.put(ln) for ln in self.proc.stdout], daemon=True)
        self.reader.start()

    def wait_for(self, pattern: str, timeout: float = 90):
        """The first output line matching `pattern` (a regex), or fail."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                ln = self.lines.get(timeout=0.5)
            except queue.Empty:
                if self.proc.poll() is not None and not self.reader.is_alive():
                    break
                continue
            self.out.append(ln)
            m = re.search(pattern, ln)
            if m:
                return m
        raise AssertionError(f"no line matching {pattern!r}: {''.join(self.out)[-3000:]}")

    def finish(self, timeout: float = 90) -> tuple[int, str]:
        try:
            rc = self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.reader.join(timeout=5)
        while not self.lines.empty():
            self.out.append(self.lines.get())
        return rc, "".join(self.out)


@pytest.mark.slow
def test_full_run_completes(reference_run):
    """(a) full run: summary, falling loss, Megatron log lines, checkpoint layout."""
    run_dir, ckpt, _args, out = reference_run
    s = _summary(run_dir)
    assert s["exit_reason"] == "completed"
    assert s["world_size"] == 2 and s["nodes"] == 1 and len(s["hosts"]) == 2
    assert s["backend"] == "gloo" and s["gpu"] is None
    assert s["start_step"] == 1 and s["steps_completed"] == TRAIN_ITERS and s["train_iters"] == TRAIN_ITERS
    assert [st for st, _ in s["losses"]] == list(range(1, TRAIN_ITERS + 1))
    losses = [loss for _, loss in s["losses"]]
    assert s["first_loss"] == losses[0] and s["final_loss"] == losses[-1]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.5, losses
    assert s["tokens_per_s"] > 0
    assert s["resumed_from"] is None and s["checkpoints"] == [10, 20, 30]
    assert [b["size_bytes"] for b in s["busbw"]] == [1024, 65536]
    for b in s["busbw"]:
        assert b["time_us"] > 0 and b["busbw_gbps"] == pytest.approx(b["algbw_gbps"], rel=1e-3)  # n=2: factor 1
    _check_ckpt_layout(ckpt, [10, 20, 30], 30)
    # Megatron-format iteration lines from the LAST rank only (print_rank_last), every log_interval=5 steps;
    # the Step Time line and the checkpoint lines from rank 0 (print_rank_0)
    lines = list(_by_rank(out))
    matches = [(r, MEGATRON_LINE.match(ln)) for r, ln in lines]
    assert {r for r, m in matches if m} == {1}, out[-3000:]
    its = [int(m.group(1)) for _, m in matches if m]
    assert its == [5, 10, 15, 20, 25, 30], out[-3000:]
    last = [m for _, m in matches if m][-1]
    assert int(last.group(3)) == TRAIN_ITERS * 8 and int(last.group(4)) == 8
    assert {r for r, ln in lines if ln.startswith("Step Time : ")} == {0}
    assert [ln for r, ln in lines if "successfully saved checkpoint" in ln and r == 0] == [
        f"  successfully saved checkpoint from iteration {i:7d} to {ckpt} [ t 1/1, p 1/1 ]" for i in (10, 20, 30)
    ]
    assert {r for r, ln in lines if "validation loss at iteration 30 on test set" in ln} == {1}
    assert "all-reduce bus bandwidth" in out
    assert (0, "Starting training loop at iteration 0") in lines  # no tracker: Bridge starts silently


@pytest.mark.slow
def test_argv_recorded_verbatim(reference_run):
    """(c) tricky Hydra-quoted argv is recorded verbatim and parsed leniently."""
    run_dir, ckpt, args, _out = reference_run
    s = _summary(run_dir)
    assert s["argv"][1:] == args
    assert s["argv"][0].endswith("smoke.py")
    assert {k: s["overrides"][k] for k in TRICKY_EXPECTED} == TRICKY_EXPECTED
    assert s["overrides"]["checkpoint.save"] == str(ckpt)
    assert set(s["unknown_keys"]) == set(TRICKY_EXPECTED) - {"optimizer.lr"}
    assert s["unparsed_args"] == ["--not-an-override"]


@pytest.mark.slow
def test_sigterm_checkpoint_and_resume(reference_run, tmp_path):
    """(b) SIGTERM to the training processes (as the launcher sends it, not to torchrun) with
    Bridge's exit-signal handler on -> agreed stop at the end of the step, a checkpoint and its
    tracker, exit 0 (torchrun too); the resumed run continues bit-for-bit."""
    ref = {st: loss for st, loss in _summary(reference_run[0])["losses"]}
    run1 = tmp_path / "run1"
    ckpt = tmp_path / "ckpt"
    run = Launched(
        run1,
        [
            *COMMON,
            f"checkpoint.save={ckpt}",
            "logger.log_interval=1",
            "smoke.step_sleep=0.25",
            "train.exit_signal_handler=true",
        ],
    )
    run.wait_for(r"iteration +[3-9]/")
    pids = trainer_pids(run.proc.pid)
    assert len(pids) == 2
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    rc, text = run.finish()
    assert rc == 0, text[-3000:]  # torchrun was not signalled: its workers saved and exited 0, and so does it
    assert "[exiting program after receiving SIGTERM.] datetime: " in text
    assert "Received signal 15, initiating graceful stop" in text
    s1 = _summary(run1)
    assert s1["exit_reason"] == "signal", text[-3000:]
    saved = s1["steps_completed"]
    assert 3 <= saved < TRAIN_ITERS
    assert s1["checkpoints"] == [saved]
    _check_ckpt_layout(ckpt, [saved], saved)
    for st, loss in s1["losses"]:
        assert loss == pytest.approx(ref[st], abs=1e-5)

    run2 = tmp_path / "run2"
    proc2 = _run(run2, [*COMMON, f"checkpoint.save={ckpt}", f"checkpoint.load={ckpt}", "logger.log_interval=1"])
    assert proc2.returncode == 0, proc2.stdout[-4000:]
    s2 = _summary(run2)
    assert s2["exit_reason"] == "completed"
    assert s2["resumed_from"] == saved and s2["start_step"] == saved + 1
    assert s2["steps_completed"] == TRAIN_ITERS and s2["steps_this_run"] == TRAIN_ITERS - saved
    assert [st for st, _ in s2["losses"]] == list(range(saved + 1, TRAIN_ITERS + 1))
    for st, loss in s2["losses"]:
        assert loss == pytest.approx(ref[st], abs=1e-5), (st, loss, ref[st])
    # consumed samples continue, not restart
    # (searched, not matched at a line start: the two ranks share one stdout, and a line the other
    # rank writes without its newline can run into the trainer's iteration line)
    first = min(int(m.group(1)) for m in ITERATION_COUNTS.finditer(proc2.stdout))
    consumed = {int(m.group(1)): int(m.group(2)) for m in ITERATION_COUNTS.finditer(proc2.stdout)}
    assert first == saved + 1 and consumed[first] == (saved + 1) * 8
    assert s2["checkpoints"] == [TRAIN_ITERS]
    _check_ckpt_layout(ckpt, [saved, TRAIN_ITERS], TRAIN_ITERS)


@pytest.mark.slow
def test_bad_batch_sizes_torchrun(tmp_path):
    """(d) under torchrun: non-zero exit and the one-line error from the worker."""
    proc = _run(tmp_path, ["train.micro_batch_size=2", "train.global_batch_size=6"], timeout=60)
    assert proc.returncode != 0
    errs = [ln for ln in proc.stdout.splitlines() if ln.startswith("smoke.py: error:")]
    assert errs == [
        "smoke.py: error: train.global_batch_size=6 is not divisible by "
        "train.micro_batch_size * data-parallel size = 2 * 2 = 4"
    ], proc.stdout[-3000:]
    assert not (tmp_path / "summary.json").exists()


@pytest.mark.slow
def test_runs_and_resumes_without_numpy(tmp_path):
    """The workload needs only torch: torch 2.13's object collectives need numpy, so it must
    not use them (numpy is hidden from the workers here, though the test venv has it)."""
    blocker = tmp_path / "no-numpy" / "numpy"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'numpy' (hidden for this test)\", name='numpy')\n"
    )
    run_dir = tmp_path / "run"
    script = _prepare(run_dir)
    env = _child_env(run_dir)
    env["PYTHONPATH"] = str(blocker.parent)
    ckpt = run_dir / "ckpt"
    base = [
        "smoke.busbw_sizes=[1024]",
        "smoke.busbw_iters=1",
        f"checkpoint.save={ckpt}",
        f"checkpoint.load={ckpt}",
        "checkpoint.save_interval=2",
    ]
    for iters in (2, 4):  # the second run loads the first one's checkpoint (rank 0 broadcasts it)
        proc = subprocess.run(
            _torchrun_cmd(script, [*base, f"train.train_iters={iters}"]),
            cwd=run_dir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=180,
        )
        assert proc.returncode == 0, proc.stdout[-3000:]
    s = _summary(run_dir)
    assert s["resumed_from"] == 2 and s["start_step"] == 3 and s["steps_completed"] == 4
    assert sorted(set(s["hosts"])) == [s["hosts"][0]] and s["world_size"] == 2


def test_most_recent_k_keeps_the_newest_checkpoints_and_each_save_is_timed(tmp_path):
    """checkpoint.most_recent_k=2 with a save every step: once each new save completes the oldest
    go (MB checkpointing.py:1647-1655, cleanup :1662-1715), so iterations 4 and 5 are left; after
    every save the last rank logs the save-checkpoint timer in Megatron's minmax form (what the
    segments measure, workloads/step_times.py)."""
    run_dir = tmp_path / "run"
    script = _prepare(run_dir)
    ckpt = run_dir / "ckpt"
    args = [
        "smoke.busbw_sizes=[1024]",
        "smoke.busbw_iters=1",
        f"checkpoint.save={ckpt}",
        "checkpoint.save_interval=1",
        "checkpoint.most_recent_k=2",
        "train.train_iters=5",
    ]
    proc = subprocess.run(
        _torchrun_cmd(script, args),
        cwd=run_dir,
        env=_child_env(run_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert sorted(p.name for p in ckpt.glob("iter_*")) == ["iter_0000004", "iter_0000005"]
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == "5"
    timed = re.findall(r"    save-checkpoint \.+: \(([\d.]+), ([\d.]+)\)", proc.stdout)
    assert len(timed) == 5 and all(float(lo) <= float(hi) for lo, hi in timed), proc.stdout[-3000:]
