"""Megatron-Bridge recipe functions bridge-launch ships (for recipes whose function no Megatron-Bridge
revision has). Each module runs inside the job, staged beside workload/bridge_recipe_entry.py, which
imports it and exposes its functions as attributes of megatron.bridge.recipes before it runs the
image's own scripts/training/run_recipe.py. They import megatron.bridge, never bridge_launch."""
