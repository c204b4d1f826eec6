"""Noise bands from repeated runs (judge/bands.py): the statistics and recommended tolerances of
Megatron-LM's compute_golden_statistics.py, the golden-values file that records them, and a run
judged against them by `compare --golden` (or a bands file as B)."""

from __future__ import annotations

import json
import math
import random

import pytest

from bridge_launch.judge import bands, parity, rulesets
from conftest import write
from training_logs import training_log

# ------------------------------------------------------------------------------------------------
# the statistics and tolerances: compute_golden_statistics.py's formulas on a known input
# ------------------------------------------------------------------------------------------------
# Three runs' golden values (the script's result files). Every expected number below is worked out
# by hand from the formulas (docs/judging_sources.md §2) and is also what the script itself at
# Megatron-LM 2a75ac12c writes for these three files (`compute_golden_statistics.py --result-files
# r1.json r2.json r3.json -o out.json`, and with `--confidence-multiplier 3 --start-step 1`).
RUNS = [
    {
        "lm loss": {"1": 10.0, "2": 8.0, "3": -0.001, "4": 1.0},
        "iteration-time": {"1": 1.0, "2": 0.5, "3": 0.5, "4": 0.6},
        "mem-allocated-bytes": {"1": 100, "2": 200, "3": 210},
    },
    {
        "lm loss": {"1": 11.0, "2": 8.0, "3": 0.001, "4": 1.0},
        "iteration-time": {"1": 2.0, "2": 0.5, "3": 0.7, "4": 0.7},
        "mem-allocated-bytes": {"1": 100, "2": 190, "3": 200},
    },
    {
        "lm loss": {"1": 12.0, "2": 8.6, "3": 0.0, "4": "nan"},  # NaN: left out (:264-267)
        "iteration-time": {"1": 1.0, "2": 0.4, "3": 0.5, "4": 0.6},
        "mem-allocated-bytes": {"1": 300, "2": 205, "3": 205},
    },
]


def _golden(run: dict) -> dict:
    return {
        name: {"start_step": 1, "end_step": len(v), "step_interval": 1, "values": dict(v)} for name, v in run.items()
    }


def _runs(name: str) -> list[dict]:
    return [bands._golden_values(_golden(r)[name]) for r in RUNS]


def test_statistics_per_step_are_the_scripts():
    st = bands.statistics(_runs("lm loss"))
    assert st[1] == {"min": 10.0, "max": 12.0, "mean": 11.0, "std": 1.0, "count": 3, "samples": [10.0, 11.0, 12.0]}
    assert st[2]["mean"] == pytest.approx(8.2) and st[2]["std"] == pytest.approx(math.sqrt(0.12))  # stdev: n - 1
    assert st[3] == {
        "min": -0.001,
        "max": 0.001,
        "mean": 0.0,
        "std": 0.001,
        "count": 3,
        "samples": [-0.001, 0.001, 0.0],
    }
    # the NaN of run 3 is left out; one value would have std 0.0 (:453)
    assert st[4] == {"min": 1.0, "max": 1.0, "mean": 1.0, "std": 0.0, "count": 2, "samples": [1.0, 1.0]}
    assert bands.statistics([{5: 2.5}])[5]["std"] == 0.0


@pytest.mark.parametrize(
    "name,multiplier,start,expected",
    [
        # per step (:574-597): the largest |x - mean| / |mean| is step 1's 1/11; step 3's mean is 0
        # (<= 1e-9), so its largest |x| (0.001) is the absolute variance
        ("lm loss", 1.5, 0, (0.1364, 0.0015, 0.090909, 0.001, 4)),
        ("lm loss", 3.0, 1, (0.2727, 0.003, 0.090909, 0.001, 4)),
        # each run's median of values[start:] (:506-538): 0.55, 0.7, 0.55 -> mean 0.6, 0.1 / 0.6
        ("iteration-time", 1.5, 0, (0.25, 1e-6, 0.166667, 0.0, 3)),
        # values[1:]: medians 0.5, 0.7, 0.5 -> mean 0.5667, 0.1333 / 0.5667 = 0.235294, x3 = 0.7059
        ("iteration-time", 3.0, 1, (0.7059, 1e-6, 0.235294, 0.0, 3)),
        # each run's max of values[1:] (:541-572): 210, 200, 205 (run 3's first 300 skipped) -> 5 / 205
        ("mem-allocated-bytes", 1.5, 0, (0.0366, 1e-6, 0.02439, 0.0, 3)),
    ],
)
def test_recommended_tolerances_are_the_scripts(name, multiplier, start, expected):
    runs = _runs(name)
    tol = bands.recommend(name, bands.statistics(runs), runs, multiplier, start)
    got = tuple(
        tol[k]
        for k in (
            "relative_tolerance",
            "absolute_tolerance",
            "max_observed_relative_variance",
            "max_observed_absolute_variance",
            "steps_included",
        )
    )
    assert got == pytest.approx(expected), got


def test_identical_runs_get_the_floors():
    runs = [{1: 3.0, 2: 2.0}] * 3
    tol = bands.recommend("lm loss", bands.statistics(runs), runs)
    assert (tol["relative_tolerance"], tol["absolute_tolerance"]) == (0.001, 1e-6)  # :601, :608


def test_the_golden_file_is_megatron_lms_layout_with_the_scripts_output_per_metric():
    data = bands.golden_file([_golden(r) for r in RUNS], ["r1", "r2", "r3"])
    assert set(data) == {"lm loss", "iteration-time", "mem-allocated-bytes"}
    e = data["lm loss"]
    # what Megatron-LM's GoldenValueMetric requires (common.py:69-73), values the per-step mean
    assert (e["start_step"], e["end_step"], e["step_interval"]) == (1, 4, 1)
    assert e["values"] == {"1": 11.0, "2": pytest.approx(8.2), "3": 0.0, "4": 1.0}
    assert e["statistics"]["num_samples"] == 3 and e["statistics"]["values"]["4"]["count"] == 2
    assert e["recommended_tolerance"]["relative_tolerance"] == 0.1364
    assert e["metadata"] == {
        "num_runs": 3,
        "result_files": ["r1", "r2", "r3"],
        "confidence_multiplier": 1.5,
        "start_step": 0,
    }
    # JSON round trip, read back as a band
    back = json.loads(json.dumps(data))
    b = bands.read_band(back, "lm loss", "f.json")
    assert b.steps[2]["max"] == 8.6 and b.tolerance["absolute_tolerance"] == 0.0015 and b.sources == ["r1", "r2", "r3"]
    # iteration-time is seconds in the file, ms on the iteration line
    t = bands.read_band(back, "elapsed time per iteration (ms)", "f.json")
    assert t.steps[1]["max"] == 2000.0 and t.tolerance["absolute_tolerance"] == pytest.approx(1e-3)
    # another multiplier: the tolerance again from the observed variance (:599-612)
    assert b.with_multiplier(3.0).tolerance["relative_tolerance"] == 0.2727


# ------------------------------------------------------------------------------------------------
# judging: three references, a fourth in-distribution run, a perturbed one
# ------------------------------------------------------------------------------------------------
def noisy(seed: int, decay: float = 40.0):
    """A loss curve with seed noise: up to 1% either way, a different draw per seed."""
    rng = random.Random(seed)
    noise = {s: rng.uniform(-0.01, 0.01) for s in range(1, 101)}
    return lambda s: (10.0 * math.exp(-s / decay) + 1.0) * (1 + noise[s])


def _log_series(seed: int, decay: float = 40.0):
    from bridge_launch.logs.reader import Log

    return parity.log_series(Log([training_log(100, loss=noisy(seed, decay))]), "lm loss", f"seed{seed}")


def test_three_references_a_fourth_passes_a_perturbed_one_fails():
    refs = [_log_series(s) for s in (1, 2, 3)]
    b = bands.band("lm loss", [r.values for r in refs], [r.label for r in refs])
    assert b.num_samples == 3 and sorted(b.steps) == list(range(1, 101))
    c = bands.judge(_log_series(4), b, metric="lm loss")
    assert c.parity and c.steps == 100 and c.outside == 0, bands.render(c)
    # a different learning rate, in effect: a faster decay
    p = _log_series(5, decay=30.0)
    c = bands.judge(p, b, metric="lm loss")
    assert not c.parity and c.outside > c.allowed == 1
    # each step outside with how far: from the band's own numbers
    o = c.outside_steps[0]
    st = b.steps[o["step"]]
    w = b.tolerance["absolute_tolerance"] + b.tolerance["relative_tolerance"] * abs(st["mean"])
    assert (o["lo"], o["hi"]) == (pytest.approx(st["min"] - w), pytest.approx(st["max"] + w))
    assert o["a"] == p.values[o["step"]] and o["by"] == pytest.approx(o["a"] - o["lo"]) and o["by"] < 0
    assert o["sigmas"] == pytest.approx((o["a"] - st["mean"]) / st["std"])
    # every step before it is inside the widened band, every one listed is outside it
    for s in range(1, o["step"]):
        lo, hi = bands.limits(b.steps[s], b.tolerance)
        assert lo <= p.values[s] <= hi
    for x in c.outside_steps:
        assert not (x["lo"] <= x["a"] <= x["hi"])
    text = bands.render(c)
    assert f"outside: step {o['step']}: A " in text and "below min" in text and text.endswith("OUTSIDE THE BAND\n")


def test_a_value_that_is_not_finite_is_outside_and_a_short_run_is_a_problem():
    refs = [_log_series(s) for s in (1, 2, 3)]
    b = bands.band("lm loss", [r.values for r in refs], [r.label for r in refs])
    a = _log_series(4)
    a.values[50] = math.nan
    c = bands.judge(a, b, metric="lm loss", allowed=0)
    assert not c.parity and [o["step"] for o in c.outside_steps] == [50] and "is not finite" in bands.render(c)
    short = parity.Series("short", {s: v for s, v in _log_series(4).values.items() if s <= 60})
    c = bands.judge(short, b, metric="lm loss")
    assert not c.parity and c.outside == 0
    assert c.problems == ["short has no value at the band's last step 100 (it ends at 60)"]


# ------------------------------------------------------------------------------------------------
# the CLI: check --export-golden of several runs, compare --golden, a bands file as B
# ------------------------------------------------------------------------------------------------
def _logs(tmp_path):
    refs = [write(tmp_path / f"seed{s}.log", training_log(100, loss=noisy(s), save_at={100})) for s in (1, 2, 3)]
    good = write(tmp_path / "seed4.log", training_log(100, loss=noisy(4), save_at={100}))
    bad = write(tmp_path / "lr.log", training_log(100, loss=noisy(5, decay=30.0), save_at={100}))
    return refs, good, bad


def test_compare_golden_and_the_bands_file(cli, tmp_path):
    refs, good, bad = _logs(tmp_path)
    r = cli("compare", good, *refs, "--golden")
    assert r.code == 0 and "0 outside the band" in r.out and r.out.endswith("WITHIN THE BAND\n"), r.out + r.err
    r = cli("compare", bad, *refs, "--golden", "-o", "json")
    assert r.code == 1, r.err
    d = r.json()
    assert d["parity"] is False and d["rules"] == "bands"
    c = d["comparisons"][0]
    assert c["references"] == [str(p) for p in refs] and c["num_samples"] == 3 and c["allowed"] == 1
    assert c["outside"] == len(c["outside_steps"]) > 1 and "compute_golden_statistics.py" in c["source"]

    out = tmp_path / "bands.json"
    r = cli("check", *refs, "--export-golden", out)
    assert r.code == 0 and f"noise bands of 3 runs written to {out}" in r.out, r.out + r.err
    data = json.loads(out.read_text())
    assert set(data) == {"lm loss", "iteration-time"}
    assert data["lm loss"]["statistics"]["num_samples"] == 3
    assert data["lm loss"]["recommended_tolerance"] == c["tolerance"]
    # the file as B: judged as a band, the same verdicts as the logs themselves
    r = cli("compare", good, out)
    assert r.code == 0 and "WITHIN THE BAND" in r.out, r.out + r.err
    j = cli("compare", bad, out, "-o", "json")
    assert j.code == 1 and j.json()["comparisons"][0]["outside_steps"] == c["outside_steps"]
    # ... and still plain golden values (the mean) to every other reader
    mean = parity.golden_series(str(out), "lm loss")
    assert mean.values[100] == pytest.approx(
        sum(json.loads(out.read_text())["lm loss"]["statistics"]["values"]["100"]["samples"]) / 3
    )
    r = cli("compare", good, out, "--rules", "megatron-lm")
    assert r.code == 0 and "0 of 100 steps outside 5%" in r.out and "PASSED (megatron-lm rules" in r.out, r.out
    assert rulesets.from_golden(str(out), mean.values, "b").iter_ms
    # a wider multiplier lets the perturbed run's smaller misses in
    wide = cli("compare", bad, out, "--confidence-multiplier", "3", "-o", "json").json()["comparisons"][0]
    assert wide["tolerance"]["relative_tolerance"] > c["tolerance"]["relative_tolerance"]
    assert wide["outside"] < c["outside"]
    # --plot -: A, the band's mean and its widened edges in the terminal
    r = cli("compare", bad, out, "--plot", "-")
    assert r.code == 1 and "band low (min - tolerance)" in r.out and "band high (max + tolerance)" in r.out
    # one run's export keeps today's format
    r = cli("check", refs[0], "--export-golden", out)
    assert r.code == 0 and "statistics" not in json.loads(out.read_text())["lm loss"]


def test_compare_golden_leaves_a_out_of_its_own_references(cli, tmp_path):
    refs, good, _ = _logs(tmp_path)
    r = cli("compare", refs[0], *refs, "--golden", "-o", "json")
    d = r.json()["comparisons"][0]
    assert d["references"] == [str(p) for p in refs[1:]]
    assert d["notes"][0] == f"A ({refs[0]}) is left out of its own references"
    # a bands file made from A is no independent judge of A: refused, not passed (issue 42, item 2)
    out = tmp_path / "bands.json"
    assert cli("check", *refs, "--export-golden", out).code == 0
    r = cli("compare", refs[0], out)
    assert r.code == 2 and "WITHIN THE BAND" not in r.out, r.out + r.err
    assert f"A ({refs[0]}) is one of the 3 runs {out} was made from" in r.err and "cannot judge it" in r.err, r.err
    assert cli("compare", good, out).code == 0  # a run outside the band's sources is judged as before


@pytest.mark.parametrize(
    "args,says",
    [
        (["GOOD", "R1", "--golden"], "--golden needs two or more references (1 given)"),
        (["GOOD", "--golden"], "compare --golden A REF [REF ...]"),
        (["GOOD", "R1", "R2", "--golden", "--rules", "megatron-lm"], "--rules megatron-lm: a noise band is judged"),
        (["GOOD", "R1", "R2", "--golden", "--rtol", "0.1"], "--rtol: a noise band's tolerance is the one"),
        (["GOOD", "R1", "R2", "--golden", "--confidence-multiplier", "0"], "--confidence-multiplier 0.0"),
        (["GOOD", "R1", "--confidence-multiplier", "2"], "--confidence-multiplier: only for a noise band"),
        (["GOOD", "BANDS", "R1", "--golden"], "a bands file is already the band of its runs"),
        (["GOOD", "BANDS", "--metric", "num zeros"], "no band for 'num zeros' in this file"),
        (["GOOD", "BROKEN"], "'lm loss' step '1': a band step is {min, max, mean, std, count, samples}"),
    ],
)
def test_bad_band_input_is_one_line_and_exit_2(cli, tmp_path, args, says):
    refs, good, _ = _logs(tmp_path)
    out = tmp_path / "bands.json"
    assert cli("check", *refs, "--export-golden", out).code == 0
    broken = json.loads(out.read_text())
    broken["lm loss"]["statistics"]["values"]["1"] = {"min": "low"}
    broken_path = write(tmp_path / "broken.json", json.dumps(broken))
    names = {"GOOD": good, "R1": refs[0], "R2": refs[1], "BANDS": out, "BROKEN": broken_path}
    r = cli("compare", *[str(names.get(a, a)) for a in args])
    assert r.code == 2 and says in r.err and "Traceback" not in r.err, r.err
    assert len(r.err.strip().splitlines()) == 1


def test_check_confidence_multiplier_needs_a_bands_export(cli, tmp_path):
    refs, _, _ = _logs(tmp_path)
    r = cli("check", refs[0], "--confidence-multiplier", "2")
    assert r.code == 2 and "--confidence-multiplier: only with --export-golden of several runs" in r.err
    out = tmp_path / "b.json"
    r = cli("check", *refs, "--export-golden", out, "--confidence-multiplier", "3")
    assert r.code == 0 and json.loads(out.read_text())["lm loss"]["metadata"]["confidence_multiplier"] == 3.0
