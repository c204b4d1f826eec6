"""Checkpoints in Megatron-Bridge's layout and write order, for the smoke workload.

The files, their names, which rank writes each and in what order are Megatron-Bridge's
(trainer_protocol.SAVE_ORDER, with sources); what is inside them is the smoke workload's own
(torch.save of small dicts, not PyTorch DCP), since nothing outside the workload reads them.
The loader follows Bridge's choice of iteration (trainer_protocol, "Load") and fails where Bridge
fails: a tracker naming an incomplete iteration, a ckpt_step whose directory does not exist.
Needs torch and an initialised process group.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import time

import torch
import torch.distributed as dist
import trainer_protocol as P


def fsync_dir(path: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _torch_save_fsync(obj, path: str) -> None:
    with open(path, "wb") as fh:
        torch.save(obj, fh)
        fh.flush()
        os.fsync(fh.fileno())


def save(
    *,
    save_dir: str,
    save_root: str,
    step: int,
    rank: int,
    world: int,
    shard: dict,
    train_state: dict,
    run_config: str,
    write_seconds: float,
    log,
) -> None:
    """One synchronous persistent (or non-persistent "global") save of iteration `step` into
    `save_dir`, in Bridge's order. `shard` is this rank's payload; `write_seconds` spreads the
    shard writes over that long (a checkpoint that takes time to write, as a 35B one on Lustre
    does). `save_root` is checkpoint.save, which Bridge prints even for non-persistent saves."""
    it_dir = os.path.join(save_dir, P.iter_dir(step))
    if rank == 0:
        log(P.saving_line(step, save_dir))
        os.makedirs(it_dir, exist_ok=True)  # rank 0, directly: no temp name, no rename
    dist.barrier()
    os.makedirs(it_dir, exist_ok=True)  # every rank mkdirs in torch's prepare_local_plan
    if write_seconds > 0:
        time.sleep(write_seconds)
    _torch_save_fsync(shard, os.path.join(it_dir, P.shard_name(rank)))
    dist.barrier()
    if rank == 0:
        tmp = os.path.join(it_dir, P.DIST_METADATA_TMP)
        with open(tmp, "wb") as fh:
            pickle.dump({"world_size": world, "shards": [P.shard_name(r) for r in range(world)]}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(it_dir, P.DIST_METADATA))
        os.rename(tmp, os.path.join(it_dir, P.DIST_METADATA))
        with open(os.path.join(it_dir, P.MCORE_METADATA), "w") as fh:  # a plain write, as save_config does
            json.dump(P.MCORE_METADATA_CONTENT, fh)
    dist.barrier()
    if rank == 0:
        local = os.path.join(it_dir, P.TRAIN_STATE)
        torch.save(train_state, local)
        shutil.copy(local, os.path.join(save_dir, P.TRACKER_STATE))
        with open(os.path.join(save_dir, P.TRACKER), "w") as fh:  # no newline, not atomic
            fh.write(str(step))
        with open(os.path.join(it_dir, P.RUN_CONFIG), "w") as fh:  # after the tracker
            fh.write(run_config)
        fsync_dir(it_dir)
        fsync_dir(save_dir)
        log(P.saved_line(step, save_root))
    dist.barrier()


def prune_non_persistent(save_dir: str, keep: int = 2) -> None:
    """Old non-persistent iterations are removed, keeping 2 (MB checkpointing.py:1151-1153, 1639-1645)."""
    its = sorted(int(m.group(1)) for m in map(P.ITER_DIR_RE.match, os.listdir(save_dir)) if m)
    for it in its[:-keep]:
        shutil.rmtree(os.path.join(save_dir, P.iter_dir(it)), ignore_errors=True)


def keep_most_recent(save_dir: str, keep: int, max_iteration: int, log) -> None:
    """checkpoint.most_recent_k > -1: once a persistent save is complete, rank 0 removes the older
    iter_* directories, keeping `keep` (0 keeps none) and never touching one newer than the save
    (MB 067f987 checkpointing.py:1609-1626 async, 1647-1655 sync, cleanup_old_non_persistent_checkpoint
    :1662-1715, which prints both lists)."""
    its = sorted(
        int(m.group(1))
        for m in map(P.ITER_DIR_RE.match, os.listdir(save_dir))
        if m and int(m.group(1)) <= max_iteration
    )
    if not its:
        return
    gone, kept = (its[:-keep], its[-keep:]) if keep > 0 else (its, [])
    paths = [os.path.join(save_dir, P.iter_dir(it)) for it in gone]
    log(f"Non-persistent checkpoints scheduled for removal: {paths}")
    log(f"Non-persistent checkpoints to be kept: {[os.path.join(save_dir, P.iter_dir(it)) for it in kept]}")
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)


def _tracker_iteration(directory: str) -> int | None:
    """latest_train_state.pt first, else the legacy .txt tracker (MB checkpointing.py:3431-3441)."""
    state = os.path.join(directory, P.TRACKER_STATE)
    if os.path.isfile(state):
        return int(torch.load(state, map_location="cpu", weights_only=True)["step"])
    txt = os.path.join(directory, P.TRACKER)
    if os.path.isfile(txt):
        text = open(txt, encoding="utf-8").read().strip()
        try:
            return int(text)
        except ValueError:  # MB checkpointing.py:311-338: print, then sys.exit()
            print(f"ERROR: Invalid metadata file {txt}. Exiting", flush=True)
            raise SystemExit() from None
    return None


def choose(load: str, *, ckpt_step: int | None, non_persistent_dir: str | None) -> tuple[str, int] | None:
    """(iteration dir, iteration) that Bridge would load from `load`, or None to start from
    scratch (no tracker: silently, as Bridge does)."""
    if os.path.isdir(load) and any(
        os.path.exists(os.path.join(load, f)) for f in (P.RUN_CONFIG, P.TRAIN_STATE, P.MCORE_METADATA, P.DIST_METADATA)
    ):
        state = os.path.join(load, P.TRAIN_STATE)
        step = int(torch.load(state, map_location="cpu", weights_only=True)["step"]) if os.path.isfile(state) else 0
        return load, step
    persistent = _tracker_iteration(load)
    np_it = _tracker_iteration(non_persistent_dir) if non_persistent_dir and os.path.isdir(non_persistent_dir) else None
    if persistent is None and np_it is None:
        return None
    if ckpt_step is not None:
        path = os.path.join(load, P.iter_dir(ckpt_step))
        if not os.path.isdir(path):
            raise FileNotFoundError(P.CKPT_STEP_MISSING.format(step=ckpt_step, path=path, load=load))
        return path, ckpt_step
    if np_it is not None and (persistent is None or np_it >= persistent):  # ties go to non-persistent
        return os.path.join(non_persistent_dir, P.iter_dir(np_it)), np_it
    return os.path.join(load, P.iter_dir(persistent)), persistent


def load(path: str, rank: int) -> tuple[dict, dict, dict]:
    """(rank 0's shard, this rank's shard, train state) of a complete iteration dir; fails on an
    incomplete one as Bridge does (no metadata.json: unknown format)."""
    if not os.path.exists(os.path.join(path, P.MCORE_METADATA)):
        raise NotImplementedError(P.UNKNOWN_FORMAT.format(path=path))
    with open(os.path.join(path, P.DIST_METADATA), "rb") as fh:
        meta = pickle.load(fh)
    if rank >= meta["world_size"]:
        raise RuntimeError(f"{path} was written by {meta['world_size']} ranks; rank {rank} has no shard in it")

    def shard(r):
        return torch.load(os.path.join(path, P.shard_name(r)), map_location="cpu", weights_only=True)

    first = shard(0)
    mine = first if rank == 0 else shard(rank)
    state = torch.load(os.path.join(path, P.TRAIN_STATE), map_location="cpu", weights_only=True)
    return first, mine, state
