"""Benchmarks for issue 4 (data prepare / packing report). Prints ratios against their anchors.

1. `data prepare` end to end (plan, write, Energon indexing, manifest) vs `tar cf` of a directory
   holding the same sample files (the I/O floor). Goal: >= 0.5x its throughput. Also 1 -> 2 workers.
2. Packing report over 1,000,000 sample lengths (simulate + summary) vs numpy sorting the same
   lengths. Goal: at most 5x.

Usage: .venv/bin/python bench/data_speed.py [--samples 4000] [--workdir DIR]"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def bench_prepare(work: Path, n: int) -> dict:
    from bridge_launch.data import prepare, source, synthetic

    srcdir = synthetic.make_source(work / "src", n=n, seed=0, max_images=2, sizes=((480, 320), (800, 600), (1024, 768)),
                                   images_per_tar=2000, distinct_images=64)
    # the I/O floor: the same sample files (images + messages) loose in a directory, then `tar cf`
    loose = work / "loose"
    loose.mkdir()
    idx = {}
    jl = srcdir / "clevr_2" / "clevr_2.jsonl"
    mi = source.MediaIndex.build(srcdir / "clevr_2", source.media_archives(srcdir / "clevr_2"), False)
    for ln in jl.read_text().splitlines():
        sid, msgs, refs = source.parse_record(ln, "x")
        for j, r in enumerate(refs):
            (loose / f"{sid}.{j}.img").write_bytes(source.read_media(mi.locate(r, "x")))
        (loose / f"{sid}.json").write_bytes(msgs)
    subprocess.run(["sync"])
    t = time.perf_counter()
    subprocess.run(["tar", "cf", str(work / "floor.tar"), "-C", str(loose), "."], check=True)
    tar_s = time.perf_counter() - t
    size = (work / "floor.tar").stat().st_size
    res = {"samples": n, "bytes": size, "tar_cf_s": round(tar_s, 3), "tar_cf_samples_per_s": round(n / tar_s)}
    # warm-up: import Energon (seconds, once per process) outside the timed runs
    prepare.prepare("nemotron-image-v3", srcdir, work / "warm", subsets=["clevr_2"], num_workers=1,
                    skip_integrity=True, max_samples=50)
    shutil.rmtree(work / "warm")
    for w in (1, 2):
        out = work / f"out{w}"
        t = time.perf_counter()
        m = prepare.prepare("nemotron-image-v3", srcdir, out, subsets=["clevr_2"], num_workers=w, skip_integrity=True)
        s = time.perf_counter() - t
        res[f"prepare_w{w}_s"] = round(s, 3)
        res[f"prepare_w{w}_samples_per_s"] = round(n / s)
        res[f"prepare_w{w}_phases_s"] = m["timings_s"]
        shutil.rmtree(out)
    res["prepare_vs_tar_w1"] = round(tar_s / res["prepare_w1_s"], 3)
    res["prepare_vs_tar_w2"] = round(tar_s / res["prepare_w2_s"], 3)
    res["speedup_1_to_2_workers"] = round(res["prepare_w1_s"] / res["prepare_w2_s"], 3)
    return res


def bench_packing(n: int = 1_000_000) -> dict:
    import numpy as np

    from bridge_launch.data import packing

    rng = np.random.default_rng(0)
    L = (rng.lognormal(6.5, 0.6, n).astype(np.int64) + 200)

    def best(f, k=5):
        b = float("inf")
        for _ in range(k):
            t = time.perf_counter()
            f()
            b = min(b, time.perf_counter() - t)
        return b

    sort_s = best(lambda: np.sort(L))
    rep_s = best(lambda: packing.summary(packing.simulate(L, 131072, 8, 16)))
    sug_s = best(lambda: packing.suggestions(L, 131072, 8, 16), k=2)
    return {"lengths": n, "numpy_sort_s": round(sort_s, 4), "packing_report_s": round(rep_s, 4),
            "report_vs_sort": round(rep_s / sort_s, 2), "suggestions_s (200k prefix, ~20 settings)": round(sug_s, 3)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=4000)
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()
    work = Path(a.workdir or tempfile.mkdtemp(prefix="bl-data-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("BRIDGE_LAUNCH_HOME", str(work / "home"))
    try:
        pk = bench_packing()
        print(json.dumps({"packing": pk}, indent=2))
        pr = bench_prepare(work, a.samples)
        print(json.dumps({"prepare": pr}, indent=2))
        print(f"prepare vs tar cf: {pr['prepare_vs_tar_w2']:.2f}x (2 workers), {pr['prepare_vs_tar_w1']:.2f}x (1 worker); goal >= 0.5x")
        print(f"1 -> 2 workers: {pr['speedup_1_to_2_workers']:.2f}x")
        print(f"packing report vs numpy sort: {pk['report_vs_sort']:.2f}x; goal <= 5x")
    finally:
        if not a.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
