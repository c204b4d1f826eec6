"""data prepare / inspect as a newcomer meets them (issue 13, item 10): the data how-to's example works
as written, the progress bar and the summary give one rate, integer histograms have integer
bins, and the packing advice keeps the job's own sequence rule and both sequence lengths."""

from __future__ import annotations

import re

import pytest

from bridge_launch.core.errors import UsageError
from bridge_launch.data import inspect as insp
from bridge_launch.data import packing
from data_measures import _measured, _recipe_cfg, np

pytest.importorskip("PIL")


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


def test_inspect_says_what_a_recipe_lacks_for_the_packing_report():
    with pytest.raises(UsageError) as exc:
        insp.report(
            _measured([100] * 10), recipe="nemotron-3-nano-pretrain", recipe_cfg=_recipe_cfg("nemotron-3-nano-pretrain")
        )
    msg = str(exc.value)
    assert "sets no dataset.packing_buffer_size" in msg and "its sequence length is 4096" in msg
    assert "no dataset.seq_length" not in msg
