"""A job's ConfigContainer built along Megatron-Bridge's own scripts/training/run_recipe.py, stopped
where training would start: recipe lookup by name, Hydra override application and the runner's
syncs are the script's own code. Used by the canary's trainer check (in the job's image) and by the
test suite's check against the real Megatron-Bridge source (scripts/bridge/realcheck.py).

run_recipe.py has two interfaces among the revisions bridge-launch pins:

- "run_config" (067f987, main): `main(argv)` parses `--recipe/--mode/...` and ends in
  `run_config(config=..., mode=..., step_func=...)` (run_recipe.py:455-530, recipe_runner.py:498-545);
  its own `--dryrun` replaces that call the same way. Replaced here by a function that keeps the
  config.
- "train_functions" (987244934 and dd81e664e, PR #4871 over r0.5.0): `main()` reads `sys.argv`
  (`parse_args`, :160-224), takes the mode from `--dataset` or infers it from the recipe name
  (`infer_train_mode`, :307-314; no `--mode`), syncs model.seq_length to dataset.seq_length and
  calls `TRAIN_FUNCTIONS[mode](config=..., forward_step_func=...)` (main, :317-358). Replaced here by
  entries that keep the config.

`static_interface` tells the two apart from the script's text without running it (a user's own entry
script may train at import): in the module's own `main`, a call of `run_config` (067f987:523) or a
subscript of `TRAIN_FUNCTIONS` (987244934:357; dd81e664e's file is byte-identical).

Standard library only at import; megatron.bridge is imported by the script itself. Never bridge_launch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import importlib.util
import io
import os
import sys

# The benchmark recipes re-exec the interpreter once to apply their environment (067f987
# recipe_runner.py bootstrap_recipe_environment, from :324); this marker says that has happened.
BOOTSTRAP_MARKER = "_MB_TRAINING_RECIPE_ENV_BOOTSTRAPPED"


class BuildError(Exception):
    """The build stopped: `stage` names where (argument parsing, recipe lookup, ...), `why` the cause."""

    def __init__(self, stage: str, why: str):
        super().__init__(f"{stage} failed: {why}")
        self.stage, self.why = stage, why


def load_entry(entry: str):
    """run_recipe.py as a module named run_recipe (its siblings import it by that name)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(entry)))
    spec = importlib.util.spec_from_file_location("run_recipe", entry)
    if spec is None or spec.loader is None:
        raise BuildError("import of " + entry, "not a Python file")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["run_recipe"] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException as exc:
        raise BuildError("import of " + entry, error_text(exc)) from exc
    return mod


def register_module(path: str) -> list[str]:
    """What the entry of a job whose recipe function bridge-launch ships does first
    (bridge_recipe_entry.register, its sibling): the module's functions set on megatron.bridge.recipes,
    where run_recipe.py's recipe lookup finds them. Returns their names. The sibling is loaded from its
    file: the canary's check takes this directory off sys.path (its modules must not shadow the image's)."""
    try:
        sibling = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bridge_recipe_entry.py")
        spec = importlib.util.spec_from_file_location("bridge_recipe_entry", sibling)
        if spec is None or spec.loader is None:
            raise ImportError(f"{sibling} is not a Python file")
        entry = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(entry)
        return entry.register(path)
    except BaseException as exc:
        raise BuildError("recipe module " + os.path.basename(path), error_text(exc)) from exc


def static_interface(entry: str) -> str | None:
    """The run_recipe.py interface `entry`'s source text has ("run_config" | "train_functions"), or
    None: read with ast, nothing of it runs."""
    import ast

    try:
        with open(entry, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), entry)
    except (OSError, SyntaxError, ValueError):
        return None
    main = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"), None)
    if main is None:
        return None
    for node in ast.walk(main):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "run_config":
            return "run_config"
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "TRAIN_FUNCTIONS":
            return "train_functions"
    return None


def interface(mod) -> str | None:
    """Which run_recipe.py interface the module has (see the module docstring), or None."""
    if callable(getattr(mod, "main", None)) and callable(getattr(mod, "run_config", None)):
        return "run_config"
    if callable(getattr(mod, "main", None)) and isinstance(getattr(mod, "TRAIN_FUNCTIONS", None), dict):
        return "train_functions"
    return None


def error_text(exc: BaseException, limit: int = 400) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text[:limit]}"


class _Stop(BaseException):
    """Raised where training would start, carrying the built config out of main()."""


def build(mod, argv: list, world_size: int) -> tuple[object, str]:
    """(config, mode) as main() would hand them to training, for `argv` (the job's arguments after
    the script's path) at `world_size` ranks. Raises BuildError naming the stage that refused."""
    os.environ.update(WORLD_SIZE=str(world_size), RANK="0", LOCAL_RANK="0")
    os.environ.setdefault(BOOTSTRAP_MARKER, str(os.getpid()))
    kind = interface(mod)
    if kind is None:
        raise BuildError(
            "interface", "no main() that ends in run_config() or TRAIN_FUNCTIONS (the two run_recipe.py shapes known)"
        )
    stage = ["argument parsing"]
    built: dict = {}

    def staged(name: str, label: str) -> None:
        fn = getattr(mod, name, None)
        if callable(fn):

            def wrapper(*a, **k):
                stage[0] = label
                return fn(*a, **k)

            setattr(mod, name, wrapper)

    staged("load_recipe", "recipe lookup")
    staged("apply_cli_overrides", "override application")
    staged("process_config_with_overrides", "override application")

    def keep(*, config, mode=None, **_kw):
        built.update(config=config, mode=mode)
        raise _Stop

    if kind == "run_config":
        mod.run_config = keep
        call = [list(argv)]
    else:
        for mode in list(mod.TRAIN_FUNCTIONS):
            mod.TRAIN_FUNCTIONS[mode] = lambda *, config, _mode=mode, **_kw: keep(config=config, mode=_mode)
        call = []
    err = io.StringIO()
    old_argv = sys.argv
    sys.argv = [mod.__file__, *argv]  # as the job runs it: argparse's prog, main()'s own argv
    cwd = os.getcwd()
    try:
        with contextlib.redirect_stderr(err):
            mod.main(*call)
    except _Stop:
        pass
    except SystemExit as exc:  # argparse: the message is on stderr
        lines = [ln.strip() for ln in err.getvalue().splitlines() if ln.strip()]
        raise BuildError(stage[0], f"run_recipe.py exited: {lines[-1] if lines else f'exit {exc.code}'}") from None
    except BaseException as exc:
        raise BuildError(stage[0], error_text(exc)) from exc
    finally:
        sys.argv = old_argv
        os.chdir(cwd)
    if not built:
        raise BuildError("main()", "returned without reaching training")
    return built["config"], built["mode"]


def runtime_update(config) -> None:
    """What training does to the config first: runtime_config_update(), which ends in
    ConfigContainer.validate() (067f987 training/config.py:1992-2032; 987244934 :1674-1714)."""
    from megatron.bridge.training.config import runtime_config_update

    try:
        runtime_config_update(config)
    except BaseException as exc:
        raise BuildError("ConfigContainer.validate()", error_text(exc)) from exc


def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value]
        return items if all(i is not _SKIP for i in items) else _SKIP
    if type(value).__module__ == "torch" and type(value).__name__ == "dtype":
        return str(value).removeprefix("torch.")
    return _SKIP


_SKIP = object()


def flatten(config, prefix: str = "") -> dict:
    """Every plain value of a (nested) dataclass config as {"section.field": value}; objects that
    are not dataclasses or plain values (callables, modules, processes) are left out."""
    out: dict = {}
    for field in dataclasses.fields(config):
        if field.name.startswith("_"):
            continue
        try:
            value = getattr(config, field.name)
        except Exception:  # noqa: BLE001 - a property that needs a GPU or a process group
            continue
        key = prefix + field.name
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out.update(flatten(value, key + "."))
            continue
        plain = _plain(value)
        if plain is not _SKIP:
            out[key] = plain
    return out


def classes(config) -> dict:
    """{section: class name} of the config's dataclass sections (model: GPTModelProvider, ...)."""
    out = {}
    for field in dataclasses.fields(config):
        value = getattr(config, field.name, None)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out[field.name] = type(value).__name__
    return out
