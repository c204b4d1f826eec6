"""The real Megatron-Bridge on CPU, driven from bridge-launch's side (Python 3.11, the package
importable): scripts/bridge-env (the cached Python 3.12 venv and the pinned revisions' sources), the
offline config.json cache (hf_configs.py) and realcheck.py run once per revision for many jobs.
Used by the tests and by scripts/derive-upstream."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import hf_configs  # its sibling: this directory is on the path of whoever imports this module

from bridge_launch.backends.base import entry_command
from bridge_launch.core import upstream

REPO = Path(__file__).resolve().parents[2]


def environment(build: bool = True) -> dict:
    """KEY=VALUE lines of scripts/bridge-env: BRIDGE_PY and SRC_MEGATRON_{BRIDGE,LM}_<commit>."""
    args = [str(REPO / "scripts" / "bridge-env")] + ([] if build else ["--check"])
    out = subprocess.run(args, capture_output=True, text=True, timeout=1200, check=True).stdout
    return dict(line.split("=", 1) for line in out.split())


def sources(env: dict, rev: upstream.Revision) -> tuple[str, str]:
    """The unpacked Megatron-Bridge and Megatron-LM trees of a pinned revision."""
    return env[f"SRC_MEGATRON_BRIDGE_{rev.bridge[:9].upper()}"], env[f"SRC_MEGATRON_LM_{rev.core[:9].upper()}"]


def hf_home(root: Path) -> str:
    hf_configs.write(root)
    return str(root)


def job_request(job_id: str, job) -> dict:
    """The job's exact run_recipe.py arguments, as every backend renders them."""
    return {"id": job_id, "argv": entry_command(job)[1:], "world_size": job.world_size}


def run(env: dict, rev: upstream.Revision, hf: str, jobs: list, tmp: Path) -> dict:
    """{job id: result} from one realcheck.py process at a revision."""
    bridge, core = sources(env, rev)
    request = tmp / f"request-{rev.bridge[:7]}.json"
    results = tmp / f"results-{rev.bridge[:7]}.jsonl"
    request.write_text(json.dumps({"bridge": bridge, "core": core, "hf_home": hf, "jobs": jobs}))
    proc = subprocess.run(
        [env["BRIDGE_PY"], str(REPO / "scripts" / "bridge" / "realcheck.py"), str(request), str(results)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {d["id"]: d for d in map(json.loads, results.read_text().splitlines())}
