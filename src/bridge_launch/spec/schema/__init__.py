"""Known Megatron-Bridge ConfigContainer keys and their types, one file per pinned revision
(config_container-<short commit>.json, generated from that revision's config dataclasses by
scripts/gen_schema.py). A recipe's keys are checked against the schema of the revision it pins
(core/upstream.py); callers without a recipe get main's."""

from __future__ import annotations

import difflib
import json
import math
from functools import cached_property, lru_cache
from pathlib import Path

from bridge_launch.core import upstream

_DIR = Path(__file__).parent


def path(commit: str | None = None) -> Path:
    """The schema file of a pinned Megatron-Bridge revision (main for None)."""
    return _DIR / f"config_container-{upstream.short(upstream.revision(commit).bridge)}.json"


class Schema:
    """One revision's keys: `fields` {dotted key: spec}, `source` (the commits it was read at)."""

    def __init__(self, doc: dict):
        self.fields: dict = doc["fields"]
        self.source: dict = doc.get("source", {})
        self.sections: dict = doc.get("sections", {})

    @cached_property
    def _parents(self) -> frozenset:
        return frozenset(k.rsplit(".", 1)[0] for k in self.fields if "." in k)

    def lookup(self, key: str) -> dict | None:
        """The field spec for a dotted key, or None. Keys below a free-form dict or an
        any-typed field are accepted with type 'any' (e.g. env_vars.FOO)."""
        spec = self.fields.get(key)
        if spec is not None:
            return spec
        parts = key.split(".")
        for i in range(len(parts) - 1, 0, -1):
            parent_key = ".".join(parts[:i])
            parent = self.fields.get(parent_key)
            if parent is not None:
                free = parent["type"] == "any" or (parent["type"] == "dict" and parent_key not in self._parents)
                return {"type": "any"} if free else None
        return None

    def is_dict_key(self, key: str) -> bool:
        """A free-form dict field (e.g. env_vars): its TOML table is one value, not sub-keys."""
        spec = self.fields.get(key)
        return spec is not None and spec["type"] == "dict" and key not in self._parents

    def foreign(self, key: str, classes: dict) -> tuple[str, list] | None:
        """(class, the classes that declare key) when key is a field only some classes of its section
        have (`only_in`) and the section's class in `classes` ({section: class name}) is not one of
        them; else None. Megatron-Bridge refuses such a key when it applies the override."""
        spec = self.fields.get(key)
        section = key.split(".", 1)[0]
        cls = classes.get(section)
        owners = (spec or {}).get("only_in") or []
        # only_in of a nested key names the nested classes (dataset.task_encoder.*): not this check's
        if cls is None or not set(owners) & set(self.sections.get(section, [])) or cls in owners:
            return None
        return cls, list(owners)

    def keys_of(self, section: str, cls: str) -> list[str]:
        """The keys of one class of a section."""
        return [
            k
            for k, spec in self.fields.items()
            if k.startswith(section + ".") and (not spec.get("only_in") or cls in spec["only_in"])
        ]

    def closest(self, key: str, extra=(), n: int = 3) -> list[str]:
        pool = list(dict.fromkeys([*self.fields, *extra]))
        hits = difflib.get_close_matches(key, pool, n=n, cutoff=0.6)
        if not hits:  # same leaf name in another section, e.g. train.seq_length -> dataset.seq_length
            leaf = key.rsplit(".", 1)[-1]
            hits = [k for k in pool if k.rsplit(".", 1)[-1] == leaf][:n]
        return hits


@lru_cache(maxsize=None)
def _load(file: Path) -> Schema:
    with open(file, encoding="utf-8") as fh:
        return Schema(json.load(fh))


def at(commit: str | None = None) -> Schema:
    """The schema of a pinned Megatron-Bridge revision (main for None)."""
    return _load(path(commit))


# main's schema, for callers that have no recipe (shell completion)
def fields() -> dict:
    return at().fields


def source() -> dict:
    return at().source


def lookup(key: str) -> dict | None:
    return at().lookup(key)


def is_dict_key(key: str) -> bool:
    return at().is_dict_key(key)


def closest(key: str, extra=(), n: int = 3) -> list[str]:
    return at().closest(key, extra, n)


_TYPE_NAMES = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "str": "a string",
    "list": "a list",
    "dict": "a dict",
}


def type_error(spec: dict, value) -> str | None:
    """None if value fits the field spec, else what is expected (for an error line)."""
    if value is None:
        return (
            None
            if spec.get("nullable") or spec["type"] == "any"
            else f"{_TYPE_NAMES.get(spec['type'], spec['type'])} (not null)"
        )
    t = spec["type"]
    ok = {
        "any": True,
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "str": isinstance(value, str),
        "list": isinstance(value, list),
        "dict": isinstance(value, dict),
    }.get(t, True)
    if ok and t == "float" and isinstance(value, float) and math.isnan(value):
        ok = True
    if not ok:
        want = _TYPE_NAMES.get(t, t)
        return want + (" or null" if spec.get("nullable") else "")
    choices = spec.get("choices")
    if choices and value not in choices:
        return "one of " + ", ".join(map(str, choices))
    return None
