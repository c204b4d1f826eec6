"""Megatron-Bridge's trainer protocol: the facts about the real trainer that bridge-launch relies on.

One source of truth. The smoke workload (the trainer's stand-in) writes its checkpoints and logs
by these definitions; the launcher's checkpoint rule (the --until-done chain), its log reader and
its failure reasons read by them. Every fact names its source at the pinned commits:

- MB: Megatron-Bridge 067f987df03b8355b03192d88d70f1709fedf51a (paths under src/megatron/bridge/)
- MC: Megatron-LM / megatron-core 2a75ac12c54ba6a42b34024756820bf819a2e25f (the commit MB's
  3rdparty/Megatron-LM submodule pins; paths under megatron/)
- T:  torch 2.13.0 (paths under torch/)

Standard library only: this file runs inside the job (copied next to the smoke workload) and is
imported by the launcher on its fast paths.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from datetime import datetime

TORCH_VERSION = "2.13.0"

# The log patterns are compiled on first use: the launcher imports this module for its constants
# on every submit and --dry-run, which read no log, and compiling some 30 patterns cost more than
# the rest of the module (issue 36). Each is declared (NAME: re.Pattern[str]) and registered with
# _later("NAME", pattern); the module's __getattr__ (PEP 562) compiles it the first time P.NAME or
# `from trainer_protocol import NAME` asks, and keeps it as a global (no cost on later uses).
_LATER: dict[str, Callable[[], object]] = {}


def _later(name: str, pattern: str, flags: int = 0) -> None:
    _LATER[name] = lambda: re.compile(pattern, flags)


def __getattr__(name: str):
    make = _LATER.get(name)
    if make is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = globals()[name] = make()
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LATER})


# ---------------------------------------------------------------------------------------------
# Checkpoint layout (persistent save, ckpt_format "torch_dist", the default: MC
# training/config/training_config.py:486)
# ---------------------------------------------------------------------------------------------
# MB training/utils/checkpoint_utils.py:32-34, 113-128, 143-154
TRAIN_STATE = "train_state.pt"
TRACKER_STATE = "latest_train_state.pt"  # f"{TRACKER_PREFIX}_{TRAIN_STATE_FILE}", TRACKER_PREFIX = "latest"
TRACKER = "latest_checkpointed_iteration.txt"  # "Megatron-LM tracker file for compatibility"
RUN_CONFIG = "run_config.yaml"
# MC core/dist_checkpointing/core.py:13 (CONFIG_FNAME) and :22-34 (CheckpointingConfig)
MCORE_METADATA = "metadata.json"
MCORE_METADATA_CONTENT = {"sharded_backend": "torch_dist", "sharded_backend_version": 1}
# T distributed/checkpoint/filesystem.py:758-790 (_FileSystemWriter.finish: pickled into
# ".metadata.tmp", fsync, rename): appears atomically, after every shard.
DIST_METADATA = ".metadata"
DIST_METADATA_TMP = ".metadata.tmp"
# MB training/checkpointing.py:153, 1157-1163: non-persistent "global" saves go to
# checkpoint.non_persistent_global_ckpt_dir, default <checkpoint.save>/non_persistent, with both
# trackers inside that directory (:1459-1461).
NON_PERSISTENT_SUBDIR = "non_persistent"


def iter_dir(iteration: int) -> str:
    """MB training/utils/checkpoint_utils.py:91-110: ``"iter_{:07d}".format(iteration)``. Rank 0
    creates it directly, with no temporary name and no rename (MB training/checkpointing.py:1307-1310)."""
    return f"iter_{iteration:07d}"


ITER_DIR_RE: re.Pattern[str]
_later("ITER_DIR_RE", r"^iter_(\d{7,})$")


def shard_name(rank: int, k: int = 0) -> str:
    """MC core/dist_checkpointing/strategies/filesystem_async.py:140-144 and :494-496:
    ``f"__{rank}_{k}.distcp"`` for global rank `rank`, k < storage_writers_per_rank (MB default 1,
    training/config.py:512). A rank holding nothing to write writes no file (:184-192), so the
    number of shards is a trainer setting, never part of the completeness rule."""
    return f"__{rank}_{k}.distcp"


# The order of writes of one synchronous persistent save (async saves run the same chain later,
# at finalisation: MC serialization.py:459-463, MB training/checkpointing.py:1518-1530):
SAVE_ORDER = (
    # 1. rank 0: mkdir iter_N (MB checkpointing.py:1307-1310)
    "iter_N/",
    # 2. every rank, in parallel, fsync'd: its shards (MC filesystem_async.py:404-424)
    "iter_N/__R_k.distcp",
    # 3. after a barrier, rank 0: .metadata via .metadata.tmp + rename (MC state_dict_saver.py:238-245)
    "iter_N/.metadata",
    # 4. rank 0: metadata.json, a plain write, then a barrier (MC serialization.py:439-457)
    "iter_N/metadata.json",
    # 5. after a barrier, rank 0 (MB checkpointing.py:1476-1500): the train state, its global copy,
    #    the tracker (str(step), no newline, not atomic), then run_config.yaml and tokenizer/ AFTER the tracker
    "iter_N/train_state.pt",
    "latest_train_state.pt",
    "latest_checkpointed_iteration.txt",
    "iter_N/run_config.yaml",
    "iter_N/tokenizer/",
)

# The files a complete checkpoint always has, whatever the parallel layout. common.pt is NOT one
# of them at the pinned megatron-core: MC serialization.py:431-437 stores the common state as a
# ShardedObject inside the shards, and save_common is deprecated (strategies/common.py:20-29);
# megatron-core <= 0.18.x still wrote it. run_config.yaml and tokenizer/ come after the tracker,
# so they cannot be required either.
COMPLETE_FILES = {
    "torch_dist": (DIST_METADATA, MCORE_METADATA, TRAIN_STATE),
    # MB checkpointing.py:255-287 (_get_checkpoint_format): only .metadata -> fsdp_dtensor
    "fsdp_dtensor": (DIST_METADATA, TRAIN_STATE),
}
# Formats whose payload markers we do not know: train_state.pt is written by rank 0 after the
# barrier that follows the payload (MB checkpointing.py:1449-1457), so it alone still proves it.
COMPLETE_FILES_OTHER = (TRAIN_STATE,)


def complete_files(ckpt_format: str | None) -> tuple:
    return COMPLETE_FILES.get(ckpt_format or "torch_dist", COMPLETE_FILES_OTHER)


# Load (MB training/checkpointing.py:3384-3443, _resolve_checkpoint_iteration):
#  - a load dir that is itself an iteration dir is loaded directly;
#  - checkpoint.ckpt_step=N loads <load>/iter_{N:07d}; the only check is that it exists (not that it
#    is complete); non-persistent checkpoints are then not considered (:3659); it applies on every
#    start while set;
#  - else the tracker: latest_train_state.pt first, else latest_checkpointed_iteration.txt;
#  - a global non-persistent checkpoint at least as new as the persistent one wins (:3677-3697);
#  - no tracker at all: the load is skipped silently and training starts at step 0 (MB
#    training/setup.py:155-191, checkpoint_utils.py:260-291);
#  - a tracker naming an incomplete iter_N fails (no metadata.json: NotImplementedError "Unknown
#    checkpoint format", :255-287, or MC validation.py:203-213); Bridge never falls back by itself.

# A pretrained checkpoint (checkpoint.pretrained_checkpoint, read by the canary): when checkpoint.load
# holds no checkpoint, Bridge loads from it with finetune=True (MB training/checkpointing.py:2365-2389);
# it must be an iteration directory, a directory with a tracker, or a HuggingFace model directory, else
# FileNotFoundError(NO_CHECKPOINT). CheckpointConfig.finalize already asserts that it exists (MB
# training/config.py:584-589).
NO_CHECKPOINT = "No checkpoint found in load directory or pretrained directory"
# MB training/utils/checkpoint_utils.py:155-160, 236-257: a directory holding any of these is itself an
# iteration directory and is loaded as it is (checkpointing.py:3384-3390)
ITERATION_DIR_MARKERS = (RUN_CONFIG, TRAIN_STATE, MCORE_METADATA, DIST_METADATA)
# MB checkpoint_utils.py:167-181, 184-233 (is_hf_checkpoint_dir): config.json plus a weight file
HF_CONFIG = "config.json"
HF_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
HF_WEIGHT_GLOBS = ("model-*-of-*.safetensors", "pytorch_model-*-of-*.bin")
# MB checkpoint_utils.py:91-110: the tracker's "release" names the directory "release", not iter_N
RELEASE_DIR = "release"
# MB checkpointing.py:311-338 (read_metadata): the .txt tracker holds an integer > 0 or "release";
# other text prints "ERROR: Invalid metadata file ..." and exits; 0 fails this assertion
TRACKER_PARSE_ERROR = "error parsing metadata file {path}"
# MB checkpointing.py:255-287 (_get_checkpoint_format): metadata.json (megatron-core's
# check_is_distributed_checkpoint) -> torch_dist; else .metadata -> fsdp_dtensor; else a HF model
# directory -> hf; else UNKNOWN_FORMAT.

CKPT_STEP_KEY = "checkpoint.ckpt_step"
CKPT_STEP_MISSING = (
    "ckpt_step={step} specified but checkpoint directory does not exist: {path}\n"
    "Available checkpoints can be listed with: ls {load}/iter_*"
)  # MB :3384-3443
UNKNOWN_FORMAT = "Unknown checkpoint format in {path}"  # MB checkpointing.py:255-287

# A checkpoint loads only into a model of the same shape: torch_dist checks every tensor's global
# shape against the checkpoint's metadata and raises "Global shape mismatch for loaded (...) and
# expected (...) tensor for key ..." (MC core/dist_checkpointing/strategies/torch.py:502-517); the
# legacy path asserts num_layers, hidden_size and num_attention_heads equal (MC
# training/checkpointing.py:148-175). The config keys that set parameter shapes (MC
# transformer/transformer_config.py:65-177, 232, 687, 726; MB models/gpt_provider.py:141, 181):
MODEL_SHAPE_KEYS = (
    "model.num_layers",
    "model.hidden_size",
    "model.ffn_hidden_size",
    "model.num_attention_heads",
    "model.num_query_groups",
    "model.kv_channels",
    "model.num_moe_experts",
    "model.moe_ffn_hidden_size",
    "model.moe_shared_expert_intermediate_size",
    "model.vocab_size",
    "model.make_vocab_size_divisible_by",
    "model.position_embedding_type",
)
# Learned absolute position embeddings (MB's default, gpt_provider.py:142) hold one row per
# position, so the sequence length is part of the shape too.
SEQ_SHAPE_KEYS = ("model.seq_length", "dataset.seq_length")


def shape_keys(config: dict, learned_positions: bool = False) -> tuple:
    """The keys whose change a checkpoint cannot load into (learned_positions: the model has a
    learned position table, as the smoke workload's TinyGPT and MB's default provider)."""
    learned = learned_positions or config.get("model.position_embedding_type") == "learned_absolute"
    return MODEL_SHAPE_KEYS + (SEQ_SHAPE_KEYS if learned else ())


# ---------------------------------------------------------------------------------------------
# Signals (MB training/utils/sig_utils.py:91-155, training/train.py:1374-1531)
# ---------------------------------------------------------------------------------------------
# train.exit_signal_handler (default False, MC training_config.py:79) installs
# DistributedSignalHandler(train.exit_signal) (default SIGTERM, :82) before setup (MB state.py:154-168).
# The handler only prints (rank 0) and sets a flag; a second signal does the same again. Without it,
# SIGTERM's default action kills the trainer.
DEFAULT_EXIT_SIGNAL = "SIGTERM"
# At the end of each iteration (MB train.py:377-755): train_step; step += 1; the iteration log line
# (last rank); evaluation if validation.eval_interval divides the step; then
# checkpoint_and_decide_exit: the ranks agree (all_gather: one rank seeing the signal is enough);
# a persistent save (not the periodic one, not non-persistent) if checkpoint.save is set; the exit
# line; return -> break -> sys.exit(0) (train.py:816). Post-training validation/test do not run.
SIGNAL_CHECK = "end of step, after the iteration log line and any evaluation, before the periodic save"

# The signal lead (the launcher's rule, one for plan's estimates and for a segment's measurements,
# workloads/step_times.py): what SIGNAL_CHECK implies the trainer may still do after the signal, a
# step, an evaluation and a save, with a quarter to spare, in whole 10 s; at least DEFAULT_LEAD;
# with UNKNOWN_STEP_ALLOWANCE for a step nobody knows when a save is known.
DEFAULT_LEAD = 120
LEAD_MARGIN = 1.25
UNKNOWN_STEP_ALLOWANCE = 60


def sized_lead(step: float | None, save: float | None, evaluation: float | None, floor: int = DEFAULT_LEAD) -> int:
    """The lead in seconds for these figures (None: unknown); `floor` 0 for measured figures."""
    need = LEAD_MARGIN * ((step or 0) + (save or 0) + (evaluation or 0))
    if not step and save:
        need += UNKNOWN_STEP_ALLOWANCE
    return max(floor, int(math.ceil(need / 10) * 10))


# torchrun (T distributed/elastic): workers are Popen(start_new_session=True), each its own process
# group (multiprocessing/subprocess_handler/subprocess_handler.py:63-77). On SIGTERM/SIGINT/SIGHUP/
# SIGQUIT (multiprocessing/api.py:534-547) torchrun forwards the same signal with os.killpg to each
# worker's group (subprocess_handler.py:79-85), waits the shutdown timeout (default 30 s; the
# --shutdown-timeout flag and TORCH_ELASTIC_SHUTDOWN_TIMEOUT exist only in recent torch,
# launcher/api.py:123,145-153), then SIGKILLs ("Unable to shutdown process %s via %s, forcefully
# exiting via %s", multiprocessing/api.py:1023-1060), and exits 1 even when every worker saved and
# exited 0 (the SignalException is re-raised: agent/server/api.py:741-761). SIGUSR1/SIGUSR2 are not
# handled: torchrun dies of them and its workers live on.
TORCHRUN_SHUTDOWN_TIMEOUT = 30
TORCHRUN_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
TORCHRUN_FORCED_KILL: re.Pattern[str]
_later("TORCHRUN_FORCED_KILL", r"Unable to shutdown process \d+ via \S+, forcefully exiting via \S+")


# ---------------------------------------------------------------------------------------------
# Log lines. print_rank_0 prints on global rank 0, print_rank_last on rank world-1, both a plain
# print(flush=True) (MB utils/common_utils.py:97-134).
# ---------------------------------------------------------------------------------------------
LOSS_KEY = "lm loss"  # the GPT forward step's loss key (an assumption for other forward steps)


def _now() -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M:%S")


def iteration_line(
    *,
    iteration: int,
    train_iters: int,
    consumed: int,
    elapsed_ms: float,
    lr: float,
    global_batch: int,
    losses: dict,
    loss_scale: float,
    grad_norm: float | None,
    skipped: int,
    nan: int,
    skipped_samples: int = 0,
    tflops: float | None = None,
    num_zeros: int | None = None,
    params_norm: float | None = None,
    stamp: str | None = None,
) -> str:
    """The per-iteration line, printed by the LAST rank every logger.log_interval iterations
    (MB training/utils/train_utils.py:1018, 1088-1140). `losses` in print order; a loss whose
    interval average is below 0 or NaN is left out (:1120-1125); skipped/nan are counts over the
    log interval."""
    s = f" [{stamp or _now()}]"
    s += " iteration {:8d}/{:8d} |".format(iteration, train_iters)
    s += " consumed samples: {:12d} |".format(consumed)
    if skipped_samples > 0:
        s += " skipped samples: {:12d} |".format(skipped_samples)
    s += " elapsed time per iteration (ms): {:.1f} |".format(elapsed_ms)
    if tflops is not None:  # only with logger.log_throughput (default False)
        s += f" throughput per GPU (TFLOP/s/GPU): {tflops:.1f} |"
    s += f" learning rate: {lr:.6E} |"
    s += f" global batch size: {global_batch:5d} |"
    for key, value in losses.items():
        if value >= 0.0:  # MB :1122-1124 `if avg >= 0.0`: a NaN (or negative) average is not printed at all
            s += " {}: {:.6E} |".format(key, value)
    s += f" loss scale: {loss_scale:.1f} |"
    if grad_norm is not None:
        s += f" grad norm: {grad_norm:.3f} |"
    if num_zeros is not None:
        s += f" num zeros: {num_zeros} |"
    if params_norm is not None:
        s += f" params norm: {params_norm:.3f} |"
    s += " number of skipped iterations: {:3d} |".format(skipped)
    s += " number of nan iterations: {:3d} |".format(nan)
    return s


# One iteration line: the step, its total and the rest of the fields (parsed by the log reader,
# bridge_launch/logread.py). " iteration {:8d}/{:8d} |" in MB train_utils.py:1089 and MC
# training/training.py:2960; the head alone is what the reader scans a whole log for.
ITERATION_HEAD = r"iteration +(\d+)/ *(\d+) \|"
ITERATION_RE: re.Pattern[str]
_later("ITERATION_RE", ITERATION_HEAD + r"([^\n]*)")
ITERATION_STEP = r"iteration +(\d+)/ *\d+ \|"  # the head capturing the step alone (a whole log's steps)


def field_value(key: str) -> str:
    """One field's value on an iteration line, found anywhere in a text: `| {key}: VALUE |` (every
    field, the first too, follows a `|`: the head ends with one), the text FIELD_RE reads as its value."""
    return r"\| " + re.escape(key) + r": ([^|\n]*)\|"


FIELD_RE: re.Pattern[str]
_later("FIELD_RE", r"\s*([^|:]+?):\s*([^|]*?)\s*\|")


_STEP_TIME = "Step Time : {seconds}s GPU utilization: {tflops}MODEL_TFLOP/s/GPU"


def step_time_line(seconds: float, tflops: float) -> str:
    """Rank 0, just before the iteration line, when the model config has kv_channels and
    num_attention_heads (MB train_utils.py:1036-1051)."""
    return _STEP_TIME.format(seconds=f"{seconds:.2f}", tflops=f"{tflops:.1f}")


STEP_TIME_RE: re.Pattern[str]
_later("STEP_TIME_RE", _STEP_TIME.format(seconds=r"([\d.]+)", tflops=r"([\d.]+)"))
STEP_TIME_UTIL = _STEP_TIME.format(seconds=r"[\d.]+", tflops=r"([\d.]+)")  # the utilization alone


def validation_lines(prefix: str, losses: dict) -> list:
    """Last rank (MB training/eval.py:462-466, 503-506). In the loop the prefix is
    f"iteration {step}" (train.py:684); after training f"iteration {n} on validation set" and
    f"iteration {n} on test set" (pretrain.py:173,186). PPL = exp(min(20, loss))."""
    s = f" validation loss at {prefix} | "
    for key, value in losses.items():
        s += "{} value: {:.6E} | ".format(key, value)
        s += "{} PPL: {:.6E} | ".format(key, math.exp(min(20, value)))
    dashes = "-" * (len(s) + 1)
    return [dashes, s, dashes]


# MC training/training.py:4536 prints " validation{suffix} loss at {prefix} | ", suffix "-<name>" for
# several validation sets (:4515-4520); prefixes as above (MC :1540, :1571, :4135).
VALIDATION_RE: re.Pattern[str]
_later(
    "VALIDATION_RE", r"validation(?:-[\w.-]+)? loss at (iteration (\d+)(?: on (validation|test) set)?) \|(.*)$", re.M
)


def saving_line(step: int, save_dir: str, ckpt_format: str = "torch_dist") -> str:
    """Rank 0, MB training/checkpointing.py:1174."""
    return f"saving checkpoint at iteration {step:7d} to {save_dir} in {ckpt_format} format"


def saved_line(step: int, save: str, tp: tuple = (1, 1), pp: tuple = (1, 1)) -> str:
    """Rank 0, after the tracker (MB checkpointing.py:1502-1509); t/p 1-based; prints
    checkpoint.save even for a non-persistent save."""
    return (
        f"  successfully saved checkpoint from iteration {step:7d} to {save} [ t {tp[0]}/{tp[1]}, p {pp[0]}/{pp[1]} ]"
    )


# The same two lines as POSIX extended regular expressions, for the chain's grep -E.
SAVING_GREP = r"saving checkpoint at iteration +[0-9]+ to "
SAVED_GREP = r"successfully saved checkpoint from iteration +[0-9]+ to "
SAVED_RE: re.Pattern[str]
_later("SAVED_RE", r"successfully saved (?:local )?checkpoint (?:from|at) iteration\s+(\d+)(?: to (\S+))?")


# After every save the trainer logs how long it took: MB training/train.py:1324-1325 starts the
# timer "save-checkpoint" ("save-checkpoint-non-persistent" for a non-persistent save) with a
# barrier, :1362-1363 stops it with a barrier and logs it; MC core/timers.py:422-450 logs on the
# last rank, in logger.timing_log_option's default form "minmax" (MB training/config.py, MC
# timers.py:339-356): a header, then one line per timer, the name padded with dots to 48.
SAVE_TIMER = "save-checkpoint"
SAVE_TIMER_NON_PERSISTENT = "save-checkpoint-non-persistent"


def timers_minmax_lines(times_ms: dict) -> list[str]:
    """MC timers.py:343-356, minmax: {name: (min, max)} in milliseconds."""
    out = ["(min, max) time across ranks (ms):"]
    out += [
        "    {}: ({:.2f}, {:.2f})".format((name + " ").ljust(48, "."), lo, hi) for name, (lo, hi) in times_ms.items()
    ]
    return out


# a name of 47 characters or more is printed without dots; names may hold "/" (train/valid/test-...)
TIMER_MINMAX_RE: re.Pattern[str]
_later("TIMER_MINMAX_RE", r"    (\S+) \.*: \(([\d.]+), ([\d.]+)\)")


# ------------------------------------------------------------------------------------------------
# straggler and timer lines (Megatron-LM's formats; Megatron-Bridge prints them unchanged)
# ------------------------------------------------------------------------------------------------
# StragglerDetector.report (MC core/utils.py:1783-1848; Bridge prints it unchanged, MB train.py:1045-1074),
# rank 0, one line per log interval, through logger.info (MC utils.py:54), e.g. (MC core/README_STRAGGLER.md:13-16)
#   INFO:megatron.core.utils:[2024-03-14 23:07:56] | MnRtt/Rnk: 3453.08ms/8 | MxRtt/Rnk: 3468.20ms/0 | ...
#   | MnEtpt/Rnk: 296.02TF/0 | MxEtpt/Rnk: 297.32TF/8
# Each field is f"{value:.2f}{unit}/{rank}" (MC utils.py:1446); units ms (Rtt, DRtt), W, C, %, MHz (:2003-2039)
# and TF for Etpt (:1830-1831). Rtt is the average time per iteration of the traced regions, Etpt the
# rank's estimated TFLOP/s (MC utils.py:1800-1808).
STRAGGLER_LOGGER = "INFO:megatron.core.utils:"  # logger.info on megatron.core.utils (MC utils.py:54)
STRAGGLER_MARK = "MnRtt/Rnk: "
STRAGGLER_FIELD_RE: re.Pattern[str]
_later("STRAGGLER_FIELD_RE", r"(Mn|Mx)(Rtt|Pwr|Tmp|Utl|Clk|DRtt|Etpt)/Rnk: ([-+]?[\d.]+|nan|inf)[A-Za-z%]*/(\d+)")
# With straggler_minmax_count N (1 < N < world), two more lines (MC utils.py:1834-1843):
#   "^^^^ Bottom {N} Ranks with lowest  Etpt(TF): v/r, v/r,"  and  "^^^^ Top    {N} Ranks with highest Etpt(TF): ..."
STRAGGLER_RANKS_MARK = "Ranks with "
STRAGGLER_RANKS_RE: re.Pattern[str]
_later("STRAGGLER_RANKS_RE", r"\^\^\^\^ (Bottom|Top) +\d+ Ranks with (?:lowest|highest) +Etpt\(TF\):(.*)$")
VALUE_RANK_RE: re.Pattern[str]
_later("VALUE_RANK_RE", r"([-+]?[\d.]+|nan|inf)[A-Za-z%]*/(\d+)")
# Timers.log (MC core/timers.py:338-376), last rank, after a header per --timing-log-option:
#   minmax "(min, max) time across ranks (ms):" then "    {name .....}: ({min:.2f}, {max:.2f})" (TIMER_MINMAX_RE)
#   max    "max time across ranks (ms):"        then "    {name .....}: {max:.2f}"
#   all    "times across ranks (ms):"           then "  {name}:" and "     rank {r:2d}: {ms:.2f}" per rank
# Ranks whose time is 0 are left out of min and max (:330) and of the per-rank lines (:366).
TIMERS_MARK = "across ranks (ms):"
TIMERS_HEAD_RE: re.Pattern[str]
_later("TIMERS_HEAD_RE", r"(\(min, max\) time|max time|times) across ranks \(ms\):\s*$")
TIMER_MAX_RE: re.Pattern[str]
_later("TIMER_MAX_RE", r"^    (\S+) \.*: ([\d.]+)\s*$")
TIMER_ALL_NAME_RE: re.Pattern[str]
_later("TIMER_ALL_NAME_RE", r"^  (\S[^:]*):\s*$")
TIMER_ALL_RANK_RE: re.Pattern[str]
_later("TIMER_ALL_RANK_RE", r"^     rank +(\d+): ([\d.]+)\s*$")
TIMER_OPTIONS = {"(min, max) time": "minmax", "max time": "max", "times": "all"}


def straggler_lines(
    rtt_ms: dict, etpt_tf: dict, drtt_ms: dict | None = None, *, minmax_count: int = 1, stamp: str | None = None
) -> list[str]:
    """StragglerDetector.report's line(s) (MC utils.py:1814-1843) from each rank's figures: the min
    and max of each metric with its rank; Pwr/Tmp/Utl/Clk come from the GPU (pynvml) and are 0
    without one; with 1 < minmax_count < world, the Bottom/Top Etpt lines."""
    now = stamp or time.strftime("%Y-%m-%d %H:%M:%S")
    drtt = drtt_ms or {r: 0.0 for r in rtt_ms}

    def mm(name: str, values: dict, unit: str) -> str:
        lo, hi = min(values, key=values.get), max(values, key=values.get)
        return f"Mn{name}/Rnk: {values[lo]:.2f}{unit}/{lo} | Mx{name}/Rnk: {values[hi]:.2f}{unit}/{hi}"

    zero = {0: 0.0}
    parts = [
        mm("Rtt", rtt_ms, "ms"),
        mm("Pwr", zero, "W"),
        mm("Tmp", zero, "C"),
        mm("Utl", zero, "%"),
        mm("Clk", zero, "MHz"),
        mm("DRtt", drtt, "ms"),
        mm("Etpt", etpt_tf, "TF"),
    ]
    out = [f"{STRAGGLER_LOGGER}[{now}] | " + " | ".join(parts)]
    if 1 < minmax_count < len(etpt_tf):
        order = sorted(etpt_tf, key=etpt_tf.get)
        low = "".join(f" {etpt_tf[r]:.2f}/{r}," for r in order[:minmax_count])
        high = "".join(f" {etpt_tf[r]:.2f}/{r}," for r in order[-minmax_count:])
        out.append(f"{STRAGGLER_LOGGER}^^^^ Bottom {minmax_count} Ranks with lowest  Etpt(TF):{low}")
        out.append(f"{STRAGGLER_LOGGER}^^^^ Top    {minmax_count} Ranks with highest Etpt(TF):{high}")
    return out


def loading_line(load_dir: str, iteration: int) -> str:
    """Rank 0, MB checkpointing.py:3728-3733 (torch_dist: "distributed ")."""
    return f" loading distributed checkpoint from {load_dir} at iteration {iteration}"


def loaded_line(load_dir: str, step: int, tp: tuple = (0, 1), pp: tuple = (0, 1)) -> str:
    """Rank 0, MB checkpointing.py:3263-3268 (t/p 0-based). Megatron-LM prints the same sentence
    with 1-based ranks and a gtp_remat field (MC training/checkpointing.py:2900-2906)."""
    return (
        f"  successfully loaded checkpoint from {load_dir} [ t {tp[0]}/{tp[1]}, p {pp[0]}/{pp[1]} ] at iteration {step}"
    )


LOADED_RE: re.Pattern[str]
_later("LOADED_RE", r"successfully loaded checkpoint from (\S+) .*?at iteration (\d+)")


def starting_line(iteration: int) -> str:
    return f"Starting training loop at iteration {iteration}"  # MB train.py:337


def barrier_and_log(text: str, stamp: str | None = None) -> str:
    """MC training/utils/log_utils.py:139-148 (rank 0, after a barrier; note the trailing space)."""
    return f"[{text}] datetime: {stamp or _now()} "


EXIT_SIGNAL = "exiting program after receiving SIGTERM."  # MB train.py:1426 (fixed text, whatever the signal)
EXIT_DURATION = "exiting program after {minutes} minutes"  # MB train.py:1490
EXIT_INTERVAL = "exiting program at iteration {step}"  # MB train.py:1509
TRAINING_DONE = "after training is done"  # MB pretrain.py:164
EXIT_RE: re.Pattern[str]
_later(
    "EXIT_RE",
    r"\[(exiting program (?:after receiving SIGTERM\.|after [\d.]+ minutes|at iteration \d+)"
    r"|Exiting program due to straggler detection\.)\] datetime: ",
)


def received_signal_line(signum: int) -> str:
    return f"Received signal {signum}, initiating graceful stop"  # MB sig_utils.py:130 (print_rank_0)


# MB pretrain.py:201-214: sys.exit(0) after the signal save is a SystemExit that _pretrain's
# `except BaseException` logs (logger.exception, every rank, with a traceback ending
# "SystemExit: 0") and re-raises, so the exit status stays 0. Not a failure.
PRETRAIN_FAILED = (
    "Pretrain failed on rank={rank} with {kind}: {error}. Bridge is aborting framework-owned "
    "distributed resources because peer ranks may be blocked in collectives."
)
BENIGN_EXIT_RE: re.Pattern[str]
_later("BENIGN_EXIT_RE", r"Pretrain failed on rank=\d+ with SystemExit: 0\b|^SystemExit: 0$")

# ---------------------------------------------------------------------------------------------
# Reading a run's output (bridge_launch/logread.py, the launcher's one log reader). Facts about
# lines the stand-in does not write, or writes only in part, from the same pinned sources and
# from the older Megatron-LM releases whose logs people still compare against.
# ---------------------------------------------------------------------------------------------
# The stamp in front of " iteration": MB train_utils.py:1088 '%Y-%m-%d %H:%M:%S'; MC
# training/training.py:2959 '%Y-%m-%d %H:%M:%S.%f' (microseconds); Megatron-LM before 2024 printed
# none (e.g. NVIDIA/nccl#743). The same two forms come after "datetime: " in barrier_and_log lines
# (MC training/utils/log_utils.py:139-148, MC training/training.py:294-302 print_datetime).
STAMP_RE: re.Pattern[str]
_later("STAMP_RE", r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)\]\s*$")
STAMP_FORMATS = ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S")

# Iteration-line fields that are not losses, in print order (MB train_utils.py:1089-1136; MC
# training.py:2960-3012). Every other "key: value" field before "loss scale" is a loss average
# (:1120-1125 / MC :2991-2999): "lm loss", MoE auxiliary losses ("load_balancing_loss",
# "seq_load_balancing_loss", "global_load_balancing_loss", "z_loss", named by
# moe_router_load_balancing_type, MB :975-986) and "mtp_N loss" (multi-token prediction).
FIELD_CONSUMED = "consumed samples"
FIELD_SKIPPED_SAMPLES = "skipped samples"
FIELD_ELAPSED_MS = "elapsed time per iteration (ms)"
FIELD_TFLOPS = "throughput per GPU (TFLOP/s/GPU)"  # only with logger.log_throughput (MB :1095-1096)
FIELD_LR = "learning rate"  # MC omits it when the learning rate is None (MC :2988-2989)
FIELD_GBS = "global batch size"
FIELD_LOSS_SCALE = "loss scale"
FIELD_GRAD_NORM = "grad norm"  # "{:.3f}": nan and inf print as "nan" / "inf"
FIELD_NUM_ZEROS = "num zeros"
FIELD_PARAMS_NORM = "params norm"
FIELD_SKIPPED = "number of skipped iterations"  # per log interval, reset after each line (MB :1137-1139)
FIELD_NAN = (
    "number of nan iterations"  # per log interval: MC counts a NaN/inf loss of a SKIPPED iteration (MC :2724-2735)
)
NOT_LOSSES = frozenset(
    {
        FIELD_CONSUMED,
        FIELD_SKIPPED_SAMPLES,
        FIELD_ELAPSED_MS,
        FIELD_TFLOPS,
        "energy per GPU (J/iter/GPU)",
        "power per GPU (W/GPU)",
        FIELD_LR,
        FIELD_GBS,
        FIELD_LOSS_SCALE,
        FIELD_GRAD_NORM,
        FIELD_NUM_ZEROS,
        FIELD_PARAMS_NORM,
        "max attention logit",
        FIELD_SKIPPED,
        FIELD_NAN,
    }
)
# A loss average is "{:.6E}" (NAN / INF when not finite, though NaN averages are not printed:
# MB :1122-1124); norms are "{:.3f}" (nan / inf). A number never ends in a letter, so a value that
# is not finite is a letter right before " |".
NONFINITE_MARKS = ("nan |", "NAN |", "inf |", "INF |")
# Both counters are "{:3d}": zero is "  0", and they end the line one after the other
# (MB :1135-1136, MC :3009-3012).
ZERO_SKIPPED = f"{FIELD_SKIPPED}:   0 |"
ZERO_NAN = f"{FIELD_NAN}:   0 |"
ZERO_COUNTERS = f"{ZERO_SKIPPED} {ZERO_NAN}"
# A loss ("lm loss: ", "load_balancing_loss: ", "mtp_1 loss: ") or a norm ("grad norm: ", "params
# norm: ") whose value is not finite; as str and as bytes patterns. Two patterns, each with a literal
# start re can search for fast: one alternation "(?:loss|norm): ..." is 7x slower over a long log.
NONFINITE_RES: tuple[tuple[re.Pattern[str], re.Pattern[bytes]], ...]
_LATER["NONFINITE_RES"] = lambda: tuple(
    (re.compile(p), re.compile(p.encode()))
    for p in (r"loss: [-+]?(?:nan|inf|NAN|INF)\b", r"norm: [-+]?(?:nan|inf|NAN|INF)\b")
)

# Memory after the first iterations, by the first data-parallel rank of each model-parallel group:
# MB train_utils.py:1141-1150 "[Rank R] (after N iterations) memory (GB) | mem-allocated-gigabytes: V | ..."
# (keys from MEMORY_KEYS, :166-177, "bytes" -> "gigabytes"); MC training/utils/common_utils.py:313-335
# "[Rank R] (after N iterations) memory (MB) | allocated: V | max allocated: V | reserved: V | max reserved: V".
MEMORY_RE: re.Pattern[str]
_later("MEMORY_RE", r"\[Rank (\d+)\] \(after (\d+) iterations\) memory \((GB|MB)\)([^\n]*)")

# NaN/Inf checks (check_for_nan_in_loss_and_grad, on by default): MC core/rerun_state_machine.py:518-535
# raises RuntimeError(f"Rank {rank}, node {node}, device {device}, iteration {it}: Unexpected result
# {result} (message='{message}')") with reruns disabled (the default); with reruns enabled it logs
# f"Unexpected result {result} on rank {rank} at iteration #{it} invocation #{n} (message='{message}')"
# (:605-611). Messages: MB training/losses.py:76 "found NaN in local forward loss calculation",
# MC core/distributed/param_and_grad_buffer.py:358,366 "found NaN/Inf in local grad norm for bucket #i ...".
NAN_CHECK_MARK = "Unexpected result"
NAN_CHECK_RE: re.Pattern[str]
_later(
    "NAN_CHECK_RE",
    r"(?:Rank (\d+), node \S+, device \d+, iteration #?(-?\d+): Unexpected result (\S+) \(message='([^']*)'\)"
    r"|Unexpected result (\S+) on rank (\d+) at iteration #(-?\d+) invocation #\d+ \(message='([^']*)'\))",
)

# The older save line (Megatron-LM before cbb9c05c06, May 2024: megatron/training/checkpointing.py:345
# "  successfully saved checkpoint at iteration {:7d} to {}"); SAVED_RE above reads both forms, and MC
# 2a75ac12 training/checkpointing.py:1053-1059 puts a stamp in front of "successfully saved".
SAVED_MARK = "successfully saved"
LOADED_MARK = "successfully loaded checkpoint"
STARTING_MARK = "Starting training loop at iteration"
STARTING_RE: re.Pattern[str]
_later("STARTING_RE", STARTING_MARK + r" (\d+)")  # MB train.py:337
VALIDATION_MARK = " loss at iteration "
# "exiting program ..." (MB train.py:1426,1490,1509) and "Exiting program due to straggler detection."
EXIT_MARK = "xiting program"
EXIT_KINDS = (
    ("after receiving SIGTERM", "signal"),
    ("minutes", "duration"),
    ("at iteration", "interval"),
    ("straggler", "straggler"),
)

# Rank prefixes in front of each line of the job's output:
#  - torchrun --tee with TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="[rank${rank}]: " (what bridge-launch's
#    Slurm script sets): the GLOBAL rank (T distributed/elastic/agent/server/local_elastic_agent.py:438-447);
#  - torchrun --tee without it: f"[{role}{local_rank}]:" with role "default", the LOCAL rank, no space
#    (T distributed/elastic/multiprocessing/tail_log.py:130);
#  - srun --label: the task number right-aligned to the widest one, then ": " (" 0: ", "11: ");
#  - torch's own "[rankN]: " on tracebacks inside a "[defaultN]:" line, and a launcher's "task/N "
#    in front (e.g. "i.pretrain/0 [default2]:[rank2]: RuntimeError: ...", NVIDIA-NeMo/Speech#14348).
# The reader strips them one after another (logread.strip_prefix).
RANK_PREFIX_RE: re.Pattern[str]
_later("RANK_PREFIX_RE", r"(?:[\w.-]+/\d+ (?=\[))?(?:\[(rank|default)(\d+)\]: ?)")
SRUN_LABEL_RE: re.Pattern[str]
_later("SRUN_LABEL_RE", r"\s*(\d+): ")

# torchrun's summary when a worker fails (T distributed/elastic/multiprocessing/errors/__init__.py:184-202):
# "Root Cause (first observed failure):" then "[0]:", "  time      : ...", "  host      : ...",
# "  rank      : R (local_rank: L)", "  exitcode  : C (pid: P)" ...; a negative exit code is a signal.
ROOT_CAUSE_RE: re.Pattern[str]
_later(
    "ROOT_CAUSE_RE",
    r"Root Cause \(first observed failure\):\s*\n(?:[^\n]*\n){0,3}?\s*rank\s*: (\d+) "
    r"\(local_rank: \d+\)\s*\n\s*exitcode\s*: (-?\d+)",
)
# A worker that a signal ended writes no error file, so torchrun makes up the failure's message
# (T distributed/elastic/multiprocessing/errors/__init__.py:139-143): "Signal 15 (SIGTERM) received by
# PID 1234", on the summary's "traceback :" line (its "exitcode  : -15 (pid: 1234) SIGTERM" above it).
SIGNAL_DEATH_MARK = "received by PID"
SIGNAL_DEATH_RE: re.Pattern[str]
_later("SIGNAL_DEATH_RE", r"Signal (\d+) \((SIG\w+)\) received by PID (\d+)")
