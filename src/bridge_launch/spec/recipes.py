"""Recipes (what to run) and overlays (named partial overrides): recipes/*.toml,
recipes/overlays/*.toml, plus the user's config dir."""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

from bridge_launch.core import paths, upstream
from bridge_launch.core.errors import UsageError, suggest
from bridge_launch.core.upstream import RUN_RECIPE
from bridge_launch.spec.catalog import Catalog, where

WORKLOADS = ("megatron-bridge", "smoke")
MODES = ("pretrain", "sft", "lora", "dora")
DEFAULT_ENTRY = RUN_RECIPE
# Recipe functions bridge-launch ships for recipes whose function no Megatron-Bridge revision has
# (`bridge_recipe_module` names a file here; workloads/bridge_recipe_entry.py registers it in the job).
# Read as text here (spec imports no workload code).
BRIDGE_RECIPES_DIR = Path(__file__).resolve().parent.parent / "workloads" / "bridge_recipes"

_RECIPE_KEYS = {
    "name": str,  # the recipe's name, for submit and `recipes show` (default: the file's stem)
    "description": str,  # one line, shown by `recipes list`
    "aliases": list,  # other names it answers to, e.g. its upstream function's (not inherited through extends)
    # a recipe this one builds on: its values (tables merged key by key) where this file sets none
    "extends": str,
    "abstract": bool,  # a base for other recipes: left out of `recipes list`, refused when run (not inherited)
    # the Megatron-Bridge recipe function the job calls (run_recipe.py --recipe); required for megatron-bridge
    "upstream": str,
    "upstream_ref": str,  # where that function's code is, for readers (free text; `recipes show` prints it)
    # the function's status where upstream Megatron-Bridge lacks it (the dry run's Upstream line); without
    # --bridge-src the dry run then warns and the canary is on by default
    "upstream_status": str,
    # why the recipe's container does not carry its bridge_commit: a Slurm job then needs --bridge-src at it
    "needs_bridge_src": str,
    # a module of workloads/bridge_recipes/ (e.g. "qwen35_vl_gb200.py") exporting `upstream`, for a function no
    # Megatron-Bridge revision has; the job registers it before run_recipe.py runs
    "bridge_recipe_module": str,
    # the Megatron-Bridge commit (a revision core/upstream.py knows; 7+ hex digits) whose recipe function, schema
    # and run_recipe.py interface the job uses; main when unset
    "bridge_commit": str,
    # config section -> the class the recipe function builds (model = "GPTModelProvider"), checked against the
    # revision's schema; a key only another class has is refused
    "classes": dict,
    "mode": str,  # pretrain, sft, lora or dora: run_recipe.py's --mode where that revision takes one
    "workload": str,  # megatron-bridge (default) or smoke (bridge-launch's preflight and tiny LM)
    # the GPUs it is written for: nodes = gpus / gpus_per_node (a fixed-size cluster must match; --nodes wins)
    "gpus": int,
    "container": str,  # the image the job runs in (the profile's container_image and --container override it)
    # the Hugging Face model id: plan's models.toml entry (after the recipe's name), the canary's hf_cache check
    "hf_model": str,
    # config keys the job needs a value for (dataset.path, ...): the dry run warns and submit refuses while unset
    "required": list,
    # the script the job runs with run_recipe.py's arguments (default: the image's
    # /opt/Megatron-Bridge/scripts/training/run_recipe.py)
    "entry": str,
    "notes": str,  # free text for readers: nothing reads it (`recipes show -o json` prints it)
    # the dataset config the recipe builds ("energon", "gpt-sft", ...; pretraining without one: "gpt"), for the
    # dataset checks; an "energon" run resumes only at the same data-parallel size
    "dataset_kind": str,
    "env": dict,  # environment variables of the job (overlays', the cluster's and --env's win over them)
    # Megatron-Bridge's environment block at the pinned revision (labelled upstream@<commit>), under [env]
    "upstream_env": dict,
    "config": dict,  # ConfigContainer keys (dotted) the recipe states, each passed as a Hydra override
    # what the recipe function sets at the pinned revision that the seeds do not state (labelled upstream@<commit>,
    # or bridge-launch-fn@<commit> for a bridge_recipe_module)
    "upstream_config": dict,
    # plan's achieved TFLOP/s per GPU: tflops_per_gpu (with precision, gpu, tflops_source, tflops_caveat), used
    # before models.toml's where the job's precision and GPU match
    "assumptions": dict,
    # config key -> how the job differs there from the seed's run and why: a warning in the dry run
    # and at submit while the job keeps the recipe's value (a command line or overlay value: none)
    "seed_differences": dict,
}
_OVERLAY_KEYS = {
    "name": str,  # the overlay's name, for --overlay (default: the file's stem)
    "description": str,  # one line, shown by `overlays list`
    "aliases": list,  # other names --overlay accepts for it (not inherited through extends)
    # an overlay this one builds on: its values (tables merged key by key) where this file sets none
    "extends": str,
    # marks a base for other overlays (not inherited); unlike a recipe's, it is still listed and --overlay applies it
    "abstract": bool,
    "gpus": int,  # the GPUs its run is written for, in place of the recipe's gpus (the last overlay's wins)
    "env": dict,  # environment variables over the recipe's (the cluster's and --env's win over them)
    "config": dict,  # ConfigContainer keys (dotted) over the recipe's (the cluster's and the command line's win)
    "notes": str,  # free text for readers: nothing reads it (`overlays show -o json` prints it)
    # where a value comes from, by key ("{bridge}": the short commit the recipe pins), e.g. NeMo-CI's
    # script line; the rest are labelled overlay:<name>
    "sources": dict,
    # the recipes the overlay is written for; on another, the job warns
    "recipes": list,
}


def flatten(table: dict, prefix: str = "", keep_dict=lambda _key: False) -> dict:
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


def _check_keys(at, data: dict, spec: dict) -> None:
    for key, value in data.items():
        if key not in spec:
            raise UsageError(f"{at(key)}: {suggest(key, spec, 'recipe key')}")
        typ = spec[key]
        if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
            raise UsageError(f"{at(key)}: '{key}' must be {typ.__name__}, got {value!r}")


def _env(at, section: str, env: dict) -> dict:
    out = {}
    for k, v in env.items():
        if isinstance(v, bool):
            v = "1" if v else "0"
        if not isinstance(v, (str, int, float)):
            raise UsageError(f"{at(f'{section}.{k}')}: env {k} must be a string or number, got {v!r}")
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


def _keep_dict(commit: str | None = None):
    from bridge_launch.spec import schema

    return schema.at(commit).is_dict_key


def _sections(cat: Catalog, name: str, pairs, commit: str | None) -> tuple[dict, dict]:
    """A child may change any value of its parent: for each (section, upstream section) pair, a key
    lives in the section of the file nearest the head that sets it. Returns ({key: section}, {key:
    source label}) where the label is "recipe:<name>" for a value a user's file sets (so --dry-run
    shows the child) and absent for the shipped files' values."""
    keep = _keep_dict(commit)
    owner: dict = {}
    label: dict = {}
    for path, origin, entry_name, own in reversed(cat.chain(name)):  # base first
        for plain, theirs in pairs:
            a = flatten(own.get(plain, {}), keep_dict=keep) if plain.endswith("config") else dict(own.get(plain, {}))
            b = flatten(own.get(theirs, {}), keep_dict=keep) if plain.endswith("config") else dict(own.get(theirs, {}))
            both = sorted(set(a) & set(b))
            if both:
                raise UsageError(
                    f"{where([path], f'{plain}.{both[0]}')}: {both[0]} is set in both [{plain}] and "
                    f"[{theirs}] of the same file; keep one"
                )
            for sect, keys in ((plain, a), (theirs, b)):
                for key in keys:
                    owner[(plain, key)] = sect
                    if origin == "user":
                        label[(plain, key)] = f"recipe:{entry_name}"
                    else:
                        label.pop((plain, key), None)
    return owner, label


def _classes(at, classes: dict, commit: str) -> dict:
    """[classes]: the class of each config section the recipe function builds (model =
    "GPTModelProvider", ...), one of the classes the revision's schema merges for that section."""
    from bridge_launch.spec import schema

    sections = schema.at(commit).sections
    for section, cls in classes.items():
        known = sections.get(section) or []
        if cls not in known:
            raise UsageError(
                f"{at(f'classes.{section}')}: {cls!r} is not a {section} class of Megatron-Bridge "
                f"{upstream.short(commit)}; valid: {', '.join(known) or 'none (not a section)'}"
            )
    return dict(classes)


def _check_values(at, section: str, values: dict, commit: str | None) -> None:
    from bridge_launch.spec import schema

    known = schema.at(commit)
    for key, value in values.items():
        spec = known.lookup(key)
        if spec is None or (isinstance(value, str) and "${" in value):
            continue
        want = schema.type_error(spec, value)
        if want:
            raise UsageError(f"{at(f'{section}.{key}')}: {key} expects {want}, got {value!r}")


@lru_cache(maxsize=8)
def recipe_functions(module: str) -> tuple[str, ...]:
    """The functions a shipped recipe module exports (its __all__, read with ast; nothing runs)."""
    tree = ast.parse((BRIDGE_RECIPES_DIR / module).read_text(encoding="utf-8"))
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            names = ast.literal_eval(node.value)
            return tuple(n for n in names if n in defined)
    return ()


def _bridge_recipe_module(at, data: dict) -> str | None:
    """The path of the recipe module bridge-launch ships for this recipe, checked to export its
    `upstream` function; None when the recipe's function is Megatron-Bridge's own."""
    module = data.get("bridge_recipe_module")
    if module is None:
        return None
    shipped = sorted(p.name for p in BRIDGE_RECIPES_DIR.glob("*.py") if p.name != "__init__.py")
    if module not in shipped:
        raise UsageError(
            f"{at('bridge_recipe_module')}: bridge_recipe_module {module!r} is not a recipe module bridge-launch "
            f"ships; valid: {', '.join(shipped)}"
        )
    if data.get("upstream") and data["upstream"] not in recipe_functions(module):
        raise UsageError(
            f"{at('upstream')}: {data['upstream']} is not a function {module} exports; it has: "
            f"{', '.join(recipe_functions(module))}"
        )
    return str(BRIDGE_RECIPES_DIR / module)


def upstream_label(recipe: dict) -> str:
    """The source --dry-run gives the values of [upstream_config]: what the recipe function sets at
    the pinned revision; `upstream@<commit>` for Megatron-Bridge's own function, `bridge-launch-fn@<commit>`
    for one bridge-launch ships (bridge_recipe_module), which upstream never set."""
    who = "bridge-launch-fn" if recipe.get("bridge_recipe_module") else "upstream"
    return f"{who}@{upstream.short(recipe['bridge_commit'])}"


def load(name: str, allow_abstract: bool = False) -> dict:
    cat = catalog()
    entry = cat.get(name)
    data = cat.resolved(entry.name)
    files = [p for p, *_ in cat.chain(entry.name)]

    def at(key: str | None = None) -> str:
        return f"{where(files, key)}: recipe '{entry.name}'"

    _check_keys(at, data, _RECIPE_KEYS)
    if data["abstract"] and not allow_abstract:
        raise UsageError(f"recipe '{entry.name}' is a base for other recipes; use one that extends it")
    data.setdefault("workload", "megatron-bridge")
    if data["workload"] not in WORKLOADS:
        raise UsageError(f"{at('workload')}: workload must be one of {', '.join(WORKLOADS)}")
    if data["workload"] == "megatron-bridge" and not data["abstract"]:
        for key in ("upstream", "mode", "container"):
            if not data.get(key):
                raise UsageError(f"{at()}: '{key}' is required for a Megatron-Bridge recipe")
    if data.get("mode") is not None:
        if data["mode"] not in MODES:
            raise UsageError(f"{at('mode')}: mode must be one of {', '.join(MODES)}, got {data['mode']!r}")
    try:  # the Megatron-Bridge revision whose recipe function the job calls (main when unset)
        rev = upstream.revision(data.get("bridge_commit"))
    except KeyError as exc:
        raise UsageError(f"{at('bridge_commit')}: {exc.args[0]}") from None
    data["bridge_commit"], data["core_commit"] = rev.bridge, rev.core
    data["bridge_recipe_module"] = _bridge_recipe_module(at, data)
    data["classes"] = _classes(at, data.get("classes", {}), rev.bridge)
    keep = _keep_dict(rev.bridge)
    owner, label = _sections(cat, entry.name, (("config", "upstream_config"), ("env", "upstream_env")), rev.bridge)
    data["config"] = flatten(data.get("config", {}), keep_dict=keep)
    data["upstream_config"] = flatten(data.get("upstream_config", {}), keep_dict=keep)
    data["env"] = _env(at, "env", data.get("env", {}))
    data["upstream_env"] = _env(at, "upstream_env", data.get("upstream_env", {}))
    for plain, theirs in (("config", "upstream_config"), ("env", "upstream_env")):
        for key in set(data[plain]) & set(data[theirs]):  # set in both by different files: the nearer wins
            del data[theirs if owner.get((plain, key)) == plain else plain][key]
    for section in ("config", "upstream_config"):
        _check_values(at, section, data[section], rev.bridge)
    # Values a user's recipe file sets: their source in --dry-run names it (recipe:<name>).
    data["sources"] = {
        "config": {k: v for (sect, k), v in label.items() if sect == "config" and k in data["config"]},
        "env": {k: v for (sect, k), v in label.items() if sect == "env" and k in data["env"]},
    }
    data.setdefault("required", [])
    data.setdefault("entry", DEFAULT_ENTRY)
    data["origin"] = entry.origin
    data["path"] = str(entry.path)
    data["files"] = [str(p) for p in files]
    return data


def _formats(text: str) -> bool:
    """Whether an overlay's source text formats with {bridge} alone (the resolver fills it)."""
    try:
        text.format(bridge="0000000")
    except (KeyError, IndexError, ValueError):
        return False
    return True


def load_overlay(name: str) -> dict:
    cat = overlay_catalog()
    entry = cat.get(name)
    data = cat.resolved(entry.name)
    files = [p for p, *_ in cat.chain(entry.name)]

    def at(key: str | None = None) -> str:
        return f"{where(files, key)}: overlay '{entry.name}'"

    _check_keys(at, data, _OVERLAY_KEYS)
    data["config"] = flatten(data.get("config", {}), keep_dict=_keep_dict())
    _check_values(at, "config", data["config"], None)  # overlays apply to any recipe; the job checks its own keys
    data["env"] = _env(at, "env", data.get("env", {}))
    data["sources"] = flatten(data.get("sources", {}), keep_dict=_keep_dict())
    for key, text in data["sources"].items():
        if key not in data["config"] or not isinstance(text, str) or not _formats(text):
            raise UsageError(
                f"{at('sources')}: sources.{key} must be the text naming where [config]'s {key} comes from"
                + ("" if key in data["config"] else f"; [config] sets no {key}")
                + ("" if not isinstance(text, str) or _formats(text) else "; its only placeholder may be {bridge}")
            )
    data["recipes"] = [str(r) for r in data.get("recipes", [])]
    data["origin"] = entry.origin
    data["path"] = str(entry.path)
    data["files"] = [str(p) for p in files]
    return data


def _listed(cat: Catalog, load_one, names, problems: list | None) -> list[dict]:
    """Each entry loaded. A file that does not load fails the call, unless `problems` is given:
    then it is left out and its one-line error appended there."""
    out = []
    if problems is not None:
        problems.extend(cat.broken())
    for n in names:
        try:
            out.append(load_one(n))
        except UsageError as exc:
            if problems is None:
                raise
            problems.append(str(exc))
    return out


def list_recipes(problems: list | None = None) -> list[dict]:
    return _listed(catalog(), load, catalog().names(listed=True), problems)


def list_all() -> list[dict]:
    """Every recipe file, abstract bases included (for checks over the whole catalog)."""
    return [load(e.name, allow_abstract=True) for e in catalog().entries()]


def list_overlays(problems: list | None = None) -> list[dict]:
    return _listed(overlay_catalog(), load_overlay, overlay_catalog().names(), problems)
