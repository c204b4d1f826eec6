#!/usr/bin/env python3
"""bridge-launch smoke workload: preflight checks plus a tiny, resumable training run that
behaves, where the launcher can see it, like Megatron-Bridge's trainer.

bridge-launch copies this directory into the run directory and starts ``smoke.py`` under
torchrun (one torchrun per node, ``--nproc-per-node`` workers) on every backend::

    torchrun ... workload/smoke.py train.train_iters=100 +smoke.step_sleep=0.1 checkpoint.save=ckpt

It depends only on the Python standard library, torch and its sibling files (never on
bridge_launch), so it runs unchanged inside any container that has torch.

The stand-in's protocol is Megatron-Bridge's (trainer_protocol.py holds each fact with its
source line at the pinned commit):

- checkpoints: ``iter_%07d/`` with one ``__R_0.distcp`` shard per rank, then ``.metadata``
  (atomic), ``metadata.json``, ``train_state.pt``, ``latest_train_state.pt``,
  ``latest_checkpointed_iteration.txt`` and ``run_config.yaml`` after the tracker, written by the
  ranks Bridge writes them with (megatron_ckpt.py). Non-persistent "global" saves go to
  ``checkpoint.non_persistent_global_ckpt_dir`` (default ``<save>/non_persistent``) with their own
  trackers. Loading picks the iteration as Bridge does (``checkpoint.ckpt_step``, the newer of
  persistent and non-persistent) and fails where Bridge fails (an incomplete ``iter_N``);
- logs: the iteration line from the last rank, the ``Step Time`` line from rank 0, validation and
  test lines, checkpoint save/load lines and the exit lines, in Bridge's formats;
- signals: with ``train.exit_signal_handler=true`` (default false, as in Bridge) a handler on
  ``train.exit_signal`` (default SIGTERM) is installed before setup; the signal is noted, acted on at
  the end of the step (after its evaluation), agreed across ranks, then a persistent save, the exit
  line and exit status 0. Without the handler SIGTERM kills. Training batches come through a torch
  DataLoader with ``dataset.num_workers`` worker processes (Bridge's default: 2), which a signal to
  the trainer's process group kills unless ``train.exit_signal_handler_for_dataloader`` is set.

- timers and stragglers: with ``logger.timing_log_level`` >= 1 the last rank logs Megatron's
  ``(min, max) time across ranks (ms):`` block every log interval, per iteration (forward-backward,
  optimizer; batch-generator at level 2; MB utils/train_utils.py:686-720, :1155); with
  ``straggler.log_straggler`` rank 0 logs the StragglerDetector line (and its Bottom/Top lines with
  ``straggler.straggler_minmax_count`` > 1) every log interval (MB train.py:217-227, :1045-1074; MC
  utils.py:1783-1848): Rtt is each rank's time in the forward passes, DRtt in getting batches,
  Etpt its TFLOP/s over that time (/3, MC utils.py:1802-1808).

Knobs of its own: ``smoke.step_sleep`` (seconds added to every step), ``smoke.slow_ms`` (milliseconds
added to each forward pass, by every rank or, with ``smoke.slow_rank``, by that rank: a straggler),
``smoke.save_sleep``
(seconds every rank spends writing its shard), ``smoke.fail_at_step`` / ``fail_rank`` / ``fail_node``
(only on that host: a bad node) / ``fail_message`` (an injected failure), ``smoke.busbw_sizes`` /
``busbw_iters`` (the preflight).

Preflight: host / rank / backend (NCCL on CUDA, else gloo on CPU), whether the IMEX channels
(/dev/nvidia-caps-imex-channels) are visible in the container, GPU model, NCCL version,
multi-node NVLink status, and an all-reduce bus-bandwidth sweep (fabric_checks.py). Rank 0 writes a
JSON summary to ``$BRIDGE_LAUNCH_RUN_DIR/summary.json`` (or ``./smoke_summary.json``).
Bad arguments exit with status 2 and a one-line ``smoke.py: error: ...`` message.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import random
import re
import signal
import socket
import sys
import tempfile
import time

import trainer_protocol as P
from hydra_args import parse_overrides
from smoke_keys import KNOWN_KEYS

# --------------------------------------------------------------------------------------------
# The exit-signal handler: Bridge's DistributedSignalHandler (MB training/utils/sig_utils.py:91-155).
# It only notes the signal (and rank 0 says so); a second signal does the same again. It is
# installed before setup, here before ``import torch``, which takes seconds.
# --------------------------------------------------------------------------------------------
_SIGNAL: dict = {"received": False}


def _on_exit_signal(signum, frame):  # noqa: ARG001 - signal handler signature
    _SIGNAL["received"] = True
    if os.environ.get("RANK", "0") == "0":  # print_rank_0
        with contextlib.suppress(OSError):  # os.write is safe in a handler; print() is not
            os.write(1, (P.received_signal_line(signum) + "\n").encode())


def install_exit_handler(signum: int) -> None:
    signal.signal(signum, _on_exit_signal)
    with contextlib.suppress(AttributeError, OSError, ValueError):
        signal.siginterrupt(signum, False)  # restart interrupted system calls (collectives)


def signal_number(value) -> int:
    """train.exit_signal as a number: 15, "15", "SIGTERM", "signal.SIGTERM", "Signals.SIGTERM"."""
    if isinstance(value, int) and not isinstance(value, bool):
        return int(signal.Signals(value))
    text = str(value).strip().rsplit(".", 1)[-1].upper()
    if text.isdigit():
        return int(signal.Signals(int(text)))
    return int(signal.Signals[text if text.startswith("SIG") else "SIG" + text])


PROG = "smoke.py"


class SmokeError(Exception):
    """An expected, user-facing error: reported as one line, exit status 2."""


class InjectedFailure(RuntimeError):
    """Raised by smoke.fail_at_step (failure-path tests)."""


DEFAULT_BUSBW_SIZES = [1024, 65536, 1048576, 8388608]


def _is_null(v) -> bool:
    return v is None or (isinstance(v, str) and v.strip().lower() in ("", "none", "null", "~"))


def _as_int(key, v, minimum=None, optional=False):
    if _is_null(v):
        if optional:
            return None
        raise SmokeError(f"{key} must be an integer, got {v!r}")
    if isinstance(v, bool):
        raise SmokeError(f"{key} must be an integer, got {v!r}")
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, str):
        try:
            v = int(v.strip().replace("_", ""))
        except ValueError:
            raise SmokeError(f"{key} must be an integer, got {v!r}") from None
    if not isinstance(v, int):
        raise SmokeError(f"{key} must be an integer, got {v!r}")
    if minimum is not None and v < minimum:
        raise SmokeError(f"{key} must be >= {minimum}, got {v}")
    return v


def _as_float(key, v, minimum=None):
    if isinstance(v, bool) or _is_null(v):
        raise SmokeError(f"{key} must be a number, got {v!r}")
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise SmokeError(f"{key} must be a number, got {v!r}") from None
    if not math.isfinite(f) or (minimum is not None and f < minimum):
        raise SmokeError(f"{key} must be a finite number >= {minimum}, got {v!r}")
    return f


def _as_bool(key, v):
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in ("true", "yes", "on", "1", "false", "no", "off", "0"):
        return v.strip().lower() in ("true", "yes", "on", "1")
    raise SmokeError(f"{key} must be true or false, got {v!r}")


def _as_path(key, v):
    if _is_null(v):
        return None
    if isinstance(v, (list, dict, bool)):
        raise SmokeError(f"{key} must be a directory path or null, got {v!r}")
    return os.path.expanduser(str(v))


_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kmg]?)(?:i?b)?\s*$", re.IGNORECASE)


def _as_size(key, v):
    if isinstance(v, bool):
        raise SmokeError(f"{key}: bad message size {v!r}")
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, int):
        n = v
    else:
        m = _SIZE_RE.match(str(v))
        if not m:
            raise SmokeError(f"{key}: bad message size {v!r} (use bytes, e.g. 1048576 or 1M)")
        n = int(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]
    if n < 1:
        raise SmokeError(f"{key}: message sizes must be >= 1 byte, got {v!r}")
    return n


def _as_sizes(key, v):
    if _is_null(v):
        return []
    if isinstance(v, str) and "," in v:
        v = [x for x in v.strip().strip("[]").split(",") if x.strip()]
    if not isinstance(v, list):
        v = [v]
    return [_as_size(key, x) for x in v]


def build_config(overrides: dict, world_size: int) -> dict:
    """Resolve the known keys (with defaults) and validate them; raises SmokeError."""
    o = overrides

    def get(*keys, default=None):
        for k in keys:
            if k in o:
                return o[k]
        return default

    cfg: dict = {}
    cfg["train_iters"] = _as_int("train.train_iters", get("train.train_iters", default=20), minimum=0)
    cfg["micro_batch_size"] = _as_int("train.micro_batch_size", get("train.micro_batch_size", default=4), minimum=1)
    gbs = get("train.global_batch_size")
    cfg["global_batch_size"] = (
        cfg["micro_batch_size"] * world_size if _is_null(gbs) else _as_int("train.global_batch_size", gbs, minimum=1)
    )
    per_step = cfg["micro_batch_size"] * world_size
    if cfg["global_batch_size"] % per_step != 0:
        raise SmokeError(
            f"train.global_batch_size={cfg['global_batch_size']} is not divisible by "
            f"train.micro_batch_size * data-parallel size = {cfg['micro_batch_size']} * {world_size} = {per_step}"
        )
    cfg["grad_accum"] = cfg["global_batch_size"] // per_step
    cfg["seq_length"] = _as_int(
        "dataset.seq_length", get("dataset.seq_length", "model.seq_length", default=64), minimum=1
    )
    cfg["num_layers"] = _as_int("model.num_layers", get("model.num_layers", default=2), minimum=1)
    cfg["hidden_size"] = _as_int("model.hidden_size", get("model.hidden_size", default=64), minimum=1)
    cfg["num_attention_heads"] = _as_int(
        "model.num_attention_heads", get("model.num_attention_heads", default=4), minimum=1
    )
    if cfg["hidden_size"] % cfg["num_attention_heads"] != 0:
        raise SmokeError(
            f"model.hidden_size={cfg['hidden_size']} is not divisible by "
            f"model.num_attention_heads={cfg['num_attention_heads']}"
        )
    ffn = get("model.ffn_hidden_size")
    cfg["ffn_hidden_size"] = (
        4 * cfg["hidden_size"] if _is_null(ffn) else _as_int("model.ffn_hidden_size", ffn, minimum=1)
    )
    vocab_key = "model.vocab_size" if "model.vocab_size" in o else "tokenizer.vocab_size"
    cfg["vocab_size"] = _as_int(vocab_key, get("model.vocab_size", "tokenizer.vocab_size", default=256), minimum=2)
    cfg["lr"] = _as_float("optimizer.lr", get("optimizer.lr", default=3e-3), minimum=0.0)
    cfg["weight_decay"] = _as_float("optimizer.weight_decay", get("optimizer.weight_decay", default=0.01), minimum=0.0)
    cfg["clip_grad"] = _as_float("optimizer.clip_grad", get("optimizer.clip_grad", default=1.0), minimum=0.0)
    cfg["lr_warmup_iters"] = _as_int(
        "scheduler.lr_warmup_iters", get("scheduler.lr_warmup_iters", default=0), minimum=0
    )
    cfg["seed"] = _as_int("rng.seed", get("rng.seed", default=1234), minimum=0)
    cfg["save"] = _as_path("checkpoint.save", get("checkpoint.save"))
    cfg["load"] = _as_path("checkpoint.load", get("checkpoint.load"))
    cfg["save_interval"] = _as_int(
        "checkpoint.save_interval", get("checkpoint.save_interval"), minimum=1, optional=True
    )
    # Defaults are Megatron-Bridge's where the launcher can see the difference (MC
    # training/config/training_config.py, trainer_protocol.py): log every 100 steps, no periodic
    # save, no in-loop evaluation, 100 evaluation iterations, no exit-signal handler.
    cfg["log_interval"] = _as_int("logger.log_interval", get("logger.log_interval", default=100), minimum=1)
    cfg["ckpt_step"] = _as_int("checkpoint.ckpt_step", get("checkpoint.ckpt_step"), minimum=0, optional=True)
    fmt = get("checkpoint.ckpt_format", default="torch_dist")
    if fmt != "torch_dist":
        raise SmokeError(f"checkpoint.ckpt_format={fmt!r}: the smoke workload writes torch_dist checkpoints only")
    if _as_bool("checkpoint.async_save", get("checkpoint.async_save", default=False)):
        raise SmokeError("checkpoint.async_save=true: the smoke workload saves synchronously only")
    cfg["np_interval"] = _as_int(
        "checkpoint.non_persistent_save_interval",
        get("checkpoint.non_persistent_save_interval"),
        minimum=1,
        optional=True,
    )
    np_type = get("checkpoint.non_persistent_ckpt_type")
    cfg["np_type"] = None if _is_null(np_type) else str(np_type)
    if cfg["np_type"] not in (None, "global"):
        raise SmokeError(
            f"checkpoint.non_persistent_ckpt_type={cfg['np_type']!r}: the smoke workload emulates "
            "'global' non-persistent checkpoints only ('local' needs nvidia_resiliency_ext)"
        )
    np_dir = _as_path("checkpoint.non_persistent_global_ckpt_dir", get("checkpoint.non_persistent_global_ckpt_dir"))
    base = cfg["save"] or cfg["load"]
    cfg["np_dir"] = np_dir or (os.path.join(base, P.NON_PERSISTENT_SUBDIR) if base else None)
    cfg["eval_interval"] = _as_int(
        "validation.eval_interval", get("validation.eval_interval", "train.eval_interval"), minimum=1, optional=True
    )
    cfg["eval_iters"] = _as_int(
        "validation.eval_iters", get("validation.eval_iters", "train.eval_iters", default=100), minimum=0
    )
    cfg["exit_interval"] = _as_int("train.exit_interval", get("train.exit_interval"), minimum=1, optional=True)
    cfg["exit_duration"] = (
        _as_float("train.exit_duration_in_mins", get("train.exit_duration_in_mins", default=0), minimum=0.0) or None
    )
    cfg["num_workers"] = _as_int("dataset.num_workers", get("dataset.num_workers", default=2), minimum=0)
    cfg["busbw_sizes"] = _as_sizes("smoke.busbw_sizes", get("smoke.busbw_sizes", default=list(DEFAULT_BUSBW_SIZES)))
    cfg["busbw_iters"] = _as_int("smoke.busbw_iters", get("smoke.busbw_iters", default=5), minimum=1)
    cfg["step_sleep"] = _as_float("smoke.step_sleep", get("smoke.step_sleep", default=0.0), minimum=0.0)
    cfg["slow_rank"] = _as_int("smoke.slow_rank", get("smoke.slow_rank"), minimum=0, optional=True)
    cfg["slow_ms"] = _as_float("smoke.slow_ms", get("smoke.slow_ms", default=0.0), minimum=0.0)
    cfg["timing_log_level"] = _as_int("logger.timing_log_level", get("logger.timing_log_level", default=0), minimum=-1)
    cfg["log_straggler"] = _as_bool("straggler.log_straggler", get("straggler.log_straggler", default=False))
    cfg["straggler_minmax_count"] = _as_int(
        "straggler.straggler_minmax_count", get("straggler.straggler_minmax_count", default=1), minimum=1
    )
    k = _as_int("checkpoint.most_recent_k", get("checkpoint.most_recent_k", default=-1), optional=True)
    cfg["most_recent_k"] = -1 if k is None else k  # MC training_config.py:421: -1 (None too) keeps every one
    cfg["save_sleep"] = _as_float("smoke.save_sleep", get("smoke.save_sleep", default=0.0), minimum=0.0)
    cfg["fail_at_step"] = _as_int("smoke.fail_at_step", get("smoke.fail_at_step"), minimum=0, optional=True)
    cfg["fail_rank"] = _as_int("smoke.fail_rank", get("smoke.fail_rank"), minimum=0, optional=True)
    cfg["fail_node"] = str(get("smoke.fail_node", default="") or "")
    # Lets failure tests choose what the failure looks like in the log (e.g. an OOM or an NCCL timeout).
    cfg["fail_message"] = str(get("smoke.fail_message", default="") or "")
    cfg["exit_signal_handler"] = _as_bool("train.exit_signal_handler", get("train.exit_signal_handler", default=False))
    cfg["handler_for_dataloader"] = _as_bool(
        "train.exit_signal_handler_for_dataloader", get("train.exit_signal_handler_for_dataloader", default=False)
    )
    try:
        cfg["exit_signal"] = signal_number(get("train.exit_signal", default=P.DEFAULT_EXIT_SIGNAL))
    except (KeyError, ValueError):
        raise SmokeError(f"train.exit_signal={get('train.exit_signal')!r} is not a signal") from None
    return cfg


def _fail(msg: str, code: int = 2):
    if os.environ.get("LOCAL_RANK", "0") == "0":  # one line per node, not per rank
        print(f"{PROG}: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def _world_size_from_env() -> int:
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        _fail(f"bad distributed environment: WORLD_SIZE={os.environ.get('WORLD_SIZE')!r}")


if __name__ == "__main__":
    # Before the (slow) torch import: reject bad arguments fast, and install the exit-signal
    # handler as Bridge does, before setup (MB training/state.py:154-168).
    try:
        _early = build_config(parse_overrides(sys.argv[1:])[0], _world_size_from_env())
    except SmokeError as _e:
        _fail(str(_e))
    if _early["exit_signal_handler"]:
        install_exit_handler(_early["exit_signal"])

import fabric_checks  # noqa: E402
import megatron_ckpt  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tiny_lm import StepBatches, TinyGPT, bigram_table, synthetic_batch  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def _log(msg: str) -> None:
    print(msg, flush=True)


def _note(msg: str) -> None:
    """The stand-in's own lines (not Bridge's), marked as such."""
    print(f"[smoke] {msg}", flush=True)


def atomic_write_text(path: str, text: str) -> None:
    """Write via a temp file in the same directory + fsync + os.replace."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    megatron_ckpt.fsync_dir(d)


def _json_safe(obj):
    """Strict-JSON copy: non-finite floats become null, unknown objects their str()."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return str(obj)


def _dataloader_worker_init(_worker_id, signum=None):
    """train.exit_signal_handler_for_dataloader: the trainer's handler in every DataLoader
    worker (MB data/loaders.py:297-302), so a signal to the process group does not kill it."""
    install_exit_handler(signum)


class _WorkerInit:
    def __init__(self, signum):
        self.signum = signum

    def __call__(self, worker_id):
        _dataloader_worker_init(worker_id, self.signum)


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------
class Smoke:
    def __init__(self, cfg: dict, overrides: dict, unknown: list, unparsed: list):
        self.cfg = cfg
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.last_rank = self.world - 1
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(self.world)))
        self.host = socket.gethostname()
        self.cuda = torch.cuda.is_available()
        self.backend = "nccl" if self.cuda else "gloo"
        self.device = torch.device(f"cuda:{self.local_rank}") if self.cuda else torch.device("cpu")
        self.t_start = time.time()
        self.summary: dict = {
            "steps_completed": 0,
            "steps_this_run": 0,
            "start_step": None,
            "train_iters": cfg["train_iters"],
            "final_loss": None,
            "first_loss": None,
            "losses": [],
            "validation": [],
            "tokens_per_s": None,
            "world_size": self.world,
            "nodes": None,
            "hosts": None,
            "backend": self.backend,
            "torch_version": torch.__version__,
            "python": sys.executable,
            "busbw": [],
            "gpu": None,
            "imex": None,  # host -> whether /dev/nvidia-caps-imex-channels is visible, and its channels
            "argv": list(sys.argv),
            # Which of the secrets bridge-launch passed by name are present (never their values).
            "secrets_present": {
                n: bool(os.environ.get(n)) for n in os.environ.get("BRIDGE_LAUNCH_SECRET_NAMES", "").split(",") if n
            },
            "overrides": overrides,
            "unknown_keys": unknown,
            "unparsed_args": unparsed,
            "exit_reason": None,
            "error": None,
            "resumed_from": None,
            "checkpoints": [],
            "non_persistent_checkpoints": [],
            "checkpoint_save": cfg["save"],
            "checkpoint_load": cfg["load"],
            "micro_batch_size": cfg["micro_batch_size"],
            "global_batch_size": cfg["global_batch_size"],
            "grad_accum": cfg["grad_accum"],
            "seq_length": cfg["seq_length"],
            "consumed_samples": 0,
            "elapsed_s": None,
        }

    # ---- collectives helpers ---------------------------------------------------------------
    # torch's *_object collectives need numpy (tensor.numpy()) in torch 2.13; this workload must
    # need only torch, so objects travel as pickled bytes in uint8 tensors.
    def _bytes_tensor(self, data: bytes):
        return (
            torch.frombuffer(bytearray(data), dtype=torch.uint8).to(self.device)
            if data
            else torch.zeros(0, dtype=torch.uint8, device=self.device)
        )

    def all_gather_objects(self, obj) -> list:
        data = self._bytes_tensor(pickle.dumps(obj))
        size = torch.tensor([data.numel()], dtype=torch.long, device=self.device)
        sizes = [torch.zeros_like(size) for _ in range(self.world)]
        dist.all_gather(sizes, size)
        longest = max(int(x.item()) for x in sizes)
        padded = torch.zeros(longest, dtype=torch.uint8, device=self.device)
        padded[: data.numel()] = data
        chunks = [torch.zeros(longest, dtype=torch.uint8, device=self.device) for _ in range(self.world)]
        dist.all_gather(chunks, padded)
        return [pickle.loads(bytes(c[: int(n.item())].cpu().tolist())) for c, n in zip(chunks, sizes, strict=False)]

    def barrier(self):
        if self.cuda:
            dist.barrier(device_ids=[self.local_rank])
        else:
            dist.barrier()

    def print_rank_0(self, msg: str) -> None:
        if self.rank == 0:
            _log(msg)

    def print_rank_last(self, msg: str) -> None:
        if self.rank == self.last_rank:
            _log(msg)

    def _log_timers(self, times_ms: dict) -> None:
        """A Timers.log block, {name: (min, max)} in ms, on the last rank in one call, as MC
        core/timers.py:445-450 logs it (`logger.info(output_string)`)."""
        self.print_rank_last("\n".join(P.timers_minmax_lines(times_ms)))

    def _log_timer(self, name: str, seconds: float) -> None:
        """One timer's (min, max) across ranks, logged by the last rank (trainer_protocol)."""
        lo = torch.tensor([seconds * 1000.0], dtype=torch.float64, device=self.device)
        hi = lo.clone()
        dist.all_reduce(lo, op=dist.ReduceOp.MIN)
        dist.all_reduce(hi, op=dist.ReduceOp.MAX)
        self._log_timers({name: (lo.item(), hi.item())})

    def _log_timers_and_stragglers(self, traced: dict, steps: int, flops_per_step: float) -> None:
        """The interval's timers (last rank) and straggler line (rank 0), as Bridge logs them."""
        cfg = self.cfg
        if cfg["timing_log_level"] < 1 and not cfg["log_straggler"]:
            return
        per = {k: v * 1000.0 / max(steps, 1) for k, v in traced.items()}  # ms per iteration
        ranks = self.all_gather_objects(per)
        if cfg["timing_log_level"] >= 1:
            names = [("forward-backward", "fb"), ("optimizer", "opt")]
            if cfg["timing_log_level"] >= 2:
                names.append(("batch-generator", "data"))
            times = {n: (min(r[k] for r in ranks), max(r[k] for r in ranks)) for n, k in names}
            self._log_timers(times)
        if cfg["log_straggler"]:
            rtt = {r: d["fwd"] for r, d in enumerate(ranks)}
            drtt = {r: d["data"] for r, d in enumerate(ranks)}
            # Etpt: this rank's share of the step's FLOPs over its forward time, / 3 (forward only)
            etpt = {r: (flops_per_step / self.world) / max(t / 1000.0, 1e-9) / 1e12 / 3.0 for r, t in rtt.items()}
            for line in P.straggler_lines(rtt, etpt, drtt, minmax_count=cfg["straggler_minmax_count"]):
                self.print_rank_0(line)

    def barrier_and_log(self, text: str) -> None:
        self.barrier()
        self.print_rank_0(P.barrier_and_log(text))

    # ---- summary ---------------------------------------------------------------------------
    def summary_path(self) -> str:
        run_dir = os.environ.get("BRIDGE_LAUNCH_RUN_DIR")
        if run_dir:
            return os.path.join(run_dir, "summary.json")
        return os.path.abspath("smoke_summary.json")

    def write_summary(self) -> None:
        if self.rank != 0:
            return
        self.summary["elapsed_s"] = round(time.time() - self.t_start, 3)
        path = self.summary_path()
        text = json.dumps(_json_safe(self.summary), indent=2, allow_nan=False) + "\n"
        atomic_write_text(path, text)
        _note(f"summary written to {path} (exit_reason={self.summary['exit_reason']})")

    # ---- preflight -------------------------------------------------------------------------
    def preflight(self):
        if self.cuda:
            if self.local_rank >= torch.cuda.device_count():
                raise SmokeError(
                    f"local rank {self.local_rank} has no GPU: only {torch.cuda.device_count()} visible "
                    "(use --nproc-per-node <= GPUs per node)"
                )
            torch.cuda.set_device(self.local_rank)
        dist.init_process_group(backend=self.backend)
        gpu_name = torch.cuda.get_device_name(self.local_rank) if self.cuda else None
        _note(
            f"host={self.host} rank={self.rank}/{self.world} local_rank={self.local_rank}/{self.local_world} "
            f"backend={self.backend} device={self.device}" + (f" gpu={gpu_name!r}" if gpu_name else "")
        )
        fabric = fabric_checks.query_fabric() if (self.cuda and self.local_rank == 0) else None
        imex = fabric_checks.imex_channels() if self.local_rank == 0 else None
        info = {
            "host": self.host,
            "rank": self.rank,
            "local_rank": self.local_rank,
            "gpu": gpu_name,
            "fabric": fabric,
            "imex": imex,
        }
        infos = self.all_gather_objects(info)
        hosts = [i["host"] for i in infos]
        self.summary["hosts"] = hosts
        self.summary["nodes"] = len(set(hosts))
        imex_by_host = {i["host"]: i["imex"] for i in infos if i["local_rank"] == 0}
        self.summary["imex"] = imex_by_host
        if self.cuda:
            fabric_by_host = {i["host"]: i["fabric"] for i in infos if i["local_rank"] == 0}
            mnnvl, reason = fabric_checks.mnnvl_status(fabric_by_host, self.summary["nodes"], imex_by_host)
            props = torch.cuda.get_device_properties(self.local_rank)
            self.summary["gpu"] = {
                "name": gpu_name,
                "names": sorted({i["gpu"] for i in infos if i["gpu"]}),
                "devices_per_node": torch.cuda.device_count(),
                "memory_gib": round(props.total_memory / 2**30, 1),
                "capability": f"{props.major}.{props.minor}",
                "cuda": torch.version.cuda,
                "nccl_version": fabric_checks.nccl_version(),
                "mnnvl": mnnvl,
                "mnnvl_reason": reason,
                "fabric": fabric_by_host,
            }
        if self.rank == 0:
            _note(
                f"torch {torch.__version__} world_size={self.world} nodes={self.summary['nodes']} "
                f"backend={self.backend} hosts={sorted(set(hosts))}"
            )
            g = self.summary["gpu"]
            if g or self.summary["nodes"] > 1:  # multi-node NVLink's concern: not a one-node CPU run's
                _note(fabric_checks.imex_line(imex_by_host))
            if g:
                _note(
                    f"gpu={g['name']!r} x{g['devices_per_node']}/node ({g['memory_gib']} GiB, cc {g['capability']}) "
                    f"cuda={g['cuda']} nccl={g['nccl_version']}"
                )
                _note(f"mnnvl={g['mnnvl']} ({g['mnnvl_reason']})")
        sizes, iters = self.cfg["busbw_sizes"], self.cfg["busbw_iters"]
        if sizes:
            rows = fabric_checks.busbw_sweep(sizes, iters, self.device, self.world, self.barrier)
            self.summary["busbw"] = rows
            if self.rank == 0:
                _note(
                    f"all-reduce bus bandwidth: world={self.world} backend={self.backend} dtype=float32 "
                    f"iters={iters} (busbw = algbw * 2(n-1)/n)"
                )
                _note(f"{'size(B)':>12} {'time(us)':>12} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12}")
                for r in rows:
                    _note(
                        f"{r['size_bytes']:>12d} {r['time_us']:>12.1f} {r['algbw_gbps']:>12.3f} "
                        f"{r['busbw_gbps']:>12.3f}"
                    )

    # ---- checkpointing ---------------------------------------------------------------------
    def _rng_state(self):
        return {
            "random_rng_state": random.getstate(),
            "torch_rng_state": torch.get_rng_state(),
            "cuda_rng_state": torch.cuda.get_rng_state(self.device) if self.cuda else None,
        }

    def save(self, step: int, *, non_persistent: bool = False) -> None:
        cfg = self.cfg
        shard = {"rng_state": self._rng_state(), "rank": self.rank}
        if self.rank == 0:
            shard.update(
                {
                    "checkpoint_version": 3.0,
                    "iteration": step,
                    "model": {k: v.detach().cpu() for k, v in self.model.module.state_dict().items()},
                    "optimizer": self.optimizer.state_dict(),
                    "opt_param_scheduler": {
                        "max_lr": cfg["lr"],
                        "warmup_steps": cfg["lr_warmup_iters"],
                        "num_steps": step,
                    },
                    "args": {k: v for k, v in cfg.items() if isinstance(v, (int, float, str, bool, type(None)))},
                    "smoke": {
                        "world_size": self.world,
                        "skipped_iters_total": self.skipped_total,
                        "nan_iters_total": self.nan_total,
                    },
                }
            )
        train_state = {
            "step": torch.tensor(step, dtype=torch.int64),
            "consumed_train_samples": torch.tensor(self.consumed, dtype=torch.int64),
            "skipped_train_samples": torch.tensor(0, dtype=torch.int64),
            "consumed_valid_samples": torch.tensor(self.consumed_valid, dtype=torch.int64),
            "floating_point_operations_so_far": torch.tensor(self.flops_so_far, dtype=torch.float32),
            "do_train": torch.tensor(True),
            "do_valid": torch.tensor(cfg["eval_iters"] > 0),
            "do_test": torch.tensor(cfg["eval_iters"] > 0),
        }
        save_dir = cfg["np_dir"] if non_persistent else cfg["save"]
        os.makedirs(save_dir, exist_ok=True)
        run_config = json.dumps(_json_safe(self.summary["overrides"]), indent=2, sort_keys=True) + "\n"  # JSON is YAML
        self.barrier()  # the save timer starts and stops with a barrier (trainer_protocol.SAVE_TIMER)
        began = time.monotonic()
        megatron_ckpt.save(
            save_dir=save_dir,
            save_root=cfg["save"],
            step=step,
            rank=self.rank,
            world=self.world,
            shard=shard,
            train_state=train_state,
            run_config=run_config,
            write_seconds=cfg["save_sleep"],
            log=self.print_rank_0,
        )
        self.barrier()
        self._log_timer(P.SAVE_TIMER_NON_PERSISTENT if non_persistent else P.SAVE_TIMER, time.monotonic() - began)
        if non_persistent:
            if self.rank == 0:
                megatron_ckpt.prune_non_persistent(save_dir)
            self.summary["non_persistent_checkpoints"].append(step)
        else:
            self.summary["checkpoints"].append(step)
            if cfg["most_recent_k"] > -1 and self.rank == 0:
                megatron_ckpt.keep_most_recent(save_dir, cfg["most_recent_k"], step, self.print_rank_0)

    def load(self, model):
        """Bridge's load (trainer_protocol, "Load"): returns the start step (1 from scratch)."""
        cfg = self.cfg
        if not cfg["load"]:
            return 1
        chosen = megatron_ckpt.choose(cfg["load"], ckpt_step=cfg["ckpt_step"], non_persistent_dir=cfg["np_dir"])
        if chosen is None:
            return 1  # no tracker: Bridge starts from random weights without a word
        path, iteration = chosen
        if cfg["ckpt_step"] is not None:
            self.print_rank_0(f"Loading checkpoint from iteration {cfg['ckpt_step']} (specified via ckpt_step)")
        self.print_rank_0(P.loading_line(cfg["load"], iteration))
        first, mine, state = megatron_ckpt.load(path, self.rank)
        model.load_state_dict(first["model"])
        self._pending_optimizer = first["optimizer"]
        rng = mine.get("rng_state")
        if rng:
            random.setstate(rng["random_rng_state"])
            torch.set_rng_state(rng["torch_rng_state"])
            if self.cuda and rng.get("cuda_rng_state") is not None:
                torch.cuda.set_rng_state(rng["cuda_rng_state"], self.device)
        step = int(state["step"])
        self.consumed = int(state["consumed_train_samples"])
        self.consumed_valid = int(state["consumed_valid_samples"])
        self.flops_so_far = float(state["floating_point_operations_so_far"])
        meta = first.get("smoke") or {}
        self.skipped_total = int(meta.get("skipped_iters_total", 0))
        self.nan_total = int(meta.get("nan_iters_total", 0))
        self.summary["resumed_from"] = step
        self.print_rank_0(P.loaded_line(cfg["load"], step))
        if meta.get("world_size") not in (None, self.world):
            _note(
                f"warning: checkpoint was written with world_size={meta['world_size']}, now {self.world}: "
                "the data order differs from an uninterrupted run"
            )
        return step + 1

    # ---- training --------------------------------------------------------------------------
    def lr_at(self, step: int) -> float:
        warm = self.cfg["lr_warmup_iters"]
        if warm > 0 and step <= warm:
            return self.cfg["lr"] * step / warm
        return self.cfg["lr"]

    def train(self):
        cfg = self.cfg
        torch.manual_seed(cfg["seed"])
        random.seed(cfg["seed"])
        if self.cuda:
            torch.cuda.manual_seed(cfg["seed"])
        model = TinyGPT(
            cfg["vocab_size"],
            cfg["seq_length"],
            cfg["hidden_size"],
            cfg["num_layers"],
            cfg["num_attention_heads"],
            cfg["ffn_hidden_size"],
        )
        self.params = sum(p.numel() for p in model.parameters())
        self.consumed = self.consumed_valid = 0
        self.flops_so_far = 0.0
        self.skipped_total = self.nan_total = 0
        self._pending_optimizer = None
        start_step = self.load(model)
        model.to(self.device)
        self.model = DDP(model, device_ids=[self.local_rank] if self.cuda else None)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=cfg["lr"], betas=(0.9, 0.95), weight_decay=cfg["weight_decay"]
        )
        if self._pending_optimizer is not None:
            self.optimizer.load_state_dict(self._pending_optimizer)
            self._pending_optimizer = None
        self.summary["start_step"] = start_step
        self.summary["steps_completed"] = start_step - 1
        self.summary["consumed_samples"] = self.consumed
        self.print_rank_0(P.starting_line(start_step - 1))
        should_exit = self.run_loop(start_step)
        if should_exit:
            # MB train.py:816 sys.exit(0); pretrain.py:201-214 logs it on every rank and re-raises: status 0.
            print(P.PRETRAIN_FAILED.format(rank=self.rank, kind="SystemExit", error=0), file=sys.stderr, flush=True)
            print("SystemExit: 0", file=sys.stderr, flush=True)
            return
        self.barrier_and_log(P.TRAINING_DONE)
        if cfg["eval_iters"] > 0:  # post-training validation and test (MB pretrain.py:170-198)
            n = self.summary["steps_completed"]
            self.evaluate(f"iteration {n} on validation set", "valid")
            self.evaluate(f"iteration {n} on test set", "test")

    def evaluate(self, prefix: str, stream: str) -> None:
        cfg = self.cfg
        table = bigram_table(cfg["seed"], cfg["vocab_size"])
        self.model.eval()
        total = torch.zeros((), device=self.device)
        with torch.no_grad():
            for i in range(cfg["eval_iters"]):
                x, y = synthetic_batch(
                    cfg["seed"],
                    i,
                    self.rank,
                    0,
                    cfg["micro_batch_size"],
                    cfg["seq_length"],
                    cfg["vocab_size"],
                    table,
                    stream=stream,
                )
                logits = self.model(x.to(self.device))
                total += F.cross_entropy(logits.reshape(-1, cfg["vocab_size"]), y.to(self.device).reshape(-1))
        self.model.train()
        dist.all_reduce(total)
        loss = float(total.item()) / (self.world * cfg["eval_iters"])
        self.consumed_valid += cfg["eval_iters"] * cfg["micro_batch_size"] * self.world
        self.summary["validation"].append([prefix, loss])
        for line in P.validation_lines(prefix, {P.LOSS_KEY: loss}):
            self.print_rank_last(line)

    def _signals_received(self) -> bool:
        """DistributedSignalHandler.signals_received: an all_gather of every rank's flag."""
        flag = torch.tensor([1 if _SIGNAL["received"] else 0], dtype=torch.int32, device=self.device)
        flags = [torch.zeros_like(flag) for _ in range(self.world)]
        dist.all_gather(flags, flag)
        return any(int(f.item()) for f in flags)

    def _loader(self, start_step: int):
        cfg = self.cfg
        ds = StepBatches(
            seed=cfg["seed"],
            rank=self.rank,
            start=start_step,
            iters=cfg["train_iters"],
            accum=cfg["grad_accum"],
            batch=cfg["micro_batch_size"],
            seq=cfg["seq_length"],
            vocab=cfg["vocab_size"],
            table=bigram_table(cfg["seed"], cfg["vocab_size"]),
        )
        workers = cfg["num_workers"]
        init = _WorkerInit(cfg["exit_signal"]) if (workers and cfg["handler_for_dataloader"]) else None
        return torch.utils.data.DataLoader(
            ds, batch_size=None, shuffle=False, num_workers=workers, persistent_workers=workers > 0, worker_init_fn=init
        )

    def run_loop(self, start_step: int) -> bool:
        """MB train.py's loop; returns True when it exits early (signal, exit interval, duration)."""
        cfg = self.cfg
        iters = cfg["train_iters"]
        params = [p for p in self.model.parameters() if p.requires_grad]
        accum, mbs, seq, vocab, gbs = (
            cfg["grad_accum"],
            cfg["micro_batch_size"],
            cfg["seq_length"],
            cfg["vocab_size"],
            cfg["global_batch_size"],
        )
        interval = {"loss": 0.0, "n": 0, "time": 0.0, "steps": 0, "skipped": 0, "nan": 0}
        traced = {"fwd": 0.0, "data": 0.0, "fb": 0.0, "opt": 0.0}  # this rank's seconds in the interval
        slow = cfg["slow_ms"] / 1000.0 if cfg["slow_rank"] in (None, self.rank) else 0.0
        flops_per_step = 6.0 * self.params * gbs * seq
        train_time, exit_reason, should_exit = 0.0, "completed", False
        step = start_step - 1  # completed steps (train_state.step)
        loader = self._loader(start_step) if step < iters else None
        batches = iter(loader) if loader is not None else None
        if self.rank == 0 and step < iters:
            _note(
                f"training steps {start_step}..{iters}: global batch {gbs} = micro {mbs} x dp {self.world} "
                f"x grad-accum {accum}, seq {seq}, vocab {vocab}"
            )
        while step < iters:
            if (
                cfg["fail_at_step"] == step + 1
                and cfg["fail_rank"] in (None, self.rank)
                and cfg["fail_node"] in ("", socket.gethostname())
            ):
                raise InjectedFailure(
                    cfg["fail_message"] or f"smoke.fail_at_step={step + 1}: injected failure on rank {self.rank}"
                )
            t0 = time.perf_counter()
            lr = self.lr_at(step + 1)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            self.optimizer.zero_grad(set_to_none=True)
            loss_sum = torch.zeros((), device=self.device)
            for micro in range(accum):
                td = time.perf_counter()
                x, y = next(batches)
                x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
                tf = time.perf_counter()
                traced["data"] += tf - td
                ctx = self.model.no_sync() if micro < accum - 1 else contextlib.nullcontext()
                with ctx:
                    logits = self.model(x)
                    loss = F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
                    if slow:
                        time.sleep(slow)
                    traced["fwd"] += time.perf_counter() - tf
                    (loss / accum).backward()
                loss_sum += loss.detach()
            to = time.perf_counter()
            traced["fb"] += to - t0
            max_norm = cfg["clip_grad"] if cfg["clip_grad"] > 0 else float("inf")
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
            skipped = not math.isfinite(grad_norm)
            if not skipped:
                self.optimizer.step()
            traced["opt"] += time.perf_counter() - to
            if cfg["step_sleep"] > 0:
                time.sleep(cfg["step_sleep"])
            red = loss_sum / accum
            dist.all_reduce(red)
            step_loss = float(red.item()) / self.world
            step += 1
            step_time = max(time.perf_counter() - t0, 1e-9)
            train_time += step_time
            self.consumed += gbs
            self.flops_so_far += flops_per_step
            nan = not math.isfinite(step_loss)
            self.skipped_total += int(skipped)
            self.nan_total += int(nan)
            for k, v in (("skipped", int(skipped)), ("nan", int(nan)), ("time", step_time), ("steps", 1)):
                interval[k] += v
            if not nan:
                interval["loss"] += step_loss
                interval["n"] += 1
            s = self.summary
            s["losses"].append([step, step_loss])
            if s["first_loss"] is None:
                s["first_loss"] = step_loss
            s["final_loss"] = step_loss
            s["steps_completed"] = step
            s["steps_this_run"] += 1
            s["consumed_samples"] = self.consumed
            if step % cfg["log_interval"] == 0:
                per = interval["time"] / max(interval["steps"], 1)
                tflops = flops_per_step / per / self.world / 1e12
                self.print_rank_0(P.step_time_line(per, tflops))
                avg = interval["loss"] / interval["n"] if interval["n"] else float("nan")
                self.print_rank_last(
                    P.iteration_line(
                        iteration=step,
                        train_iters=iters,
                        consumed=self.consumed,
                        elapsed_ms=per * 1000.0,
                        lr=lr,
                        global_batch=gbs,
                        losses={P.LOSS_KEY: avg},
                        loss_scale=1.0,
                        grad_norm=grad_norm,
                        skipped=interval["skipped"],
                        nan=interval["nan"],
                    )
                )
                self._log_timers_and_stragglers(traced, interval["steps"], flops_per_step)
                interval = {"loss": 0.0, "n": 0, "time": 0.0, "steps": 0, "skipped": 0, "nan": 0}
                traced = {"fwd": 0.0, "data": 0.0, "fb": 0.0, "opt": 0.0}
            if cfg["eval_interval"] and step % cfg["eval_interval"] == 0 and cfg["eval_iters"] > 0:
                self.evaluate(f"iteration {step}", "valid")
            # checkpoint_and_decide_exit (MB train.py:1374-1531), in its order.
            if cfg["exit_signal_handler"] and self._signals_received():
                if cfg["save"]:
                    self.save(step)
                self.barrier_and_log(P.EXIT_SIGNAL)
                exit_reason, should_exit = "signal", True
                break
            saved = False
            if cfg["save"] and cfg["save_interval"] and step % cfg["save_interval"] == 0:
                self.save(step)
                saved = True
            elif cfg["save"] and cfg["np_type"] == "global" and cfg["np_interval"] and step % cfg["np_interval"] == 0:
                self.save(step, non_persistent=True)
            if cfg["exit_duration"]:
                minutes = torch.tensor([(time.time() - self.t_start) / 60.0], dtype=torch.float64, device=self.device)
                dist.all_reduce(minutes, op=dist.ReduceOp.MAX)
                if float(minutes.item()) > cfg["exit_duration"]:
                    if cfg["save"] and not saved:
                        self.save(step)
                    self.barrier_and_log(P.EXIT_DURATION.format(minutes=float(minutes.item())))
                    exit_reason, should_exit = "exit_duration", True
                    break
            if cfg["exit_interval"] and step % cfg["exit_interval"] == 0:
                if cfg["save"] and not saved:
                    self.save(step)
                self.barrier_and_log(P.EXIT_INTERVAL.format(step=step))
                exit_reason, should_exit = "exit_interval", True
                break
        # The end-of-training save, unless the last periodic save already has it (MB train.py:760-777).
        if (
            not should_exit
            and cfg["save"]
            and step == iters
            and self.summary["steps_this_run"]
            and (not cfg["save_interval"] or step % cfg["save_interval"] != 0)
        ):
            self.save(step)
        del batches, loader  # workers end here, not at interpreter exit
        if train_time > 0 and self.summary["steps_this_run"]:
            tokens = self.summary["steps_this_run"] * gbs * seq
            self.summary["tokens_per_s"] = round(tokens / train_time, 3)
        self.summary["exit_reason"] = exit_reason
        if self.rank == 0:
            s = self.summary
            ran = (
                f"steps {s['start_step']}..{s['steps_completed']}"
                if s["steps_this_run"]
                else f"no steps run (at iteration {s['steps_completed']})"
            )
            _note(
                f"done: exit_reason={exit_reason} {ran} first_loss={s['first_loss']} "
                f"final_loss={s['final_loss']} tokens/s={s['tokens_per_s']} checkpoints={s['checkpoints']}"
            )
        return should_exit


def _ensure_dist_env():
    """Allow `python smoke.py ...` without torchrun: a single-process world on localhost."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("LOCAL_WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    overrides, unparsed = parse_overrides(argv)
    unknown = sorted(k for k in overrides if k not in KNOWN_KEYS)
    _ensure_dist_env()
    try:
        cfg = build_config(overrides, _world_size_from_env())
    except SmokeError as e:
        _fail(str(e))
    if cfg["exit_signal_handler"] and signal.getsignal(cfg["exit_signal"]) is not _on_exit_signal:
        install_exit_handler(cfg["exit_signal"])

    smoke = Smoke(cfg, overrides, unknown, unparsed)
    if smoke.rank == 0 and (unknown or unparsed):
        _note(f"ignoring unknown overrides: {unknown + unparsed}")
    try:
        smoke.preflight()
        smoke.train()
        smoke.write_summary()
    except SmokeError as e:
        smoke.summary["exit_reason"] = "failed"
        smoke.summary["error"] = str(e)
        with contextlib.suppress(Exception):
            smoke.write_summary()
        _fail(str(e))
    except Exception as e:
        smoke.summary["exit_reason"] = "failed"
        smoke.summary["error"] = f"{type(e).__name__}: {e}"
        with contextlib.suppress(Exception):
            smoke.write_summary()
        raise
    if dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    try:
        from torch.distributed.elastic.multiprocessing.errors import record
    except ImportError:  # pragma: no cover - very old torch

        def record(fn):
            return fn

    exit_code = record(main)()
    # Success: everything is written and fsynced and the process group is destroyed, so skip the
    # interpreter teardown, which takes seconds once DDP has imported torch._dynamo.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code or 0)
