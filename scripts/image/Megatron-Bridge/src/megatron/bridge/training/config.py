"""Stand-in: Megatron-Bridge's ConfigContainer, a subset of its sections and fields, and the checks of
its validate() that concern them.

Sources (Megatron-Bridge 067f987, src/megatron/bridge/...; megatron-core 2a75ac12, megatron/...):
- the sections and their classes: training/config.py:962-1014 (ConfigContainer), with the base fields of
  megatron/training/config/training_config.py (TrainingConfig :8-107, ValidationConfig :112-156,
  SchedulerConfig :165-239, LoggerConfig :244-387, CheckpointConfig :392-480), same names and defaults;
- TrainingConfig.finalize: training/config.py:467-494; CheckpointConfig.finalize: :582-619
  (a pretrained_checkpoint that does not exist fails here: "Pretrained checkpoint ... does not exist");
- EnergonDatasetConfig and QwenVLEnergonTaskEncoderConfig: data/builders/energon.py:46-83, 141-228;
  DataloaderConfig: data/base.py:28-70;
- ConfigContainer.validate: training/config.py:1255-1660 (num_epochs, dataset/model/logger/train/
  scheduler/checkpoint finalize, data_parallel_size from the world size, eval batch defaults and
  divisibility, the Energon micro-batch rule, FSDP exclusivity, the training/scheduler cross-check,
  CP rules for finetuning datasets, model/dataset sequence length);
- runtime_config_update: training/config.py:1992-2032 (environment, mixed precision, DP size, then
  validate()); apply_environment_variables: :1971-1990;
- the model: a GPT provider with megatron-core TransformerConfig's head/TP rule
  (megatron/core/transformer/transformer_config.py: num_attention_heads must be a multiple of
  tensor_model_parallel_size).
Everything else the real classes hold is absent: an override of a field that is not here fails as it
would against an image whose Megatron-Bridge lacks the field.
"""
from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field, fields

from megatron.bridge.utils.common_utils import get_world_size_safe


@dataclass(kw_only=True)
class RNGConfig:
    seed: int = 1234
    te_rng_tracker: bool = False
    data_parallel_random_init: bool = False


@dataclass(kw_only=True)
class TrainingConfig:
    micro_batch_size: int | None = None
    global_batch_size: int | None = None
    rampup_batch_size: list | None = None
    empty_unused_memory_level: int = 0
    train_iters: int | None = None
    train_samples: int | None = None
    exit_interval: int | None = None
    exit_duration_in_mins: int | None = None
    exit_signal_handler: bool = False
    exit_signal: signal.Signals = signal.SIGTERM
    exit_signal_handler_for_dataloader: bool = False
    manual_gc: bool = False
    manual_gc_interval: int = 0
    manual_gc_eval: bool = True
    num_epochs: float | None = None
    eval_iters: int | None = None
    eval_interval: int | None = None
    skip_train: bool | None = None

    def finalize(self) -> None:
        modes = sum((self.train_iters is not None, self.train_samples is not None, self.num_epochs is not None))
        assert modes > 0, "One of train_iters, train_samples, or num_epochs must be provided"
        assert modes == 1, "Cannot specify more than one of train_iters, train_samples, or num_epochs"
        if self.train_samples is not None:
            assert self.train_samples > 0, "train_samples must be positive"
            assert self.global_batch_size is not None, "global_batch_size must be set when using train_samples"
            self.train_iters = self.train_samples // self.global_batch_size


@dataclass(kw_only=True)
class ValidationConfig:
    eval_iters: int | None = 100
    eval_interval: int | None = None
    eval_global_batch_size: int | None = None
    eval_micro_batch_size: int | None = None
    skip_train: bool = False


@dataclass(kw_only=True)
class SchedulerConfig:
    lr_decay_style: str = "linear"
    lr_decay_iters: int | None = None
    lr_decay_samples: int | None = None
    lr_warmup_fraction: float | None = None
    lr_warmup_iters: int = 0
    lr_warmup_samples: int = 0
    lr_warmup_init: float = 0.0
    start_weight_decay: float | None = None
    end_weight_decay: float | None = None
    weight_decay_incr_style: str = "constant"
    lr_decay_steps: int | None = field(init=False, default=None)
    lr_warmup_steps: int | None = field(init=False, default=None)

    def finalize(self) -> None:
        pass


@dataclass(kw_only=True)
class LoggerConfig:
    log_interval: int = 100
    log_throughput: bool = False
    tensorboard_dir: str | None = None
    wandb_project: str | None = None
    wandb_exp_name: str | None = None
    wandb_save_dir: str | None = None
    wandb_entity: str | None = None
    save_config_filepath: str | None = None

    def finalize(self) -> None:
        pass


@dataclass(kw_only=True)
class CheckpointConfig:
    save: str | None = None
    save_interval: int | None = None
    most_recent_k: int | None = -1
    save_optim: bool = True
    save_rng: bool = True
    load: str | None = None
    load_optim: bool = True
    load_main_params_from_ckpt: bool = False
    load_rng: bool = True
    non_persistent_save_interval: int | None = None
    non_persistent_ckpt_type: str | None = None
    non_persistent_global_ckpt_dir: str | None = None
    finetune: bool = False
    pretrained_checkpoint: str | None = None
    ckpt_step: int | None = None
    ckpt_format: str = "torch_dist"
    async_save: bool = False
    use_persistent_ckpt_worker: bool = True

    def finalize(self) -> None:
        if self.pretrained_checkpoint is not None:
            assert os.path.exists(self.pretrained_checkpoint), (
                f"Pretrained checkpoint {self.pretrained_checkpoint} does not exist"
            )
        if self.load_main_params_from_ckpt:
            assert not self.load_optim, "load_main_params_from_ckpt must be used with load_optim=False"
        if self.async_save:
            assert self.save is not None, "async_save is enabled, but save is not set. Set save to a valid path."
            assert self.use_persistent_ckpt_worker, "async_save requires use_persistent_ckpt_worker=True."
        if self.ckpt_step is not None and self.load is None:
            raise ValueError(
                f"ckpt_step={self.ckpt_step} specified but checkpoint.load is None. "
                f"Please set checkpoint.load to the base checkpoint directory."
            )


@dataclass(kw_only=True)
class OptimizerConfig:
    optimizer: str = "adam"
    lr: float | None = None
    min_lr: float | None = None
    weight_decay: float = 0.01
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-08
    clip_grad: float = 1.0
    use_distributed_optimizer: bool = False
    bf16: bool = False
    fp16: bool = False


@dataclass(kw_only=True)
class DistributedDataParallelConfig:
    grad_reduce_in_fp32: bool = False
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    average_in_collective: bool = False
    use_distributed_optimizer: bool = False
    use_megatron_fsdp: bool = False


@dataclass(kw_only=True)
class DistributedInitConfig:
    distributed_backend: str = "nccl"
    distributed_timeout_minutes: int = 10
    use_megatron_fsdp: bool = False
    use_torch_fsdp2: bool = False
    eval_context_parallel_size: int | None = None


@dataclass(kw_only=True)
class TokenizerConfig:
    tokenizer_type: str | None = None
    tokenizer_model: str | None = None
    vocab_size: int | None = None


@dataclass(kw_only=True)
class GPTModelProvider:
    """The model section: a few of the fields a GPT provider has (megatron-core TransformerConfig and
    Bridge's GPTModelProvider), with TransformerConfig's heads/TP rule."""

    num_layers: int = 2
    hidden_size: int = 64
    ffn_hidden_size: int | None = None
    num_attention_heads: int = 4
    seq_length: int = 64
    vocab_size: int | None = None
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    virtual_pipeline_model_parallel_size: int | None = None
    context_parallel_size: int = 1
    expert_model_parallel_size: int = 1
    expert_tensor_parallel_size: int | None = None
    sequence_parallel: bool = False
    recompute_granularity: str | None = None
    recompute_modules: list | None = None
    calculate_per_token_loss: bool = False
    use_te_rng_tracker: bool = False
    cuda_graph_impl: str = "none"
    hf_model_id: str | None = None
    hf_model_revision: str | None = None

    def finalize(self) -> None:
        if self.num_attention_heads % self.tensor_model_parallel_size != 0:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"tensor_model_parallel_size ({self.tensor_model_parallel_size})."
            )


@dataclass(kw_only=True)
class DataloaderConfig:
    dataloader_type: str | None = None
    num_workers: int = 2
    data_sharding: bool = True
    pin_memory: bool = True
    drop_last: bool = True
    persistent_workers: bool = True
    trust_remote_code: bool | None = None

    def finalize(self) -> None:
        if self.num_workers == 0 and self.persistent_workers:
            self.persistent_workers = False


@dataclass(kw_only=True)
class MockGPTDatasetConfig(DataloaderConfig):
    seq_length: int = 64
    random_seed: int = 1234


@dataclass(kw_only=True)
class QwenVLEnergonTaskEncoderConfig:
    hf_processor_path: str
    hf_processor_revision: str | None = None
    temporal_patch_size: int = 2
    spatial_merge_size: int = 2
    patch_size: int = 14
    min_pixels: int = 200704
    max_pixels: int = 1003520
    max_num_images: int | None = 10
    max_num_frames: int | None = 60
    max_visual_tokens: int | None = 16384
    trust_remote_code: bool | None = None

    def validate(self) -> None:
        if not isinstance(self.hf_processor_path, str) or not self.hf_processor_path.strip():
            raise ValueError("hf_processor_path must be a non-empty string.")
        if self.hf_processor_revision is not None and (
            not isinstance(self.hf_processor_revision, str) or not self.hf_processor_revision.strip()
        ):
            raise ValueError("hf_processor_revision must be a non-empty string when set.")
        for name in ("temporal_patch_size", "spatial_merge_size", "patch_size", "min_pixels", "max_pixels"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be greater than 0.")
        for name in ("max_num_images", "max_num_frames", "max_visual_tokens"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be greater than 0 when set.")


@dataclass(kw_only=True)
class EnergonDatasetConfig(DataloaderConfig):
    path: str | None = None
    seq_length: int
    micro_batch_size: int
    task_encoder: QwenVLEnergonTaskEncoderConfig
    dataloader_type: str | None = "external"
    do_validation: bool = True
    do_test: bool = False
    shuffle_buffer_size: int = 100
    max_samples_per_sequence: int | None = None
    packing_buffer_size: int | None = None
    pad_to_max_length: bool = False
    pad_to_multiple_of: int = 128

    def validate(self) -> None:
        if not isinstance(self.path, str) or not self.path.strip():
            raise ValueError("EnergonDatasetConfig.path must be set to a non-empty dataset path.")
        if self.seq_length <= 0:
            raise ValueError("seq_length must be greater than 0.")
        if self.micro_batch_size <= 0:
            raise ValueError("micro_batch_size must be greater than 0.")
        if self.num_workers < 0:
            raise ValueError("num_workers must be greater than or equal to 0.")
        if self.shuffle_buffer_size <= 0:
            raise ValueError("shuffle_buffer_size must be greater than 0.")
        if self.packing_buffer_size is not None and self.packing_buffer_size <= 0:
            raise ValueError("packing_buffer_size must be greater than 0 when set.")
        if self.packing_buffer_size is not None and self.micro_batch_size != 1:
            raise ValueError("Energon native sequence packing requires micro_batch_size=1.")
        if self.do_test:
            raise ValueError("EnergonDatasetConfig does not support a distinct test split.")
        self.task_encoder.validate()

    def finalize(self) -> None:
        super().finalize()
        self.validate()


_FINETUNING_DATASETS = (EnergonDatasetConfig,)


@dataclass(kw_only=True)
class ConfigContainer:
    """Top-level container holding all configuration objects."""

    env_vars: dict = field(default_factory=dict)
    rng: RNGConfig = field(default_factory=RNGConfig)
    train: TrainingConfig
    model: GPTModelProvider
    optimizer: OptimizerConfig
    ddp: DistributedDataParallelConfig = field(default_factory=DistributedDataParallelConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    scheduler: SchedulerConfig
    dataset: MockGPTDatasetConfig | EnergonDatasetConfig
    logger: LoggerConfig
    tokenizer: TokenizerConfig
    checkpoint: CheckpointConfig
    dist: DistributedInitConfig = field(default_factory=DistributedInitConfig)
    mixed_precision: str | None = None

    def get_data_parallel_size(self, world_size: int) -> int:
        m = self.model
        total = m.tensor_model_parallel_size * m.pipeline_model_parallel_size * m.context_parallel_size
        assert world_size % total == 0, f"""
        world size ({world_size}) is not divisible by total_model_size ({m.tensor_model_parallel_size=} * {m.pipeline_model_parallel_size=} * {m.context_parallel_size=})
        """
        return world_size // total

    def set_data_parallel_size(self) -> None:
        self.data_parallel_size = self.get_data_parallel_size(get_world_size_safe())

    def validate(self) -> None:
        if self.train.num_epochs is not None:
            raise ValueError(
                "num_epochs is only supported for finite GPTSFTDatasetConfig datasets because other dataset "
                "providers may build a requested number of samples instead of exposing their true dataset size."
            )
        if hasattr(self.dataset, "finalize"):
            self.dataset.finalize()
        self.model.finalize()
        self.logger.finalize()
        self.train.finalize()
        self.scheduler.finalize()
        self.checkpoint.finalize()
        if self.rng.te_rng_tracker or self.model.use_te_rng_tracker:
            self.model.use_te_rng_tracker = self.rng.te_rng_tracker = True
        if getattr(self, "data_parallel_size", None) is None:
            self.data_parallel_size = self.get_data_parallel_size(get_world_size_safe())
        if self.validation.eval_global_batch_size is None:
            assert self.train.global_batch_size is not None, (
                "train.global_batch_size must be set when eval_global_batch_size is not explicitly configured"
            )
            self.validation.eval_global_batch_size = self.train.global_batch_size
        if self.validation.eval_micro_batch_size is None:
            assert self.train.micro_batch_size is not None, (
                "train.micro_batch_size must be set when eval_micro_batch_size is not explicitly configured"
            )
            self.validation.eval_micro_batch_size = self.train.micro_batch_size
        if (
            isinstance(self.dataset, EnergonDatasetConfig)
            and self.dataset.do_validation
            and self.dataset.micro_batch_size != self.validation.eval_micro_batch_size
        ):
            raise ValueError(
                "EnergonDatasetConfig.micro_batch_size must match validation.eval_micro_batch_size "
                f"({self.dataset.micro_batch_size} != {self.validation.eval_micro_batch_size})."
            )
        eval_dp_product = self.validation.eval_micro_batch_size * self.data_parallel_size
        assert self.validation.eval_global_batch_size % eval_dp_product == 0, (
            f"eval_global_batch_size ({self.validation.eval_global_batch_size}) must be divisible by "
            f"eval_micro_batch_size * eval_data_parallel_size ({self.validation.eval_micro_batch_size} * "
            f"{self.data_parallel_size} = {eval_dp_product})"
        )
        if self.dist.use_megatron_fsdp and self.dist.use_torch_fsdp2:
            raise ValueError("use_megatron_fsdp and use_torch_fsdp2 are mutually exclusive.")
        if self.train.train_samples is None:
            assert self.scheduler.lr_decay_samples is None, (
                "Use lr_decay_iters for iteration-based training, not lr_decay_samples"
            )
            assert self.scheduler.lr_warmup_samples == 0, (
                "Use lr_warmup_iters for iteration-based training, not lr_warmup_samples"
            )
        if self.model.context_parallel_size > 1:
            assert self.model.seq_length % (self.model.context_parallel_size * 2) == 0, (
                "Sequence length must be divisible by 2 * context parallel size if context parallel is used."
            )
            if isinstance(self.dataset, _FINETUNING_DATASETS):
                assert self.model.calculate_per_token_loss, (
                    "When finetuning with CP>1, calculate_per_token_loss must be True"
                )
                assert not self.ddp.average_in_collective, (
                    "When finetuning with CP>1, average_in_collective must be False"
                )
        if isinstance(self.dataset, EnergonDatasetConfig):
            assert self.model.seq_length == self.dataset.seq_length, (
                f"Please ensure sequence length configuration in model config and "
                f"dataset config match.\nSequence length in model config: {self.model.seq_length}, "
                f"Sequence length in dataset config: {self.dataset.seq_length}"
            )
        for f in fields(ValidationConfig):
            value = getattr(self.train, f.name, None)
            if value is not None:
                setattr(self.validation, f.name, value)


def apply_environment_variables(cfg: ConfigContainer) -> None:
    for name, value in cfg.env_vars.items():
        if not isinstance(name, str) or not name:
            raise ValueError("Environment variable names must be non-empty strings.")
        if not isinstance(value, (str, int, float, bool)):
            raise TypeError(f"Environment variable {name!r} must have a scalar value, got {type(value).__name__}.")
        os.environ.setdefault(name, str(value))


_MIXED_PRECISION = ("bf16_mixed", "fp16_mixed", "bf16_with_mxfp8_mixed", "bf16_with_fp8_delayed_scaling_mixed")


def runtime_config_update(cfg: ConfigContainer) -> None:
    apply_environment_variables(cfg)
    if cfg.mixed_precision is not None and cfg.mixed_precision not in _MIXED_PRECISION:
        raise ValueError(f"Unknown mixed precision recipe {cfg.mixed_precision!r}")  # get_mixed_precision_config
    cfg.set_data_parallel_size()
    cfg.validate()
