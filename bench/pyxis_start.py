"""Issue 37 production pyxis: submit to the first training step of a 2-node job on local-slurm-pyxis
(pyxis with use_squashfuse=0, as production runs it), the health step on, and the first
`enroot create` on each node slowed by DELAY seconds (the enroot wrapper of scripts/local-slurm:
a stand-in for a registry import or the unpacking of a 30-50 GB image),

    bridge-launch's job: its image step (stale containers swept, space checked, the image unpacked
                         into a named container), the health step (node checks), torchrun
        vs  a hand-written sbatch that materialises the image once (srun --container-image
            --container-name true), runs the same node checks and the same trainer under torchrun
            in that container, and removes it

The two alternate (anchor first), so the shared machine's load hits both alike; each prints its
seconds, then the medians and their ratio (the goal: at most 1.1).

Needs root and the cluster with containers. Run: .venv/bin/python bench/pyxis_start.py [--repeats N] [--delay S]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STATE = Path("/var/lib/bridge-launch-slurm")
IMAGE = STATE / "containers" / "images" / "local-torch.sqsh"
CLI = [sys.executable, "-m", "bridge_launch.cli.app"]
FIRST_STEP = re.compile(r"iteration\s+1/")
WORKLOADS = REPO / "src" / "bridge_launch" / "workloads"
TRAIN = [
    "model.num_layers=2",
    "model.hidden_size=64",
    "model.num_attention_heads=4",
    "model.vocab_size=256",
    "dataset.seq_length=64",
    "train.micro_batch_size=4",
    "train.train_iters=2",
    "logger.log_interval=1",
    "smoke.busbw_sizes=[1024]",
    "smoke.busbw_iters=1",
]


def first_step(logs: str, t0: float, done) -> float:
    """Seconds from t0 to the first iteration line in any of the logs (a glob); done() says the job ended."""
    while time.monotonic() < t0 + 900:
        for log in glob.glob(logs):
            if FIRST_STEP.search(Path(log).read_text(errors="replace")):
                return time.monotonic() - t0
        if done():
            sys.exit(f"the job ended before its first step: {logs}")
        time.sleep(0.2)
    sys.exit(f"no first step within 900 s: {logs}")


def job_state(job: str, env) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, env=env).stdout
    return out.strip() or "DONE"


def wait_gone(job: str, env) -> None:
    while job_state(job, env) != "DONE":
        time.sleep(0.5)


def ours(env) -> float:
    t0 = time.monotonic()
    r = subprocess.run(
        [*CLI, "submit", "smoke", "-c", "bench-pyxis-slow", "-o", "json", *TRAIN[6:]],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    if r.returncode:
        sys.exit(f"submit failed: {r.stderr}")
    sub = json.loads(r.stdout)
    job = sub["job_ids"][0]
    dt = first_step(f"{sub['run_dir']}/logs/{job}-*.log", t0, lambda: job_state(job, env) == "DONE")
    wait_gone(job, env)
    return dt


def anchor(env, work: Path, delay: int) -> float:
    """The hand-written job: materialise once, the node checks, torchrun, remove the container."""
    run = work / f"anchor-{time.monotonic_ns()}"
    (run / "health").mkdir(parents=True)
    mounts = f"--container-mounts={run}:{run},{WORKLOADS}:{WORKLOADS}"
    common = f"--no-container-mount-home --container-writable {mounts} --container-workdir={run}"
    script = f"""#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:20:00
#SBATCH --output={run}/sbatch-%j.out
export BRIDGE_LAUNCH_TEST_CREATE_DELAY={delay} OMP_NUM_THREADS=1 BRIDGE_LAUNCH_RUN_DIR={run}
name=anchor.$SLURM_JOB_ID
srun --container-image={IMAGE} --container-name=$name {common} true || exit 1
srun --container-name=$name:no_exec {common} --time=1 python3 {WORKLOADS}/node_health.py \\
    --gpus=0 --gpu-model= --report={run}/health || exit 1
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
addr=$(scontrol show node "$head" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')
srun --container-name=$name:no_exec {common} --output={run}/%j-%N.log \\
    torchrun --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=$addr:29511 \\
    --rdzv-id=$SLURM_JOB_ID {WORKLOADS}/smoke.py {" ".join(repr(a) if "[" in a else a for a in TRAIN)}
srun enroot remove -f pyxis_$name
"""
    path = run / "anchor.sbatch"
    path.write_text(script)
    t0 = time.monotonic()
    job = subprocess.run(["sbatch", "--parsable", str(path)], capture_output=True, text=True, env=env, check=True)
    jid = job.stdout.strip().split(";")[0]
    dt = first_step(f"{run}/{jid}-*.log", t0, lambda: job_state(jid, env) == "DONE")
    wait_gone(jid, env)
    return dt


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--delay", type=int, default=45, help="seconds each node's first enroot create waits")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (the local cluster)")
    subprocess.run([str(REPO / "scripts" / "local-slurm"), "start", "--containers"], check=True, capture_output=True)
    home = Path(tempfile.mkdtemp(prefix="bench-pyxis-start-"))
    env = dict(
        os.environ,
        BRIDGE_LAUNCH_HOME=str(home / "state"),
        XDG_CONFIG_HOME=str(home / "config"),
        PYTHONPATH=str(REPO / "src"),
        SLURM_CONF=str(STATE / "etc" / "slurm.conf"),
    )
    clusters = home / "config" / "bridge-launch" / "clusters"
    clusters.mkdir(parents=True)
    (clusters / "bench-pyxis-slow.toml").write_text(
        'extends = "local-slurm-pyxis"\n[slurm]\nhealth_check = true\nhealth_fabric = false\nimage_space_gb = 1\n'
        f'[env]\nBRIDGE_LAUNCH_TEST_CREATE_DELAY = "{a.delay}"\n'
    )
    work = STATE / "jobs" / "bench-pyxis-start"
    work.mkdir(parents=True, exist_ok=True)
    mine, theirs = [], []
    try:
        for i in range(a.repeats):
            theirs.append(anchor(env, work, a.delay))
            mine.append(ours(env))
            print(f"round {i + 1}: hand-written {theirs[-1]:.1f} s, bridge-launch {mine[-1]:.1f} s", flush=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    m, t = statistics.median(mine), statistics.median(theirs)
    print(f"submit to first step, create delayed {a.delay} s a node, health step on (median of {a.repeats}):")
    print(f"  hand-written sbatch (materialise once)  {t:6.1f} s")
    print(f"  bridge-launch                           {m:6.1f} s")
    print(f"  ratio {m / t:.2f} (goal: <= 1.1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
