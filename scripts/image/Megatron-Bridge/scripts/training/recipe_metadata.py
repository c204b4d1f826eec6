"""Stand-in: Megatron-Bridge 067f987 scripts/training/recipe_metadata.py, the part run_recipe.py uses
for library recipes: infer_recipe_mode (:214-225), recipe_task (:209-211), recipe_step (:182-199; the
stand-in's prefix table has qwen-VL and tiny_vl recipes on vlm_step). The stand-in image has no
benchmark (perf) recipes: resolved_benchmark_recipe_metadata is always None."""
from __future__ import annotations

QWEN_VL_RECIPE_PREFIXES = ("qwen3_vl_", "qwen35_vl_")
RECIPE_FORWARD_STEP_PREFIXES = (("qwen3_vl_", "qwen3_vl_step"), ("qwen35_vl_", "qwen3_vl_step"), ("tiny_vl_", "vlm_step"))
BENCHMARK_RECIPE_PRECEDENCE_COLLISIONS: frozenset = frozenset()
LIBRARY_RECIPE_PRECEDENCE_COLLISIONS: frozenset = frozenset()


def recipe_task(mode: str) -> str:
    return "peft" if mode in {"lora", "dora"} else mode


def infer_recipe_mode(recipe_name: str) -> str | None:
    normalized_name = f"_{recipe_name.lower().strip('_')}_"
    if "_pretrain_" in normalized_name:
        return "pretrain"
    if "_sft_" in normalized_name or "_finetune_" in normalized_name:
        return "sft"
    if "_dora_" in normalized_name:
        return "dora"
    if "_peft_" in normalized_name or "_lora_" in normalized_name:
        return "lora"
    return None


def recipe_step(recipe_name: str, *, native_energon_packing: bool = False) -> str:
    if native_energon_packing and recipe_name.startswith(QWEN_VL_RECIPE_PREFIXES):
        return "vlm_step"
    for prefix, step_name in RECIPE_FORWARD_STEP_PREFIXES:
        if recipe_name.startswith(prefix):
            return step_name
    return "llm_step"


def resolved_benchmark_recipe_metadata(recipe_name: str):
    return None


def benchmark_recipe_family(recipe_name: str) -> str:
    raise ValueError(recipe_name)
