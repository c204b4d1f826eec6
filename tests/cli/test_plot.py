from __future__ import annotations

import math
import struct

import pytest

from conftest import run_cli, write
from training_logs import training_log


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.mark.parametrize("ext", [".png", ".svg", ".html"])
def test_plots_are_real_images(cli, tmp_path, ext):
    a = write(tmp_path / "a.log", training_log(200, save_at={200}))
    b = write(
        tmp_path / "b.log", training_log(200, save_at={200}, loss=lambda s: 1.01 * (10.0 * math.exp(-s / 40) + 1.0))
    )
    out = tmp_path / f"plot{ext}"
    r = cli("compare", a, b, "--plot", out)
    assert r.code == 0 and f"plot written to {out}" in r.out, r.out + r.err
    size = out.stat().st_size
    if ext == ".png":
        w, h = _png_size(out)
        assert (w, h) == (1100, 770) and 20_000 < size < 2_000_000
    else:
        text = out.read_text()
        assert "<svg" in text and "</svg>" in text and text.count("<path") > 10 and 20_000 < size < 5_000_000
        if ext == ".html":
            assert text.startswith("<!DOCTYPE html>") and "parity, 0/200 steps outside" in text


def test_without_matplotlib_a_terminal_chart(tmp_path):
    """The 'plot' extra missing: the same command draws in the terminal and says why."""
    shadow = tmp_path / "shadow" / "matplotlib"
    write(shadow / "__init__.py", "raise ImportError('No module named matplotlib')\n")
    a = write(tmp_path / "a.log", training_log(100, save_at={100}))
    b = write(tmp_path / "b.log", training_log(100, save_at={100}, loss=lambda s: 10.0 * math.exp(-s / 40) + 1.5))
    import os

    env = {"PYTHONPATH": str(tmp_path / "shadow") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = run_cli("compare", a, b, "--plot", tmp_path / "p.png", env=env)
    assert r.code == 1, r.err  # 1.5 vs 1.0 at the end: no parity
    assert "matplotlib is not installed" in r.err and "p.png not written" in r.err
    assert not (tmp_path / "p.png").exists()
    chart = r.out[r.out.index("lm loss (*") :]
    assert chart.count("\n") >= 16 and "|rel diff|" in chart and "*" in chart and "o" in chart
