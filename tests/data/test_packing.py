from __future__ import annotations

import pytest

from bridge_launch.data import inspect as insp
from bridge_launch.data import packing
from data_measures import _measured, _recipe_cfg

# an isolated state dir for every test here
pytestmark = pytest.mark.usefixtures("home")

pytest.importorskip("PIL")


np = pytest.importorskip("numpy")


def test_packing_hand_computed():
    # buffers [60,50,40] and [30,20,10], seq 100: FFD -> [60+40], [50], [30+20+10]
    s = packing.simulate([60, 50, 40, 30, 20, 10], 100, 3)
    assert s["packs"] == 3 and s["tokens"] == 210 and s["padding"] == 90
    assert s["padding_fraction"] == pytest.approx(0.3)
    assert sorted(s["pack_fill"].tolist()) == [0.5, 0.6, 1.0]
    assert sorted(s["pack_samples"].tolist()) == [1, 2, 3]
    # one buffer of 6: FFD -> [60,40], [50,30,20], [10]
    s = packing.simulate([60, 50, 40, 30, 20, 10], 100, 6)
    assert s["packs"] == 3 and sorted(s["pack_fill"].tolist()) == [0.1, 1.0, 1.0]
    # alignment to a multiple counts as padding; too-long samples are counted and left out
    s = packing.simulate([17, 33, 200], 64, 8, multiple=16)
    assert s["too_long"] == 1 and s["aligned_tokens"] == 32 + 48 and s["packs"] == 2
    assert s["padding"] == 2 * 64 - 50
    # the seeds' warning: 8 samples of ~600 tokens in a 131072 pack -> > 95 % padding
    s = packing.simulate([600] * 80, 131072, 8)
    assert (
        s["packs"] == 10 and s["padding_fraction"] == pytest.approx(1 - 4800 / 131072) and s["padding_fraction"] > 0.95
    )


def test_packing_matches_reference_first_fit_decreasing():
    rng = np.random.default_rng(3)
    L = rng.integers(1, 900, size=997)

    def ref(lengths, cap, buf):
        fills = []
        for i in range(0, len(lengths), buf):
            bins = []
            for x in sorted(lengths[i : i + buf], reverse=True):
                for b in bins:
                    if b[0] + x <= cap:
                        b[0] += x
                        break
                else:
                    bins.append([x])
            fills += [b[0] for b in bins]
        return sorted(fills)

    for cap, buf in [(1000, 8), (2048, 16), (4096, 64), (900, 3)]:
        s = packing.simulate(L, cap, buf)
        assert sorted((s["pack_fill"] * cap).round().astype(int).tolist()) == ref(L.tolist(), cap, buf)


def test_pad_multiple_follows_bridge_rule():
    assert (
        packing.pad_multiple(
            {"model.tensor_model_parallel_size": 2, "model.context_parallel_size": 8, "model.sequence_parallel": True}
        )
        == 16
    )
    assert (
        packing.pad_multiple(
            {"model.tensor_model_parallel_size": 4, "model.context_parallel_size": 1, "model.sequence_parallel": True}
        )
        == 4
    )
    assert packing.pad_multiple({}) == 1


def test_suggestions_reduce_padding():
    L = [600] * 4000
    base = packing.simulate(L, 131072, 8)["padding_fraction"]
    sg = packing.suggestions(L, 131072, 8)
    assert sg["samples_to_fill_a_pack"] == 219
    assert sg["settings"] and all(r["padding_fraction"] < base for r in sg["settings"])
    assert {"dataset.packing_buffer_size", "dataset.seq_length"} <= {r["setting"] for r in sg["settings"]}


def test_packing_advice_keeps_the_sequence_rule_and_sets_both_lengths():
    # TP 2, CP 8, sequence parallel: Bridge wants seq_length divisible by lcm(2*CP, TP*CP) = 16
    # (training/config.py:1354-1372, docs/validation_rules.md)
    cfg = _recipe_cfg("qwen35-vl-sft")
    cfg["dataset.packing_buffer_size"] = 3  # so that buffer x mean length lands on an odd multiple of 16
    rep = insp.report(_measured([592] * 600), recipe="qwen35-vl-sft", recipe_cfg=cfg)
    rows = rep["packing"]["suggestions"]["settings"]
    seq_rows = [r for r in rows if r["setting"] == "dataset.seq_length"]
    assert seq_rows, rows
    for r in seq_rows:
        assert r["value"] % 16 == 0, r  # a value the job's own validation accepts
        assert r["overrides"] == [f"dataset.seq_length={r['value']}", f"model.seq_length={r['value']}"]
    from bridge_launch.plan import rules as validate

    for r in seq_rows:
        assert not validate.sequence_errors(
            {**cfg, "dataset.seq_length": r["value"], "model.seq_length": r["value"]}, kind="energon"
        )
    assert validate.sequence_errors({**cfg, "dataset.seq_length": 1768, "model.seq_length": 1768}, kind="energon")
    text = insp.text_view(rep, _measured([592] * 600))
    assert f"dataset.seq_length={seq_rows[0]['value']} model.seq_length={seq_rows[0]['value']}" in text
