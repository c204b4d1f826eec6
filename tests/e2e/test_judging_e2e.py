"""Judging runs on the local two-node Slurm cluster (2 x 2 CPU ranks): a run made slower on purpose is
caught by the timing rules and the throughput criterion, not by the loss rules; a rank slowed on
purpose is named as the straggler, with its node, by `check` and `status RUN`. The smoke workload
prints Megatron's formats (trainer_protocol.py): Step Time and iteration lines, the timers
(logger.timing_log_level) and the StragglerDetector line (straggler.log_straggler)."""

import os

import pytest
from test_bands_e2e import SMALL, _wait, slurm  # noqa: F401 (the fixture)

from conftest import run_cli

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

if os.geteuid() != 0:
    pytest.skip("the local Slurm cluster needs root", allow_module_level=True)

STEPS = ["train.train_iters=30", "logger.log_interval=1", "logger.timing_log_level=2"]


def _submit(*args) -> str:
    r = run_cli("submit", "smoke", "-c", "local-slurm", "-o", "json", *SMALL, *STEPS, *args)
    assert r.code == 0, r.err
    return r.json()["run_id"]


@pytest.mark.usefixtures("slurm", "home")
def test_a_slowed_run_fails_the_timing_rules_and_the_throughput_criterion_not_the_loss_rules():
    ref = _submit("smoke.step_sleep=0.02")
    slow = _submit("smoke.step_sleep=0.25")  # the same seed: the same losses, step for step
    _wait([ref, slow])
    for rules, timing in (("megatron-bridge", "gpu-utilization"), ("megatron-lm", "iteration-time")):
        r = run_cli("compare", slow, ref, "--rules", rules, "-o", "json")
        j = r.json()["comparisons"][0]
        assert r.code == 1 and j["verdicts"]["loss"] is True and j["verdicts"]["timing"] is False, (rules, j)
        assert next(c for c in j["checks"] if c["rule"] == timing)["status"] == "fail"
    assert run_cli("compare", ref, ref, "--rules", "megatron-bridge").code == 0
    # check's throughput criterion against an expected 0.1 s a step (the reference's steps take about 0.05 s,
    # the slowed run's about 0.3 s), with where the time went
    r = run_cli("check", slow, "--expect-step-time", "0.1", "--only", "throughput", "-o", "json")
    crit = r.json()["results"][0]["criteria"][0]
    assert r.code == 1 and "slower, more than 20%; where the time went: step " in crit["evidence"], crit
    assert "forward-backward" in crit["evidence"] and "(data wait " in crit["evidence"]
    r = run_cli("check", ref, "--expect-step-time", "0.1", "--only", "throughput")
    assert r.code == 0 and "faster" in r.out, r.out


@pytest.mark.usefixtures("slurm", "home")
def test_a_rank_slowed_on_purpose_is_named_as_the_straggler_with_its_node():
    run = _submit("straggler.log_straggler=true", "+smoke.slow_rank=3", "+smoke.slow_ms=60")
    _wait([run])
    r = run_cli("check", run, "-o", "json")
    st = r.json()["results"][0]["stragglers"]
    assert st["named"] == [3], st
    named = st["stragglers"][0]
    assert named["by"] == "round-trip time" and named["intervals"] >= 25 and named["typical"] > 1.0, named
    # its node: the one whose log holds rank 3's lines (torchrun's rendezvous placed it)
    run_dir = run_cli("status", run, "-o", "json").json()[0]["run_dir"]
    logs = os.path.join(run_dir, "logs")
    holder = [f for f in os.listdir(logs) if f.endswith(".log") and "[rank3]: " in open(os.path.join(logs, f)).read()]
    assert len(holder) == 1 and named["host"] == holder[0].rsplit("-", 1)[1][: -len(".log")], (holder, named)
    assert f"rank 3 on {named['host']}: " in run_cli("check", run).out
    shown = run_cli("status", run).out
    assert f"stragglers  rank 3 on {named['host']}: " in shown, shown
    # an even run names none: tests/judge/test_stragglers.py (fixtures); the smoke's CPU ranks vary too much
