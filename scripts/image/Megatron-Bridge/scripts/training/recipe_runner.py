"""Stand-in: Megatron-Bridge 067f987 scripts/training/recipe_runner.py, the library-recipe path:

- find_library_recipe (:199-225): an attribute of megatron.bridge.recipes with the exported function
  name, else the same name in each `megatron.bridge.recipes.<family>.h100` module;
- load_recipe (:240-284): not found -> AttributeError("Recipe '<name>' not found in
  megatron.bridge.recipes or megatron.bridge.perf_recipes."); the function is called with only the
  optional kwargs it accepts (_recipe_kwargs_for_signature, :104-145);
- apply_cli_overrides (:314-318): omegaconf_utils.process_config_with_overrides;
- the syncs run_recipe.py applies (sync_model_dataset_sequence_length :468-485,
  sync_finetuning_cp_invariants :354-378), apply_runtime_environment (:329-335), load_forward_step
  (:287-311), run_config (:500-548: dry-run writes the config; else the train function).
RECIPE_ENV_BOOTSTRAP_MARKER is upstream's (:95), used only by benchmark recipes (none here)."""
from __future__ import annotations

import importlib
import inspect
import logging
import os
import pkgutil

from megatron.bridge.training.config import ConfigContainer, apply_environment_variables

logger = logging.getLogger(__name__)
RECIPE_ENV_BOOTSTRAP_MARKER = "_MB_TRAINING_RECIPE_ENV_BOOTSTRAPPED"
STEP_FUNCTIONS = {
    "gpt_step": ("megatron.bridge.training.gpt_step", "forward_step"),
    "llm_step": ("megatron.bridge.training.gpt_step", "forward_step"),
    "vlm_step": ("megatron.bridge.training.vlm_step", "forward_step"),
    "qwen3_vl_step": ("megatron.bridge.training.vlm_step", "forward_step"),
}
TRAIN_FUNCTIONS = {
    "pretrain": ("megatron.bridge.training.pretrain", "pretrain"),
    "finetune": ("megatron.bridge.training.finetune", "finetune"),
}
ERR_UNKNOWN_STEP = "Unknown step type: {step_type}. Choose from: {choices}"


def _recipe_kwargs_for_signature(config_builder, *, peft_scheme, seq_length=None) -> dict:
    params = inspect.signature(config_builder).parameters
    has_var_keyword = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs: dict = {}
    if peft_scheme is not None:
        if "peft_scheme" in params:
            kwargs["peft_scheme"] = peft_scheme
        elif "peft" in params or has_var_keyword:
            kwargs["peft"] = peft_scheme
        elif peft_scheme.lower() != "lora":
            raise ValueError(f"Recipe '{config_builder.__name__}' does not accept a configurable PEFT scheme; "
                             f"--mode {peft_scheme} is unsupported.")
    if ("seq_length" in params or has_var_keyword) and seq_length is not None:
        kwargs["seq_length"] = seq_length
    return kwargs


def find_library_recipe(recipe_name: str):
    import megatron.bridge.recipes as recipes

    fn = getattr(recipes, recipe_name, None)
    if callable(fn):
        return fn
    for info in pkgutil.iter_modules(recipes.__path__):
        if not info.ispkg or info.name.startswith("_") or info.name == "utils":
            continue
        name = f"{recipes.__name__}.{info.name}.h100"
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        fn = getattr(module, recipe_name, None)
        if callable(fn):
            return fn
    return None


def load_recipe(recipe_name: str, peft_scheme: str | None = None, seq_length: int | None = None) -> ConfigContainer:
    config_builder = find_library_recipe(recipe_name)
    if config_builder is None:
        raise AttributeError(
            f"Recipe '{recipe_name}' not found in megatron.bridge.recipes or megatron.bridge.perf_recipes."
        )
    logger.info("Loading library recipe '%s' from megatron.bridge.recipes", recipe_name)
    return config_builder(**_recipe_kwargs_for_signature(config_builder, peft_scheme=peft_scheme,
                                                         seq_length=seq_length))


def load_forward_step(step_type: str, mode: str | None = None):
    key = step_type.lower()
    if key not in STEP_FUNCTIONS:
        raise ValueError(ERR_UNKNOWN_STEP.format(step_type=step_type, choices=", ".join(STEP_FUNCTIONS)))
    module_name, attribute = STEP_FUNCTIONS[key]
    return getattr(importlib.import_module(module_name), attribute)


def apply_cli_overrides(config: ConfigContainer, cli_overrides: list[str] | None) -> ConfigContainer:
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    return process_config_with_overrides(config, cli_overrides=cli_overrides or None)


def apply_runtime_environment(config: ConfigContainer) -> ConfigContainer:
    apply_environment_variables(config)
    return config


def apply_determinism(config: ConfigContainer, *, deterministic: bool) -> ConfigContainer:
    return config


def sync_model_pipeline_layout(config: ConfigContainer, *, cli_overrides: list[str]) -> ConfigContainer:
    return config


def sync_offline_packing_alignment(config: ConfigContainer) -> ConfigContainer:
    return config


def sync_finetuning_cp_invariants(config: ConfigContainer, *, mode: str) -> ConfigContainer:
    if mode != "finetune":
        return config
    if getattr(config.model, "context_parallel_size", 1) > 1 and hasattr(config.dataset, "task_encoder"):
        config.model.calculate_per_token_loss = True
        config.ddp.average_in_collective = False
    return config


def sync_model_dataset_sequence_length(config: ConfigContainer) -> ConfigContainer:
    seq = getattr(config.dataset, "seq_length", None)
    if seq is not None and config.model.seq_length != seq:
        config.model.seq_length = seq
    return config


def run_config(*, config: ConfigContainer, mode: str, step_func, dryrun: bool = False,
               save_config_filepath: str | None = None, dryrun_world_size: int | None = None,
               dump_environment: bool = False) -> bool:
    if dryrun:
        from omegaconf import OmegaConf

        from megatron.bridge.training.utils.omegaconf_utils import create_omegaconf_dict_config

        path = save_config_filepath or config.logger.save_config_filepath or "ConfigContainer.yaml"
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        OmegaConf.save(create_omegaconf_dict_config(config)[0], path)
        return True
    module_name, attribute = TRAIN_FUNCTIONS[mode]
    getattr(importlib.import_module(module_name), attribute)(config=config, forward_step_func=step_func)
    return False
