"""Issue 17 canary: what it costs before a job that is right, and how soon it stops one that is not,
on local-slurm-pyxis (2 nodes x 2 CPU processes, the local image given the real Megatron-Bridge 067f987
and its Python 3.12 venv through mounts: scripts/bridge/realbridge.py container()).

  the seed's VL SFT job (qwen35-vl-sft, fitted to 4 ranks; the training loop is the one stand-in,
  scripts/bridge/probe_trainer.py, after Megatron-Bridge's own build and validate) submitted to COMPLETED
      (--no-canary: the canary is on by default for the VL recipes bridge-launch ships)
      vs  the same job with --canary (canary job, then the real job after it)
  and, with --canary and a dataset.path that does not exist, submit to the run's FAILED verdict
      (the real job never starts).

Prints the medians of each, the ratio with/without canary (anchor: the job without it), and the
canary's own time inside the container from its report, check by check. On a GB200 cluster
the figure that matters is the other side: a failure found on 2 nodes in minutes instead of
on the full allocation after its start (see docs/how-to/canary.md).

Needs root and the cluster with containers (scripts/local-slurm start --containers).
Run: .venv/bin/python bench/canary_cost.py [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "scripts" / "bridge"))
CLI = [sys.executable, "-m", "bridge_launch.cli.app"]
import realbridge  # noqa: E402 - scripts/bridge, on the path above

FIT = realbridge.VL_FIT_4_RANKS  # the seed's 32-GPU topology fitted to 4 ranks


def cli(*args, env):
    out = subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    if out.returncode:
        raise SystemExit(f"bridge-launch {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout


def setup(root: Path) -> tuple[dict, list]:
    from bridge_launch.data import prepare, synthetic

    src = synthetic.make_source(root / "src", n=8, seed=2)
    prepare.prepare(
        "nemotron-image-v3",
        src,
        root / "data",
        subsets=["clevr_2"],
        skip_integrity=True,
        validation_fraction=0.25,
        max_samples_per_tar=5,
        num_workers=1,
    )
    it = root / "ckpt" / "iter_0000001"
    it.mkdir(parents=True)
    (it / "metadata.json").write_text(json.dumps({"sharded_backend": "torch_dist", "sharded_backend_version": 1}))
    (it / ".metadata").write_text("dcp")
    (root / "ckpt" / "latest_checkpointed_iteration.txt").write_text("1")
    from bridge_launch.core import upstream

    realbridge.hf_home(root / "hf")
    for snap in (root / "hf" / "hub").glob("models--Qwen--Qwen3.5-35B-A3B/snapshots/*"):
        (snap / "preprocessor_config.json").write_text("{}")
    mounts, variables = realbridge.container(realbridge.environment(), upstream.revision(upstream.BRIDGE_MAIN))
    conf = root / "config" / "bridge-launch"
    (conf / "clusters").mkdir(parents=True)
    (conf / "recipes").mkdir(parents=True)
    (conf / "recipes" / "vl4.toml").write_text('name = "qwen35-vl-sft-4"\nextends = "qwen35-vl-sft"\ngpus = 4\n')
    (conf / "clusters" / "bench-canary.toml").write_text(
        'extends = "local-slurm-pyxis"\n'
        f"container_mounts = {json.dumps([*mounts, f'{root}:{root}'])}\n"
        f'hf_home = "{root}/hf"\n[env]\n' + "".join(f"{k} = {json.dumps(v)}\n" for k, v in variables.items())
    )
    env = dict(os.environ, BRIDGE_LAUNCH_HOME=str(root / "state"), XDG_CONFIG_HOME=str(root / "config"))
    return env, [f"dataset.path={root}/data", f"checkpoint.pretrained_checkpoint={root}/ckpt", *FIT]


def one(env, args, want: str) -> tuple[float, dict]:
    t0 = time.monotonic()
    run = json.loads(cli("submit", "qwen35-vl-sft-4", "-c", "bench-canary", *args, "-o", "json", env=env))["run_id"]
    while True:
        st = json.loads(cli("status", run, "-o", "json", env=env))[0]
        if st["state"] in ("COMPLETED", "FAILED", "CANCELLED"):
            break
        time.sleep(0.5)
    took = time.monotonic() - t0
    if st["state"] != want:
        raise SystemExit(f"{run}: {st['state']} ({st['reason']}), expected {want}")
    return took, st


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="canary-bench-") as tmp:
        env, good = setup(Path(tmp))
        bad = ["dataset.path=/nonexistent/clevr2", *good[1:]]
        plain, gated, stopped, own = [], [], [], []
        for _ in range(a.repeats):  # interleaved, so load on the shared machine hits all three alike
            plain.append(one(env, ["--no-canary", *good], "COMPLETED")[0])
            t, st = one(env, ["--canary", *good], "COMPLETED")
            gated.append(t)
            own.append(json.loads(Path(st["info"]["canary"]["report"]).read_text()))
            stopped.append(one(env, ["--canary", *bad], "FAILED")[0])
    med = statistics.median
    print(f"submit -> COMPLETED without canary: {med(plain):6.1f} s  (anchor; runs {[round(x, 1) for x in plain]})")
    print(
        f"submit -> COMPLETED with canary:    {med(gated):6.1f} s  ratio {med(gated) / med(plain):.2f}x "
        f"(runs {[round(x, 1) for x in gated]})"
    )
    print(
        f"  the canary inside the container: {med([r['elapsed_s'] for r in own]):6.1f} s  ("
        + ", ".join(
            f"{c['check']} {med([x['seconds'] for r in own for x in r['checks'] if x['check'] == c['check']]):.1f} s"
            for c in own[0]["checks"]
            if "seconds" in c
        )
        + "; the rest: start, imports)"
    )
    print(
        f"submit -> FAILED at data (canary):  {med(stopped):6.1f} s  ratio {med(stopped) / med(plain):.2f}x; "
        "the real job never started"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
