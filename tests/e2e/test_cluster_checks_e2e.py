"""The canary's trainer check (workloads/cluster_checks.py, through recipe_build.py) against the real
Megatron-Bridge source on CPU, at both run_recipe.py interfaces: 067f987's main(argv) ending in
run_config(), and 987244934's main() reading sys.argv and calling TRAIN_FUNCTIONS. The check runs as
in the job's image: its own subprocess, the image's packages first on the path (here the pinned
sources, with the stand-ins of scripts/bridge/site for what only installs with CUDA)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import realbridge  # scripts/bridge: on the path tests/conftest.py sets

from bridge_launch.core import upstream
from bridge_launch.spec import schema
from conftest import REPO, WORKLOADS

pytestmark = pytest.mark.slow

NANO_ARGS = ["train.train_iters=2", "model.expert_model_parallel_size=8"]
NEMOTRON = "nemotron_3_nano_gb200_pretrain_config"  # 987244934's library recipe (recipes/nemotronh/gb200)
PIN = "98724493411ca166e09ea8bed8959c1129252703"


@pytest.fixture(scope="module")
def env():
    return realbridge.environment()


def _trainer(env, tmp_path, commit, recipe, mode, argv, world=8):
    rev = upstream.revision(commit)
    bridge, core = realbridge.sources(env, rev)
    spec = {
        "run_id": "r1",
        "report": str(tmp_path / "report.json"),
        "workload": "megatron-bridge",
        "entry": f"{bridge}/scripts/training/run_recipe.py",
        "recipe": recipe,
        "mode": mode,
        "args": [a for a in argv if "=" in a],
        "argv": argv,
        "world_size": world,
        "gpu_type": "gb200",
        "schema_source": schema.at(commit).source,
        "check_timeout_s": 600,
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    site = str(REPO / "scripts" / "bridge" / "site")
    run_env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([site, f"{bridge}/src", core]),
        BRIDGE_LAUNCH_FAKE_GPU="NVIDIA GB200:10:0",
        HF_HUB_OFFLINE="1",
        HF_HOME=str(tmp_path / "hf"),
    )
    proc = subprocess.run(
        [env["BRIDGE_PY"], str(WORKLOADS / "cluster_checks.py"), "--check", "trainer", str(path)],
        capture_output=True,
        text=True,
        env=run_env,
        timeout=900,
    )
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@bridge-launch-canary-result ")]
    assert proc.returncode == 0 and line, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(line[-1].split(" ", 1)[1])


def test_the_train_functions_interface_builds_and_validates_the_nemotron_recipe(env, tmp_path):
    recipe = "nemotron_3_nano_gb200_pretrain_config"
    r = _trainer(
        env, tmp_path, "98724493411ca166e09ea8bed8959c1129252703", recipe, "pretrain", ["--recipe", recipe, *NANO_ARGS]
    )
    assert r["status"] == "ok", r["detail"]
    assert r["detail"].startswith(
        f"recipe {recipe} built with 2 overrides and validated for 8 ranks (data-parallel size 8)"
    )
    assert r["data"]["interface"] == "train_functions" and r["data"]["mode"] == "pretrain"


def test_the_train_functions_interface_refuses_mains_key_at_override_application(env, tmp_path):
    r = _trainer(env, tmp_path, PIN, NEMOTRON, "pretrain", ["--recipe", NEMOTRON, "dataset.seq_length=4096"])
    assert r["status"] == "fail"
    assert r["detail"].startswith(
        "override application failed: OverridesError: Failed to parse Hydra overrides: Could not override "
        "'dataset.seq_length'"
    ), r["detail"]
    # and --mode, which that run_recipe.py does not take, is refused at argument parsing
    r = _trainer(env, tmp_path, PIN, NEMOTRON, "pretrain", ["--recipe", NEMOTRON, "--mode", "pretrain"])
    assert r["status"] == "fail" and "--mode" in r["detail"], r["detail"]


def test_the_run_config_interface_builds_and_validates_at_main(env, tmp_path):
    recipe = "nemotron_3_nano_pretrain_8gpu_gb200_bf16_config"
    # main's GB200 recipe turns on the precision-aware optimizer, which validate() checks against TE's
    # FusedAdam signature: the TE stand-in has none, so this check turns it off (TE's own behaviour
    # needs the image)
    argv = ["--recipe", recipe, "--mode", "pretrain", *NANO_ARGS, "optimizer.use_precision_aware_optimizer=false"]
    r = _trainer(env, tmp_path, upstream.BRIDGE_MAIN, recipe, "pretrain", argv)
    assert r["status"] == "ok", r["detail"]
    assert r["data"]["interface"] == "run_config"
    assert "validated for 8 ranks" in r["detail"]
