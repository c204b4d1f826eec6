"""scripts/bridge/realbridge.py and hf_configs.py, the launcher's side of the real-Megatron-Bridge
check, without running it (tests/e2e/test_real_bridge_e2e.py runs it): what each request carries."""

from __future__ import annotations

import json

import hf_configs  # scripts/bridge: on the path tests/conftest.py sets
import pytest
import realbridge

from bridge_launch.resolve import resolver as resolve
from bridge_launch.spec import recipes

VL = ("dataset.path=/lustre/fsw/d", "checkpoint.pretrained_checkpoint=/lustre/fsw/c")


@pytest.mark.usefixtures("home")
def test_a_job_whose_function_bridge_launch_ships_is_checked_with_its_module_and_run_recipes_own_argv():
    job = resolve.resolve("qwen35-vl-sft", resolve.Options(cluster="gb200-32", overrides=VL))
    req = realbridge.job_request("j", job)
    assert req["module"] == str(recipes.BRIDGE_RECIPES_DIR / "qwen35_vl_gb200.py")
    # what run_recipe.py receives after its own path: no entry shim, module or script in it
    assert req["argv"] == job.recipe_argv() and req["argv"][:2] == ["--recipe", job.upstream]
    assert req["world_size"] == 32
    plain = resolve.resolve("qwen35-9b-pretrain", resolve.Options(cluster="gb200-8"))
    assert realbridge.job_request("p", plain) == {"id": "p", "argv": plain.recipe_argv(), "world_size": 8}


@pytest.mark.usefixtures("home")
def test_the_offline_cache_holds_each_pinned_revision(tmp_path):
    revs = realbridge.pinned_revisions()
    assert revs == ["59d61f3ce65a6d9863b86d2e96597125219dc754"]  # the VL recipes' model and processor pin
    hf_configs.write(tmp_path, revisions=revs)
    root = tmp_path / "hub" / "models--Qwen--Qwen3.5-35B-A3B"
    pinned = json.loads((root / "snapshots" / revs[0] / "config.json").read_text())
    assert pinned == json.loads((root / "snapshots" / hf_configs.SNAPSHOT / "config.json").read_text())
    assert pinned["model_type"] == "qwen3_5_moe"
