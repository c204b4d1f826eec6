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
from canary_jobs import FIT, VL_FUNCTION, VL_MODULE, _spec, real_bridge, subcheck
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


# -- the check as the canary runs it in the image, on the seed's VL SFT recipe (canary_jobs) ------------
SCHEMA_LINE = "schema/ from megatron-bridge 0.7.0 (067f987df), megatron-core 0.20.0 (2a75ac12c)"


@pytest.mark.parametrize(
    "kw,status,expected",
    [
        (
            {},
            "ok",
            f"recipe {VL_FUNCTION} built with 7 overrides and validated for 4 ranks (data-parallel size 4); image: "
            "megatron-bridge 0.7.0, megatron-core ",
        ),
        (  # 067f987's validate() refuses MTP with Energon native packing (training/config.py:1334)
            {"args": [*FIT, "dataset.path=/d", "model.mtp_num_layers=1"]},
            "fail",
            "ConfigContainer.validate() failed: ValueError: Energon native sequence packing does not support MTP.",
        ),
        (  # a key the recipe's classes lack: Hydra's struct mode refuses it
            {"args": [*FIT, "dataset.path=/d", "model.no_such_field=1"]},
            "fail",
            "override application failed: OverridesError: Failed to parse Hydra overrides: Could not override "
            "'model.no_such_field'.",
        ),
    ],
)
def test_the_canarys_trainer_check_runs_run_recipes_path_in_the_image(tmp_path, kw, status, expected):
    r = subcheck("trainer", _spec(tmp_path, **kw))
    assert r["status"] == status and r["detail"].startswith(expected), r["detail"]
    assert (
        r["data"]["versions"]["megatron_bridge"]["file"] == real_bridge()["bridge"] + "/src/megatron/bridge/__init__.py"
    )
    if status == "ok":
        assert r["data"]["recipe_module"] == VL_MODULE and r["data"]["interface"] == "run_config"
        assert r["detail"].endswith(SCHEMA_LINE) and r["data"]["versions_match"] is True


def test_the_trainer_check_reports_a_version_skew_and_a_module_that_does_not_import(tmp_path):
    src = {
        "megatron_bridge": "abc",
        "megatron_core": "def",
        "megatron_bridge_version": "0.8.0",
        "megatron_core_version": "0.20.0",
    }
    module = tmp_path / "mine.py"
    module.write_text("import no_such_module_here\n")
    r = subcheck("trainer", _spec(tmp_path, schema_source=src, recipe_module=str(module)))
    assert r["status"] == "fail" and r["detail"].startswith(
        "recipe module mine.py failed: ModuleNotFoundError: No module named 'no_such_module_here'"
    ), r["detail"]
    assert r["data"]["versions_match"] is False
    assert r["detail"].endswith("schema/ from megatron-bridge 0.8.0 (abc), megatron-core 0.20.0 (def)"), r["detail"]


def test_the_data_check_reads_one_sample_with_the_images_energon_and_sample_type(tmp_path, energon_dataset):
    r = subcheck("data", _spec(tmp_path, dataset={"kind": "energon", "path": str(energon_dataset)}))
    assert r["status"] == "ok" and r["detail"].startswith(
        f"{energon_dataset} opened with the image's Energon 7.4.1; one train sample read (ChatMLSample clevr_2__"
    ), r
    assert r["data"]["sample"]["imgs"].endswith("item(s)") and r["data"]["sample"]["conversation"] == "2 item(s)"
