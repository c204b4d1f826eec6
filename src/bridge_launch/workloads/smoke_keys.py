"""The config keys the smoke workload reads (smoke.py): the Megatron-Bridge keys it models and its
own `smoke.*` knobs. smoke.py ignores any other key, saying so; resolve accepts its own knobs for a
smoke job as keys of the job's schema, and refuses any other key that the schema lacks."""

KNOWN_KEYS = frozenset(
    {
        "train.train_iters",
        "train.micro_batch_size",
        "train.global_batch_size",
        "train.exit_signal_handler",
        "train.exit_signal",
        "train.exit_signal_handler_for_dataloader",
        "checkpoint.most_recent_k",
        "train.exit_interval",
        "train.exit_duration_in_mins",
        "train.eval_interval",
        "train.eval_iters",
        "validation.eval_interval",
        "validation.eval_iters",
        "dataset.num_workers",
        "dataset.seq_length",
        "model.seq_length",
        "model.num_layers",
        "model.hidden_size",
        "model.num_attention_heads",
        "model.ffn_hidden_size",
        "model.vocab_size",
        "tokenizer.vocab_size",
        "optimizer.lr",
        "optimizer.weight_decay",
        "optimizer.clip_grad",
        "scheduler.lr_warmup_iters",
        "rng.seed",
        "checkpoint.save",
        "checkpoint.load",
        "checkpoint.save_interval",
        "checkpoint.ckpt_step",
        "checkpoint.ckpt_format",
        "checkpoint.async_save",
        "checkpoint.non_persistent_save_interval",
        "checkpoint.non_persistent_ckpt_type",
        "checkpoint.non_persistent_global_ckpt_dir",
        "logger.log_interval",
        "smoke.busbw_sizes",
        "smoke.busbw_iters",
        "smoke.step_sleep",
        "smoke.save_sleep",
        "smoke.fail_at_step",
        "smoke.fail_rank",
        "smoke.fail_node",
        "smoke.fail_message",
    }
)


OWN_KEYS = frozenset(k for k in KNOWN_KEYS if k.startswith("smoke."))
