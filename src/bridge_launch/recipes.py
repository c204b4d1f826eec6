"""Recipes (what to run) and overlays (named partial overrides): recipes/*.toml,
recipes/overlays/*.toml, plus the user's config dir."""

from __future__ import annotations

from functools import lru_cache

from . import paths
from .catalog import Catalog
from .errors import UsageError, suggest

WORKLOADS = ("megatron-bridge", "smoke")
MODES = ("pretrain", "sft", "lora", "dora")
DEFAULT_ENTRY = "/opt/Megatron-Bridge/scripts/training/run_recipe.py"

_RECIPE_KEYS = {
    "name": str, "description": str, "aliases": list, "extends": str, "abstract": bool,
    "upstream": str, "upstream_ref": str, "upstream_status": str, "mode": str, "workload": str, "gpus": int,
    "container": str, "hf_model": str, "required": list, "entry": str, "notes": str, "dataset_kind": str,
    "env": dict, "upstream_env": dict, "config": dict, "upstream_config": dict, "assumptions": dict,
}
_OVERLAY_KEYS = {
    "name": str, "description": str, "aliases": list, "extends": str, "abstract": bool,
    "gpus": int, "env": dict, "config": dict, "notes": str,
}


def flatten(table: dict, prefix: str = "", keep_dict=lambda key: False) -> dict:
    """Nested TOML tables -> {dotted.key: value}, in file order. A table whose key
    the schema types as a dict (e.g. env_vars) is kept whole."""
    out = {}
    for key, value in table.items():
        full = f"{prefix}{key}"
        if isinstance(value, dict) and value and not keep_dict(full):
            out.update(flatten(value, full + ".", keep_dict))
        else:
            out[full] = value
    return out


def _check_keys(where: str, data: dict, spec: dict) -> None:
    for key, value in data.items():
        if key not in spec:
            raise UsageError(f"{where}: {suggest(key, spec, 'recipe key')}")
        typ = spec[key]
        if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
            raise UsageError(f"{where}: '{key}' must be {typ.__name__}, got {value!r}")


def _env(where: str, env: dict) -> dict:
    out = {}
    for k, v in env.items():
        if isinstance(v, bool):
            v = "1" if v else "0"
        if not isinstance(v, (str, int, float)):
            raise UsageError(f"{where}: env {k} must be a string or number, got {v!r}")
        out[k] = str(v)
    return out


@lru_cache(maxsize=1)
def catalog() -> Catalog:
    return Catalog("recipe", [(paths.data_dir() / "recipes", "shipped"), (paths.config_dir() / "recipes", "user")])


@lru_cache(maxsize=1)
def overlay_catalog() -> Catalog:
    return Catalog(
        "overlay",
        [(paths.data_dir() / "recipes" / "overlays", "shipped"), (paths.config_dir() / "recipes" / "overlays", "user")],
    )


def _keep_dict():
    from .schema import is_dict_key

    return is_dict_key


def load(name: str, allow_abstract: bool = False) -> dict:
    cat = catalog()
    entry = cat.get(name)
    data = cat.resolved(entry.name)
    where = f"recipe '{entry.name}' ({entry.path})"
    _check_keys(where, data, _RECIPE_KEYS)
    if data["abstract"] and not allow_abstract:
        raise UsageError(f"recipe '{entry.name}' is a base for other recipes; use one that extends it")
    data.setdefault("workload", "megatron-bridge")
    if data["workload"] not in WORKLOADS:
        raise UsageError(f"{where}: workload must be one of {', '.join(WORKLOADS)}")
    if data["workload"] == "megatron-bridge" and not data["abstract"]:
        for key in ("upstream", "mode", "container"):
            if not data.get(key):
                raise UsageError(f"{where}: '{key}' is required for a Megatron-Bridge recipe")
    if data.get("mode") is not None:
        if data["mode"] not in MODES:
            raise UsageError(f"{where}: mode must be one of {', '.join(MODES)}, got {data['mode']!r}")
    keep = _keep_dict()
    data["config"] = flatten(data.get("config", {}), keep_dict=keep)
    data["upstream_config"] = flatten(data.get("upstream_config", {}), keep_dict=keep)
    clash = set(data["config"]) & set(data["upstream_config"])
    if clash:
        raise UsageError(f"{where}: {sorted(clash)[0]} is set in both [config] and [upstream_config]")
    data["env"] = _env(where, data.get("env", {}))
    data["upstream_env"] = _env(where, data.get("upstream_env", {}))
    both = set(data["env"]) & set(data["upstream_env"])
    if both:
        raise UsageError(f"{where}: env {sorted(both)[0]} is set in both [env] and [upstream_env]")
    data.setdefault("required", [])
    data.setdefault("entry", DEFAULT_ENTRY)
    data["origin"] = entry.origin
    data["path"] = str(entry.path)
    return data


def load_overlay(name: str) -> dict:
    cat = overlay_catalog()
    entry = cat.get(name)
    data = cat.resolved(entry.name)
    _check_keys(f"overlay '{entry.name}' ({entry.path})", data, _OVERLAY_KEYS)
    data["config"] = flatten(data.get("config", {}), keep_dict=_keep_dict())
    data["env"] = _env(f"overlay '{entry.name}'", data.get("env", {}))
    return data


def list_recipes() -> list[dict]:
    return [load(e.name) for e in catalog().entries() if not e.data.get("abstract")]


def list_all() -> list[dict]:
    """Every recipe file, abstract bases included (for checks over the whole catalog)."""
    return [load(e.name, allow_abstract=True) for e in catalog().entries()]


def list_overlays() -> list[dict]:
    return [load_overlay(e.name) for e in overlay_catalog().entries()]
