"""The record of imported images ($BRIDGE_LAUNCH_HOME/images.json): `image import` writes it after
`enroot import` put an image's squashfs in a profile's `[slurm] image_cache`, under its digest;
resolve reads this record alone, so a dry run never touches the cluster."""

from __future__ import annotations

import json
import os

from bridge_launch.core import paths
from bridge_launch.core.errors import UsageError
from bridge_launch.core.image_ref import DIGEST

RECORD = "images.json"


def _record_path():
    return paths.state_dir() / RECORD


def load_record() -> dict:
    try:
        data = json.loads(_record_path().read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"the image cache record {_record_path()} cannot be read ({exc}); delete it and import again"
        ) from None
    return data if isinstance(data, dict) else {}


def cached(cluster: str, cache_dir: str, ref: str) -> dict | None:
    """The record of `ref` imported into `cache_dir` for `cluster`, or None."""
    if not cache_dir:
        return None
    entry = load_record().get(cluster, {}).get(ref)
    if not entry or entry.get("cache_dir") != cache_dir or not DIGEST.match(entry.get("digest", "")):
        return None
    return entry


def remember(cluster: str, ref: str, entry: dict) -> None:
    """Add one import to the record (read-modify-write under a lock, replaced atomically)."""
    import fcntl

    path = _record_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = load_record()
        data.setdefault(cluster, {})[ref] = entry
        tmp = path.with_suffix(f".tmp.{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
