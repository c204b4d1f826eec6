"""data prepare / inspect as a newcomer meets them (issue 13, item 10): the README's example works
as written, the progress bar and the summary give one rate, integer histograms have integer
bins, and the packing advice keeps the job's own sequence rule and both sequence lengths."""

from __future__ import annotations

import re
import shlex

import pytest

from bridge_launch.core.errors import UsageError
from conftest import REPO, run_cli

np = pytest.importorskip("numpy")
pytest.importorskip("PIL")

from bridge_launch.data import inspect as insp  # noqa: E402
from bridge_launch.data import packing, synthetic  # noqa: E402
from bridge_launch.spec import recipes  # noqa: E402


def _measured(lengths_text, lengths_visual=None, images=None) -> dict:
    t = np.asarray(lengths_text, dtype=np.int64)
    v = np.asarray(lengths_visual if lengths_visual is not None else [0] * t.size, dtype=np.int64)
    i = np.asarray(images if images is not None else [1] * t.size, dtype=np.int64)
    return {
        "path": "/x",
        "text_tokens_exact": False,
        "visual_token_settings": {"min_pixels": 1, "max_pixels": 2, "patch_size": 16, "spatial_merge_size": 2},
        "splits": {"train": {"images": i, "text_tokens": t, "visual_tokens": v, "skipped": np.zeros(t.size, bool)}},
    }


def _recipe_cfg(name: str) -> dict:
    r = recipes.load(name)
    return {**r["upstream_config"], **r["config"]}


def test_integer_histograms_have_integer_bins():
    lines = packing.histogram_lines(np.array([1, 2, 2, 3, 4, 4, 4], dtype=np.int64), bins=10)
    labels = [ln.split("#")[0].strip() for ln in lines]
    assert [lab.split()[0] for lab in labels] == ["1", "2", "3", "4"]
    assert not any("." in lab for lab in labels)
    wide = packing.histogram_lines(np.arange(0, 101, dtype=np.int64), bins=10)
    assert all(re.match(r"\s+\d+ - \d+\s", ln) for ln in wide) and len(wide) <= 10
    assert sum(int(ln.split()[-1]) for ln in wide) == 101
    text = insp.text_view(
        insp.report(_measured([10, 20, 30], images=[1, 2, 2])), _measured([10, 20, 30], images=[1, 2, 2])
    )
    block = text.split("images per sample", 1)[1].split("text tokens", 1)[0]
    assert "1.5" not in block and "1.1" not in block


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


def test_inspect_says_what_a_recipe_lacks_for_the_packing_report():
    with pytest.raises(UsageError) as exc:
        insp.report(
            _measured([100] * 10), recipe="nemotron-3-nano-pretrain", recipe_cfg=_recipe_cfg("nemotron-3-nano-pretrain")
        )
    msg = str(exc.value)
    assert "sets no dataset.packing_buffer_size" in msg and "its sequence length is 4096" in msg
    assert "no dataset.seq_length" not in msg


def test_prepare_summary_rate_is_the_progress_bars(monkeypatch, tmp_path):
    """The bar counts samples written per second of writing; the summary says the same rate, and
    where the rest of the time went."""
    from typer.testing import CliRunner

    from bridge_launch.cli import datasets as dcli
    from bridge_launch.data import prepare as prep

    manifest = {
        "output_dir": str(tmp_path / "out"),
        "counts": {"train": 900, "val": 100},
        "shards": {"train": 9, "val": 1},
        "timings_s": {"plan": 6.0, "write": 0.04, "index": 1.96, "total": 8.0},
        "source_integrity_verified": True,
        "integrity_manifests": {"clevr_2": "user"},
    }
    monkeypatch.setattr(prep, "prepare", lambda *_a, **_k: manifest)
    r = CliRunner().invoke(
        dcli.app,
        [
            "prepare",
            "nemotron-image-v3",
            "--source-dir",
            str(tmp_path),
            "--output-dir",
            str(tmp_path / "out"),
            "--subsets",
            "clevr_2",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "writing 0.0 s at 25,000 samples/s" in r.output and "reading and checking the source 6.0 s" in r.output
    assert "125 samples/s" not in r.output  # not samples over the whole run, which the bar never shows


@pytest.mark.slow
def test_readme_prepare_example_works_as_written(tmp_path):
    pytest.importorskip("megatron.energon")
    readme = (REPO / "README.md").read_text()
    block = re.search(r"\n    (bridge-launch data prepare .*?)\n    bridge-launch data inspect", readme, re.S).group(1)
    words = shlex.split(block.replace("\\\n", " "))[1:]
    assert not any(w.startswith("[") for w in words), block  # nothing left for the reader to choose
    src = synthetic.make_source(tmp_path / "src", n=40, seed=2)
    env = {"BRIDGE_LAUNCH_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    for out in ("out", "again"):
        args = [{"SRC": str(src), "OUT": str(tmp_path / out)}.get(w, w) for w in words]
        r = run_cli(*args, env=env, timeout=600)
        assert r.code == 0, r.err
        assert re.search(r"writing [\d.]+ s at [\d,]+ samples/s", r.out), r.out
    assert "Source integrity: verified" in r.out  # the second run checked against the first run's pins
