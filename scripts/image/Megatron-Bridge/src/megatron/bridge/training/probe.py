"""The stand-in's training loop: it trains nothing. After the config checks the real setup makes
(runtime_config_update, as Megatron-Bridge's training/setup.py does before building the model), it
reports what the process sees as JSON in $BRIDGE_LAUNCH_RUN_DIR/probe/<host>-<rank>.json: which
megatron.bridge and megatron.core it imports, the variables BRIDGE_LAUNCH_PROBE_VARS names, the
secrets' presence, length and sha256, its argv, the directory it started in (run_recipe.py's
START_CWD; main() then moves to the repository), the config it was given; and copies $PROBE_READ to
$PROBE_WRITE.<rank> if set."""
import dataclasses
import hashlib
import json
import os
import socket
import sys

import megatron.bridge as bridge
import megatron.core as core
from megatron.bridge.training.config import runtime_config_update


def _plain(value):
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


def run(config, mode: str) -> None:
    runtime_config_update(config)
    out = {"host": socket.gethostname(), "rank": os.environ.get("RANK"), "argv": sys.argv[1:], "mode": mode,
           "bridge_file": bridge.__file__, "bridge_origin": getattr(bridge, "ORIGIN", None),
           "core_file": core.__file__, "core_origin": getattr(core, "ORIGIN", None),
           "pythonpath": os.environ.get("PYTHONPATH"),
           "cwd": getattr(sys.modules.get("__main__"), "START_CWD", None) or os.getcwd(), "repo_cwd": os.getcwd(),
           "env": {k: os.environ.get(k) for k in os.environ.get("BRIDGE_LAUNCH_PROBE_VARS", "").split(",") if k},
           "secrets": {k: {"present": k in os.environ, "length": len(os.environ.get(k, "")),
                           "sha256": hashlib.sha256(os.environ.get(k, "").encode()).hexdigest()}
                       for k in os.environ.get("BRIDGE_LAUNCH_SECRET_NAMES", "").split(",") if k},
           "config": _plain(config)}
    if os.environ.get("PROBE_READ"):
        with open(os.environ["PROBE_READ"]) as fh:
            out["read"] = fh.read()
        with open(os.environ["PROBE_WRITE"] + f".{out['rank']}", "w") as fh:
            fh.write(f"written by rank {out['rank']} on {out['host']}\n")
    d = os.path.join(os.environ["BRIDGE_LAUNCH_RUN_DIR"], "probe")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"{out['host']}-{out['rank']}.json"), "w") as fh:
        json.dump(out, fh, indent=1)
    print(f"probe: rank {out['rank']} on {out['host']}: megatron.bridge from {bridge.__file__}", flush=True)
