"""Measured sample lengths and recipe settings the packing and inspect tests share."""

from __future__ import annotations

import pytest

from bridge_launch.spec import recipes

np = pytest.importorskip("numpy")


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
