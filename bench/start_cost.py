"""Issue 25: what bridge-launch adds between submit and the first training step, on local-slurm
(2 nodes x 2 CPU processes, bare processes), interleaved, medians of --rounds:

  anchor   a hand-written sbatch that runs the same torchrun command (the smoke workload, the same
           overrides) with one `srun --ntasks-per-node=1` per node
  plain    `bridge-launch submit smoke -c local-slurm` (the rendered script: rendezvous, traps,
           the node launcher, the time-limit save)
  health   the same with [slurm] health_check = true (the health step before torchrun)

Each figure is the wall time from the submit command's start to the first "iteration 1/" line in the
job's logs. Goal: plain <= 1.10 x anchor; health - plain is the health step's own time, which is
also printed from its reports (the seconds each node spent on its checks).

Needs root and the cluster (scripts/local-slurm start). Run: .venv/bin/python bench/start_cost.py
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
CLI = [sys.executable, "-m", "bridge_launch.cli.app"]
ARGS = [
    "smoke.busbw_sizes=[1024]",
    "smoke.busbw_iters=1",
    "train.train_iters=3",
    "logger.log_interval=1",
]
FIRST_STEP = re.compile(r"iteration\s+1/")


def _wait_first_step(logs: Path, t0: float, timeout: float = 300) -> float:
    deadline = t0 + timeout
    while time.time() < deadline:
        for f in logs.glob("*") if logs.is_dir() else []:
            if f.is_file() and FIRST_STEP.search(f.read_text(errors="replace")):
                return time.time() - t0
        time.sleep(0.1)
    raise SystemExit(f"no first step in {logs} within {timeout} s")


def _wait_gone(job_id: str, env: dict) -> None:
    while subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True, text=True, env=env).stdout.strip():
        time.sleep(0.5)


def anchor(root: Path, env: dict, i: int) -> float:
    """The hand-written sbatch: the same workload and overrides, torchrun on each node."""
    run = root / f"anchor-{i}"
    (run / "logs").mkdir(parents=True)
    work = REPO / "src" / "bridge_launch" / "workloads"
    script = run / "job.sbatch"
    script.write_text(
        "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --time=00:10:00\n"
        f"#SBATCH --output={run}/logs/sbatch-%j.out\n"
        'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)\n'
        f"srun --output={run}/logs/%j-%N.log {sys.executable} -m torch.distributed.run "
        '--nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint="$head":$((20000 + SLURM_JOB_ID % 10000)) '
        f"--rdzv-id=$SLURM_JOB_ID {work}/smoke.py {' '.join(ARGS)} checkpoint.save={run}/ckpt\n"
    )
    t0 = time.time()
    job_id = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, env=env, check=True)
    took = _wait_first_step(run / "logs", t0)
    _wait_gone(job_id.stdout.strip(), env)
    return took


def ours(env: dict, cluster: str) -> tuple[float, float | None]:
    t0 = time.time()
    out = subprocess.run(
        [*CLI, "submit", "smoke", "-c", cluster, "-o", "json", *ARGS], capture_output=True, text=True, env=env, cwd=REPO
    )
    if out.returncode:
        raise SystemExit(f"submit failed: {out.stderr.strip()}")
    run = json.loads(out.stdout)
    took = _wait_first_step(Path(run["run_dir"]) / "logs", t0)
    _wait_gone(run["job_ids"][-1], env)
    # the slowest node's own checks, then the fabric's all-reduces (fabric.json) after them
    reports = [json.loads(p.read_text()) for p in (Path(run["run_dir"]) / "health").glob("*/*.json")]
    nodes = [r["seconds"] for r in reports if "node" in r]
    fabric = [r["seconds"] for r in reports if "node" not in r and "seconds" in r]
    health = max(nodes) + max(fabric, default=0.0) if nodes else None
    return took, health


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if not os.environ.get("SLURM_CONF"):
        os.environ["SLURM_CONF"] = "/var/lib/bridge-launch-slurm/etc/slurm.conf"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cfg = root / "cfg" / "bridge-launch" / "clusters"
        cfg.mkdir(parents=True)
        (cfg / "healthy.toml").write_text('name = "healthy"\nextends = "local-slurm"\n[slurm]\nhealth_check = true\n')
        env = dict(os.environ, BRIDGE_LAUNCH_HOME=str(root / "state"), XDG_CONFIG_HOME=str(root / "cfg"))
        times: dict = {"anchor": [], "plain": [], "health": [], "health_step": []}
        for i in range(a.rounds):  # interleaved: a noisy neighbour hits all three alike
            times["anchor"].append(anchor(root, env, i))
            times["plain"].append(ours(env, "local-slurm")[0])
            took, step = ours(env, "healthy")
            times["health"].append(took)
            if step is not None:
                times["health_step"].append(step)
        med = {k: statistics.median(v) for k, v in times.items() if v}
        print(f"submit to first step, medians of {a.rounds} (s): " + ", ".join(f"{k} {v:.2f}" for k, v in med.items()))
        ratio = med["plain"] / med["anchor"]
        print(f"plain / anchor: {ratio:.3f}x (goal <= 1.10): {'MET' if ratio <= 1.10 else 'MISSED'}")
        print(
            f"health - plain: {med['health'] - med['plain']:.2f} s; the checks themselves took "
            f"{med.get('health_step', float('nan')):.2f} s on the slowest node (their reports)"
        )


if __name__ == "__main__":
    main()
