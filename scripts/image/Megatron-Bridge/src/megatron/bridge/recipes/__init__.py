"""Stand-in: the library recipes, exported by function name from megatron.bridge.recipes, where
run_recipe.py's recipe lookup finds them (scripts/training/recipe_runner.py find_library_recipe:
`hasattr(megatron.bridge.recipes, name)`, then the `<family>.h100` alias modules).

Each returns a complete ConfigContainer, as upstream recipe functions do (e.g.
recipes/qwen_vl/h100/qwen35_vl.py). Only the stand-in's own recipes exist: a recipe name the image
does not export (the seed's qwen35_vl_... GB200 recipes, for instance) is not found."""
from megatron.bridge.recipes.standin import probe_config, tiny_vl_sft_config  # noqa: F401
