"""Tests for the stand-alone smoke workload (src/bridge_launch/workloads/: smoke.py and its
sibling modules).

The fast tests import the files directly (they are scripts, not part of the package API).
The ``slow`` tests copy them into a temporary run directory and launch them the way
bridge-launch does: ``python -m torch.distributed.run --standalone --nproc-per-node 2``
on CPU/gloo with OMP_NUM_THREADS=1. Its Megatron-Bridge protocol is tested in
tests/test_trainer_protocol.py.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

WORKLOADS = Path(__file__).resolve().parents[1] / "src" / "bridge_launch" / "workloads"
SMOKE_SRC = WORKLOADS / "smoke.py"

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

# Hydra-quoted / odd tokens: must be recorded verbatim and parsed leniently.
TRICKY = [
    "+smoke.note='it\\'s a \"quoted\", value'",
    '++logger.wandb_exp_name="run #1 = best"',
    "+dataset.blend=[\"a b\", 'c,d', 3]",
    "+tokenizer.path=C:\\models\\tok",
    "+smoke.empty=",
    "+smoke.unicode=ünïcødé ✓",
    "+smoke.nullish=null",
    "+smoke.float=1e-3",
    'optimizer.lr="3e-3"',
    "--not-an-override",
]
TRICKY_EXPECTED = {
    "smoke.note": 'it\'s a "quoted", value',
    "logger.wandb_exp_name": "run #1 = best",
    "dataset.blend": ["a b", "c,d", 3],
    "tokenizer.path": "C:\\models\\tok",
    "smoke.empty": "",
    "smoke.unicode": "ünïcødé ✓",
    "smoke.nullish": None,
    "smoke.float": 0.001,
    "optimizer.lr": "3e-3",
}

MEGATRON_LINE = re.compile(
    r"^ \[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] iteration +(\d+)/ +(\d+) \| consumed samples: +(\d+) \| "
    r"elapsed time per iteration \(ms\): [\d.]+ \| learning rate: [\d.]+E[+-]\d+ \| "
    r"global batch size: +(\d+) \| lm loss: ([\d.]+E[+-]\d+) \| loss scale: 1\.0 \| grad norm: [\d.]+ \| "
    r"number of skipped iterations: +\d+ \| number of nan iterations: +\d+ \|$"
)


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def smoke_mod():
    sys.path.insert(0, str(WORKLOADS))  # its siblings import each other as top-level modules, as in the job
    try:
        spec = importlib.util.spec_from_file_location("bridge_launch_smoke_under_test", SMOKE_SRC)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        import fabric_checks
        import hydra_args
        import tiny_lm

        for part in (hydra_args, fabric_checks, tiny_lm):
            for name in dir(part):
                if not name.startswith("__") and not hasattr(mod, name):
                    setattr(mod, name, getattr(part, name))
        yield mod
    finally:
        sys.path.remove(str(WORKLOADS))


def _child_env(run_dir: Path) -> dict:
    env = dict(os.environ)
    for k in (
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHELASTIC_RUN_ID",
        "GROUP_RANK",
    ):
        env.pop(k, None)
    env.update(
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
        BRIDGE_LAUNCH_RUN_DIR=str(run_dir),
        CUDA_VISIBLE_DEVICES="",
    )
    return env


def _prepare(run_dir: Path) -> Path:
    """Copy the workload into the run dir, as bridge-launch does at submit."""
    dst = run_dir / "workload"
    dst.mkdir(parents=True, exist_ok=True)
    for src in WORKLOADS.glob("*.py"):
        shutil.copy2(src, dst / src.name)
    return dst / "smoke.py"


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
# fast unit tests (no torchrun)
# ----------------------------------------------------------------------------------------------
def test_only_stdlib_and_torch_imports():
    """In-job code needs only the standard library, torch and its siblings: never bridge_launch. The
    canary alone imports from the image (megatron.bridge, megatron.energon), and only inside functions."""
    siblings = {p.stem for p in WORKLOADS.glob("*.py")}
    roots, lazy = set(), set()
    for path in WORKLOADS.glob("*.py"):
        tree = ast.parse(path.read_text())
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path.name}: relative import (the job runs these files as scripts)"
                names = [node.module]
            for name in names:
                if name.split(".")[0] == "megatron" and path.name == "cluster_checks.py" and id(node) not in top:
                    lazy.add(name)
                else:
                    roots.add(name.split(".")[0])
    bad = {r for r in roots if r not in sys.stdlib_module_names and r != "torch" and r not in siblings}
    assert not bad, bad
    assert "trainer_protocol" in roots and "bridge_launch" not in roots
    assert lazy <= {"megatron.energon", "megatron.bridge.training.config"}, lazy


@pytest.mark.parametrize(
    "text,expected",
    [
        ("10", 10),
        ("-3", -3),
        ("1_000", 1000),
        ("3e-3", 3e-3),
        ("0.5", 0.5),
        (".5", 0.5),
        ("true", True),
        ("False", False),
        ("null", None),
        ("NULL", None),
        ("None", "None"),
        ("'a b'", "a b"),
        ('"x=y"', "x=y"),
        ("'it\\'s'", "it's"),
        ('"a\\"b"', 'a"b'),
        ("'back\\\\slash'", "back\\slash"),
        ("'C:\\dir'", "C:\\dir"),
        ("", ""),
        ("  7 ", 7),
        ("[1024, 65536]", [1024, 65536]),
        ("[]", []),
        ("['a,b', \"c\", [1, 2]]", ["a,b", "c", [1, 2]]),
        ("abc", "abc"),
        ("/path/to/x", "/path/to/x"),
        ("'unterminated", "'unterminated"),
        ("1.2.3", "1.2.3"),
        ("inf", float("inf")),
    ],
)
def test_parse_value(smoke_mod, text, expected):
    assert smoke_mod.parse_value(text) == expected


def test_parse_overrides(smoke_mod):
    ov, unparsed = smoke_mod.parse_overrides(
        ["train.train_iters=5", "+a.b=1", "++c.d='x'", "--local-rank=0", "~e.f", "junk", "a.b=2"]
    )
    assert ov == {"train.train_iters": 5, "a.b": 2, "c.d": "x"}
    assert unparsed == ["~e.f", "junk"]
    ov, unparsed = smoke_mod.parse_overrides(TRICKY)
    assert {k: ov[k] for k in TRICKY_EXPECTED} == TRICKY_EXPECTED
    assert unparsed == ["--not-an-override"]


def test_build_config(smoke_mod):
    cfg = smoke_mod.build_config({}, 4)
    assert cfg["train_iters"] == 20 and cfg["micro_batch_size"] == 4
    assert cfg["global_batch_size"] == 16 and cfg["grad_accum"] == 1
    assert cfg["save"] is None and cfg["save_interval"] is None and cfg["exit_signal_handler"] is False
    assert cfg["log_interval"] == 100 and cfg["eval_interval"] is None and cfg["eval_iters"] == 100  # Bridge's defaults
    assert cfg["num_workers"] == 2 and cfg["exit_signal"] == signal.SIGTERM
    assert cfg["busbw_sizes"] == smoke_mod.DEFAULT_BUSBW_SIZES
    cfg = smoke_mod.build_config(
        {
            "train.global_batch_size": 32,
            "tokenizer.vocab_size": 100,
            "checkpoint.load": "None",
            "smoke.busbw_sizes": ["1K", "2M"],
        },
        4,
    )
    assert cfg["grad_accum"] == 2 and cfg["vocab_size"] == 100 and cfg["load"] is None
    assert cfg["busbw_sizes"] == [1024, 2 << 20]
    for bad in (
        {"train.global_batch_size": 6, "train.micro_batch_size": 4},
        {"train.train_iters": "many"},
        {"model.hidden_size": 30},
        {"train.micro_batch_size": 0},
        {"train.exit_signal_handler": "maybe"},
        {"checkpoint.ckpt_format": "torch"},
        {"checkpoint.async_save": True},
        {"checkpoint.non_persistent_ckpt_type": "local"},
        {"train.exit_signal": "SIGNOPE"},
    ):
        with pytest.raises(smoke_mod.SmokeError):
            smoke_mod.build_config(bad, 2)


def test_synthetic_data_deterministic(smoke_mod):
    table = smoke_mod.bigram_table(1, 64)
    a = smoke_mod.synthetic_batch(1, 7, 1, 0, 2, 16, 64, table)
    b = smoke_mod.synthetic_batch(1, 7, 1, 0, 2, 16, 64, table)
    c = smoke_mod.synthetic_batch(1, 8, 1, 0, 2, 16, 64, table)
    assert (a[0] == b[0]).all() and (a[1] == b[1]).all()
    assert not (a[0] == c[0]).all()
    assert (a[0][:, 1:] == a[1][:, :-1]).all()  # labels are inputs shifted by one
    follows = (table[a[0]] == a[1]).float().mean().item()
    assert follows > 0.7  # mostly follows the bigram chain -> learnable


def test_mnnvl_status(smoke_mod, monkeypatch):
    monkeypatch.delenv("NCCL_MNNVL_ENABLE", raising=False)
    text = (
        "GPU 00000000:01:00.0\n    Fabric\n        State : Completed\n        Status : Success\n"
        "        CliqueId : 7\n        ClusterUUID : abc\n        Health\n            Bandwidth : Full\n"
        "    Processes : None\n"
    )
    sec = smoke_mod.parse_fabric(text)
    assert sec == [
        {"State": "Completed", "Status": "Success", "CliqueId": "7", "ClusterUUID": "abc", "Bandwidth": "Full"}
    ]
    reg = {"state": "Completed", "status": "Success", "clique_id": "7", "cluster_uuid": "abc"}
    assert smoke_mod.mnnvl_status({"a": reg, "b": reg}, 2)[0] == "likely"
    assert smoke_mod.mnnvl_status({"a": reg}, 1)[0] == "no"
    assert smoke_mod.mnnvl_status({"a": {"state": "N/A", "status": "N/A"}}, 2)[0] == "no"
    assert smoke_mod.mnnvl_status({"a": None, "b": reg}, 2)[0] == "unknown"
    monkeypatch.setenv("NCCL_MNNVL_ENABLE", "0")
    assert smoke_mod.mnnvl_status({"a": reg, "b": reg}, 2)[0] == "disabled"


def test_bad_batch_sizes_single_process(tmp_path):
    """(d) without torchrun: a one-line error on stderr and exit status 2, no traceback."""
    script = _prepare(tmp_path)
    proc = subprocess.run(
        [sys.executable, str(script), "train.micro_batch_size=3", "train.global_batch_size=8"],
        cwd=tmp_path,
        env=_child_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("smoke.py: error: train.global_batch_size=8 is not divisible")
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "summary.json").exists()


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
    its = [MEGATRON_LINE.match(ln) for ln in proc2.stdout.splitlines()]
    first = next(m for m in its if m)
    assert int(first.group(1)) == saved + 1 and int(first.group(3)) == (saved + 1) * 8
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
