from __future__ import annotations

import json

import pytest

from bridge_launch.judge import parity
from conftest import write

# ------------------------------------------------------------------------------------------------
# parity
# ------------------------------------------------------------------------------------------------
# The head of a real golden-values file of Megatron-LM's functional tests (tests/functional_tests/
# test_cases/gpt/gpt3_15b_8t_release/golden_values_dev_dgx_h100.json at d98e8a64), cut at step 50.
MLM_GOLDEN = {
    "lm loss": {
        "start_step": 1,
        "end_step": 50,
        "step_interval": 5,
        "values": {
            "1": 12.95636,
            "5": 12.91492,
            "10": 12.06072,
            "15": 11.39912,
            "20": 10.42784,
            "25": 9.97709,
            "30": 9.6286,
            "35": 9.36623,
            "40": 9.17247,
            "45": 9.00251,
            "50": 8.84223,
        },
    }
}


def series(values: dict, label="x"):
    return parity.Series(label, dict(values))


def test_parity_against_megatron_golden_values(tmp_path):
    path = write(tmp_path / "golden_values_dev_dgx_h100.json", json.dumps(MLM_GOLDEN))
    ref = parity.golden_series(str(path), "lm loss")
    assert ref.values[50] == 8.84223 and len(ref.values) == 11
    # a log with every step; only the golden's steps are compared
    mine = {s: 12.95636 - (12.95636 - 8.84223) * (s - 1) / 49 for s in range(1, 51)}
    mine.update({s: v * 1.01 for s, v in ref.values.items()})
    c = parity.compare(series(mine), ref)
    assert c.steps == 11 and c.outside == 0 and c.parity and c.final["step"] == 50
    assert c.correlation == pytest.approx(1.0)
    # two steps 5% off: one is allowed out of 11, the second is not; the first is named
    off = {**mine, 20: ref.values[20] * 1.05, 35: ref.values[35] * 0.95}
    c = parity.compare(series(off), ref)
    assert (c.outside, c.allowed, c.parity) == (2, 1, False)
    assert c.first_outside["step"] == 20 and c.first_outside["rel"] == pytest.approx(0.05)
    assert parity.compare(series(off), ref, allowed=2).parity
    # the final value beyond 3% fails on its own; "nan" in a golden file is never close
    c = parity.compare(series({**mine, 50: ref.values[50] * 1.04}), ref, rtol=0.05)
    assert c.outside == 0 and not c.final["ok"] and not c.parity
    g = json.loads(json.dumps(MLM_GOLDEN))
    g["lm loss"]["values"]["25"] = "nan"
    c = parity.compare(series(mine), parity.golden_series(str(write(tmp_path / "g2.json", json.dumps(g))), "lm loss"))
    assert c.first_outside["step"] == 25 and c.outside == 1


def test_a_shorter_run_is_not_in_parity():
    ref = series({s: 10.0 - s * 0.01 for s in range(1, 101)}, "ref")
    c = parity.compare(series({s: 10.0 - s * 0.01 for s in range(1, 51)}), ref)
    assert not c.parity and any("no value at the reference's last step 100" in p for p in c.problems)


def test_compare_names_the_largest_difference_with_the_sign_of_its_row(cli, tmp_path):
    from training_logs import training_log

    a = write(tmp_path / "a.log", training_log(50, loss=lambda s: (3.0 - 0.01 * s) * (0.35 if s == 48 else 1.0)))
    b = write(tmp_path / "b.log", training_log(50, loss=lambda s: 3.0 - 0.01 * s))
    r = cli("compare", a, b, "--allowed", "0")
    assert r.code == 1, r.err
    row = next(ln for ln in r.out.splitlines() if ln.split()[:1] == ["48"])
    assert row.split()[-1] == "-65.00%", row
    assert "  largest difference: -65.00% at step 48" in r.out, r.out
    assert cli("compare", a, b, "-o", "json").json()["comparisons"][0]["max_rel"] == pytest.approx(-0.65)


def test_a_metric_the_logs_do_not_have_is_a_usage_error(cli, tmp_path):
    from training_logs import training_log

    a = write(tmp_path / "a.log", training_log(20))
    b = write(tmp_path / "b.log", training_log(20))
    r = cli("compare", a, b, "--metric", "lm losss")
    assert r.code == 2 and "PARITY" not in r.out, r.out + r.err
    assert "--metric 'lm losss'" in r.err and "did you mean 'lm loss'?" in r.err and "grad norm" in r.err
    assert len(r.err.strip().splitlines()) == 1
    r = cli("check", a, "--metric", "lm losss")
    assert r.code == 2 and "did you mean 'lm loss'?" in r.err, r.out + r.err
    assert cli("compare", a, b, "--metric", "grad norm").code == 0


def _by_definition(a: dict, b: dict, rtol: float, atol: float) -> tuple:
    """np.isclose step by step (a value that is not finite is never close), the largest |A - B| / |B|
    (later step on a tie) and the Pearson correlation of the finite pairs: the harness's definitions."""
    import math

    steps = sorted(a.keys() & b.keys())
    fin = [s for s in steps if math.isfinite(a[s]) and math.isfinite(b[s])]
    bad = [s for s in steps if s not in fin or not abs(a[s] - b[s]) <= atol + rtol * abs(b[s])]

    def rel(s):
        if s not in fin:
            return math.inf
        return (0.0 if a[s] == 0 else math.inf) if b[s] == 0 else (a[s] - b[s]) / abs(b[s])

    worst = max(steps, key=lambda s: (abs(rel(s)), s))
    xs, ys = [a[s] for s in fin], [b[s] for s in fin]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    return len(bad), bad[0] if bad else None, worst, rel(worst), sxy / (sxx * syy) ** 0.5


@pytest.mark.parametrize(
    "tweak",
    [
        {},  # every value finite, no zero: the C-loop path
        {7: 0.0},  # a reference of 0: the sizes step by step
        {9: float("nan")},  # a value that is not finite: step by step
        {11: float("inf")},
    ],
)
@pytest.mark.parametrize("atol", [0.0, 0.05])
def test_the_fast_comparison_keeps_the_definitions(tweak, atol):
    b = {s: 3.0 + (s % 7) * 0.1 for s in range(1, 201)}
    a = {s: v * (1.0 + (0.03 if s % 13 == 0 else 0.001) * (-1) ** s) for s, v in b.items()}
    a[50] = b[50] * 1.03  # a tie in size with the 13th steps: the later step wins
    b.update(tweak)
    a.pop(3)  # A lacks a step: the common steps only
    c = parity.compare(parity.Series("a", a), parity.Series("b", b), rtol=0.02, atol=atol)
    outside, first, worst, worst_rel, corr = _by_definition(a, b, 0.02, atol)
    assert (c.outside, c.first_outside and c.first_outside["step"]) == (outside, first)
    assert (c.max_rel_step, c.max_rel) == (worst, worst_rel)
    assert c.correlation == pytest.approx(corr, rel=1e-12)
    assert c.steps == 199 and [r[0] for r in c.rows] == sorted(a.keys() & b.keys())


@pytest.mark.parametrize("tweak", [{}, {7: 0.0}, {9: float("nan")}, {200: float("inf")}])
def test_two_logs_columns_judge_as_their_values_do(tweak):
    """Two logs of one length come as columns in step order: compared without a dict, the same
    comparison as from their values taken in another order (the step-by-step alignment)."""
    b = {s: 3.0 + (s % 7) * 0.1 for s in range(1, 201)}
    a = {s: v * (1.0 + (0.03 if s % 13 == 0 else 0.001) * (-1) ** s) for s, v in b.items()}
    b.update(tweak)
    fast = parity.compare(
        parity.Series("a", columns=(list(a), list(a.values()))),
        parity.Series("b", columns=(list(b), list(b.values()))),
    )
    shuffled = parity.compare(
        parity.Series("a", dict(reversed(a.items()))), parity.Series("b", dict(reversed(b.items())))
    )
    assert fast.to_dict(rows=True) == shuffled.to_dict(rows=True)
    assert fast.final["step"] == 200 and fast.steps == 200
    with pytest.raises(TypeError):
        parity.Series("neither")
    s = parity.Series("c", columns=([1, 2], [0.5, 0.25]))
    assert s.values == {1: 0.5, 2: 0.25} and parity.Series("d", {2: 1.0, 1: 2.0}).columns == ([2, 1], [1.0, 2.0])


def _without(text: str, steps: range, *, whole_line: bool) -> str:
    """The log with the iteration lines of `steps` gone (whole_line) or without their lm loss field
    (Megatron prints no loss whose interval average is NaN: MB train_utils.py:1122-1124)."""
    import re

    out = []
    for line in text.splitlines(keepends=True):
        m = re.search(r"iteration\s+(\d+)/", line)
        if m and int(m.group(1)) in steps:
            if whole_line:
                continue
            line = re.sub(r"\| lm loss: [^|]+", "", line)
        out.append(line)
    return "".join(out)


def test_steps_a_log_lacks_inside_its_range_are_named_and_no_verdict_passes_over_them(cli, tmp_path):
    """Issue 42 item 4: compare judged only the steps both logs had, so a stretch with no loss (a NaN
    average is not printed) or a log that lost lines passed as PARITY; check passed a log with a
    hole by its last line. Now each says what it did not judge, and fails; a log interval other than
    1, and a last step off it, are no hole."""
    from bridge_launch.logs.reader import unlogged
    from training_logs import training_log

    assert unlogged(list(range(1, 101))) == (0, [])
    assert unlogged([*range(10, 100, 10), 95]) == (0, []) and unlogged([*range(10, 101, 10)]) == (0, [])
    assert unlogged([*range(1, 30), *range(71, 101)]) == (41, [(30, 70)])
    assert unlogged([*range(10, 51, 10), 80, 90]) == (2, [(60, 70)])
    full = training_log(100, save_at={100})
    b = write(tmp_path / "b.log", full)
    nan = write(tmp_path / "nan.log", _without(full, range(30, 71), whole_line=False))
    for args in ((nan, b), (b, nan)):
        r = cli("compare", *args)
        assert r.code == 1 and "NO PARITY" in r.out, r.out
        assert f"{nan} has no 'lm loss' at 41 step(s) inside its own range (30-70): not judged" in r.out, r.out
    r = cli("compare", nan, "--golden", b, write(tmp_path / "b2.log", full))
    assert r.code == 1 and f"{nan} has no 'lm loss' at 41 step(s) inside its own range (30-70)" in r.out, r.out
    gap = write(tmp_path / "gap.log", _without(full, range(11, 91), whole_line=True))
    r = cli("check", gap)
    assert r.code == 1 and "80 iteration(s) inside it are not in the output (11-90): not judged" in r.out, r.out
    assert cli("check", b).code == 0 and cli("compare", b, write(tmp_path / "b3.log", full)).code == 0
