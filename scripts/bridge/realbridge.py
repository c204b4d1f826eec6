"""The real Megatron-Bridge on CPU, driven from bridge-launch's side (Python 3.11, the package
importable): scripts/bridge-env (the cached Python 3.12 venv and the pinned revisions' sources), the
offline config.json cache (hf_configs.py) and realcheck.py run once per revision for many jobs.
Used by the tests and by scripts/derive-upstream."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import hf_configs  # its sibling: this directory is on the path of whoever imports this module

from bridge_launch.backends.base import RECIPE_ENTRY_FILE, entry_command
from bridge_launch.core import upstream
from bridge_launch.core.upstream import BRIDGE_IN_CONTAINER
from bridge_launch.spec import recipes

REPO = Path(__file__).resolve().parents[2]


class Missing(RuntimeError):
    """The real Megatron-Bridge cannot be had here: its one line says what is missing."""


def vendor() -> Path:
    """Where scripts/bridge-env finds the pinned sources' tarballs."""
    return Path(os.environ.get("BRIDGE_VENDOR") or REPO.parent / "shared" / "vendor")


def missing(rev: upstream.Revision | None = None) -> str | None:
    """Why the real Megatron-Bridge of a pinned revision (default: main's) cannot run here, in one line;
    None when its tarballs are there (scripts/bridge-env unpacks them)."""
    rev = rev or upstream.revision(upstream.BRIDGE_MAIN)
    for name in (f"megatron-bridge-{rev.bridge[:9]}.tar.gz", f"megatron-lm-{rev.core[:9]}.tar.gz"):
        if not (vendor() / name).exists():
            return (
                f"the real Megatron-Bridge needs {vendor() / name} (set BRIDGE_VENDOR to the directory that holds it)"
            )
    return None


def environment(build: bool = True) -> dict:
    """KEY=VALUE lines of scripts/bridge-env: BRIDGE_PY and SRC_MEGATRON_{BRIDGE,LM}_<commit>."""
    args = [str(REPO / "scripts" / "bridge-env")] + ([] if build else ["--check"])
    proc = subprocess.run(args, capture_output=True, text=True, timeout=1200)
    if proc.returncode:
        raise Missing((proc.stderr.strip().splitlines() or [f"scripts/bridge-env exited {proc.returncode}"])[-1])
    return dict(line.split("=", 1) for line in proc.stdout.split())


def sources(env: dict, rev: upstream.Revision) -> tuple[str, str]:
    """The unpacked Megatron-Bridge and Megatron-LM trees of a pinned revision."""
    names = f"SRC_MEGATRON_BRIDGE_{rev.bridge[:9].upper()}", f"SRC_MEGATRON_LM_{rev.core[:9].upper()}"
    if not all(n in env for n in names):
        raise Missing(missing(rev) or f"scripts/bridge-env gave no {' or '.join(n for n in names if n not in env)}")
    return env[names[0]], env[names[1]]


def image_tree(env: dict, rev: upstream.Revision) -> Path:
    """The Megatron-Bridge tree as a NeMo image holds it at /opt/Megatron-Bridge: the revision's
    source with the Megatron-LM it pins as 3rdparty/Megatron-LM (docker/common/print_sha.sh reads
    both there). Assembled once beside the unpacked sources, with hard links (seconds, no copy)."""
    bridge, core = sources(env, rev)
    tree = Path(bridge).parents[1] / "image" / f"megatron-bridge-{rev.bridge[:9]}"
    if not (tree / ".complete").exists():
        tmp = tree.with_name(tree.name + f".{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(bridge, tmp, copy_function=os.link)
        shutil.copytree(core, tmp / "3rdparty" / "Megatron-LM", copy_function=os.link)
        shutil.rmtree(tree, ignore_errors=True)
        tmp.rename(tree)
        (tree / ".complete").touch()
    return tree


STANDINS_IN_CONTAINER = "/opt/bridge-launch-standins"  # scripts/bridge, read-only

# The seed's Qwen3.5-VL SFT topology is for 32 GB200s; these overrides fit it to the local cluster's 4
# ranks (2 nodes x 2), which validate() checks: the canary's tests and bench/canary_cost.py use them.
VL_FIT_4_RANKS = [
    "train.train_iters=2",
    "model.tensor_model_parallel_size=1",
    "model.context_parallel_size=1",
    "model.expert_model_parallel_size=4",
    "model.sequence_parallel=false",
    "train.global_batch_size=4",
]


def container(env: dict, rev: upstream.Revision, hf: str | None = None) -> tuple[list[str], dict]:
    """(mounts, environment) that give a job in the local test image the real Megatron-Bridge at
    `rev` as its installed one (/opt/Megatron-Bridge, with its 3rdparty/Megatron-LM) and the cached
    Python 3.12 venv (and the interpreter it was made from, at the same paths) first on PATH; the
    stand-ins of site/ for what only installs with CUDA, a GB200's device answers, and the training
    loop's stand-in (probe_trainer.py). Nothing is baked into the image."""
    venv = Path(env["BRIDGE_PY"]).parents[1]
    home = next(
        ln.split("=", 1)[1].strip() for ln in (venv / "pyvenv.cfg").read_text().splitlines() if ln.startswith("home")
    )
    base = Path(home).parent  # the interpreter's prefix (pyenv's versions/3.12.x)
    mounts = [
        f"{venv}:{venv}",
        f"{base}:{base}",
        f"{image_tree(env, rev)}:{BRIDGE_IN_CONTAINER}",
        f"{REPO / 'scripts' / 'bridge'}:{STANDINS_IN_CONTAINER}",
    ]
    variables = {
        "PATH": f"{venv}/bin:/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONPATH": ":".join(
            [
                f"{STANDINS_IN_CONTAINER}/site",
                f"{BRIDGE_IN_CONTAINER}/src",
                f"{BRIDGE_IN_CONTAINER}/3rdparty/Megatron-LM",
            ]
        ),
        "BRIDGE_LAUNCH_FAKE_GPU": "NVIDIA GB200:10:0",
        "BRIDGE_LAUNCH_TRAINER": "probe",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    if hf:
        mounts.append(f"{hf}:{hf}")
    return mounts, variables


def pinned_revisions() -> list[str]:
    """The model and processor revisions the shipped recipes pin (their config.json must be in the
    offline cache under that revision too: huggingface_hub looks a commit up by its snapshot)."""
    found = set()
    for rec in recipes.list_recipes():
        for section in ("config", "upstream_config"):
            for key in ("model.hf_model_revision", "dataset.task_encoder.hf_processor_revision"):
                if rec[section].get(key):
                    found.add(rec[section][key])
    return sorted(found)


def hf_home(root: Path) -> str:
    hf_configs.write(root, revisions=pinned_revisions())
    return str(root)


def function_request(job_id: str, rec: dict) -> dict:
    """The recipe function alone (what it sets): Megatron-Bridge's, or the module bridge-launch ships."""
    req = {"id": job_id, "function": rec["upstream"]}
    if rec.get("bridge_recipe_module"):
        req["module"] = rec["bridge_recipe_module"]
    return req


def job_request(job_id: str, job) -> dict:
    """The job's exact run_recipe.py arguments, as every backend renders them. For a recipe whose
    function bridge-launch ships, the entry is workload/bridge_recipe_entry.py MODULE RUN_RECIPE ARGS:
    the module is checked from this checkout, and the arguments after run_recipe.py are its argv."""
    cmd = entry_command(job)
    if not job.bridge_recipe_module:
        return {"id": job_id, "argv": cmd[1:], "world_size": job.world_size}
    assert cmd[0].endswith("/" + RECIPE_ENTRY_FILE) and cmd[2] == job.entry, cmd[:3]
    module = recipes.BRIDGE_RECIPES_DIR / cmd[1].rsplit("/", 1)[1]
    return {"id": job_id, "argv": cmd[3:], "world_size": job.world_size, "module": str(module)}


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
