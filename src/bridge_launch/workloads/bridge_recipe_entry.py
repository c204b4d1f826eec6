#!/usr/bin/env python3
"""The entry of a job whose recipe function bridge-launch ships (workloads/bridge_recipes/):

    torchrun ... workload/bridge_recipe_entry.py workload/bridge_recipes/MODULE.py \\
        /opt/Megatron-Bridge/scripts/training/run_recipe.py --recipe F --mode M KEY=VALUE ...

It imports MODULE.py (from its path), sets every function the module's __all__ names as an
attribute of megatron.bridge.recipes, where run_recipe.py's recipe lookup finds a library recipe
(Megatron-Bridge 067f987 scripts/training/recipe_runner.py:191-197), then runs that run_recipe.py
as __main__ with the arguments after it, exactly as `python run_recipe.py ARGS` would: sys.argv[0]
is the script and sys.path[0] its directory (its sibling modules import each other by name). The
image's own run_recipe.py parses the arguments, applies the overrides and trains; nothing else is
changed.

`register(path)` is the first half alone: the test suite's check against the real Megatron-Bridge
(scripts/bridge/realcheck.py) and the canary's trainer check call it before run_recipe.py's main().

Standard library only (the module it imports brings megatron.bridge); never bridge_launch.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys

USAGE = "usage: bridge_recipe_entry.py RECIPE_MODULE.py RUN_RECIPE.py [run_recipe.py arguments ...]"


def register(path: str) -> list[str]:
    """Import the recipe module at `path` and set its __all__ functions on megatron.bridge.recipes;
    returns their names."""
    name = "bridge_launch_recipes_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    import megatron.bridge.recipes as recipes

    names = list(getattr(module, "__all__", ()))
    if not names:
        raise ImportError(f"{path} names no recipe function in __all__")
    for fn_name in names:
        fn = getattr(module, fn_name)
        if not callable(fn):
            raise ImportError(f"{path}: {fn_name} is not a function")
        setattr(recipes, fn_name, fn)
    return names


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].endswith(".py") or not argv[1].endswith(".py"):
        print(USAGE, file=sys.stderr)
        return 2
    module, script, rest = argv[0], os.path.abspath(argv[1]), argv[2:]
    for path in (module, script):
        if not os.path.isfile(path):
            print(f"bridge_recipe_entry.py: {path} does not exist; {USAGE}", file=sys.stderr)
            return 2
    register(module)
    sys.argv = [script, *rest]
    sys.path[0] = os.path.dirname(script)  # as `python run_recipe.py` sets it (this file's dir is left out)
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
