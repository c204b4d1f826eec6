"""An offline Hugging Face cache holding only the config.json of each model the shipped recipes
build, written from src/bridge_launch/spec/models.toml (the one place bridge-launch keeps a
model's architecture, each fact with its source), so that Megatron-Bridge's recipe functions
build their model providers on a machine that cannot reach the Hub.

    python scripts/bridge/hf_configs.py HF_HOME

Layout as huggingface_hub 1.33 reads an offline cache (file_download.py: repo_folder_name
"models--org--name", refs/main holding the snapshot commit, snapshots/<commit>/config.json). The
snapshot commit is a stand-in name, the same for every repo ("0" * 40): nothing checks it offline.

Fields: the Qwen3.5 configs are unified (text_config + vision_config), as the Qwen/Qwen3.5-*
checkpoints are (transformers 5.12.1 models/qwen3_5/configuration_qwen3_5.py,
qwen3_5_moe/configuration_qwen3_5_moe.py); the fields models.toml states are written, the others
are those classes' defaults (rope, norm epsilon, token ids), which no value bridge-launch checks
reads. Models that the recipes build without the Hub (Nemotron 3 Nano: MambaModelProvider with
literal values) get none.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bridge_launch.spec import models

SNAPSHOT = "0" * 40


def _period(layers: str) -> int:
    """full_attention_interval: the layer pattern's period ("G+E G+E G+E *+E" -> 4)."""
    return len(layers.split())


def qwen35(name: str) -> dict:
    f = models.entry_values(name)
    moe = "moe.num_experts" in f
    text = {
        "model_type": "qwen3_5_moe_text" if moe else "qwen3_5_text",
        "num_hidden_layers": f["num_layers"],
        "hidden_size": f["hidden_size"],
        "vocab_size": f["vocab_size"],
        "tie_word_embeddings": f["tied_embeddings"],
        "num_attention_heads": f["attention.num_heads"],
        "num_key_value_heads": f["attention.num_query_groups"],
        "head_dim": f["attention.head_dim"],
        "linear_num_key_heads": f["gdn.key_heads"],
        "linear_num_value_heads": f["gdn.value_heads"],
        "linear_key_head_dim": f["gdn.key_head_dim"],
        "linear_value_head_dim": f["gdn.value_head_dim"],
        "linear_conv_kernel_dim": f["gdn.conv_kernel"],
        "full_attention_interval": _period(f["layers"]),
        "mtp_num_hidden_layers": f["mtp_layers"],
    }
    if moe:
        text.update(
            num_experts=f["moe.num_experts"],
            num_experts_per_tok=f["moe.topk"],
            moe_intermediate_size=f["moe.expert_ffn"],
            shared_expert_intermediate_size=f["moe.shared_expert_ffn"],
        )
    else:
        text["intermediate_size"] = f["ffn"]
    vision = {"model_type": "qwen3_5_moe_vision" if moe else "qwen3_5_vision"}
    for ours, theirs in (
        ("depth", "depth"),
        ("hidden_size", "hidden_size"),
        ("ffn", "intermediate_size"),
        ("num_heads", "num_heads"),
        ("patch_size", "patch_size"),
        ("temporal_patch_size", "temporal_patch_size"),
        ("spatial_merge_size", "spatial_merge_size"),
        ("num_position_embeddings", "num_position_embeddings"),
    ):
        if f"vision.{ours}" in f:
            vision[theirs] = f[f"vision.{ours}"]
    vision["out_hidden_size"] = f["hidden_size"]
    return {
        "model_type": "qwen3_5_moe" if moe else "qwen3_5",
        "architectures": ["Qwen3_5MoeForConditionalGeneration" if moe else "Qwen3_5ForConditionalGeneration"],
        "tie_word_embeddings": f["tied_embeddings"],
        "text_config": text,
        "vision_config": vision,
    }


BUILDERS = {"qwen35-9b": qwen35, "qwen35-35b-a3b": qwen35, "qwen35-vl-35b-a3b": qwen35}


def write(hf_home: Path, revisions=()) -> list[str]:
    """Writes every config (also under each of `revisions`, the commits recipes pin: a pinned
    revision is looked up by its snapshot directory, file_download.py's commit-hash path); returns
    the repo ids written."""
    written = []
    for name, build in BUILDERS.items():
        config = build(name)
        for repo in models.entry_values(name)["hf_ids"]:
            root = hf_home / "hub" / ("models--" + repo.replace("/", "--"))
            for commit in (SNAPSHOT, *revisions):
                snap = root / "snapshots" / commit
                snap.mkdir(parents=True, exist_ok=True)
                (snap / "config.json").write_text(json.dumps(config, indent=2) + "\n")
            (root / "refs").mkdir(exist_ok=True)
            (root / "refs" / "main").write_text(SNAPSHOT)
            written.append(repo)
    return written


if __name__ == "__main__":
    print("\n".join(write(Path(sys.argv[1]))))
