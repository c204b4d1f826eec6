"""Megatron-Bridge's trainer protocol (src/bridge_launch/workloads/trainer_protocol.py): the
facts the launcher relies on, held against the stand-in that writes by them, against the real
torchrun here (torch 2.13) and against the chain's own checkpoint rule.

Fast tests: the log formats against lines quoted from Bridge's source, and the chain's bash
publication rule on checkpoint directories laid out as Bridge leaves them. Slow tests: the
smoke workload under real torchrun (write order seen through inotify, signal handling, the
DataLoader workers, torchrun's shutdown timeout and exit status, loading)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from bridge_launch.workloads import trainer_protocol as P


# ----------------------------------------------------------------------------------------------
# the chain's publication rule, as rendered into the batch script
# ----------------------------------------------------------------------------------------------
def _functions(*overrides) -> str:
    """The batch script's inputs (its checkpoint settings among them) and the staged resume-point.sh,
    as a --until-done dry run renders them."""
    from conftest import run_cli

    r = run_cli("submit", "smoke", "-c", "local-slurm", "--until-done", "--dry-run", "-o", "json", *overrides)
    assert r.code == 0, r.err
    art = r.json()["artifact"]
    text = art["text"]
    inputs = text[text.index("\n", text.index("# the batch logic")) + 1 : text.index("\nstop_file=")]
    (library,) = (body for rel, body in art["files"].items() if rel.endswith(".resume-point.sh"))
    return inputs + "\n" + library


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


def test_the_minmax_timer_pattern_reads_every_name_the_timers_print():
    # MC timers.py:338-355: (name + " ").ljust(48, "."): a long name gets no dots; names may hold "/"
    names = {"save-checkpoint": (1.0, 2.5), "train/valid/test-data-iterators-setup": (3.0, 4.0), "x" * 50: (5.0, 6.0)}
    lines = P.timers_minmax_lines(names)
    got = {m.group(1): (float(m.group(2)), float(m.group(3))) for m in map(P.TIMER_MINMAX_RE.match, lines[1:]) if m}
    assert got == names
