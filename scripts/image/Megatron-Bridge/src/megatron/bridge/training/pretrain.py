"""Stand-in: megatron.bridge.training.pretrain.pretrain (recipe_runner.py TRAIN_FUNCTIONS["pretrain"])."""
from megatron.bridge.training import probe


def pretrain(config, forward_step_func, **kwargs) -> None:
    probe.run(config, "pretrain")
