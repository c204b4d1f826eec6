"""Stand-in: megatron.bridge.training.finetune.finetune (recipe_runner.py TRAIN_FUNCTIONS["finetune"])."""
from megatron.bridge.training import probe


def finetune(config, forward_step_func, **kwargs) -> None:
    probe.run(config, "finetune")
