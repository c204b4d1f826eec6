#!/usr/bin/env python3
"""Stand-in for Megatron-Bridge's scripts/training/run_recipe.py in bridge-launch's local test image.

Follows Megatron-Bridge 067f987 scripts/training/run_recipe.py for library recipes (its benchmark
branch is left out: the stand-in has no perf recipes):
- parse_args (:395-402): --model/--recipe, --mode, --step-func, --dataset, the common convenience
  options converted to overrides (COMMON_OVERRIDE_FIELDS :131-149, _common_config_overrides
  :259-268), trailing KEY=VALUE overrides (_collect_overrides :247-256: an argument starting with "-"
  or without "=" is an error), the mode inferred from the recipe name when omitted;
- main (:405-476): chdir to the repository, load the recipe by name (_load_selected_recipe :360-366,
  with _validate_recipe_mode :278-282), apply the dataset preset, determinism, the CLI overrides
  (recipe_runner.apply_cli_overrides), the pipeline-layout sync, the runtime environment, the
  finetuning CP invariants, offline packing, model/dataset sequence length, then the forward step
  and run_config, which trains (here: reports, megatron.bridge.training.probe).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

START_CWD = os.getcwd()  # the stand-in's probe reports it: main() moves to the repository, as upstream's does
SCRIPT_DIR = Path(__file__).resolve().parent
REPO_ROOT = SCRIPT_DIR.parents[1]
if str(SCRIPT_DIR) not in sys.path:
    sys.path.insert(0, str(SCRIPT_DIR))

from recipe_metadata import infer_recipe_mode, recipe_step, recipe_task  # noqa: E402
from recipe_runner import (  # noqa: E402
    apply_cli_overrides,
    apply_determinism,
    apply_runtime_environment,
    load_forward_step,
    load_recipe,
    run_config,
    sync_finetuning_cp_invariants,
    sync_model_dataset_sequence_length,
    sync_model_pipeline_layout,
    sync_offline_packing_alignment,
)

from megatron.bridge.recipes.utils.dataset_utils import DATASET_PRESETS, build_dataset_config  # noqa: E402

COMMON_OVERRIDE_FIELDS = (
    ("max_steps", "train.train_iters"),
    ("global_batch_size", "train.global_batch_size"),
    ("micro_batch_size", "train.micro_batch_size"),
    ("seq_length", "dataset.seq_length"),
    ("tensor_model_parallel_size", "model.tensor_model_parallel_size"),
    ("pipeline_model_parallel_size", "model.pipeline_model_parallel_size"),
    ("context_parallel_size", "model.context_parallel_size"),
    ("lr", "optimizer.lr"),
    ("pretrained_checkpoint", "checkpoint.pretrained_checkpoint"),
    ("save_dir", "checkpoint.save"),
    ("load_dir", "checkpoint.load"),
)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, allow_abbrev=False)
    selection = parser.add_mutually_exclusive_group(required=True)
    selection.add_argument("--model")
    selection.add_argument("--recipe")
    parser.add_argument("--mode", choices=["pretrain", "sft", "lora", "dora"])
    parser.add_argument("--step-func", "--step_func", dest="step_func")
    parser.add_argument("--dataset", choices=sorted(DATASET_PRESETS))
    parser.add_argument("-ms", "--max_steps", type=int)
    parser.add_argument("-gb", "--global_batch_size", type=int)
    parser.add_argument("-mb", "--micro_batch_size", type=int)
    parser.add_argument("-sl", "--seq_length", type=int)
    parser.add_argument("-tp", "--tensor_model_parallel_size", type=int)
    parser.add_argument("-pp", "--pipeline_model_parallel_size", type=int)
    parser.add_argument("-cp", "--context_parallel_size", type=int)
    parser.add_argument("--lr", type=float)
    parser.add_argument("--pretrained_checkpoint")
    parser.add_argument("--save_dir")
    parser.add_argument("--load_dir")
    parser.add_argument("--dry-run", "--dry_run", action="store_true", dest="dryrun")
    parser.add_argument("--deterministic", action="store_true")
    parser.add_argument("--dump-env", "--dump_env", action="store_true", dest="dump_env")
    return parser


def _collect_overrides(parser, values):
    overrides = []
    for value in values:
        if value.startswith("-"):
            parser.error(f"Unknown option: {value}")
        if "=" not in value:
            parser.error(f"Expected override in KEY=VALUE form, got {value!r}")
        overrides.append(value)
    return overrides


def _common_config_overrides(args) -> list[str]:
    out = []
    for name, key in COMMON_OVERRIDE_FIELDS:
        value = getattr(args, name)
        if value is not None:
            out.append(f"{key}={json.dumps(value) if isinstance(value, str) else value}")
    return out


def _train_mode(mode: str) -> str:
    return "pretrain" if mode == "pretrain" else "finetune"


def _infer_mode(args) -> None:
    if args.mode is None and args.recipe:
        args.mode = infer_recipe_mode(args.recipe)
    if args.mode is None:
        raise ValueError("Unable to infer training mode; pass --mode or use a conventional --recipe name.")


def _validate_recipe_mode(recipe_name: str, mode: str) -> None:
    recipe_mode = infer_recipe_mode(recipe_name)
    if recipe_mode is not None and recipe_task(recipe_mode) != recipe_task(mode):
        raise ValueError(f"Mode '{mode}' is incompatible with recipe '{recipe_name}'.")


def _selected_recipe_name(args) -> str:
    return args.recipe or f"{args.model}_{recipe_task(args.mode)}_config"


def _load_selected_recipe(args):
    peft_scheme = args.mode if args.mode in {"lora", "dora"} else None
    recipe_name = _selected_recipe_name(args)
    if args.recipe:
        _validate_recipe_mode(recipe_name, args.mode)
    return load_recipe(recipe_name, peft_scheme=peft_scheme)


def parse_args(argv=None):
    parser = _build_parser()
    args, unknown = parser.parse_known_args(argv)
    cli_overrides = [*_common_config_overrides(args), *_collect_overrides(parser, unknown)]
    _infer_mode(args)
    return args, cli_overrides


def main(argv=None) -> None:
    os.chdir(REPO_ROOT)
    logging.basicConfig(level=logging.INFO)
    args, cli_overrides = parse_args(argv)
    recipe_name = _selected_recipe_name(args)
    recipe = _load_selected_recipe(args)
    if args.dataset is not None:
        recipe.dataset = build_dataset_config(recipe, args.dataset)
    recipe = apply_determinism(recipe, deterministic=args.deterministic)
    recipe = apply_cli_overrides(recipe, cli_overrides)
    recipe = sync_model_pipeline_layout(recipe, cli_overrides=cli_overrides)
    configuration_mode = _train_mode(args.mode)
    recipe = apply_runtime_environment(recipe)
    recipe = sync_finetuning_cp_invariants(recipe, mode=configuration_mode)
    recipe = sync_offline_packing_alignment(recipe)
    recipe = sync_model_dataset_sequence_length(recipe)
    native_energon_packing = getattr(recipe.dataset, "packing_buffer_size", None) is not None
    step = load_forward_step(args.step_func or recipe_step(recipe_name, native_energon_packing=native_energon_packing),
                             mode=configuration_mode)
    run_config(config=recipe, mode=configuration_mode, step_func=step, dryrun=args.dryrun,
               dump_environment=args.dump_env)


if __name__ == "__main__":
    main()
