"""The entry of a job whose recipe function bridge-launch ships (workloads/bridge_recipe_entry.py), run
as torchrun runs it, over a stand-in megatron.bridge.recipes package and a run_recipe.py that looks the
recipe up there the way Megatron-Bridge's does (recipe_runner.py:191-197: getattr on the package) and
imports a sibling module by name. The real Megatron-Bridge's run_recipe.py runs it in
tests/e2e/test_real_bridge_e2e.py. Also: what the shipped recipe module exports, read without importing
megatron.bridge."""

import json
import os
import subprocess
import sys

import pytest

from bridge_launch.spec import recipes
from conftest import WORKLOADS, write

ENTRY = WORKLOADS / "bridge_recipe_entry.py"

RUN_RECIPE = """
import json, os, sys
import recipe_runner  # a sibling, found because sys.path[0] is this script's directory
import megatron.bridge.recipes as recipes

fn = getattr(recipes, sys.argv[sys.argv.index("--recipe") + 1])
json.dump(
    {"name": __name__, "argv": sys.argv, "path0": sys.path[0], "built": fn(), "runner": recipe_runner.NAME},
    open(os.environ["OUT"], "w"),
)
"""


@pytest.fixture
def tree(tmp_path):
    site = tmp_path / "site"
    write(site / "megatron" / "__init__.py", "")
    write(site / "megatron" / "bridge" / "__init__.py", "")
    write(site / "megatron" / "bridge" / "recipes" / "__init__.py", "")  # the image has no such recipe
    scripts = tmp_path / "mb" / "scripts" / "training"
    write(scripts / "run_recipe.py", RUN_RECIPE)
    write(scripts / "recipe_runner.py", 'NAME = "runner"\n')
    module = tmp_path / "workload" / "bridge_recipes" / "mine.py"
    write(
        module,
        "def qwen35_vl_x_sft_config():\n    return {'tp': 2}\n\n\n"
        "def _helper():\n    return None\n\n\n"
        '__all__ = ["qwen35_vl_x_sft_config"]\n',
    )
    return tmp_path, site, scripts / "run_recipe.py", module


def _run(site, *args, out=None):
    env = dict(os.environ, PYTHONPATH=str(site), OUT=str(out or "/dev/null"))
    return subprocess.run([sys.executable, str(ENTRY), *map(str, args)], capture_output=True, text=True, env=env)


def test_the_entry_registers_the_module_and_runs_run_recipe_as_main(tree):
    tmp, site, run_recipe, module = tree
    out = tmp / "out.json"
    args = ["--recipe", "qwen35_vl_x_sft_config", "--mode", "sft", "a.b=1", "'c=[1,2]'"]
    proc = _run(site, module, run_recipe, *args, out=out)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(out.read_text())
    assert seen["name"] == "__main__" and seen["built"] == {"tp": 2} and seen["runner"] == "runner"
    # exactly what `python run_recipe.py ARGS` would see
    assert seen["argv"] == [str(run_recipe), *args]
    assert seen["path0"] == str(run_recipe.parent)
    # without the entry, the image's run_recipe.py does not find the function
    plain = subprocess.run(
        [sys.executable, str(run_recipe), *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(site), OUT=str(out)),
    )
    assert plain.returncode == 1 and "AttributeError" in plain.stderr


def test_run_recipes_own_failure_is_the_entrys_exit_status(tree):
    _tmp, site, run_recipe, module = tree
    proc = _run(site, module, run_recipe, "--recipe", "qwen35_vl_missing_config")
    assert proc.returncode == 1 and "has no attribute 'qwen35_vl_missing_config'" in proc.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        ([], "usage: bridge_recipe_entry.py RECIPE_MODULE.py RUN_RECIPE.py"),
        (["only.py"], "usage: bridge_recipe_entry.py RECIPE_MODULE.py RUN_RECIPE.py"),
        (["{tmp}/nope.py", "{run_recipe}"], "nope.py does not exist"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(tree, args, message):
    tmp, site, run_recipe, _module = tree
    proc = _run(site, *[a.format(tmp=tmp, run_recipe=run_recipe) for a in args])
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr


def test_a_module_without_all_is_refused(tree):
    _tmp, site, run_recipe, module = tree
    module.write_text("def f():\n    return 1\n")
    proc = _run(site, module, run_recipe, "--recipe", "f")
    assert proc.returncode == 1 and "names no recipe function in __all__" in proc.stderr


@pytest.mark.usefixtures("home")
def test_the_shipped_module_exports_the_vl_recipes_functions():
    assert recipes.recipe_functions("qwen35_vl_gb200.py") == (
        "qwen35_vl_35b_a3b_sft_long_context_32gpu_gb200_bf16_config",
        "qwen35_vl_35b_a3b_sft_long_context_32gpu_gb200_fp8mx_config",
    )
    for name in ("qwen35-vl-sft", "qwen35-vl-sft-mxfp8"):
        rec = recipes.load(name)
        assert rec["upstream"] in recipes.recipe_functions("qwen35_vl_gb200.py")
        # the `qwen35_vl_` prefix is what makes run_recipe.py pick vlm_step with native packing
        assert rec["upstream"].startswith("qwen35_vl_")
    text = (recipes.BRIDGE_RECIPES_DIR / "qwen35_vl_gb200.py").read_text()
    assert "import bridge_launch" not in text and "from bridge_launch" not in text
