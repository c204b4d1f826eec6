"""TOML catalogs shared by recipes, overlays and cluster profiles.

A catalog is the shipped folder plus the user's folder in the XDG config dir; a user
file with the same name replaces (or, with `extends`, builds on) the shipped one.
Each entry has a kebab-case `name` (defaults to the file stem) and optional `aliases`.
"""

from __future__ import annotations

import copy
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .errors import UsageError, suggest


@dataclass
class Entry:
    name: str
    path: Path
    data: dict
    origin: str  # "shipped" | "user"
    aliases: list[str] = field(default_factory=list)


def read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: invalid TOML: {exc}") from None
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
    def __init__(self, what: str, folders: list[tuple[Path, str]]):
        self.what = what
        self._entries: dict[str, Entry] = {}
        for folder, origin in folders:
            if not folder.is_dir():
                continue
            for path in sorted(folder.glob("*.toml")):
                data = read_toml(path)
                name = data.get("name", path.stem)
                if not isinstance(name, str) or not name:
                    raise UsageError(f"{path}: 'name' must be a non-empty string")
                aliases = data.get("aliases", [])
                if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
                    raise UsageError(f"{path}: 'aliases' must be a list of strings")
                prior = self._entries.get(name)
                if prior is not None and data.get("extends") == name:
                    # a user file that builds on the shipped entry of the same name
                    merged = deep_merge(prior.data, data)
                    merged["extends"] = prior.data.get("extends")
                    data = merged
                self._entries[name] = Entry(name, path, data, origin, list(data.get("aliases", [])))
        self._alias: dict[str, str] = {}
        for entry in self._entries.values():
            for alias in entry.aliases:
                self._alias.setdefault(alias, entry.name)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def entries(self) -> list[Entry]:
        return [self._entries[n] for n in self.names()]

    def get(self, name: str) -> Entry:
        key = name if name in self._entries else self._alias.get(name)
        if key is None:
            raise UsageError(suggest(name, list(self._entries) + list(self._alias), self.what))
        return self._entries[key]

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
            if parent not in self._entries:
                raise UsageError(f"{entry.path}: extends {suggest(parent, self._entries, self.what)}")
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
