"""The nodes of a cluster that failed a run, kept out of later submits to it until they expire.

One JSON file per cluster in the state dir (`bad-nodes/<cluster>.json`: {node: {"evidence", "run",
"since", "until"}}). The runs layer records a node when a run's logs name it as the source of a
flaky failure (backends: the per-node log whose error is a hardware or network fault) and passes the
live entries to resolve as an input, as --exclude is; resolve stays pure."""

from __future__ import annotations

import json
import time
from pathlib import Path

from bridge_launch.core import paths


def _file(cluster: str) -> Path:
    d = paths.state_dir() / "bad-nodes"
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{cluster}.json"


def _read(cluster: str) -> dict:
    try:
        data = json.loads(_file(cluster).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(cluster: str, data: dict) -> None:
    path = _file(cluster)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)  # whole or not at all


def active(cluster: str, now: float | None = None) -> dict:
    """{node: entry} of the nodes still out at `now` (expired entries are dropped when the file is
    next written)."""
    now = time.time() if now is None else now
    return {n: e for n, e in _read(cluster).items() if isinstance(e, dict) and e.get("until", 0) > now}


def record(cluster: str, node: str, evidence: str, run_id: str, hours: float) -> dict:
    """Put `node` on the list for `hours` (the profile's bad_node_hours)."""
    now = time.time()
    data = active(cluster, now)
    entry = {"evidence": evidence[:300], "run": run_id, "since": now, "until": now + hours * 3600}
    data[node] = entry
    _write(cluster, data)
    return entry


def forget(cluster: str, node: str) -> bool:
    data = active(cluster)
    if node not in data:
        return False
    del data[node]
    _write(cluster, data)
    return True


def exclusions(cluster: str) -> tuple:
    """The live list as resolve takes it (Options.bad_nodes): ((node, why), ...)."""
    import datetime

    return tuple(
        (
            node,
            f"{e['evidence']} (run {e['run']}; out until {datetime.datetime.fromtimestamp(e['until']):%Y-%m-%d %H:%M})",
        )
        for node, e in sorted(active(cluster).items())
    )
