"""Canary specs for the fast and end-to-end canary tests (the stand-in Megatron-Bridge's run_recipe.py)."""

import json
from pathlib import Path

from conftest import REPO

STANDIN = REPO / "scripts" / "image" / "Megatron-Bridge"


STANDIN_PATH = f"{STANDIN}/src:{STANDIN}/3rdparty/Megatron-LM"


def _spec(tmp_path, **kw) -> Path:
    spec = {
        "run_id": "r1",
        "report": str(tmp_path / "run" / "canary" / "r1.json"),
        "workload": "megatron-bridge",
        "entry": str(STANDIN / "scripts" / "training" / "run_recipe.py"),
        "recipe": "tiny_vl_sft_config",
        "mode": "sft",
        "args": ["train.train_iters=2"],
        "world_size": 4,
        "gpu_type": "cpu",
        "schema_source": {
            "megatron_bridge": "067f987df03b8355b03192d88d70f1709fedf51a",
            "megatron_core": "2a75ac12c54ba6a42b34024756820bf819a2e25f",
            "megatron_bridge_version": "0.7.0",
            "megatron_core_version": "0.20.0",
        },
        "dataset": {"kind": "energon", "path": str(tmp_path / "nope")},
        "check_timeout_s": 300,
    }
    spec.update(kw)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path
