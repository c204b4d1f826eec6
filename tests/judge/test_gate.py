"""`check` (the seeds' hardware gate), `--export-golden` and `compare` (loss parity, plots) on
logs written by the trainer protocol's own line builders (the formats Megatron-Bridge prints,
trainer_protocol.py) and on Megatron-LM's golden-values format."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess

import pytest

from bridge_launch.judge import gate, parity
from bridge_launch.logs.reader import Log
from bridge_launch.workloads import trainer_protocol as P
from conftest import CLI, REPO, run_cli, write
from training_logs import every_pass_log, training_log


def verdict(text, **kw):
    v = gate.check(Log([text]), "log", **kw)
    return v, {c.name: c for c in v.criteria}


def verdict_of(texts, **kw):
    v = gate.check(Log(texts), "run", **kw)
    return v, {c.name: c for c in v.criteria}


def test_a_clean_run_passes_every_criterion_with_evidence():
    v, c = verdict(training_log(save_at={50, 100}))
    assert v.passed and (v.step, v.total) == (100, 100)
    assert list(c) == [n for n in gate.CRITERIA if n != "throughput"]  # throughput: only with an expectation
    assert c["steps"].evidence == "100/100"
    assert c["finite"].evidence.startswith("100 iteration lines, all finite (lm loss 10.75 -> ")
    assert "saved at iteration 100" in c["checkpoint"].evidence
    assert c["validation"].evidence == "iteration 100 on validation set: lm loss 2"
    assert c["test"].passed and c["no-signal"].passed


@pytest.mark.parametrize(
    "kw,name,step,fragment",
    [
        ({"gn": lambda s: float("nan") if s == 37 else 1.0}, "finite", 37, "grad norm nan"),
        ({"gn": lambda s: float("inf") if s == 12 else 1.0}, "finite", 12, "grad norm inf"),
        # a NaN interval average is not printed at all (MB train_utils.py:1122-1124)
        ({"loss": lambda s: float("nan") if s == 20 else 3.0}, "finite", 20, "no lm loss printed"),
        ({"skipped": lambda s: 1 if s in (5, 9) else 0}, "skipped", 5, "1 skipped"),
        ({"nan": lambda s: 2 if s == 64 else 0}, "nan", 64, "2 NaN iteration(s)"),
        ({"checks": (71,)}, "nan", 71, "NaN check on rank 1: nan (found NaN in local forward loss calculation)"),
        ({"save_at": {50}}, "checkpoint", 50, "the last save was at iteration 50, not at the last iteration 100"),
        ({"test": False}, "test", None, "no 'validation loss at iteration N on test set' line"),
        (
            {"stop": 47, "exit_line": P.EXIT_SIGNAL, "save_at": {47}},
            "no-signal",
            47,
            "exiting program after receiving SIGTERM.",
        ),
        ({"stop": 47}, "steps", 47, "not finished, 47/100 so far"),
    ],
)
def test_each_failure_names_its_step(kw, name, step, fragment):
    kw.setdefault("save_at", {100})
    v, c = verdict(training_log(**kw))
    assert not v.passed
    assert not c[name].passed and c[name].step == step and fragment in c[name].evidence, c[name]
    others = [n for n, x in c.items() if not x.passed and n != name]
    if name not in ("no-signal", "steps"):
        assert others == [], others


def test_steps_only_skip_and_a_finished_run():
    text = training_log(save_at={100})
    assert verdict(text, steps=120)[1]["steps"].evidence == "not finished, 100/120 so far"
    assert verdict(text, steps=120, finished=True)[1]["steps"].evidence == "stopped early, 100/120 so far"
    v, c = verdict(training_log(validation=False, test=False), only={"steps", "finite"})
    assert v.passed and list(c) == ["steps", "finite"]
    v, c = verdict(training_log(validation=False, test=False, save_at={100}), skip={"validation", "test"})
    assert v.passed and "validation" not in c


def test_no_iteration_lines_fails_every_criterion():
    v, c = verdict("hello\n")
    assert not v.passed and all(x.evidence == "no iteration lines in the output" for x in c.values())


def test_a_long_log_takes_the_counting_path_and_agrees_with_the_lines():
    """10,000 clean iteration lines are judged from counts; one bad line among them is found by step."""
    clean = training_log(10_000, save_at={10_000})
    log = Log([clean])
    t = log.tally()
    assert t["counters"] == t["zero_counters"] == 10_000 and not t["nonfinite"]
    assert "iterations" not in log.__dict__  # the counting path never split the lines
    assert gate.check(log, "x").passed
    bad = training_log(10_000, save_at={10_000}, gn=lambda s: float("nan") if s == 9_876 else 1.0)
    v, c = verdict(bad)
    assert c["finite"].step == 9_876 and not v.passed


def test_segments_of_a_chain_are_one_run():
    first = training_log(100, stop=60, exit_line=P.EXIT_SIGNAL, save_at={50, 60})
    second = P.loaded_line("/ckpt", 60) + "\n" + training_log(100, save_at={100}, start=61)
    v, c = verdict_of([first, second])
    assert v.passed, [x for x in v.criteria if not x.passed]  # the SIGTERM save of segment 1 is not the end
    assert [i.step for i in Log([first, second]).iterations] == list(range(1, 101))
    # the chain stopped after segment 1: its signal exit ends the run
    v, c = verdict_of([first])
    assert not c["no-signal"].passed and c["steps"].evidence == "not finished, 60/100 so far"


# ------------------------------------------------------------------------------------------------
# the CLI: exit codes, JSON, --export-golden
# ------------------------------------------------------------------------------------------------
def test_check_cli_exit_codes_json_and_golden(cli, tmp_path):
    good = write(tmp_path / "good.log", training_log(save_at={100}))
    bad = write(tmp_path / "bad.log", training_log(save_at={100}, gn=lambda s: float("nan") if s == 5 else 1.0))
    r = cli("check", good)
    assert r.code == 0 and "PASSED (100/100)" in r.out, r.out + r.err
    r = cli("check", bad, "-o", "json")
    assert r.code == 1
    d = r.json()
    assert d["passed"] is False and d["results"][0]["criteria"][1] == {
        "name": "finite",
        "passed": False,
        "evidence": "iteration 5: grad norm nan",
        "step": 5,
    }
    r = cli("check", good, bad)
    assert r.code == 1 and r.out.count("PASSED") == 1 and r.out.count("FAILED") == 1
    golden = tmp_path / "golden.json"
    r = cli("check", good, "--export-golden", golden)
    assert r.code == 0, r.err
    g = json.loads(golden.read_text())
    assert set(g) == {"lm loss", "iteration-time"}
    assert (g["lm loss"]["start_step"], g["lm loss"]["end_step"], g["lm loss"]["step_interval"]) == (1, 100, 1)
    assert g["lm loss"]["values"]["100"] == float(f"{10.0 * math.exp(-100 / 40) + 1.0:.6E}")
    assert g["iteration-time"]["values"]["1"] == 0.5  # seconds, as TensorBoard's iteration-time
    # the exported values are in parity with the log they came from
    r = cli("compare", good, golden)
    assert r.code == 0 and "PARITY" in r.out, r.out + r.err


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["check", "/nonexistent/x.log"], "/nonexistent/x.log: no such file"),
        (["check", "no-such-run"], "'no-such-run' is not a run, an experiment or a file"),
        (["check", "LOG", "--only", "speed"], "criterion 'speed' is not one of: steps, finite"),
        (["check", "LOG", "--steps", "0"], "--steps 0"),
        (["compare", "LOG"], "compare needs two sources"),
        (["compare", "LOG", "LOG", "LOG"], "compare takes two sources"),
        (["compare", "LOG", "LOG", "--plot", "x.pdf"], "must end in .png, .svg, .html"),
        (["compare", "LOG", "LOG", "--rtol", "-1"], "--rtol -1.0: a tolerance is 0 or more"),
        (["compare", "LOG", "GOLDEN_BAD"], "no 'lm loss' in this golden-values file (it has: num-zeros)"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli, tmp_path, args, fragment):
    log = write(tmp_path / "a.log", training_log(10, save_at={10}))
    bad = write(tmp_path / "g.json", '{"num-zeros": {"values": {"1": 0}}}')
    args = [str(log) if a == "LOG" else str(bad) if a == "GOLDEN_BAD" else a for a in args]
    r = cli(*args)
    assert r.code == 2, r.out + r.err
    assert fragment in r.err and len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err, r.err


def test_allowed_outside_is_megatrons():
    assert [parity.allowed_outside(n) for n in (1, 50, 100, 250, 1000, 4999, 5000, 100000)] == [
        1,
        1,
        1,
        2,
        10,
        49,
        50,
        50,
    ]


def test_a_worker_killed_by_a_signal_fails_no_signal(cli, tmp_path):
    # torchrun's failure summary for a worker a signal ended (T distributed/elastic/multiprocessing/
    # errors/__init__.py:139-143 and the _FAILURE_FORMAT_TEMPLATE at 184-192, torch 2.13)
    summary = (
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "============================================================\n"
        "smoke.py FAILED\n"
        "------------------------------------------------------------\n"
        "Failures:\n  <NO_OTHER_FAILURES>\n"
        "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n[0]:\n"
        "  time      : 2026-12-01_10:00:00\n  host      : node1\n  rank      : 1 (local_rank: 1)\n"
        "  exitcode  : -15 (pid: 4242) SIGTERM\n  error_file: <N/A>\n"
        "  traceback : Signal 15 (SIGTERM) received by PID 4242\n"
        "============================================================\n"
    )
    log = write(tmp_path / "run.log", training_log(100, save_at={100}) + summary)
    r = cli("check", log, "--only", "no-signal")
    assert r.code == 1, r.out + r.err
    assert "torchrun says signal 15 (SIGTERM) killed pid 4242" in r.out, r.out
    before = write(tmp_path / "early.log", summary + training_log(100, save_at={100}))  # an earlier attempt's
    assert cli("check", before, "--only", "no-signal").code == 0


def test_long_logs_judged_over_two_processes_answer_as_on_one_cpu(tmp_path):
    """check and compare of logs over PARALLEL_MIN read in two processes (Log.survey,
    float_columns_of); under taskset to one CPU they read in one. The answers are the same."""
    from bridge_launch.core import forked
    from bridge_launch.logs import reader

    if forked.cpus() < 2 or not shutil.which("taskset"):
        pytest.skip("one CPU (nothing runs in a second process), or no taskset to compare with")
    base = lambda s: 10.0 * math.exp(-s / 40) + 1.0  # noqa: E731
    a = write(tmp_path / "a.log", every_pass_log(7000))
    b = write(tmp_path / "b.log", every_pass_log(7000, loss=lambda s: base(s) * (1.05 if s % 1000 == 500 else 1.01)))
    assert min(os.path.getsize(a), os.path.getsize(b)) >= reader.PARALLEL_MIN
    for args in (["check", a, "-o", "json"], ["check", a], ["compare", a, b, "-o", "json"], ["compare", a, b]):
        two = run_cli(*args)
        one = subprocess.run(["taskset", "-c", "0", *CLI, *map(str, args)], capture_output=True, text=True, cwd=REPO)
        assert (two.code, two.out, two.err) == (one.returncode, one.stdout, one.stderr), args
    (res,) = run_cli("check", a, "-o", "json").json()["results"]
    failed = {c["name"]: c for c in res["criteria"] if not c["passed"]}
    assert set(failed) == {"finite", "nan"} and failed["finite"]["step"] == 6997, failed
    assert failed["nan"]["evidence"].startswith("iteration 30: NaN check on rank 5")
    assert res["stragglers"]["named"] == [5]
    d = run_cli("compare", a, b, "-o", "json").json()
    assert d["parity"] and d["comparisons"][0]["outside"] == 7 and d["comparisons"][0]["first_outside"]["step"] == 500
