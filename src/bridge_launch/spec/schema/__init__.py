"""Known Megatron-Bridge ConfigContainer keys and their types, shipped as data
(config_container.json, generated from upstream's config dataclasses by scripts/gen_schema.py)."""

from __future__ import annotations

import difflib
import json
import math
from functools import lru_cache
from pathlib import Path

_FILE = Path(__file__).with_name("config_container.json")


@lru_cache(maxsize=1)
def _schema() -> dict:
    with open(_FILE, encoding="utf-8") as fh:
        return json.load(fh)


def fields() -> dict:
    return _schema()["fields"]


def source() -> dict:
    return _schema().get("source", {})


def lookup(key: str) -> dict | None:
    """The field spec for a dotted key, or None. Keys below a free-form dict or an
    any-typed field are accepted with type 'any' (e.g. env_vars.FOO)."""
    spec = fields().get(key)
    if spec is not None:
        return spec
    parts = key.split(".")
    for i in range(len(parts) - 1, 0, -1):
        parent_key = ".".join(parts[:i])
        parent = fields().get(parent_key)
        if parent is not None:
            free = parent["type"] == "any" or (parent["type"] == "dict" and parent_key not in _parents())
            return {"type": "any"} if free else None
    return None


@lru_cache(maxsize=1)
def _parents() -> frozenset:
    return frozenset(k.rsplit(".", 1)[0] for k in fields() if "." in k)


def is_dict_key(key: str) -> bool:
    """A free-form dict field (e.g. env_vars): its TOML table is one value, not sub-keys."""
    spec = fields().get(key)
    return spec is not None and spec["type"] == "dict" and key not in _parents()


def closest(key: str, extra=(), n: int = 3) -> list[str]:
    pool = list(dict.fromkeys([*fields(), *extra]))
    hits = difflib.get_close_matches(key, pool, n=n, cutoff=0.6)
    if not hits:  # same leaf name in another section, e.g. train.seq_length -> dataset.seq_length
        leaf = key.rsplit(".", 1)[-1]
        hits = [k for k in pool if k.rsplit(".", 1)[-1] == leaf][:n]
    return hits


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
