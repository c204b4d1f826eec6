"""Preparing a synthetic Nemotron-Image-Training-v3 source, for the data tests fast and end to end."""

from __future__ import annotations

from bridge_launch.data import prepare

DS = "nemotron-image-v3"


def _prep(srcdir, out, **kw):
    kw.setdefault("subsets", ["clevr_2"])
    kw.setdefault("skip_integrity", True)
    kw.setdefault("validation_fraction", 0.25)
    kw.setdefault("max_samples_per_tar", 5)
    kw.setdefault("num_workers", 1)
    return prepare.prepare(DS, srcdir, out, **kw)
