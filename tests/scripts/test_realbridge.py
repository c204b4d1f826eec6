"""scripts/bridge/realbridge.py and hf_configs.py, the launcher's side of the real-Megatron-Bridge
check, without running it (tests/e2e/test_real_bridge_e2e.py runs it): what each request carries."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import hf_configs  # scripts/bridge: on the path tests/conftest.py sets
import pytest
import realbridge

from bridge_launch.core import upstream
from bridge_launch.resolve import resolver as resolve
from bridge_launch.spec import recipes
from conftest import REPO

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


def test_without_the_pinned_sources_bridge_env_says_so_and_the_tests_skip(tmp_path, monkeypatch):
    """A clone with no ../shared/vendor: scripts/bridge-env fails with one line (it exited 0 and said
    nothing), and the tests that need the real Megatron-Bridge skip saying what is missing (they
    crashed with KeyError: 'SRC_MEGATRON_BRIDGE_067F987DF')."""
    empty = tmp_path / "vendor"
    empty.mkdir()
    env = dict(os.environ, BRIDGE_VENDOR=str(empty))
    proc = subprocess.run([str(REPO / "scripts" / "bridge-env"), "--sources"], capture_output=True, text=True, env=env)
    assert proc.returncode == 1 and proc.stdout == "", proc
    assert proc.stderr.strip() == (
        f"bridge-env: no Megatron-Bridge or Megatron-LM sources in {empty} "
        "(megatron-{bridge,lm}-<commit>.tar.gz; set BRIDGE_VENDOR to their directory)"
    )
    monkeypatch.setenv("BRIDGE_VENDOR", str(empty))
    why = realbridge.missing()
    assert why and why.startswith(f"the real Megatron-Bridge needs {empty}/megatron-bridge-067f987df.tar.gz"), why
    with pytest.raises(realbridge.Missing):
        realbridge.sources({}, upstream.revision(upstream.BRIDGE_MAIN))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-rs",
            "tests/runs/test_canary.py",
            "-k",
            "test_data_check_refuses_what_it_can_tell",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
    )
    assert proc.returncode == 0 and "KeyError" not in proc.stdout and " skipped" in proc.stdout, proc.stdout[-3000:]
    assert "the real Megatron-Bridge needs " in proc.stdout
