"""The stand-in image's recipes (see recipes/__init__.py)."""
from megatron.bridge.training.config import (
    CheckpointConfig,
    ConfigContainer,
    EnergonDatasetConfig,
    GPTModelProvider,
    LoggerConfig,
    MockGPTDatasetConfig,
    OptimizerConfig,
    QwenVLEnergonTaskEncoderConfig,
    SchedulerConfig,
    TokenizerConfig,
    TrainingConfig,
)


def probe_config() -> ConfigContainer:
    """A pretraining config on mock data; the stand-in's training step reports what it sees."""
    return ConfigContainer(
        train=TrainingConfig(train_iters=10, global_batch_size=8, micro_batch_size=1),
        model=GPTModelProvider(),
        optimizer=OptimizerConfig(lr=3e-4),
        scheduler=SchedulerConfig(),
        dataset=MockGPTDatasetConfig(seq_length=64),
        logger=LoggerConfig(),
        tokenizer=TokenizerConfig(),
        checkpoint=CheckpointConfig(),
    )


def tiny_vl_sft_config(seq_length: int = 4096) -> ConfigContainer:
    """A small Qwen-VL-style SFT config on an Energon dataset: dataset.path and
    checkpoint.pretrained_checkpoint are left for the command line, as the seed's VL recipes leave
    them (upstream recipes/qwen_vl/h100/qwen35_vl.py _qwen35_vl_35b_a3b_sft_base_config)."""
    return ConfigContainer(
        train=TrainingConfig(train_iters=100, global_batch_size=4, micro_batch_size=1),
        model=GPTModelProvider(seq_length=seq_length, hf_model_id="bridge-launch/tiny-vl"),
        optimizer=OptimizerConfig(lr=2e-5, min_lr=2e-6, use_distributed_optimizer=True),
        scheduler=SchedulerConfig(lr_decay_style="cosine"),
        dataset=EnergonDatasetConfig(
            seq_length=seq_length, micro_batch_size=1, num_workers=1,
            task_encoder=QwenVLEnergonTaskEncoderConfig(hf_processor_path="bridge-launch/tiny-vl"),
        ),
        logger=LoggerConfig(log_interval=1),
        tokenizer=TokenizerConfig(),
        checkpoint=CheckpointConfig(save_interval=50),
    )
