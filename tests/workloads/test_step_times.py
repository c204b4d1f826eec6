"""workloads/step_times.py: a segment's own step and save times, read from the lines
Megatron-Bridge prints (trainer_protocol), incrementally, and the lead they need. On a real
cluster: tests/e2e/test_until_done_e2e.py::test_a_chain_measures_steps_far_longer_than_its_estimate_and_adapts."""

import json
import sys

import pytest

from bridge_launch.plan import sizing
from conftest import WORKLOADS


@pytest.fixture(scope="module")
def mods():
    sys.path.insert(0, str(WORKLOADS))  # staged in the run dir and run by the batch host's python3
    try:
        import step_times
        import trainer_protocol

        yield step_times, trainer_protocol
    finally:
        sys.path.remove(str(WORKLOADS))


def _iteration(P, i, ms):
    return P.iteration_line(
        iteration=i,
        train_iters=100,
        consumed=16 * i,
        elapsed_ms=ms,
        lr=1e-3,
        global_batch=16,
        losses={"lm loss": 2.0},
        loss_scale=1.0,
        grad_norm=0.5,
        skipped=0,
        nan=0,
    )


def test_the_timer_lines_are_megatrons_minmax_form(mods):
    _S, P = mods
    # MC core/timers.py:346-356, minmax: '    {}: ({:.2f}, {:.2f})' with the name padded by dots to 48
    lines = P.timers_minmax_lines({"save-checkpoint": (1234.5, 2345.678)})
    assert lines == [
        "(min, max) time across ranks (ms):",
        "    save-checkpoint " + "." * 32 + ": (1234.50, 2345.68)",  # 16 characters + 32 dots = 48
    ]
    assert P.TIMER_MINMAX_RE.findall("[rank3]: " + lines[1]) == [("save-checkpoint", "1234.50", "2345.68")]


def test_steps_skip_each_logs_warm_up_and_saves_take_the_slowest_rank(mods, tmp_path, capsys):
    S, P = mods
    log = tmp_path / "7-node2.log"
    text = [_iteration(P, 1, 95000.0), _iteration(P, 2, 41000.0)]
    log.write_text("".join(f"[rank3]:  {x}\n" for x in text))
    state = tmp_path / "measure.json"
    assert S.main([str(state), "-", "-", str(log)]) == 0
    # the warm-up interval (95 s: compilation, autotuning) is left out; 1.25 x 41 s -> 60 s
    assert capsys.readouterr().out.split() == ["60", "41", "-"]
    # appended: a save (its max across ranks), a slower step and half a line still being written
    more = [_iteration(P, 3, 52000.0), *P.timers_minmax_lines({P.SAVE_TIMER: (20000.0, 30000.0)})]
    with log.open("a") as fh:
        fh.write("".join(f"[rank3]:  {x}\n" for x in more) + "[rank3]:  " + _iteration(P, 4, 99000.0)[:60])
    assert S.main([str(state), "-", "-", str(log)]) == 0
    assert capsys.readouterr().out.split() == ["110", "52", "30"]  # 1.25 x (52 + 30) = 102.5 -> 110
    saved = json.loads(state.read_text())
    assert saved["files"][str(log)]["offset"] < log.stat().st_size  # the partial line is read next time
    # a new log (the next segment) has its own warm-up; the figures carry over
    nxt = tmp_path / "8-node2.log"
    nxt.write_text(f"{_iteration(P, 4, 300000.0)}\n")
    S.main([str(state), "-", "-", str(nxt), str(tmp_path / "8-node1.log")])  # a log with no lines yet: skipped
    assert capsys.readouterr().out.split() == ["110", "52", "30"]


def test_no_lead_before_a_step_is_measured_and_a_planned_save_stands_in(mods, tmp_path, capsys):
    S, P = mods
    log = tmp_path / "9-node1.log"
    log.write_text(f"{_iteration(P, 1, 10000.0)}\n")  # the warm-up only
    S.main([str(tmp_path / "m.json"), "126", "-", str(log)])
    assert capsys.readouterr().out.split() == ["0", "-", "-"]
    with log.open("a") as fh:
        fh.write(f"{_iteration(P, 2, 35000.0)}\n")
    S.main([str(tmp_path / "m.json"), "126", "378", str(log)])
    assert capsys.readouterr().out.split() == [str(P.sized_lead(35.0, 126.0, 378.0, floor=0)), "35", "-"]


def test_plan_and_the_segments_size_the_lead_by_one_rule(mods):
    _S, P = mods
    assert (sizing.DEFAULT_LEAD, sizing.LEAD_MARGIN, sizing.UNKNOWN_STEP_ALLOWANCE) == (
        P.DEFAULT_LEAD,
        P.LEAD_MARGIN,
        P.UNKNOWN_STEP_ALLOWANCE,
    )
    assert P.sized_lead(35.4, 125.8, 377.5) == 680  # qwen35-vl-sft-mxfp8 on gb200-32 (test_sizing)
    assert P.sized_lead(None, 125.8, None) == 220  # 1.25 x 125.8 + 60 s for the unknown step
    assert P.sized_lead(1.0, None, None) == 120 and P.sized_lead(1.0, None, None, floor=0) == 10
