"""Nemotron-Image-Training-v3 subsets -> Energon-ready WebDataset shards.

Two phases, so that the output does not depend on how many processes wrote it:
  plan   (one process) read each subset's JSONL in order, validate every record, derive its key and
         split, locate each image (a byte range in a media tar), and cut each split into shards of
         --max-samples-per-tar in JSONL order;
  write  (N processes, or a Slurm job array) each shard task copies its images' bytes into one tar
         with fixed member metadata (mtime 0, mode 0644, no owner names).
Then Energon indexes the shards (`.nv-meta/`), and `dataset.yaml` + `manifest.json` are written. All
of it happens in a hidden sibling directory that is renamed onto --output-dir only at the end."""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import __version__
from ..errors import LaunchError, UsageError
from . import source as src

SPLITS = ("train", "val")
SHARD_NAME = "{split}-shard-{n:06d}.tar"
TRAINING_DATASET_YAML = """\
__module__: megatron.bridge.data.energon.task_encoder_utils
__class__: ChatMLWebdataset
field_map:
  imgs: jpgs
  conversation: json
subflavors: {}
"""


# ---------------------------------------------------------------- shard writing (runs in workers)

def _tarinfo(name: str, size: int) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime, ti.mode = size, 0, 0o644
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


def write_shard(task: tuple) -> tuple[str, int]:
    """Write one shard: task = (path, [(key, messages_json_bytes, [media location, ...]), ...])."""
    path, samples = task
    tmp = path + ".part"
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tf:
        for key, msg_json, locs in samples:
            imgs = pickle.dumps([src.read_media(loc) for loc in locs], protocol=4)
            # Member order as webdataset's TarWriter writes them: extensions sorted.
            tf.addfile(_tarinfo(f"{key}.jpgs", len(imgs)), io.BytesIO(imgs))
            tf.addfile(_tarinfo(f"{key}.json", len(msg_json)), io.BytesIO(msg_json))
    os.replace(tmp, path)
    return path, len(samples)


def write_shards(tasks: list[tuple]) -> list[tuple[str, int]]:
    """One Slurm array element's share (also usable in-process)."""
    return [write_shard(t) for t in tasks]


# ---------------------------------------------------------------- planning

def _check_output(out: Path) -> None:
    if out.exists():
        if not out.is_dir():
            raise UsageError(f"--output-dir {out} exists and is not a directory; give an empty or absent directory")
        entries = sorted(p.name for p in out.iterdir())
        if entries:
            shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
            raise UsageError(f"--output-dir {out} is not empty ({shown}); give an empty or absent directory")


def _plan_subset(subset: str, subset_dir: Path, media: src.MediaIndex, fraction: float, seen: dict,
                 budget: int | None, plan: dict) -> int:
    jl = src.jsonl_path(subset_dir, subset)
    n = 0
    with open(jl, "rb") as f:
        for lineno, line in enumerate(f, start=1):
            if budget is not None and n >= budget:
                break
            if not line.strip():
                continue
            where = f"{jl}:{lineno}"
            sid, messages, refs = src.parse_record(line, where)
            key = src.sample_key(subset, sid, where)
            if key in seen:
                raise UsageError(f"{where}: duplicate sample key {key!r} (first at {seen[key]})")
            seen[key] = where
            locs = [media.locate(r, where) for r in refs]
            msg_json = json.dumps(messages, ensure_ascii=False).encode("utf-8")
            plan[src.sample_split(key, fraction)].append((key, msg_json, locs))
            n += 1
    return n


def _validate_args(subsets, fraction, per_tar, workers, max_samples):
    if not subsets or any(not s.strip() or "/" in s for s in subsets):
        raise UsageError(f"--subsets {list(subsets)}: give one or more subset directory names (e.g. clevr_2)")
    if len(set(subsets)) != len(subsets):
        raise UsageError(f"--subsets {list(subsets)}: a subset is named twice")
    if not 0 <= fraction < 1:
        raise UsageError(f"--validation-fraction {fraction}: valid: 0 <= fraction < 1")
    if per_tar < 1:
        raise UsageError(f"--max-samples-per-tar {per_tar}: valid: an integer >= 1")
    if workers < 1:
        raise UsageError(f"--num-workers {workers}: valid: an integer >= 1")
    if max_samples is not None and max_samples < 1:
        raise UsageError(f"--max-samples {max_samples}: valid: an integer >= 1")


def prepare(dataset: str, source_dir: Path, output_dir: Path, *, subsets: list[str],
            validation_fraction: float = 0.05, max_samples_per_tar: int = 1000, num_workers: int = 2,
            max_samples: int | None = None, skip_integrity: bool = False, write_manifest: bool = False,
            cluster: str | None = None, on_plan=None, on_progress=None, log=None) -> dict:
    """Convert, index and describe; returns the manifest. Raises UsageError / LaunchError."""
    info = src.dataset_info(dataset)
    _validate_args(subsets, validation_fraction, max_samples_per_tar, num_workers, max_samples)
    source_dir, output_dir = Path(source_dir).resolve(), Path(output_dir).absolute()
    if not source_dir.is_dir():
        raise UsageError(f"--source-dir {source_dir} is not a directory")
    _check_output(output_dir)
    log = log or (lambda msg: None)
    t0 = time.perf_counter()

    # Integrity first: nothing is converted from a source that does not match its pins.
    verified, to_hash, to_pin, indexes, origins = [], [], {}, {}, {}
    for subset in subsets:
        sdir = source_dir / subset
        if not sdir.resolve().is_relative_to(source_dir) or not sdir.is_dir():
            raise UsageError(f"subset directory {sdir} does not exist (download subset {subset!r} of {info['id']} "
                             f"at revision {info['revision'][:12]} into --source-dir)")
        pins, origin = src.find_pins(dataset, subset)
        if pins:
            log(f"verifying {len(pins)} pinned files of {subset} ({origin})")
            verified += src.verify_pins(source_dir, pins, origin)
            archives = [source_dir / p for p in sorted(pins) if p.endswith(".tar")]
            allow_loose = False  # verified mode: media only from the verified tars
            jl = src.jsonl_path(sdir, subset)
            if str(jl.relative_to(source_dir)) not in pins:
                to_hash.append(jl)
            origins[subset] = origin
        elif write_manifest or skip_integrity:
            archives, allow_loose = src.media_archives(sdir), True
            to_hash += [src.jsonl_path(sdir, subset), *archives]
            if write_manifest:
                to_pin[subset] = [src.jsonl_path(sdir, subset), *archives]
            origins[subset] = "none (--write-manifest)" if write_manifest else "none (--skip-source-integrity-check)"
        else:
            raise UsageError(f"subset {subset!r} has no integrity manifest (published: turing); after verifying its "
                             f"provenance pass --write-manifest to pin it, or --skip-source-integrity-check")
        indexes[subset] = src.MediaIndex.build(sdir, archives, allow_loose)

    with ThreadPoolExecutor(max_workers=4) as pool:  # hashing overlaps planning (hashlib drops the GIL)
        hashes = {p: pool.submit(src.sha256_file, p) for p in to_hash}
        plan: dict[str, list] = {s: [] for s in SPLITS}
        seen: dict[str, str] = {}
        total = 0
        for subset in subsets:
            budget = None if max_samples is None else max_samples - total
            total += _plan_subset(subset, source_dir / subset, indexes[subset], validation_fraction, seen, budget, plan)
            if max_samples is not None and total >= max_samples:
                break
        hashed = [{"path": str(p.relative_to(source_dir)), "size": p.stat().st_size, "sha256": h.result()}
                  for p, h in hashes.items()]

    loose = sorted({loc[1] for part in plan.values() for _, _, locs in part for loc in locs if loc[0] == "file"})
    hashed += [{"path": str(Path(p).relative_to(source_dir)), "size": os.path.getsize(p), "sha256": src.sha256_file(Path(p))}
               for p in loose]
    counts = {s: len(plan[s]) for s in SPLITS}
    if counts["train"] == 0:
        raise UsageError(f"no training samples in {', '.join(subsets)} (read {total} records); check the source or lower --validation-fraction")
    if validation_fraction > 0 and counts["val"] == 0:
        raise UsageError(f"no validation samples among {total} records at --validation-fraction {validation_fraction}; "
                         "raise it or --max-samples, or pass --validation-fraction 0")

    tmp = output_dir.parent / f".{output_dir.name}.partial-{os.getpid()}"
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        tasks = []
        for split in SPLITS:
            items = plan[split]
            for n, i in enumerate(range(0, len(items), max_samples_per_tar)):
                tasks.append((str(tmp / SHARD_NAME.format(split=split, n=n)), items[i:i + max_samples_per_tar]))
        if on_plan:
            on_plan(total, len(tasks))
        t1 = time.perf_counter()
        if cluster:
            from .slurm import run_array

            run_array(cluster, tasks, tmp, num_workers, on_progress=on_progress, log=log)
        else:
            _run_local(tasks, num_workers, on_progress)
        t2 = time.perf_counter()
        log(f"indexing {len(tasks)} shards with Energon")
        index(tmp, [s for s in SPLITS if counts[s]], num_workers)
        (tmp / ".nv-meta" / "dataset.yaml").write_text(TRAINING_DATASET_YAML)
        manifest = {
            "dataset": info["id"], "dataset_name": dataset, "revision": info["revision"],
            "subsets": list(subsets), "validation_fraction": validation_fraction,
            "max_samples_per_tar": max_samples_per_tar, "max_samples": max_samples,
            "counts": counts, "shards": {s: sum(1 for t in tasks if Path(t[0]).name.startswith(s + "-")) for s in SPLITS},
            "source_integrity_verified": all(not origins[s].startswith("none") for s in subsets),
            "integrity_manifests": origins,
            "source_files": sorted(verified + hashed, key=lambda f: f["path"]),
            "tool": f"bridge-launch {__version__}",
            "layout": "Megatron-Bridge ChatMLWebdataset: <key>.jpgs (pickled list of image bytes), <key>.json (messages)",
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        t3 = time.perf_counter()
        _check_output(output_dir)  # nobody wrote there meanwhile
        if output_dir.exists():
            output_dir.rmdir()
        os.rename(tmp, output_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for subset, files in to_pin.items():
        by_path = {f["path"]: f for f in hashed}
        pinned = [by_path[str(p.relative_to(source_dir))] for p in files]
        pinned += [f for f in hashed if f["path"].startswith(subset + "/") and f not in pinned]
        path = src.write_user_manifest(dataset, subset, pinned)
        log(f"pinned {len(pinned)} files of {subset} in {path}")
    manifest["timings_s"] = {"plan": round(t1 - t0, 3), "write": round(t2 - t1, 3), "index": round(t3 - t2, 3),
                             "total": round(time.perf_counter() - t0, 3)}
    manifest["output_dir"] = str(output_dir)
    return manifest


def _run_local(tasks, workers, on_progress):
    if workers == 1 or len(tasks) == 1:
        for t in tasks:
            _, n = write_shard(t)
            if on_progress:
                on_progress(n)
        return
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=mp.get_context("fork")) as pool:
        futs = [pool.submit(write_shard, t) for t in tasks]
        try:
            for f in as_completed(futs):
                _, n = f.result()
                if on_progress:
                    on_progress(n)
        except BaseException:
            for f in futs:
                f.cancel()
            raise


def index(root: Path, splits: list[str], workers: int) -> None:
    """Energon's own indexing: *.tar.idx, .nv-meta/split.yaml, index.sqlite, .info.json."""
    try:
        from megatron.energon.flavors.webdataset.base_webdataset import BaseWebdatasetFactory
    except ImportError as e:
        raise LaunchError(f"megatron-energon is not installed ({e}); install the data extra: pip install 'bridge-launch[data]'")
    paths = sorted(p.name for p in root.glob("*.tar"))
    import contextlib

    with contextlib.redirect_stdout(io.StringIO()):
        BaseWebdatasetFactory.prepare_dataset(
            root, paths, split_parts_patterns=[(s, f"{s}-shard-.*") for s in splits],
            shuffle_seed=None, workers=max(1, min(workers, len(paths))),
        )
