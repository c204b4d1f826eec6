"""Where things live: shipped data, user config, local state."""

from __future__ import annotations

import os
from pathlib import Path

_PKG = Path(__file__).resolve().parent.parent


def data_dir() -> Path:
    """Shipped recipes/ and clusters/: inside the wheel, or the source checkout."""
    packaged = _PKG / "_data"
    if packaged.is_dir():
        return packaged
    return _PKG.parent.parent  # src/bridge_launch -> repo root


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "bridge-launch"


LOG_COPIES = ("cloud-logs", "slurm-logs")  # local copies of remote logs, one directory per run


def log_copies(kind: str, run_id: str) -> Path:
    """Where this machine keeps its copy of a run's remote logs (kind: one of LOG_COPIES); created."""
    assert kind in LOG_COPIES, kind
    path = state_dir() / kind / run_id
    path.mkdir(parents=True, exist_ok=True)
    return path


def state_dir() -> Path:
    home = os.environ.get("BRIDGE_LAUNCH_HOME")
    if home:
        return Path(home)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "bridge-launch"


def registry_file() -> Path:
    """The run registry's database (runs/registry.py makes it on first use)."""
    return state_dir() / "registry.sqlite"


def write_private(path: Path, text: str) -> None:
    """Files that hold environment values are readable by the owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
