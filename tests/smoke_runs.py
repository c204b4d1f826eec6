"""Running the smoke workload as a subprocess: tricky overrides and a clean environment."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from conftest import WORKLOADS

# Hydra-quoted / odd tokens: must be recorded verbatim and parsed leniently.
TRICKY = [
    "+smoke.note='it\\'s a \"quoted\", value'",
    '++logger.wandb_exp_name="run #1 = best"',
    "+dataset.blend=[\"a b\", 'c,d', 3]",
    "+tokenizer.path=C:\\models\\tok",
    "+smoke.empty=",
    "+smoke.unicode=ünïcødé ✓",
    "+smoke.nullish=null",
    "+smoke.float=1e-3",
    'optimizer.lr="3e-3"',
    "--not-an-override",
]

TRICKY_EXPECTED = {
    "smoke.note": 'it\'s a "quoted", value',
    "logger.wandb_exp_name": "run #1 = best",
    "dataset.blend": ["a b", "c,d", 3],
    "tokenizer.path": "C:\\models\\tok",
    "smoke.empty": "",
    "smoke.unicode": "ünïcødé ✓",
    "smoke.nullish": None,
    "smoke.float": 0.001,
    "optimizer.lr": "3e-3",
}


def _child_env(run_dir: Path) -> dict:
    env = dict(os.environ)
    for k in (
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHELASTIC_RUN_ID",
        "GROUP_RANK",
    ):
        env.pop(k, None)
    env.update(
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
        BRIDGE_LAUNCH_RUN_DIR=str(run_dir),
        CUDA_VISIBLE_DEVICES="",
    )
    return env


def _prepare(run_dir: Path) -> Path:
    """Copy the workload into the run dir, as bridge-launch does at submit."""
    dst = run_dir / "workload"
    dst.mkdir(parents=True, exist_ok=True)
    for src in WORKLOADS.glob("*.py"):
        shutil.copy2(src, dst / src.name)
    return dst / "smoke.py"
