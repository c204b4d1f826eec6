"""Nemotron-Image-Training-v3 subsets -> Energon-ready WebDataset shards.

Two phases, so that the output does not depend on how many processes wrote it:
  plan   read each subset's JSONL (in byte ranges, one per worker task), validate every record, derive
         its key and split; then, in file order, refuse duplicate keys, locate each image (a byte range
         in a media tar) and cut each split into shards of --max-samples-per-tar;
  write  (N processes, or a Slurm job array) each shard task preads its images' bytes into one tar
         with fixed member metadata (mtime 0, mode 0644, no owner names) and records every offset.
Then the Energon index (`.nv-meta/`) is written from those offsets, and `dataset.yaml` +
`manifest.json`. All of it happens in a hidden sibling directory renamed onto --output-dir at the end."""

from __future__ import annotations

import gc
import importlib
import importlib.util
import json
import operator
import os
import re
import shutil
import signal
import sys
import threading
import time
from concurrent.futures import BrokenExecutor, ThreadPoolExecutor
from itertools import chain, repeat
from pathlib import Path
from types import SimpleNamespace

from bridge_launch import __version__
from bridge_launch.core.errors import LaunchError, UsageError, missing_extra
from bridge_launch.data import shards
from bridge_launch.data import source as src

SPLITS = ("train", "val")
CHUNK_BYTES = 256 << 10  # a JSONL is parsed in byte ranges of at least this much, 4 per worker at most
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


# ---------------------------------------------------------------- planning


def _check_output(out: Path) -> None:
    if out.exists():
        if not out.is_dir():
            raise UsageError(f"--output-dir {out} exists and is not a directory; give an empty or absent directory")
        entries = sorted(p.name for p in out.iterdir())
        if entries:
            shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
            raise UsageError(f"--output-dir {out} is not empty ({shown}); give an empty or absent directory")


_ASCII_WS = " \t\n\r\x0b\x0c"  # what bytes.strip() strips: a line of only these is blank


def _parse_lines(subset: str, jl: str, lines, fraction: float, budget: int | None = None) -> tuple:
    """Validate consecutive JSONL lines, numbered from 1 here: ([(line, key, split, messages json,
    image refs)], error), error = None or (line, the message after "file:line: ").

    Every line is read the same way whichever path reads it (a worker's byte range or the serial
    reader): as UTF-8 text, one leading BOM dropped (as json.loads(bytes) drops it), blank if it holds
    only ASCII whitespace; a line that is not UTF-8 goes to json.loads as bytes, for its error. An
    error ends the list, so the caller can report the first one in file order."""
    out = []
    for n, line in enumerate(lines, start=1):
        if budget is not None and len(out) >= budget:
            break
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError:
                pass
        if isinstance(line, str):
            if line.startswith("\ufeff"):
                line = line[1:]
            if not line.strip(_ASCII_WS):
                continue
        elif not line.strip():
            continue
        where = f"{jl}:{n}"
        try:
            sid, msg_json, refs = src.parse_record(line, where)
            key = src.sample_key(subset, sid, where)
        except UsageError as e:
            msg = str(e)
            return out, (n, msg[len(where) + 2 :] if msg.startswith(where + ": ") else msg)
        except Exception as e:  # noqa: BLE001 - whatever a record does, it is one line naming the record
            return out, (n, f"cannot read this record ({type(e).__name__}: {e})")
        out.append((n, key, src.sample_split(key, fraction), msg_json, refs))
    return out, None


def _parse_chunk(task: tuple) -> tuple:
    """One byte range of a JSONL file, starting at a line start, in a worker: _parse_lines' result
    and the number of line ends in the range (the caller numbers the lines of the next range)."""
    subset, jl, start, end, fraction = task
    with open(jl, "rb") as f:
        f.seek(start)
        lines = f.read(end - start).split(b"\n")
    return (*_parse_lines(subset, jl, lines, fraction), len(lines) - 1)


def _chunks(jl: Path, n: int) -> list[tuple[int, int]]:
    """(start, end) of up to n byte ranges of the file, each beginning at a line start."""
    size = jl.stat().st_size
    bounds = [0]
    with open(jl, "rb") as f:
        for k in range(1, n):
            f.seek(max(size * k // n, bounds[-1]))
            f.readline()
            if bounds[-1] < f.tell() < size:
                bounds.append(f.tell())
    bounds.append(size)
    return list(zip(bounds, bounds[1:], strict=False))


def _start_parse(subsets, source_dir, fraction, max_samples, pool, workers) -> list[tuple]:
    """Per subset: (subset, JSONL path, its parse results in file order, or None to parse it in _plan).

    With a pool (and no --max-samples) the byte ranges are submitted now and parse while the caller
    does other work; --max-samples reads serially, only as far as the budget."""
    jobs = []
    for subset in subsets:
        jl = src.jsonl_path(source_dir / subset, subset)
        if pool is None or max_samples is not None:
            jobs.append((subset, jl, None))
            continue
        n = max(1, min(workers * 4, jl.stat().st_size // CHUNK_BYTES))
        futs = [pool.submit(_parse_chunk, (subset, str(jl), a, b, fraction)) for a, b in _chunks(jl, n)]
        jobs.append((subset, jl, futs))
    return jobs


def _plan(jobs, indexes, fraction, max_samples) -> tuple[dict, int]:
    """Every record, in order, validated and placed: {split: [(key, json, image locations)]}."""
    plan: dict[str, list] = {s: [] for s in SPLITS}
    seen: dict[str, str] = {}
    total = 0
    for subset, jl, futs in jobs:
        if futs is None:
            with open(jl, "rb") as f:
                budget = None if max_samples is None else max_samples - total
                results = [(*_parse_lines(subset, str(jl), f, fraction, budget), 0)]
        else:
            results = (f.result() for f in futs)
        media = indexes[subset]
        before = 0  # lines in the ranges before this one
        for records, error, lines in results:
            for lineno, key, split, msg_json, refs in records:
                where = f"{jl}:{lineno + before}"
                if key in seen:
                    raise UsageError(f"{where}: duplicate sample key {key!r} (first at {seen[key]})")
                seen[key] = where
                plan[split].append((key, msg_json, [media.locate(r, where) for r in refs]))
            total += len(records)
            if error:
                raise UsageError(f"{jl}:{error[0] + before}: {error[1]}")
            before += lines
        if max_samples is not None and total >= max_samples:
            break
    return plan, total


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


# What index() uses of megatron-energon, and the packages above them. megatron.energon's __init__
# imports torch (1.6 s, three quarters of a cold `data prepare` of thousands of samples) and none of
# these modules needs it, so _energon() loads them under their packages' module objects created
# without running the __init__s.
_ENERGON_MODULES = (
    "megatron.energon.epathlib",
    "megatron.energon.bracecollapse",
    "megatron.energon.typed_converter",
    "megatron.energon.flavors.webdataset.config",
    "megatron.energon.flavors.webdataset.indexing",
    "megatron.energon.flavors.webdataset.structs",
)
_ENERGON_PACKAGES = ("megatron.energon", "megatron.energon.flavors", "megatron.energon.flavors.webdataset")


def _energon() -> SimpleNamespace:
    """Energon's version and the modules of _ENERGON_MODULES, by their last names.

    An Energon this process has imported already is used as it is. Otherwise the modules are loaded
    without the packages' __init__s, and every megatron.energon module is dropped from sys.modules
    again, so that a later `import megatron.energon` (inspect, a test) runs the real packages.
    Whatever fails on that way (another Energon whose modules need their packages) is retried as a
    plain import."""
    from importlib.metadata import version

    try:
        if "megatron.energon" in sys.modules:
            return _namespace(
                sys.modules["megatron.energon"].__version__, map(importlib.import_module, _ENERGON_MODULES)
            )
        before = set(sys.modules)
        try:
            for name in _ENERGON_PACKAGES:
                spec = importlib.util.find_spec(name)
                if spec is None:
                    raise ImportError(f"No module named {name!r}")
                sys.modules[name] = importlib.util.module_from_spec(spec)
            modules = list(map(importlib.import_module, _ENERGON_MODULES))
        except Exception:  # noqa: BLE001 - any failure of the light way is the plain import's to judge
            modules = None
        finally:
            for name in set(sys.modules) - before:
                if name == "megatron.energon" or name.startswith("megatron.energon."):
                    del sys.modules[name]
        if modules is None:
            importlib.import_module("megatron.energon")
            return _energon()
    except ImportError as e:
        raise UsageError(missing_extra(e) or f"megatron-energon could not be imported ({e})") from e
    try:  # as megatron/energon/__init__.py sets its __version__ (megatron-energon 7.4.1, lines 4-10)
        energon_version = version("megatron-energon")
    except Exception:  # noqa: BLE001 - Energon's own fallback
        energon_version = "unknown"
    return _namespace(energon_version, modules)


def _namespace(energon_version: str, modules) -> SimpleNamespace:
    return SimpleNamespace(version=energon_version, **{m.__name__.rsplit(".", 1)[1]: m for m in modules})


def _same_source(source_dir: Path, sdir: Path, subset: str, pins: dict, origin: str, threads: int) -> list[dict] | None:
    """The files of this machine's own pin, verified, when the source holds exactly them; None when it
    holds other files or they differ (so --write-manifest pins it anew)."""
    have = {str(p.relative_to(source_dir)) for p in (src.jsonl_path(sdir, subset), *src.media_archives(sdir))}
    if have != set(pins):
        return None
    try:
        return src.verify_pins(source_dir, pins, origin, threads=threads)
    except UsageError:
        return None


def prepare(
    dataset: str,
    source_dir: Path,
    output_dir: Path,
    *,
    subsets: list[str],
    validation_fraction: float = 0.05,
    max_samples_per_tar: int = 1000,
    num_workers: int = 2,
    max_samples: int | None = None,
    skip_integrity: bool = False,
    write_manifest: bool = False,
    cluster: str | None = None,
    on_plan=None,
    on_progress=None,
    log=None,
) -> dict:
    """Convert, index and describe; returns the manifest. Raises UsageError / LaunchError.

    The source is read once for the shards (each worker preads its images out of the media tars), once
    for the sha256 of every file in the manifest (a thread, while the workers parse and write), and the
    Energon index is written from the offsets the writers recorded rather than by re-reading shards."""
    gc_was_on = gc.isenabled()
    gc.disable()  # millions of small tuples stay alive until the end; collecting them repeatedly only costs
    try:
        return _prepare(
            dataset,
            source_dir,
            output_dir,
            subsets=subsets,
            validation_fraction=validation_fraction,
            max_samples_per_tar=max_samples_per_tar,
            num_workers=num_workers,
            max_samples=max_samples,
            skip_integrity=skip_integrity,
            write_manifest=write_manifest,
            cluster=cluster,
            on_plan=on_plan,
            on_progress=on_progress,
            log=log,
        )
    finally:
        if gc_was_on:
            gc.enable()


def _prepare(
    dataset,
    source_dir,
    output_dir,
    *,
    subsets,
    validation_fraction,
    max_samples_per_tar,
    num_workers,
    max_samples,
    skip_integrity,
    write_manifest,
    cluster,
    on_plan,
    on_progress,
    log,
) -> dict:
    info = src.dataset_info(dataset)
    _validate_args(subsets, validation_fraction, max_samples_per_tar, num_workers, max_samples)
    source_dir, output_dir = Path(source_dir).resolve(), Path(output_dir).absolute()
    if not source_dir.is_dir():
        raise UsageError(f"--source-dir {source_dir} is not a directory")
    _check_output(output_dir)
    if cluster:
        from bridge_launch.data.array import check_cluster

        check_cluster(cluster)
    log = log or (lambda _msg: None)
    t0 = time.perf_counter()

    # Integrity first: nothing is converted from a source that does not match its pins.
    verified, to_hash, to_pin, media, origins = [], [], {}, {}, {}
    for subset in subsets:
        sdir = source_dir / subset
        if not sdir.resolve().is_relative_to(source_dir) or not sdir.is_dir():
            raise UsageError(
                f"subset directory {sdir} does not exist (download subset {subset!r} of {info['id']} "
                f"at revision {info['revision'][:12]} into --source-dir)"
            )
        pins, origin = src.find_pins(dataset, subset)
        # a pin of this machine's own (--write-manifest) gives way when asked: its check skipped, or a
        # source that no longer matches it pinned anew (the same source is verified); a shipped pin is
        # checked unless skipped
        checked = None
        if pins and skip_integrity:
            log(f"{subset}: the integrity manifest ({origin}) is not checked (--skip-source-integrity-check)")
            pins = None
        elif pins and write_manifest and origin.startswith("user:"):
            log(f"verifying {len(pins)} pinned files of {subset} ({origin}; a changed source is pinned anew)")
            checked = _same_source(source_dir, sdir, subset, pins, origin, max(2, num_workers))
            if checked is None:
                log(f"{subset}: the source differs from the integrity manifest ({origin}): pinned anew")
                pins = None
        if pins:
            if checked is None:
                log(f"verifying {len(pins)} pinned files of {subset} ({origin})")
                checked = src.verify_pins(source_dir, pins, origin, threads=max(2, num_workers))
            verified += checked
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
            origins[subset] = (
                "pinned now (--write-manifest)" if write_manifest else "none (--skip-source-integrity-check)"
            )
        else:
            raise UsageError(
                f"subset {subset!r} has no integrity manifest (published: turing); after verifying its "
                f"provenance pass --write-manifest to pin it, or --skip-source-integrity-check"
            )
        media[subset] = (sdir, archives, allow_loose)

    shards._COPY = shards._BEST_COPY  # a fallback found by an earlier call (another filesystem) need not hold now
    pool = None
    if num_workers > 1 and not cluster:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        # fork: the workers see this process's modules (and GC off, as here). They start all at once
        # with the first task, before any thread below exists (verify_pins' threads have been joined),
        # so no lock is copied into them held. Ctrl-C is for this process alone: it stops the pool,
        # whose workers finish the shard in hand, and only then deletes the partial directory.
        pool = ProcessPoolExecutor(
            max_workers=num_workers,
            mp_context=mp.get_context("fork"),
            initializer=signal.signal,
            initargs=(signal.SIGINT, signal.SIG_IGN),
        )
        pool.submit(int).result()
    tmp = output_dir.parent / f".{output_dir.name}.partial-{os.getpid()}"
    stop = threading.Event()  # set on failure: the hashing thread stops reading the source
    threads = ThreadPoolExecutor(max_workers=2)
    try:
        # Hashing (hashlib drops the GIL) and loading Energon's index writer overlap the work.
        hashing = threads.submit(lambda: [(p, src.sha256_file(p, stop)) for p in to_hash])
        energon = threads.submit(_energon)
        log(f"reading the records of {', '.join(subsets)}" + (f" in {num_workers} processes" if pool else ""))
        jobs = _start_parse(subsets, source_dir, validation_fraction, max_samples, pool, num_workers)
        indexes = {subset: src.MediaIndex.build(*args) for subset, args in media.items()}  # while they parse
        plan, total = _plan(jobs, indexes, validation_fraction, max_samples)
        counts = {s: len(plan[s]) for s in SPLITS}
        if counts["train"] == 0:
            raise UsageError(
                f"no training samples in {', '.join(subsets)} (read {total} records); check the source or lower "
                "--validation-fraction"
            )
        if validation_fraction > 0 and counts["val"] == 0:
            raise UsageError(
                f"no validation samples among {total} records at --validation-fraction {validation_fraction}; "
                "raise it or --max-samples, or pass --validation-fraction 0"
            )
        loose = sorted({loc[1] for part in plan.values() for _, _, locs in part for loc in locs if loc[0] == "file"})

        output_dir.parent.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        tasks = []
        for split in SPLITS:
            items = plan[split]
            for n, i in enumerate(range(0, len(items), max_samples_per_tar)):
                tasks.append((str(tmp / SHARD_NAME.format(split=split, n=n)), items[i : i + max_samples_per_tar]))
        del plan
        if on_plan:
            on_plan(total, len(tasks))
        t1 = time.perf_counter()
        if cluster:
            from bridge_launch.data.array import run_array

            written = run_array(cluster, tasks, tmp, num_workers, on_progress=on_progress, log=log)
        else:
            written = _run_local(tasks, pool, on_progress)
        t2 = time.perf_counter()
        log(f"indexing {len(tasks)} shards for Energon")
        energon_version = index(tmp, written, [s for s in SPLITS if counts[s]], energon.result())
        (tmp / ".nv-meta" / "dataset.yaml").write_text(TRAINING_DATASET_YAML)
        hashed = [
            {"path": str(p.relative_to(source_dir)), "size": p.stat().st_size, "sha256": h} for p, h in hashing.result()
        ]
        hashed += [
            {
                "path": str(Path(p).relative_to(source_dir)),
                "size": os.path.getsize(p),
                "sha256": src.sha256_file(Path(p)),
            }
            for p in loose
        ]
        manifest = {
            "dataset": info["id"],
            "dataset_name": dataset,
            "revision": info["revision"],
            "subsets": list(subsets),
            "validation_fraction": validation_fraction,
            "max_samples_per_tar": max_samples_per_tar,
            "max_samples": max_samples,
            "counts": counts,
            "shards": {s: sum(1 for t in tasks if Path(t[0]).name.startswith(s + "-")) for s in SPLITS},
            "source_integrity_verified": all(not origins[s].startswith(("none", "pinned now")) for s in subsets),
            "integrity_manifests": origins,
            "source_files": sorted(verified + hashed, key=lambda f: f["path"]),
            "tool": f"bridge-launch {__version__}",
            "energon": f"megatron-energon {energon_version}",
            "layout": "Megatron-Bridge ChatMLWebdataset: <key>.jpgs (pickled list of image bytes), <key>.json "
            "(messages)",
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        t3 = time.perf_counter()
        _check_output(output_dir)  # nobody wrote there meanwhile
        if output_dir.exists():
            output_dir.rmdir()
        os.rename(tmp, output_dir)
    except BaseException as e:
        stop.set()
        if pool is not None:  # no worker may still be writing into tmp when it is deleted
            pool.shutdown(wait=True, cancel_futures=True)
            pool = None
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, (OSError, BrokenExecutor)):  # a full disk, a killed worker: one line, not a traceback
            raise LaunchError(
                f"data prepare stopped, nothing was written to {output_dir}: {type(e).__name__}: {e}"
            ) from e
        raise
    finally:
        threads.shutdown(wait=False)
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    for subset, files in to_pin.items():
        by_path = {f["path"]: f for f in hashed}
        pinned = [by_path[str(p.relative_to(source_dir))] for p in files]
        pinned += [f for f in hashed if f["path"].startswith(subset + "/") and f not in pinned]
        path = src.write_user_manifest(dataset, subset, pinned)
        log(f"pinned {len(pinned)} files of {subset} in {path}")
    manifest["timings_s"] = {
        "plan": round(t1 - t0, 3),
        "write": round(t2 - t1, 3),
        "index": round(t3 - t2, 3),
        "total": round(time.perf_counter() - t0, 3),
    }
    manifest["output_dir"] = str(output_dir)
    return manifest


def _run_local(tasks, pool, on_progress) -> list[tuple]:
    if pool is None or len(tasks) == 1:
        out = []
        for t in tasks:
            out.append(shards.write_shard(t))
            if on_progress:
                on_progress(out[-1][1])
        return out
    from concurrent.futures import as_completed

    futs = [pool.submit(shards.write_shard, t) for t in tasks]
    try:
        for f in as_completed(futs):
            if on_progress:
                on_progress(f.result()[1])
    except BaseException:
        for f in futs:
            f.cancel()
        raise
    return [f.result() for f in futs]


def index(root: Path, written: list[tuple], splits: list[str], energon=None) -> str:
    """Energon's index of the shards, from the offsets their writers recorded: the `.nv-meta/` that
    megatron-energon's `prepare_dataset` writes (index.sqlite through Energon's own SqliteIndexWriter,
    index.uuid, .info.json, split.yaml by shard-name pattern), without reading every tar header again.
    A test checks it against `prepare_dataset` run on the same shards. `energon`: _energon()'s result.
    Returns Energon's version."""
    e = energon or _energon()
    ecfg, structs, to_json_object = e.config, e.structs, e.typed_converter.to_json_object
    import uuid

    import yaml

    shards = sorted(written, key=lambda w: Path(w[0]).name)
    names = [Path(w[0]).name for w in shards]
    meta = root / ecfg.MAIN_FOLDER_NAME
    meta.mkdir(exist_ok=True)
    # Energon's schema and indexes
    writer = e.indexing.SqliteIndexWriter(e.epathlib.EPath(meta / ecfg.INDEX_SQLITE_FILENAME))
    try:
        db = writer.db
        db.execute("PRAGMA synchronous = OFF")  # a fresh file in the partial directory: nothing to protect yet
        for tid, (_, n, keys, offs, pp) in enumerate(shards):
            # the rows Energon's IndexSample / IndexSamplePart carry, in its column order
            db.executemany(
                "INSERT INTO samples (tar_file_id, sample_key, sample_index, byte_offset, byte_size) "
                "VALUES (?, ?, ?, ?, ?)",
                zip(repeat(tid), keys, range(n), offs, map(operator.sub, offs[1:], offs)),
            )
            db.executemany(
                "INSERT INTO sample_parts (tar_file_id, sample_index, part_name, content_byte_offset, "
                "content_byte_size) VALUES (?, ?, ?, ?, ?)",
                chain.from_iterable(
                    zip(
                        zip(repeat(tid), range(n), repeat("jpgs"), pp[0::4], pp[1::4]),
                        zip(repeat(tid), range(n), repeat("json"), pp[2::4], pp[3::4]),
                        strict=False,
                    )
                ),
            )
    finally:
        writer.close()
    (meta / ecfg.INDEX_UUID_FILENAME).write_text(str(uuid.uuid4()))
    info = structs.WebdatasetInfo(
        energon_version=e.version, shard_counts={nm: w[1] for nm, w in zip(names, shards, strict=False)}
    )
    with open(meta / ecfg.INFO_JSON_FILENAME, "w") as f:
        json.dump(to_json_object(info), f, indent=2)
    split_parts = {
        s: e.bracecollapse.collapse([nm for nm in names if re.match(f"{s}-shard-.*", nm)], keep_order=True)
        for s in splits
    }
    with open(meta / "split.yaml", "w") as f:
        yaml.dump(to_json_object(structs.WebdatasetSplits(split_parts=split_parts)), f, sort_keys=False)
    return e.version
