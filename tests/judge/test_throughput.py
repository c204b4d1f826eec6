"""The throughput criterion (judge/throughput.py): a run against an expected TFLOP/s per GPU or step
time, MFU against the GPU's peak, and where the time went from Megatron-Bridge's timers."""

from __future__ import annotations

import pytest

from bridge_launch.judge import throughput as T
from bridge_launch.logs.reader import Log
from bridge_launch.workloads import trainer_protocol as P
from training_logs import training_log


def _timers(fb: float, opt: float, data: float | None) -> list[str]:
    """One log interval's timers as Timers.log prints them (MC core/timers.py:338-355), per iteration."""
    times = {"forward-backward": (fb * 0.9, fb), "optimizer": (opt * 0.9, opt)}
    if data is not None:
        times["batch-generator"] = (data * 0.5, data)
    return ["[rank7]: " + ln for ln in P.timers_minmax_lines(times)]


def _log(n=50, *, ms=500.0, tflops=400.0, fb=None, opt=40.0, data=None, saves=()) -> Log:
    lines = training_log(n, elapsed_ms=lambda _s: ms, tflops=lambda _s: tflops, save_at=set(saves)).splitlines()
    out = []
    for ln in lines:
        out.append(ln)
        if fb is not None and "iteration " in ln and "| consumed samples" in ln:
            out += _timers(fb, opt, data)
        if "successfully saved checkpoint" in ln:
            out += ["[rank7]: " + x for x in P.timers_minmax_lines({P.SAVE_TIMER: (900.0, 1000.0)})]
    return Log(["\n".join(out) + "\n"])


def test_a_run_at_the_expected_speed_passes_and_a_slow_one_fails_with_where_the_time_went():
    exp = T.Expectation(tflops_per_gpu=400.0, source="plan", peak_tflops=2500.0)
    ok, evidence, data = T.judge(_log(), exp)
    assert ok and evidence.startswith("median 400 TFLOP/s/GPU (the Step Time lines) vs 400 expected (plan)"), evidence
    assert data["mfu"] == 400.0 / 2500.0 and "MFU 16.0% of 2500 peak" in evidence
    # 30% slower; the data loader is most of it
    slow = _log(ms=700.0, tflops=280.0, fb=600.0, opt=40.0, data=250.0, saves=(20, 40))
    ok, evidence, data = T.judge(slow, exp)
    assert not ok and "30% slower, more than 20%" in evidence, evidence
    assert "step 700 ms: forward-backward 600 (data wait 250 ms, 36%), optimizer 40, other 60" in evidence
    assert "checkpoint saves 2 x 1000 ms = 5% of the time" in evidence  # 2 s of 50 x 0.7 s + 2 s
    # within the tolerance: said, and passes
    ok, evidence, _ = T.judge(_log(tflops=340.0), exp)
    assert ok and "15% slower, within 20%" in evidence
    ok, evidence, _ = T.judge(_log(tflops=340.0), exp, tolerance=0.1)
    assert not ok and "no forward-backward/optimizer timers in the log" in evidence


def test_a_step_time_expectation_and_a_log_without_throughput_lines():
    no_tflops = Log([training_log(40, elapsed_ms=lambda s: 2000.0 if s <= 4 else 1000.0, tflops=lambda _s: None)])
    # the warm-up tenth (4 of 40 steps) is not judged: its 2 s steps do not count
    ok, evidence, data = T.judge(no_tflops, T.Expectation(step_s=1.0, source="golden.json"))
    assert (
        ok
        and data["step_s"] == 1.0
        and "median step 1 s vs 1 s expected (golden.json) over 36 steady steps" in evidence
    )
    ok, evidence, _ = T.judge(no_tflops, T.Expectation(step_s=0.5, source="x"))
    assert not ok and "50% slower, more than 20%" in evidence  # half the expected steps per second
    # TFLOP/s expected, only step times measured: the model's FLOPs per step turn one into the other
    exp = T.Expectation(tflops_per_gpu=100.0, source="plan", flops_per_step=4 * 100e12, world=4)
    ok, evidence, data = T.judge(no_tflops, exp)
    assert ok and data["tflops_per_gpu"] == 100.0 and "the model's FLOPs per step over the step time" in evidence
    ok, evidence, _ = T.judge(no_tflops, T.Expectation(tflops_per_gpu=100.0, source="plan"))
    assert not ok and evidence.startswith("no measurement to compare: the log has step times")


def test_peak_tflops_by_gpu_and_precision():
    from bridge_launch.core.hardware import peak_tflops

    assert peak_tflops("gb200", "bf16_mixed") == 2500.0 and peak_tflops("GB200", "mxfp8") == 5000.0
    assert peak_tflops("cpu", "bf16") is None and peak_tflops("h100", "fp4") is None


def test_check_judges_throughput_only_when_an_expectation_is_given(cli, tmp_path):
    from conftest import write

    log = write(tmp_path / "run.log", training_log(50, tflops=lambda _s: 280.0, save_at={50}))
    r = cli("check", str(log), "-o", "json")
    assert r.code == 0 and "throughput" not in {c["name"] for c in r.json()["results"][0]["criteria"]}, r.out + r.err
    r = cli("check", str(log), "--expect-tflops", "300")
    assert r.code == 0 and "median 280 TFLOP/s/GPU (the Step Time lines) vs 300 expected (--expect-tflops)" in r.out
    r = cli("check", str(log), "--expect-tflops", "400", "-o", "json")
    crit = {c["name"]: c for c in r.json()["results"][0]["criteria"]}["throughput"]
    assert r.code == 1 and not crit["passed"] and "30% slower, more than 20%" in crit["evidence"]
    assert cli("check", str(log), "--expect-tflops", "400", "--throughput-tolerance", "0.35").code == 0
    # a golden file's iteration time (check --export-golden writes it in seconds)
    gold = tmp_path / "golden.json"
    assert cli("check", str(log), "--export-golden", str(gold)).code == 0
    r = cli("check", str(log), "--expect-golden", str(gold))
    assert r.code == 0 and "median step 0.5 s vs 0.5 s expected" in r.out, r.out


def test_bad_expectations_are_one_line(cli, tmp_path):
    from conftest import write

    log = str(write(tmp_path / "run.log", training_log(10)))
    loss_only = write(
        tmp_path / "loss.json",
        '{"lm loss": {"start_step": 1, "end_step": 2, "step_interval": 1, "values": {"1": 3.0, "2": 2.9}}}',
    )
    for args, said in (
        (["--expect-golden", str(loss_only)], f"--expect-golden {loss_only}: no 'iteration-time' in this golden"),
        (["--expect-tflops", "0"], "--expect-tflops 0: expected a positive number (e.g. 700)"),
        (["--expect-tflops", "5", "--expect-step-time", "1"], "give one expectation for the throughput criterion"),
        (["--expect-golden", log], ": not a golden-values file (check --export-golden writes one)"),
        (["--expect-plan"], "run.log is a log file; plan needs a run's job (or --expect-tflops)"),
        (["--expect-tflops", "5", "--throughput-tolerance", "2"], "--throughput-tolerance 2: a fraction"),
    ):
        r = cli("check", log, *args)
        assert r.code == 2 and said in r.err and len(r.err.strip().splitlines()) == 1, (args, r.err)


@pytest.mark.usefixtures("home")
def test_check_expect_plan_judges_a_run_against_plans_figure_with_its_mfu(tmp_path):
    """A GB200 job's run (recorded, its log written here): plan expects 210.36 TFLOP/s/GPU for the
    MXFP8 VL SFT recipe on gb200-32 (the recipe's measured figure, models.toml)."""
    from bridge_launch.backends.local import log_path
    from bridge_launch.resolve import resolver as resolve
    from bridge_launch.runs import lifecycle as launch
    from bridge_launch.runs.registry import Registry
    from conftest import run_cli, write

    overrides = ["dataset.path=/d", "checkpoint.pretrained_checkpoint=/c", "train.train_iters=50"]
    job = resolve.resolve("qwen35-vl-sft-mxfp8", resolve.Options(cluster="gb200-32", overrides=overrides))
    reg = Registry()

    def record(text: str) -> str:
        run = reg.reserve(job.recipe, job.cluster, "local")
        (reg.jobs_dir() / f"{run.run_id}.json").write_text(launch.job_json(job.with_run_id(run.run_id)))
        run_dir = tmp_path / run.run_id
        write(run_dir / log_path(run.run_id), text)
        reg.update(run.run_id, state="COMPLETED", run_dir=str(run_dir))
        return run.run_id

    def uneven(s):  # rank 5 a third slower from step 11 on (StragglerDetector lines, judge/stragglers.py)
        return {r: 1000.0 * (1.33 if r == 5 and s > 10 else 1.0) + r for r in range(8)}

    slow = record(
        training_log(50, elapsed_ms=lambda _s: 45000.0, tflops=lambda _s: 150.0, save_at={50}, straggler=uneven)
    )
    r = run_cli("check", slow, "--expect-plan", "--only", "throughput", "-o", "json")
    crit = r.json()["results"][0]["criteria"][0]
    assert r.code == 1 and crit["name"] == "throughput" and not crit["passed"], r.out + r.err
    assert "median 150 TFLOP/s/GPU (the Step Time lines) vs 210.4 expected (plan: " in crit["evidence"]
    assert "MFU 3.0% of 5000 peak: 29% slower, more than 20%" in crit["evidence"]
    # status RUN says both, from its log tails
    shown = run_cli("status", slow).out
    assert "plan        210.4 TFLOP/s/GPU expected (plan: " in shown, shown
    assert "now 150, MFU 3.0%: 29% slower, more than 20% (check RUN --expect-plan says where the time went)" in shown
    assert "stragglers  rank 5: 34% slower (worst 34%)" in shown and "by round-trip time in 40 of 50 intervals" in shown
    # no TFLOP/s lines: the model's FLOPs per step over the step time plan expects gives its figure back
    step_ms = 31242.0  # plan: 31.242 s a step at 210.36 TFLOP/s/GPU
    on_time = record(training_log(50, elapsed_ms=lambda _s: step_ms, tflops=lambda _s: None, save_at={50}))
    r = run_cli("check", on_time, "--expect-plan", "--only", "throughput", "-o", "json")
    crit = r.json()["results"][0]["criteria"][0]
    assert r.code == 0 and "the model's FLOPs per step over the step time" in crit["evidence"], crit
    assert "vs 210.4 expected" in crit["evidence"] and crit["evidence"].endswith("MFU 4.2% of 5000 peak: as expected")
