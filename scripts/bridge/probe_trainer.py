"""The one stand-in left on the job's path: Megatron-Bridge's training loop, which needs GPUs.

Installed by standins.install_trainer_probe() (sitecustomize, with BRIDGE_LAUNCH_TRAINER=probe) in
place of `megatron.bridge.training.pretrain.pretrain` and `megatron.bridge.training.finetune.finetune`
before anything imports them, so that both run_recipe.py interfaces reach it through their own code:
067f987 (main) looks the function up when training starts (recipe_runner.py TRAIN_FUNCTIONS, names
resolved by `_load_train_function`, :548-554); 987244934 imports them at the top of run_recipe.py
(:125, :129) and calls `TRAIN_FUNCTIONS[mode](config=..., forward_step_func=...)` (:357-358).
Everything before that call (argument parsing, recipe lookup, Hydra overrides, the runner's syncs)
is the real script's.

What the real loop does first, this does too: `runtime_config_update(config)` (training/setup.py
calls it before building the model; it ends in `ConfigContainer.validate()`, config.py:1992-2032 at
067f987). Then, instead of training, it reports what the process sees as JSON in
$BRIDGE_LAUNCH_RUN_DIR/probe/<host>-<rank>.json: the megatron.bridge and megatron.core it imports,
the run_recipe.py interface that called it, the variables BRIDGE_LAUNCH_PROBE_VARS names, the
secrets' presence, length and sha256 (never their values), the directory the process started in
(067f987's main() then moves to the repository, run_recipe.py:460), the config's values flattened
(dotted keys), and copies $PROBE_READ to $PROBE_WRITE.<rank> when set. Rank 0's line "probe: rank R
on HOST: megatron.bridge from FILE" goes to stdout.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import os
import socket
import sys

# imported by sitecustomize before any script runs; kept in the environment across the re-exec of
# 067f987's benchmark recipes (recipe_runner.py bootstrap_recipe_environment, :324-347), which
# happens after main() moved to the repository
START_CWD = os.environ.setdefault("BRIDGE_LAUNCH_PROBE_START_CWD", os.getcwd())


def _plain(value):
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


def flatten(obj, prefix: str = "") -> dict:
    """Dataclass fields as dotted keys (the sections of a ConfigContainer and what they hold)."""
    out: dict = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name, None)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out.update(flatten(value, key + "."))
        else:
            out[key] = _plain(value)
    return out


def run(config, mode: str, caller: str) -> None:
    from megatron.bridge.training.config import runtime_config_update

    interface = "run_config" if caller == "run_config" else "train_functions"
    runtime_config_update(config)
    import megatron.bridge as bridge
    import megatron.core as core

    def secret(k: str) -> dict:
        v = os.environ.get(k, "")
        return {"present": k in os.environ, "length": len(v), "sha256": hashlib.sha256(v.encode()).hexdigest()}

    out = {
        "host": socket.gethostname(),
        "rank": os.environ.get("RANK"),
        "argv": sys.argv[1:],
        "mode": mode,
        "interface": interface,
        "python": sys.executable,
        "bridge_file": bridge.__file__,
        "core_file": core.__file__,
        "cwd": START_CWD,
        "repo_cwd": os.getcwd(),
        "env": {k: os.environ.get(k) for k in os.environ.get("BRIDGE_LAUNCH_PROBE_VARS", "").split(",") if k},
        "secrets": {k: secret(k) for k in os.environ.get("BRIDGE_LAUNCH_SECRET_NAMES", "").split(",") if k},
        "config": flatten(config),
    }
    if os.environ.get("PROBE_READ"):
        with open(os.environ["PROBE_READ"], encoding="utf-8") as fh:
            out["read"] = fh.read()
        with open(os.environ["PROBE_WRITE"] + f".{out['rank']}", "w", encoding="utf-8") as fh:
            fh.write(f"written by rank {out['rank']} on {out['host']}\n")
    d = os.path.join(os.environ["BRIDGE_LAUNCH_RUN_DIR"], "probe")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"{out['host']}-{out['rank']}.json"), "w", encoding="utf-8") as fh:
        json.dump(out, fh, indent=1)
    print(f"probe: rank {out['rank']} on {out['host']}: megatron.bridge from {bridge.__file__}", flush=True)


def pretrain(config, forward_step_func=None, *_a, **_k) -> None:  # noqa: ARG001 - the real signature
    run(config, "pretrain", sys._getframe(1).f_code.co_name)


def finetune(config, forward_step_func=None, *_a, **_k) -> None:  # noqa: ARG001 - the real signature
    run(config, "finetune", sys._getframe(1).f_code.co_name)
