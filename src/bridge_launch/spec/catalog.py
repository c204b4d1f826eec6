"""TOML catalogs shared by recipes, overlays and cluster profiles.

A catalog is the shipped folder plus the user's folder in the XDG config dir; a user
file with the same name replaces (or, with `extends`, builds on) the shipped one.
Each entry has a kebab-case `name` (defaults to the file stem) and optional `aliases`.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

from bridge_launch.core.errors import UsageError, suggest


@dataclass
class Entry:
    name: str
    path: Path
    data: dict
    origin: str  # "shipped" | "user"
    aliases: list[str] = field(default_factory=list)
    # The files this entry is made of, base first: [(path, origin, own data)]. More than one when a
    # user file builds on the shipped entry of the same name (`extends` its own name).
    layers: list = field(default_factory=list)


_TOML_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")


def key_line(path: Path, dotted: str) -> int | None:
    """The line of `path` where the TOML key `dotted` (e.g. "slurm.mpi", "config.optimizer.lr") is
    set, found by reading table headers and `key = value` lines; None if not found."""
    want = dotted.split(".")
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    table: list[str] = []
    for n, raw in enumerate(lines, 1):
        line = raw.strip()
        head = re.match(r"^\[\[?\s*([^\]]+?)\s*\]\]?", line)
        if head:
            table = [k.strip().strip("\"'") for k in head.group(1).split(".")]
            if table == want:
                return n
            continue
        m = re.match(r"^([A-Za-z0-9_.\-\"' ]+?)\s*=", line)
        if m and [*table, *(k.strip().strip("\"'") for k in m.group(1).split("."))] == want:
            return n
    return None


def where(paths, dotted: str | None = None) -> str:
    """'FILE:LINE' of the first of `paths` (head first) that sets `dotted`, else the first path."""
    paths = [Path(p) for p in paths]
    for p in paths:
        line = key_line(p, dotted) if dotted else None
        if line:
            return f"{p}:{line}"
    return str(paths[0]) if paths else "?"


def read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        text = str(exc)
        at = _TOML_AT.search(text)
        loc = f"{path}:{at.group(1)}:{at.group(2)}" if at else str(path)
        raise UsageError(f"{loc}: invalid TOML: {_TOML_AT.sub('', text)}") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None


def deep_merge(base: dict, top: dict) -> dict:
    """Tables merge key by key; everything else (lists included) is replaced."""
    out = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class Catalog:
    """A file that cannot be read (bad TOML, a bad name) is kept aside as broken, under its file
    name: it is reported when it is asked for or listed, and every other entry works."""

    def __init__(self, what: str, folders: list[tuple[Path, str]]):
        self.what = what
        self._entries: dict[str, Entry] = {}
        self._broken: dict[str, str] = {}  # file stem -> the one-line error
        for folder, origin in folders:
            if not folder.is_dir():
                continue
            for path in sorted(folder.glob("*.toml")):
                try:
                    data = read_toml(path)
                    name = data.get("name", path.stem)
                    if not isinstance(name, str) or not name:
                        raise UsageError(f"{where([path], 'name')}: 'name' must be a non-empty string")
                    aliases = data.get("aliases", [])
                    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
                        raise UsageError(f"{where([path], 'aliases')}: 'aliases' must be a list of strings")
                except UsageError as exc:
                    self._broken[path.stem] = str(exc)
                    continue
                layers = [(path, origin, data)]
                prior = self._entries.get(name)
                if prior is not None and data.get("extends") == name:
                    # a user file that builds on the shipped entry of the same name
                    merged = deep_merge(prior.data, data)
                    merged["extends"] = prior.data.get("extends")
                    data = merged
                    layers = prior.layers + layers
                self._entries[name] = Entry(name, path, data, origin, list(data.get("aliases", [])), layers)
        self._alias: dict[str, str] = {}
        for entry in self._entries.values():
            for alias in entry.aliases:
                self._alias.setdefault(alias, entry.name)

    def names(self, listed: bool = False) -> list[str]:
        """Every entry's name; with listed, only those a listing shows (no abstract bases)."""
        return sorted(n for n, e in self._entries.items() if not (listed and e.data.get("abstract")))

    def usable(self) -> list[str]:
        """The names a listing shows whose `extends` chain resolves: what an error offers as valid."""
        return [n for n in self.names(listed=True) if self._chain_ok(n)]

    def _chain_ok(self, name: str) -> bool:
        """Whether an entry's `extends` chain reaches its base (no missing or broken parent, no
        cycle): what a suggestion may offer as valid."""
        seen: set = set()
        while name not in seen:
            seen.add(name)
            entry = self._entries.get(name)
            if entry is None or name in self._broken:
                return False
            parent = entry.data.get("extends")
            if not parent:
                return True
            name = parent
        return False

    def entries(self) -> list[Entry]:
        return [self._entries[n] for n in self.names()]

    def broken(self) -> list[str]:
        """One error line per file that could not be read."""
        return [self._broken[k] for k in sorted(self._broken)]

    def get(self, name: str) -> Entry:
        if name in self._broken:  # a broken file shadows what it would have replaced
            raise UsageError(self._broken[name])
        key = name if name in self._entries else self._alias.get(name)
        if key is None:
            canonical = {n: n for n in self.usable()}
            canonical.update({a: n for a, n in self._alias.items() if n in canonical})
            raise UsageError(suggest(name, canonical, self.what, canonical))
        return self._entries[key]

    def chain(self, name: str) -> list:
        """The files an entry is built from, head first: [(path, origin, name, own data)]."""
        out: list = []
        seen: set = set()
        entry: Entry | None = self.get(name)
        while entry is not None and entry.name not in seen:
            seen.add(entry.name)
            out += [(p, o, entry.name, d) for p, o, d in reversed(entry.layers)]
            parent = entry.data.get("extends")
            entry = self._entries.get(parent) if parent else None
        return out

    def resolved(self, name: str) -> dict:
        """The entry's data with its `extends` chain merged in (base first)."""
        chain: list[Entry] = []
        entry = self.get(name)
        while True:
            if entry in chain:
                raise UsageError(f"{entry.path}: 'extends' forms a cycle through '{entry.name}'")
            chain.append(entry)
            parent = entry.data.get("extends")
            if not parent:
                break
            if parent in self._broken:
                raise UsageError(
                    f"{where([entry.path], 'extends')}: extends '{parent}', which is broken: {self._broken[parent]}"
                )
            if parent not in self._entries:
                raise UsageError(
                    f"{where([entry.path], 'extends')}: extends "
                    + suggest(
                        parent,
                        [n for n in self._entries if n not in {e.name for e in chain} and self._chain_ok(n)],
                        self.what,
                    )
                )
            entry = self._entries[parent]
        data: dict = {}
        for e in reversed(chain):
            data = deep_merge(data, {k: v for k, v in e.data.items() if k not in ("extends", "aliases", "abstract")})
        head = chain[0]
        data["name"] = head.name
        data["aliases"] = head.aliases
        data["abstract"] = bool(head.data.get("abstract", False))
        if head.data.get("extends"):
            data["extends"] = head.data["extends"]
        return data
