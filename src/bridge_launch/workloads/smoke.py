#!/usr/bin/env python3
"""bridge-launch smoke workload: preflight checks plus a tiny, resumable training run.

bridge-launch copies this file into the run directory and starts it under torchrun
(one torchrun per node, ``--nproc-per-node`` workers) on every backend::

    torchrun ... smoke.py train.train_iters=100 +smoke.step_sleep=0.1 checkpoint.save=ckpt

It depends ONLY on the Python standard library and torch (it never imports bridge_launch),
so it runs unchanged inside any container that has torch.

What it does
------------
1. Parses Hydra-style ``KEY=VALUE`` / ``+KEY=VALUE`` / ``++KEY=VALUE`` overrides, the same tokens
   Megatron-Bridge's ``run_recipe.py`` receives.  Unknown keys are recorded, never errors.
2. Preflight: host / rank / local rank / backend (NCCL on CUDA, else gloo on CPU), GPU model,
   NCCL version, multi-node NVLink (MNNVL) status (best effort, "unknown" when it cannot tell),
   and an all-reduce bus-bandwidth sweep (nccl-tests formula: busbw = algbw * 2(n-1)/n).
3. Trains a small decoder-only transformer LM (DDP) on synthetic tokens that are a deterministic
   function of (seed, step, rank, micro-batch), drawn from a fixed noisy bigram chain so the loss
   visibly drops.  A resumed run sees exactly the data an uninterrupted run would have seen.
4. Logs Megatron-format iteration lines on rank 0 (same parser as real Megatron-Bridge logs).
5. Saves Megatron-layout checkpoints: ``{save}/iter_{N:07d}/mp_rank_00/model_optim_rng.pt`` and
   ``{save}/latest_checkpointed_iteration.txt``; the iteration dir is written under a temporary
   name and renamed, and the tracker is replaced atomically afterwards, so a crash never leaves a
   tracker pointing at a partial checkpoint.  ``checkpoint.load`` resumes from the tracker.
6. SIGTERM (always) and SIGUSR1/SIGUSR2 (when ``train.exit_signal_handler`` is true, the default)
   request a graceful stop: all ranks agree at the end of the current step (all-reduce of the
   flag), save a checkpoint, write the summary with ``"exit_reason": "signal"`` and exit 0.
7. Rank 0 writes a JSON summary to ``$BRIDGE_LAUNCH_RUN_DIR/summary.json`` (or
   ``./smoke_summary.json``).  ``exit_reason`` is ``completed``, ``signal`` or ``failed``.
8. Bad arguments exit with status 2 and a one-line ``smoke.py: error: ...`` message.

Summary notes: ``steps_completed`` is the last completed global iteration (so a resumed run that
finishes reports ``train_iters``); ``steps_this_run`` counts the steps executed by this process;
``start_step`` is the first iteration executed by this run (saved iteration + 1 after a resume);
``losses`` holds ``[step, loss]`` for the steps executed by this run.
``gpu.mnnvl`` is one of ``likely`` / ``no`` / ``disabled`` / ``unknown`` with ``gpu.mnnvl_reason``.

Run without torchrun (``python smoke.py ...``) it behaves as a single-process world.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import math
import os
import pickle
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

# --------------------------------------------------------------------------------------------
# Exit-signal flag.  The SIGTERM handler is installed before ``import torch`` (which takes
# seconds) so that a preemption arriving during start-up is still handled gracefully.
# --------------------------------------------------------------------------------------------
_EXIT_SIGNAL: dict = {"signum": None}


def _on_exit_signal(signum, frame):  # noqa: ARG001 - signal handler signature
    if _EXIT_SIGNAL["signum"] is None:
        _EXIT_SIGNAL["signum"] = signum
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = str(signum)
        rank = os.environ.get("RANK", "0")
        msg = (
            f"[smoke] rank {rank}: received {name}; will save a checkpoint and exit "
            "at the end of the current step\n"
        )
        try:  # os.write is safe inside a signal handler; print() is not (reentrancy)
            os.write(2, msg.encode())
        except OSError:
            pass


def _install_signal_handler(sig) -> None:
    signal.signal(sig, _on_exit_signal)
    with contextlib.suppress(AttributeError, OSError, ValueError):
        # Restart interrupted system calls (SA_RESTART) so collectives are not hit by EINTR.
        signal.siginterrupt(sig, False)


PROG = "smoke.py"
TRACKER = "latest_checkpointed_iteration.txt"
CKPT_FILE = os.path.join("mp_rank_00", "model_optim_rng.pt")
DATA_NOISE = 0.1  # probability that a synthetic token ignores the bigram chain


class SmokeError(Exception):
    """An expected, user-facing error: reported as one line, exit status 2."""


class InjectedFailure(RuntimeError):
    """Raised by smoke.fail_at_step (failure-path tests)."""


# --------------------------------------------------------------------------------------------
# Hydra-style override parsing (lenient)
# --------------------------------------------------------------------------------------------
_INT_RE = re.compile(r"^[+-]?\d[\d_]*$")
_FLOAT_RE = re.compile(r"^[+-]?(?:(?:\d[\d_]*)?\.\d[\d_]*|\d[\d_]*\.?)(?:[eE][+-]?\d+)?$")
_KEY_RE = re.compile(r"^[A-Za-z_][\w\-]*(?:[.@/][\w\-]+)*$")


def _parse_quoted(s: str, i: int):
    """Parse a quoted string starting at s[i]; return (value, index after closing quote)
    or (None, len(s)) when unterminated.  Backslash escapes quotes and backslashes; a backslash
    before any other character is kept literally (Windows-ish paths survive)."""
    quote = s[i]
    out = []
    j = i + 1
    while j < len(s):
        c = s[j]
        if c == "\\" and j + 1 < len(s):
            nxt = s[j + 1]
            if nxt in ("\\", "'", '"'):
                out.append(nxt)
                j += 2
                continue
            out.append(c)
            j += 1
            continue
        if c == quote:
            return "".join(out), j + 1
        out.append(c)
        j += 1
    return None, len(s)


def _split_top_level(s: str):
    """Split the inside of a [...] list on top-level commas; None if unbalanced."""
    items, cur, depth, j = [], [], 0, 0
    while j < len(s):
        c = s[j]
        if c in "'\"":
            val, end = _parse_quoted(s, j)
            if val is None:
                return None
            cur.append(s[j:end])
            j = end
            continue
        if c in "[{(":
            depth += 1
        elif c in "]})":
            depth -= 1
            if depth < 0:
                return None
        if c == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        j += 1
    if depth != 0:
        return None
    items.append("".join(cur))
    if len(items) == 1 and not items[0].strip():
        return []
    return items


def parse_value(text: str):
    """Convert one Hydra override value: int, float, bool, null, quoted string, [list]."""
    s = text.strip()
    if s == "":
        return ""
    if s[0] in "'\"":
        val, end = _parse_quoted(s, 0)
        if val is not None and end == len(s):
            return val
        return s
    if s[0] == "[" and s[-1] == "]":
        items = _split_top_level(s[1:-1])
        if items is not None:
            return [parse_value(x) for x in items]
        return s
    low = s.lower()
    if low == "true":
        return True
    if low == "false":
        return False
    if low == "null":
        return None
    if _INT_RE.match(s):
        return int(s.replace("_", ""))
    if _FLOAT_RE.match(s) and any(ch.isdigit() for ch in s):
        return float(s.replace("_", ""))
    if low in ("inf", "+inf", "-inf", "nan", "+nan", "-nan"):
        return float(low)
    return s


def parse_overrides(tokens):
    """Parse argv tokens.  Returns (overrides: dict key->value, unparsed: list of tokens).
    Leading '+'/'++' are stripped from keys; the last occurrence of a key wins."""
    overrides: dict = {}
    unparsed: list = []
    skip_next = False
    for tok in tokens:
        if skip_next:
            skip_next = False
            continue
        if tok in ("--local-rank", "--local_rank"):  # legacy torch.distributed.launch
            skip_next = True
            continue
        if tok.startswith(("--local-rank=", "--local_rank=")):
            continue
        if "=" not in tok or tok.startswith(("-", "~")):
            unparsed.append(tok)
            continue
        key, _, value = tok.partition("=")
        key = key.strip()
        if key.startswith("++"):
            key = key[2:]
        elif key.startswith("+"):
            key = key[1:]
        if not _KEY_RE.match(key):
            unparsed.append(tok)
            continue
        overrides[key] = parse_value(value)
    return overrides, unparsed


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------
DEFAULT_BUSBW_SIZES = [1024, 65536, 1048576, 8388608]

KNOWN_KEYS = frozenset(
    {
        "train.train_iters",
        "train.micro_batch_size",
        "train.global_batch_size",
        "train.exit_signal_handler",
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
        "logger.log_interval",
        "smoke.busbw_sizes",
        "smoke.busbw_iters",
        "smoke.step_sleep",
        "smoke.fail_at_step",
        "smoke.fail_rank",
        "smoke.fail_message",
    }
)


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
        cfg["micro_batch_size"] * world_size
        if _is_null(gbs)
        else _as_int("train.global_batch_size", gbs, minimum=1)
    )
    per_step = cfg["micro_batch_size"] * world_size
    if cfg["global_batch_size"] % per_step != 0:
        raise SmokeError(
            f"train.global_batch_size={cfg['global_batch_size']} is not divisible by "
            f"train.micro_batch_size * data-parallel size = {cfg['micro_batch_size']} * {world_size} = {per_step}"
        )
    cfg["grad_accum"] = cfg["global_batch_size"] // per_step
    cfg["seq_length"] = _as_int("dataset.seq_length", get("dataset.seq_length", "model.seq_length", default=64), minimum=1)
    cfg["num_layers"] = _as_int("model.num_layers", get("model.num_layers", default=2), minimum=1)
    cfg["hidden_size"] = _as_int("model.hidden_size", get("model.hidden_size", default=64), minimum=1)
    cfg["num_attention_heads"] = _as_int("model.num_attention_heads", get("model.num_attention_heads", default=4), minimum=1)
    if cfg["hidden_size"] % cfg["num_attention_heads"] != 0:
        raise SmokeError(
            f"model.hidden_size={cfg['hidden_size']} is not divisible by "
            f"model.num_attention_heads={cfg['num_attention_heads']}"
        )
    ffn = get("model.ffn_hidden_size")
    cfg["ffn_hidden_size"] = 4 * cfg["hidden_size"] if _is_null(ffn) else _as_int("model.ffn_hidden_size", ffn, minimum=1)
    vocab_key = "model.vocab_size" if "model.vocab_size" in o else "tokenizer.vocab_size"
    cfg["vocab_size"] = _as_int(vocab_key, get("model.vocab_size", "tokenizer.vocab_size", default=256), minimum=2)
    cfg["lr"] = _as_float("optimizer.lr", get("optimizer.lr", default=3e-3), minimum=0.0)
    cfg["weight_decay"] = _as_float("optimizer.weight_decay", get("optimizer.weight_decay", default=0.01), minimum=0.0)
    cfg["clip_grad"] = _as_float("optimizer.clip_grad", get("optimizer.clip_grad", default=1.0), minimum=0.0)
    cfg["lr_warmup_iters"] = _as_int("scheduler.lr_warmup_iters", get("scheduler.lr_warmup_iters", default=0), minimum=0)
    cfg["seed"] = _as_int("rng.seed", get("rng.seed", default=1234), minimum=0)
    cfg["save"] = _as_path("checkpoint.save", get("checkpoint.save"))
    cfg["load"] = _as_path("checkpoint.load", get("checkpoint.load"))
    cfg["save_interval"] = _as_int("checkpoint.save_interval", get("checkpoint.save_interval"), minimum=1, optional=True)
    cfg["log_interval"] = _as_int("logger.log_interval", get("logger.log_interval", default=1), minimum=1)
    cfg["busbw_sizes"] = _as_sizes("smoke.busbw_sizes", get("smoke.busbw_sizes", default=list(DEFAULT_BUSBW_SIZES)))
    cfg["busbw_iters"] = _as_int("smoke.busbw_iters", get("smoke.busbw_iters", default=5), minimum=1)
    cfg["step_sleep"] = _as_float("smoke.step_sleep", get("smoke.step_sleep", default=0.0), minimum=0.0)
    cfg["fail_at_step"] = _as_int("smoke.fail_at_step", get("smoke.fail_at_step"), minimum=0, optional=True)
    cfg["fail_rank"] = _as_int("smoke.fail_rank", get("smoke.fail_rank"), minimum=0, optional=True)
    # Lets failure tests choose what the failure looks like in the log (e.g. an OOM or an NCCL timeout).
    cfg["fail_message"] = str(get("smoke.fail_message", default="") or "")
    cfg["exit_signal_handler"] = _as_bool("train.exit_signal_handler", get("train.exit_signal_handler", default=True))
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
    # Before the (slow) torch import: handle SIGTERM gracefully and reject bad arguments fast.
    _install_signal_handler(signal.SIGTERM)
    try:
        build_config(parse_overrides(sys.argv[1:])[0], _world_size_from_env())
    except SmokeError as _e:
        _fail(str(_e))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


# --------------------------------------------------------------------------------------------
# Model and data
# --------------------------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)

    def forward(self, x):
        b, t, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
        q, k, v = (z.view(b, t, self.heads, h // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, h))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyGPT(nn.Module):
    """Decoder-only transformer LM (pre-LN, causal self-attention, learned positions)."""

    def __init__(self, vocab: int, seq: int, hidden: int, layers: int, heads: int, ffn: int):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, hidden)
        self.pos_emb = nn.Embedding(seq, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads, ffn) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, tokens):
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok_emb(tokens) + self.pos_emb(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def _mix_seed(*parts) -> int:
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def bigram_table(seed: int, vocab: int):
    g = torch.Generator().manual_seed(_mix_seed("bigram", seed, vocab))
    return torch.randperm(vocab, generator=g)


def synthetic_batch(seed, step, rank, micro, batch, seq, vocab, table):
    """Tokens are a pure function of (seed, step, rank, micro): a noisy walk on a fixed bigram
    permutation, so next-token prediction is learnable and resumed runs see identical data."""
    g = torch.Generator().manual_seed(_mix_seed("data", seed, step, rank, micro))
    n = seq + 1
    toks = torch.empty(batch, n, dtype=torch.long)
    toks[:, 0] = torch.randint(vocab, (batch,), generator=g)
    noise = torch.rand(batch, n, generator=g) < DATA_NOISE
    rnd = torch.randint(vocab, (batch, n), generator=g)
    for i in range(1, n):
        toks[:, i] = torch.where(noise[:, i], rnd[:, i], table[toks[:, i - 1]])
    return toks[:, :-1], toks[:, 1:]


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------
def _log(msg: str) -> None:
    print(f"[smoke] {msg}", flush=True)


def _fsync_dir(path: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


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
    _fsync_dir(d)


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


def _nccl_version():
    try:
        v = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001 - best effort
        return None
    if isinstance(v, tuple):
        return ".".join(str(x) for x in v)
    if isinstance(v, int):  # old encoding: 2.x.y -> 2xxyy / 2x0y
        major, rest = divmod(v, 10000) if v >= 10000 else divmod(v, 1000)
        minor, patch = divmod(rest, 100)
        return f"{major}.{minor}.{patch}"
    return str(v)


def parse_fabric(text: str) -> list:
    """Parse the 'Fabric' sections of `nvidia-smi -q` (one dict per GPU)."""
    sections, cur, indent = [], None, 0
    for line in text.splitlines():
        stripped = line.strip()
        ind = len(line) - len(line.lstrip())
        if stripped == "Fabric":
            cur, indent = {}, ind
            sections.append(cur)
            continue
        if cur is None or not stripped:
            continue
        if ind <= indent:
            cur = None
            continue
        if ":" in stripped:
            k, _, v = stripped.partition(":")
            k, v = k.strip(), v.strip()
            if v and k not in cur:
                cur[k] = v
    return sections


def _query_fabric():
    """Best-effort GPU fabric state of this node via nvidia-smi; None when unavailable."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "-q"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    sections = parse_fabric(out.stdout)
    if not sections:
        return {"state": "absent"}
    first = sections[0]
    return {
        "state": first.get("State", "unknown"),
        "status": first.get("Status", "unknown"),
        "clique_id": first.get("CliqueId") or first.get("Clique ID"),
        "cluster_uuid": first.get("ClusterUUID") or first.get("Cluster UUID"),
        "uniform": all(s.get("State") == first.get("State") for s in sections),
        "gpus": len(sections),
    }


def mnnvl_status(fabric_by_host: dict, nodes: int):
    """Return (status, reason).  status: likely / no / disabled / unknown."""
    env = os.environ.get("NCCL_MNNVL_ENABLE")
    env_desc = f"NCCL_MNNVL_ENABLE={env}" if env is not None else "NCCL_MNNVL_ENABLE unset (NCCL auto)"
    if env is not None and env.strip() == "0":
        return "disabled", "NCCL_MNNVL_ENABLE=0"
    if not fabric_by_host or any(f is None for f in fabric_by_host.values()):
        return "unknown", f"nvidia-smi fabric state unavailable on some node; {env_desc}"
    states = {h: (f.get("state"), f.get("status")) for h, f in fabric_by_host.items()}
    for host, (state, _status) in states.items():
        if state in ("absent", "N/A", "Not Supported", "Not supported"):
            return "no", f"no NVLink fabric (state {state}) on {host}; {env_desc}"
    if all(s == "Completed" and st == "Success" for s, st in states.values()):
        if nodes <= 1:
            return "no", f"single node: NVLink fabric registered but MNNVL needs >1 node; {env_desc}"
        cliques = {(f.get("cluster_uuid"), f.get("clique_id")) for f in fabric_by_host.values()}
        if len(cliques) == 1 and None not in next(iter(cliques)):
            return "likely", (
                f"all {nodes} nodes share NVLink clique {next(iter(cliques))[1]} "
                f"(fabric registered); {env_desc}; confirm with NCCL_DEBUG=INFO (look for MNNVL)"
            )
        return "no", f"nodes are in different NVLink cliques {sorted(map(str, cliques))}; {env_desc}"
    return "unknown", f"fabric states {sorted(set(states.values()))}; {env_desc}"


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------
class Smoke:
    def __init__(self, cfg: dict, overrides: dict, unknown: list, unparsed: list):
        self.cfg = cfg
        self.overrides = overrides
        self.unknown = unknown
        self.unparsed = unparsed
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
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
            "tokens_per_s": None,
            "world_size": self.world,
            "nodes": None,
            "hosts": None,
            "backend": self.backend,
            "torch_version": torch.__version__,
            "python": sys.executable,
            "busbw": [],
            "gpu": None,
            "argv": list(sys.argv),
            # Which of the secrets bridge-launch passed by name are present (never their values).
            "secrets_present": {
                n: bool(os.environ.get(n))
                for n in os.environ.get("BRIDGE_LAUNCH_SECRET_NAMES", "").split(",") if n
            },
            "overrides": overrides,
            "unknown_keys": unknown,
            "unparsed_args": unparsed,
            "exit_reason": None,
            "error": None,
            "resumed_from": None,
            "checkpoints": [],
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
    # torch's *_object collectives need numpy (tensor.numpy()) in torch 2.13; this file must
    # need only torch, so objects travel as pickled bytes in uint8 tensors.
    def _bytes_tensor(self, data: bytes):
        return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(self.device) if data else \
            torch.zeros(0, dtype=torch.uint8, device=self.device)

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
        return [pickle.loads(bytes(c[: int(n.item())].cpu().tolist())) for c, n in zip(chunks, sizes)]

    def broadcast_object(self, obj, src: int = 0):
        data = self._bytes_tensor(pickle.dumps(obj) if self.rank == src else b"")
        size = torch.tensor([data.numel()], dtype=torch.long, device=self.device)
        dist.broadcast(size, src=src)
        buf = data if self.rank == src else torch.zeros(int(size.item()), dtype=torch.uint8, device=self.device)
        dist.broadcast(buf, src=src)
        return obj if self.rank == src else pickle.loads(bytes(buf.cpu().tolist()))

    def barrier(self):
        if self.cuda:
            dist.barrier(device_ids=[self.local_rank])
        else:
            dist.barrier()

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
        _log(f"summary written to {path} (exit_reason={self.summary['exit_reason']})")

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
        _log(
            f"host={self.host} rank={self.rank}/{self.world} local_rank={self.local_rank}/{self.local_world} "
            f"backend={self.backend} device={self.device}" + (f" gpu={gpu_name!r}" if gpu_name else "")
        )
        fabric = _query_fabric() if (self.cuda and self.local_rank == 0) else None
        info = {"host": self.host, "rank": self.rank, "local_rank": self.local_rank,
                "gpu": gpu_name, "fabric": fabric}
        infos = self.all_gather_objects(info)
        hosts = [i["host"] for i in infos]
        self.summary["hosts"] = hosts
        self.summary["nodes"] = len(set(hosts))
        if self.cuda:
            fabric_by_host = {i["host"]: i["fabric"] for i in infos if i["local_rank"] == 0}
            mnnvl, reason = mnnvl_status(fabric_by_host, self.summary["nodes"])
            props = torch.cuda.get_device_properties(self.local_rank)
            self.summary["gpu"] = {
                "name": gpu_name,
                "names": sorted({i["gpu"] for i in infos if i["gpu"]}),
                "devices_per_node": torch.cuda.device_count(),
                "memory_gib": round(props.total_memory / 2**30, 1),
                "capability": f"{props.major}.{props.minor}",
                "cuda": torch.version.cuda,
                "nccl_version": _nccl_version(),
                "mnnvl": mnnvl,
                "mnnvl_reason": reason,
                "fabric": fabric_by_host,
            }
        if self.rank == 0:
            _log(f"torch {torch.__version__} world_size={self.world} nodes={self.summary['nodes']} "
                 f"backend={self.backend} hosts={sorted(set(hosts))}")
            g = self.summary["gpu"]
            if g:
                _log(f"gpu={g['name']!r} x{g['devices_per_node']}/node ({g['memory_gib']} GiB, cc {g['capability']}) "
                     f"cuda={g['cuda']} nccl={g['nccl_version']}")
                _log(f"mnnvl={g['mnnvl']} ({g['mnnvl_reason']})")
        self.busbw_sweep()

    def busbw_sweep(self):
        sizes, iters = self.cfg["busbw_sizes"], self.cfg["busbw_iters"]
        if not sizes:
            return
        n = self.world
        factor = 2.0 * (n - 1) / n
        rows = []
        for size in sizes:
            numel = max(1, size // 4)
            buf = torch.ones(numel, dtype=torch.float32, device=self.device)
            for _ in range(2):  # warm-up (also creates the NCCL communicator)
                dist.all_reduce(buf)
            if self.cuda:
                torch.cuda.synchronize()
            self.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(buf)
            if self.cuda:
                torch.cuda.synchronize()
            dt = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64, device=self.device)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)  # slowest rank defines the time
            t = float(dt.item())
            nbytes = numel * 4
            algbw = nbytes / t / 1e9 if t > 0 else 0.0
            rows.append({
                "size_bytes": nbytes,
                "time_us": round(t * 1e6, 3),
                "algbw_gbps": round(algbw, 6),
                "busbw_gbps": round(algbw * factor, 6),
            })
            del buf
        self.summary["busbw"] = rows
        if self.rank == 0:
            _log(f"all-reduce bus bandwidth: world={n} backend={self.backend} dtype=float32 iters={iters} "
                 f"(busbw = algbw * 2(n-1)/n)")
            _log(f"{'size(B)':>12} {'time(us)':>12} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12}")
            for r in rows:
                _log(f"{r['size_bytes']:>12d} {r['time_us']:>12.1f} {r['algbw_gbps']:>12.3f} {r['busbw_gbps']:>12.3f}")

    # ---- checkpointing ---------------------------------------------------------------------
    def _rng_state(self):
        return {
            "random_rng_state": random.getstate(),
            "torch_rng_state": torch.get_rng_state(),
            "cuda_rng_state": torch.cuda.get_rng_state(self.device) if self.cuda else None,
        }

    def save_checkpoint(self, step: int):
        save = self.cfg["save"]
        rng_states = self.all_gather_objects(self._rng_state())
        self.barrier()
        if self.rank == 0:
            t0 = time.perf_counter()
            state = {
                "checkpoint_version": 3.0,
                "iteration": step,
                "model": {k: v.detach().cpu() for k, v in self.model.module.state_dict().items()},
                "optimizer": self.optimizer.state_dict(),
                "opt_param_scheduler": {"max_lr": self.cfg["lr"], "warmup_steps": self.cfg["lr_warmup_iters"],
                                        "num_steps": step},
                "rng_state": rng_states,
                "consumed_train_samples": self.consumed,
                "args": dict(self.cfg),
                "smoke": {"world_size": self.world, "skipped_iters_total": self.skipped_total,
                          "nan_iters_total": self.nan_total},
            }
            os.makedirs(save, exist_ok=True)
            final = os.path.join(save, f"iter_{step:07d}")
            tmp = os.path.join(save, f".iter_{step:07d}.tmp.{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(os.path.dirname(os.path.join(tmp, CKPT_FILE)))
            with open(os.path.join(tmp, CKPT_FILE), "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
            _fsync_dir(os.path.join(tmp, "mp_rank_00"))
            _fsync_dir(tmp)
            if os.path.exists(final):  # re-saving an iteration that exists (e.g. an earlier attempt)
                old = os.path.join(save, f".iter_{step:07d}.old.{os.getpid()}")
                os.rename(final, old)
                os.rename(tmp, final)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.rename(tmp, final)
            _fsync_dir(save)
            atomic_write_text(os.path.join(save, TRACKER), str(step))  # tracker LAST
            _log(f"saved checkpoint iteration {step} to {final} ({(time.perf_counter() - t0) * 1e3:.1f} ms)")
        self.barrier()
        self.summary["checkpoints"].append(step)
        self.last_saved = step

    def load_checkpoint(self):
        """Rank 0 reads the tracker and checkpoint and broadcasts it (works without a shared FS)."""
        load = self.cfg["load"]
        payload = [None]
        if self.rank == 0:
            try:
                payload[0] = ("ok", self._read_checkpoint(load))
            except SmokeError as e:
                payload[0] = ("error", str(e))
            except Exception as e:  # noqa: BLE001 - reported on all ranks as one line
                payload[0] = ("error", f"cannot load checkpoint from {load}: {type(e).__name__}: {e}")
        kind, value = self.broadcast_object(payload[0])
        if kind == "error":
            raise SmokeError(value)
        return value

    @staticmethod
    def _read_checkpoint(load: str):
        tracker = os.path.join(load, TRACKER)
        if not os.path.isfile(tracker):
            return None
        with open(tracker, encoding="utf-8") as f:
            text = f.read().strip()
        if text == "release":
            ckpt_dir = os.path.join(load, "release")
        else:
            try:
                it = int(text)
            except ValueError:
                raise SmokeError(f"bad tracker file {tracker}: {text!r}") from None
            ckpt_dir = os.path.join(load, f"iter_{it:07d}")
        path = os.path.join(ckpt_dir, CKPT_FILE)
        if not os.path.isfile(path):
            raise SmokeError(f"tracker {tracker} names {text!r} but {path} does not exist")
        return torch.load(path, map_location="cpu", weights_only=True)

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
        model = TinyGPT(cfg["vocab_size"], cfg["seq_length"], cfg["hidden_size"], cfg["num_layers"],
                        cfg["num_attention_heads"], cfg["ffn_hidden_size"])
        self.consumed = 0
        self.skipped_total = 0
        self.nan_total = 0
        self.last_saved = None
        start_step = 1
        ckpt = None
        if cfg["load"]:
            ckpt = self.load_checkpoint()
            if ckpt is None:
                if self.rank == 0:
                    _log(f"checkpoint.load={cfg['load']}: no {TRACKER} found; starting from scratch")
            else:
                model.load_state_dict(ckpt["model"])
                start_step = int(ckpt["iteration"]) + 1
                self.consumed = int(ckpt.get("consumed_train_samples", 0))
                meta = ckpt.get("smoke") or {}
                self.skipped_total = int(meta.get("skipped_iters_total", 0))
                self.nan_total = int(meta.get("nan_iters_total", 0))
                self.summary["resumed_from"] = int(ckpt["iteration"])
                self.last_saved = int(ckpt["iteration"])
                if self.rank == 0:
                    _log(f"resumed from {cfg['load']} iteration {ckpt['iteration']}; continuing at step {start_step}")
                    if meta.get("world_size") not in (None, self.world):
                        _log(f"warning: checkpoint was written with world_size={meta['world_size']}, "
                             f"now {self.world}: the data order differs from an uninterrupted run")
        model.to(self.device)
        self.model = DDP(model, device_ids=[self.local_rank] if self.cuda else None)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg["lr"], betas=(0.9, 0.95),
                                           weight_decay=cfg["weight_decay"])
        if ckpt is not None:
            self.optimizer.load_state_dict(ckpt["optimizer"])
            rng = ckpt.get("rng_state") or []
            if len(rng) == self.world and rng[self.rank]:
                mine = rng[self.rank]
                random.setstate(mine["random_rng_state"])
                torch.set_rng_state(mine["torch_rng_state"])
                if self.cuda and mine.get("cuda_rng_state") is not None:
                    torch.cuda.set_rng_state(mine["cuda_rng_state"], self.device)
            del ckpt
        self.summary["start_step"] = start_step
        self.summary["steps_completed"] = start_step - 1
        self.summary["consumed_samples"] = self.consumed
        self.run_loop(start_step)

    def _agree_stop(self) -> bool:
        flag = torch.tensor([1.0 if _EXIT_SIGNAL["signum"] is not None else 0.0], device=self.device)
        dist.all_reduce(flag)
        return flag.item() > 0

    def run_loop(self, start_step: int):
        cfg = self.cfg
        iters = cfg["train_iters"]
        table = bigram_table(cfg["seed"], cfg["vocab_size"])
        params = [p for p in self.model.parameters() if p.requires_grad]
        accum, mbs, seq, vocab = cfg["grad_accum"], cfg["micro_batch_size"], cfg["seq_length"], cfg["vocab_size"]
        gbs = cfg["global_batch_size"]
        interval = {"loss": 0.0, "n": 0, "time": 0.0, "skipped": 0, "nan": 0}
        train_time = 0.0
        exit_reason = "completed"
        if start_step <= iters and self._agree_stop():  # signal arrived during start-up
            exit_reason = "signal"
            start_step = iters + 1
        if self.rank == 0 and start_step <= iters:
            _log(f"training steps {start_step}..{iters}: global batch {gbs} = micro {mbs} x dp {self.world} "
                 f"x grad-accum {accum}, seq {seq}, vocab {vocab}")
        for step in range(start_step, iters + 1):
            if cfg["fail_at_step"] == step and cfg["fail_rank"] in (None, self.rank):
                raise InjectedFailure(cfg["fail_message"]
                                      or f"smoke.fail_at_step={step}: injected failure on rank {self.rank}")
            t0 = time.perf_counter()
            lr = self.lr_at(step)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            self.optimizer.zero_grad(set_to_none=True)
            loss_sum = torch.zeros((), device=self.device)
            for micro in range(accum):
                x, y = synthetic_batch(cfg["seed"], step, self.rank, micro, mbs, seq, vocab, table)
                x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
                ctx = self.model.no_sync() if micro < accum - 1 else contextlib.nullcontext()
                with ctx:
                    logits = self.model(x)
                    loss = F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
                    (loss / accum).backward()
                loss_sum += loss.detach()
            max_norm = cfg["clip_grad"] if cfg["clip_grad"] > 0 else float("inf")
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
            skipped = not math.isfinite(grad_norm)
            if not skipped:
                self.optimizer.step()
            if cfg["step_sleep"] > 0:
                time.sleep(cfg["step_sleep"])
            flag = 1.0 if _EXIT_SIGNAL["signum"] is not None else 0.0
            red = torch.stack([loss_sum / accum, torch.tensor(flag, device=self.device)])
            dist.all_reduce(red)  # one collective: mean loss over ranks + stop agreement
            step_loss = float(red[0].item()) / self.world
            stop = float(red[1].item()) > 0
            # smoke.step_sleep is artificial: keep it out of the timings and tokens/s
            step_time = max(time.perf_counter() - t0 - cfg["step_sleep"], 1e-9)
            train_time += step_time
            self.consumed += gbs
            nan = not math.isfinite(step_loss)
            self.skipped_total += int(skipped)
            self.nan_total += int(nan)
            interval["skipped"] += int(skipped)
            interval["nan"] += int(nan)
            interval["time"] += step_time
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
                if self.rank == 0:
                    n_logged = max(interval["n"], 1)
                    steps_in_interval = cfg["log_interval"]
                    avg_loss = interval["loss"] / n_logged if interval["n"] else float("nan")
                    line = f" [{datetime.datetime.now().strftime('%Y-%m-%d %H:%M:%S')}]"
                    line += f" iteration {step:8d}/{iters:8d} |"
                    line += f" consumed samples: {self.consumed:12d} |"
                    line += f" elapsed time per iteration (ms): {interval['time'] * 1000.0 / steps_in_interval:.1f} |"
                    line += f" learning rate: {lr:.6E} |"
                    line += f" global batch size: {gbs:5d} |"
                    line += f" lm loss: {avg_loss:.6E} |"
                    line += " loss scale: 1.0 |"
                    line += f" grad norm: {grad_norm:.3f} |"
                    line += f" number of skipped iterations: {interval['skipped']:3d} |"
                    line += f" number of nan iterations: {interval['nan']:3d} |"
                    print(line, flush=True)
                interval = {"loss": 0.0, "n": 0, "time": 0.0, "skipped": 0, "nan": 0}
            periodic = cfg["save_interval"] is not None and step % cfg["save_interval"] == 0
            if cfg["save"] and (periodic or stop or step == iters):
                self.save_checkpoint(step)
            if stop and step < iters:  # a signal during the last step still counts as completed
                exit_reason = "signal"
                if self.rank == 0:
                    _log(f"exit signal received: stopped after iteration {step}"
                         + (", checkpoint saved" if cfg["save"] else " (checkpoint.save not set: nothing saved)"))
                break
        if train_time > 0 and self.summary["steps_this_run"]:
            tokens = self.summary["steps_this_run"] * gbs * seq
            self.summary["tokens_per_s"] = round(tokens / train_time, 3)
        self.summary["exit_reason"] = exit_reason
        if self.rank == 0:
            s = self.summary
            ran = (f"steps {s['start_step']}..{s['steps_completed']}" if s["steps_this_run"]
                   else f"no steps run (at iteration {s['steps_completed']})")
            _log(f"done: exit_reason={exit_reason} {ran} first_loss={s['first_loss']} "
                 f"final_loss={s['final_loss']} tokens/s={s['tokens_per_s']} checkpoints={s['checkpoints']}")


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
    if cfg["exit_signal_handler"]:
        for sig in (signal.SIGUSR1, signal.SIGUSR2):
            _install_signal_handler(sig)
    _install_signal_handler(signal.SIGTERM)

    smoke = Smoke(cfg, overrides, unknown, unparsed)
    if smoke.rank == 0 and (unknown or unparsed):
        _log(f"ignoring unknown overrides: {unknown + unparsed}")
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
