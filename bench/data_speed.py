"""Benchmarks for issues 4 and 24 (data prepare / packing report). Prints ratios against their anchors.

1. `data prepare` end to end (plan, write, Energon indexing, manifest) vs `tar cf` of a directory
   holding the same sample files (the I/O floor). Goal: >= 0.5x its throughput. Also 1 -> 2 workers.
2. The cold `bridge-launch data prepare` CLI vs Megatron-Bridge's own converter,
   `tutorials/data/energon/prepare_nemotron_image_v3.py` at 2b8cb21d9 (issue 24). Goal: >= 2x.
3. Packing report over 1,000,000 sample lengths (simulate + summary) vs numpy sorting the same
   lengths. Goal: at most 5x.

Each prepare figure is the median of --rounds runs interleaved with its anchor (the machines are
shared and noisy). In 1 prepare runs in this process, Energon's import warmed up first; 2 is the cold CLI.

In 2 both are fresh processes doing the same work on the same synthetic source: subset clevr_2, every
sample, validation fraction 0.05, 1000 samples per tar, 2 workers, the integrity check skipped (the
source is not a pinned one), into an empty directory.
- The converter parses the JSONL, opens every media tar with tarfile, reads each image and writes
  the shards with webdataset's ShardWriter, in one process; then Megatron-Bridge's
  `prepare_webdataset` runs Energon's `prepare_dataset` with --num-workers 2 (it re-reads every
  shard to write `*.tar.idx` and `.nv-meta/`), and it adds `dataset.yaml` and `manifest.json`.
  It runs with webdataset and the `data` extra; `megatron.bridge.data.energon` comes from the
  Megatron-Bridge 067f987df tarball, whose `data/energon/` is that of 2b8cb21d9, under empty
  `megatron.bridge` and `megatron.bridge.data` packages (the real ones import all of Bridge's models,
  which would only slow the anchor). These files are unpacked into the bench's temporary directory.
- `bridge-launch data prepare` parses the JSONL and writes the shards in 2 processes, writes the
  Energon index from the writers' offsets and also hashes every source file for its manifest.
The bench checks that the two outputs hold the same shards, `*.tar.idx`, `split.yaml`, `.info.json` and
`dataset.yaml`.

Usage: .venv/bin/python bench/data_speed.py [--samples 4000] [--rounds 3] [--large-images] [--workdir DIR]
       [--vendor DIR]  (the Megatron-Bridge tarballs; default ../shared/vendor)"""

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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "bench"))
from _timing import bench_env, wall  # noqa: E402

DATASET, SUBSET = "nemotron-image-v3", "clevr_2"
TUTORIAL_TARBALL = "megatron-bridge-2b8cb21d9-energon-tutorial.tar.gz"
CONVERTER = "Megatron-Bridge/tutorials/data/energon/prepare_nemotron_image_v3.py"
BRIDGE_TARBALL = "megatron-bridge-067f987df.tar.gz"
BRIDGE_ENERGON = "Megatron-Bridge/src/megatron/bridge/data/energon/"
# what both commands are given (the converter's defaults too, named so that neither relies on them)
SAME_WORK = [
    "--subsets",
    SUBSET,
    "--validation-fraction",
    "0.05",
    "--max-samples-per-tar",
    "1000",
    "--num-workers",
    "2",
    "--skip-source-integrity-check",
]


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def make_source(work: Path, n: int, large: bool) -> Path:
    from bridge_launch.data import synthetic

    return synthetic.make_source(
        work / "src",
        n=n,
        seed=0,
        max_images=2,
        sizes=((480, 320), (800, 600), (1024, 768)),
        images_per_tar=2000,
        distinct_images=64,
        noisy_every=2 if large else None,
    )


def bench_prepare(work: Path, srcdir: Path, n: int, rounds: int, large: bool) -> dict:
    from bridge_launch.data import prepare, source

    # the I/O floor: the same sample files (images + messages) loose in a directory, then `tar cf`
    loose = work / "loose"
    loose.mkdir()
    jl = srcdir / "clevr_2" / "clevr_2.jsonl"
    mi = source.MediaIndex.build(srcdir / "clevr_2", source.media_archives(srcdir / "clevr_2"), False)
    for ln in jl.read_text().splitlines():
        sid, msg_json, refs = source.parse_record(ln, "x")
        for j, r in enumerate(refs):
            _, tar, off, size = mi.locate(r, "x")
            with open(tar, "rb") as f:
                f.seek(off)
                (loose / f"{sid}.{j}.img").write_bytes(f.read(size))
        (loose / f"{sid}.json").write_bytes(msg_json)
    subprocess.run(["sync"])
    # warm-up: import Energon (seconds, once per process) outside the timed runs; the cold CLI run
    # below shows what a user's first call costs with it
    prepare.prepare(
        "nemotron-image-v3",
        srcdir,
        work / "warm",
        subsets=["clevr_2"],
        num_workers=1,
        skip_integrity=True,
        max_samples=50,
    )
    shutil.rmtree(work / "warm")
    times = {"tar": [], 1: [], 2: []}
    phases = {}
    for _ in range(rounds):  # interleaved, so that a noisy neighbour hits all three alike
        t = time.perf_counter()
        subprocess.run(["tar", "cf", str(work / "floor.tar"), "-C", str(loose), "."], check=True)
        times["tar"].append(time.perf_counter() - t)
        size = (work / "floor.tar").stat().st_size
        (work / "floor.tar").unlink()
        for w in (1, 2):
            out = work / f"out{w}"
            t = time.perf_counter()
            m = prepare.prepare(
                "nemotron-image-v3", srcdir, out, subsets=["clevr_2"], num_workers=w, skip_integrity=True
            )
            times[w].append(time.perf_counter() - t)
            phases[w] = m["timings_s"]
            shutil.rmtree(out)
    tar_s, w1, w2 = _median(times["tar"]), _median(times[1]), _median(times[2])
    res = {
        "samples": n,
        "bytes": size,
        "large_images": large,
        "rounds": rounds,
        "tar_cf_s": [round(x, 3) for x in times["tar"]],
        "prepare_w1_s": [round(x, 3) for x in times[1]],
        "prepare_w2_s": [round(x, 3) for x in times[2]],
        "phases_last_w1_s": phases[1],
        "phases_last_w2_s": phases[2],
        "prepare_vs_tar_w1": round(tar_s / w1, 3),
        "prepare_vs_tar_w2": round(tar_s / w2, 3),
        "speedup_1_to_2_workers": round(w1 / w2, 3),
    }
    return res


def unpack_converter(vendor: Path, work: Path) -> tuple[Path, Path]:
    """The converter script and the directory that provides its `megatron.bridge.data.energon`."""
    import importlib.util
    import tarfile

    if importlib.util.find_spec("webdataset") is None:
        sys.exit(
            f"the converter anchor needs webdataset, which is not installed: {sys.executable} -m pip install webdataset"
        )
    for name in (TUTORIAL_TARBALL, BRIDGE_TARBALL):
        if not (vendor / name).is_file():
            sys.exit(f"the converter anchor needs {vendor / name} (give the folder holding it with --vendor)")
    root = work / "converter"
    members = [(TUTORIAL_TARBALL, CONVERTER)] + [
        (BRIDGE_TARBALL, BRIDGE_ENERGON + f) for f in ("__init__.py", "prepare.py")
    ]
    for tarball, member in members:
        with tarfile.open(vendor / tarball) as tf:
            f = tf.extractfile(member)
            if f is None:
                sys.exit(f"{vendor / tarball} holds no file {member}")
            (root / member).parent.mkdir(parents=True, exist_ok=True)
            (root / member).write_bytes(f.read())
    lib = root / "Megatron-Bridge" / "src"
    for pkg in ("megatron/bridge", "megatron/bridge/data"):
        (lib / pkg / "__init__.py").write_text("")
    return root / CONVERTER, lib


def _same_output(a: Path, b: Path) -> list[str]:
    """The files of two prepared directories that should be equal and are not (index.sqlite differs
    in row order and index.uuid is random; the manifests differ in layout)."""
    names = sorted({p.name for d in (a, b) for p in d.iterdir() if p.name.endswith((".tar", ".tar.idx"))})
    names += [f".nv-meta/{f}" for f in ("split.yaml", ".info.json", "dataset.yaml")]
    return [
        n
        for n in names
        if not (a / n).is_file() or not (b / n).is_file() or (a / n).read_bytes() != (b / n).read_bytes()
    ]


def bench_converter(work: Path, srcdir: Path, rounds: int, converter_files: tuple[Path, Path]) -> dict:
    """Megatron-Bridge's converter and the cold `bridge-launch data prepare` CLI, interleaved (the
    order alternating per round) after one untimed round of each that also checks their outputs."""
    script, lib = converter_files
    env = bench_env(str(work / "home"))
    conv_env = {**env, "PYTHONPATH": str(lib)}
    cli = str(Path(sys.executable).with_name("bridge-launch"))

    def converter(out: Path) -> list[str]:
        return [sys.executable, str(script), "--source-dir", str(srcdir), "--output-dir", str(out), *SAME_WORK]

    def ours(out: Path) -> list[str]:
        return [
            cli,
            "data",
            "prepare",
            DATASET,
            "--source-dir",
            str(srcdir),
            "--output-dir",
            str(out),
            *SAME_WORK,
            "--output",
            "json",
        ]

    cases = {"converter": (converter, conv_env), "bridge-launch": (ours, env)}
    times: dict[str, list[float]] = {k: [] for k in cases}
    for round_ in range(rounds + 1):
        order = list(cases) if round_ % 2 else list(cases)[::-1]
        for name in order:
            cmd, e = cases[name]
            out = work / f"cmp-{name}"
            dt = wall(cmd(out), env=e)
            if round_:
                times[name].append(dt)
        if not round_:
            differ = _same_output(work / "cmp-converter", work / "cmp-bridge-launch")
            if differ:
                sys.exit(f"the converter and bridge-launch wrote different files: {', '.join(differ)}")
        for name in cases:
            shutil.rmtree(work / f"cmp-{name}")
    conv, bl = _median(times["converter"]), _median(times["bridge-launch"])
    return {
        "rounds": rounds,
        "converter_s": [round(x, 3) for x in times["converter"]],
        "bridge_launch_s": [round(x, 3) for x in times["bridge-launch"]],
        "same_shards_and_index_files": True,
        "converter_vs_bridge_launch": round(conv / bl, 3),
    }


def bench_packing(n: int = 1_000_000) -> dict:
    import numpy as np

    from bridge_launch.data import packing

    rng = np.random.default_rng(0)
    L = rng.lognormal(6.5, 0.6, n).astype(np.int64) + 200

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
    return {
        "lengths": n,
        "numpy_sort_s": round(sort_s, 4),
        "packing_report_s": round(rep_s, 4),
        "report_vs_sort": round(rep_s / sort_s, 2),
        "suggestions_s (200k prefix, ~20 settings)": round(sug_s, 3),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=4000)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--large-images", action="store_true", help="half the images random noise (~120 kB, like photos)")
    ap.add_argument(
        "--vendor", type=Path, default=REPO.parent / "shared" / "vendor", help="the Megatron-Bridge tarballs"
    )
    a = ap.parse_args()
    work = Path(a.workdir or tempfile.mkdtemp(prefix="bl-data-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("BRIDGE_LAUNCH_HOME", str(work / "home"))
    try:
        converter_files = unpack_converter(a.vendor, work)  # first: a missing piece is said at once
        pk = bench_packing()
        print(json.dumps({"packing": pk}, indent=2))
        srcdir = make_source(work, a.samples, a.large_images)
        pr = bench_prepare(work, srcdir, a.samples, a.rounds, a.large_images)
        print(json.dumps({"prepare": pr}, indent=2))
        cv = bench_converter(work, srcdir, a.rounds, converter_files)
        print(json.dumps({"prepare_vs_converter": cv}, indent=2))
        print(
            f"prepare vs tar cf: {pr['prepare_vs_tar_w2']:.2f}x (2 workers), {pr['prepare_vs_tar_w1']:.2f}x (1 "
            "worker); goal >= 0.5x"
        )
        print(f"1 -> 2 workers: {pr['speedup_1_to_2_workers']:.2f}x")
        print(
            f"cold CLI vs Megatron-Bridge's converter ({a.samples} samples, 2 workers, medians of {a.rounds}): "
            f"{cv['converter_vs_bridge_launch']:.2f}x faster; goal >= 2.0x"
        )
        print(f"packing report vs numpy sort: {pk['report_vs_sort']:.2f}x; goal <= 5x")
    finally:
        if not a.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
