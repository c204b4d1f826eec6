"""Canary specs and the in-job checks run as the job's image runs them (workloads/cluster_checks.py
--check NAME in its own process), for the fast and end-to-end canary tests. The image's
Megatron-Bridge is the real one: Megatron-Bridge 067f987 (main) under the cached Python 3.12 venv,
with scripts/bridge/site's stand-ins for what installs only with CUDA (scripts/bridge-env)."""

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import realbridge  # scripts/bridge: on the path tests/conftest.py sets

from bridge_launch.core import upstream
from bridge_launch.spec import recipes
from conftest import REPO, WORKLOADS

VL_FUNCTION = "qwen35_vl_35b_a3b_sft_long_context_32gpu_gb200_bf16_config"  # the seed's VL SFT recipe
VL_MODULE = str(recipes.BRIDGE_RECIPES_DIR / "qwen35_vl_gb200.py")  # its function: bridge-launch ships it
FIT = realbridge.VL_FIT_4_RANKS  # the seed's 32-GPU topology fitted to 4 ranks


@functools.cache
def real_bridge() -> dict:
    """{"python", "pythonpath", "entry", "bridge"}: the image's interpreter and path for the checks; a
    test that needs it skips with one line where the pinned sources are not on this machine."""
    why = realbridge.missing()
    if why:
        pytest.skip(why)
    env = realbridge.environment()
    bridge, core = realbridge.sources(env, upstream.revision(upstream.BRIDGE_MAIN))
    site = str(REPO / "scripts" / "bridge" / "site")
    return {
        "python": env["BRIDGE_PY"],
        "pythonpath": os.pathsep.join([site, f"{bridge}/src", core]),
        "entry": f"{bridge}/scripts/training/run_recipe.py",
        "bridge": bridge,
    }


def run_env(tmp_path: Path, pythonpath: str) -> dict:
    """The job's environment for a check: the image's path, a GB200's device answers, an offline HF
    cache with the pinned models' config.json (scripts/bridge/hf_configs.py)."""
    hf = tmp_path / "hf"
    if not hf.exists():
        realbridge.hf_home(hf)
    return dict(
        os.environ,
        PYTHONPATH=pythonpath,
        BRIDGE_LAUNCH_FAKE_GPU="NVIDIA GB200:10:0",
        HF_HOME=str(hf),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        OMP_NUM_THREADS="1",
    )


def _spec(tmp_path, **kw) -> Path:
    """A canary spec for the seed's VL SFT recipe at main, fitted to 4 ranks."""
    spec = {
        "run_id": "r1",
        "report": str(tmp_path / "run" / "canary" / "r1.json"),
        "workload": "megatron-bridge",
        "entry": kw.pop("entry", None) or real_bridge()["entry"],
        "recipe": VL_FUNCTION,
        "recipe_module": VL_MODULE,
        "mode": "sft",
        "args": [*FIT, "dataset.path=/d"],
        "world_size": 4,
        "gpu_type": "gb200",
        "schema_source": {
            "megatron_bridge": "067f987df03b8355b03192d88d70f1709fedf51a",
            "megatron_core": "2a75ac12c54ba6a42b34024756820bf819a2e25f",
            "megatron_bridge_version": "0.7.0",
            "megatron_core_version": "0.20.0",
        },
        "dataset": {"kind": "energon", "path": str(tmp_path / "nope")},
        "check_timeout_s": 600,
    }
    spec.update(kw)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def subcheck(name, spec_path, *, real: bool = True, pythonpath: str | None = None) -> dict:
    """One check's result, run as the job runs it: under the image's interpreter and path (real), or
    this interpreter with `pythonpath` (an image without Megatron-Bridge)."""
    tmp = Path(spec_path).parent
    if real:
        rb = real_bridge()
        python, env = rb["python"], run_env(tmp, pythonpath if pythonpath is not None else rb["pythonpath"])
    else:
        python, env = sys.executable, dict(os.environ, PYTHONPATH=pythonpath or "")
    proc = subprocess.run(
        [python, str(WORKLOADS / "cluster_checks.py"), "--check", name, str(spec_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@bridge-launch-canary-result ")]
    assert proc.returncode == 0 and line, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(line[-1].split(" ", 1)[1])
