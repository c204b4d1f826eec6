"""Issue 3 submit goal, a ratio against its anchor measured in the same run:

  bridge-launch submit smoke --cluster local-slurm (until the job id is printed)
      vs  nemo-run submitting the same 2-node torchrun job through its SlurmExecutor
          with a LocalTunnel (until run.run(detach=True) returns)              goal <= 0.2x

Needs the local Slurm cluster (scripts/local-slurm start, as root) and nemo-run
(pip install -c constraints.txt '.[cloud]'). Every submitted job is cancelled at once.
Run: .venv/bin/python bench/submit_speed.py [--repeats N]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import bench_env, report

PY = sys.executable
REPO = Path(__file__).resolve().parent.parent
SLURM_CONF = "/var/lib/bridge-launch-slurm/etc/slurm.conf"

NEMO_RUN_SUBMIT = r"""
import sys, nemo_run as run
executor = run.SlurmExecutor(
    account="bench", partition="debug", nodes=2, ntasks_per_node=2, time="00:10:00",
    launcher="torchrun", tunnel=run.LocalTunnel(job_dir=JOB_DIR), packager=run.Packager(),
    env_vars={"OMP_NUM_THREADS": "1"},
)
task = run.Script(path=SMOKE, entrypoint="python", args=["train.train_iters=1", "smoke.busbw_sizes=[1024]"])
run.run(task, executor=executor, name="smoke-bench", detach=True)
"""


def scancel_all(env) -> None:
    subprocess.run(["scancel", "--full", "-u", "root"], env=env, capture_output=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    if not Path(SLURM_CONF).exists():
        sys.exit("start the local Slurm cluster first: scripts/local-slurm start")
    ours, theirs = [], []
    with tempfile.TemporaryDirectory() as home:
        env = bench_env(home)
        env["SLURM_CONF"] = SLURM_CONF
        env["NEMORUN_HOME"] = os.path.join(home, "nemo_run")
        job_dir = os.path.join(env["NEMORUN_HOME"], "experiments")
        os.makedirs(job_dir)
        smoke = str(REPO / "src" / "bridge_launch" / "workloads" / "smoke.py")
        nemo = [PY, "-c", f"JOB_DIR={job_dir!r}\nSMOKE={smoke!r}\n" + NEMO_RUN_SUBMIT]
        bl = [
            PY,
            "-m",
            "bridge_launch.cli.app",
            "submit",
            "smoke",
            "-c",
            "local-slurm",
            "-o",
            "json",
            "train.train_iters=1",
            "smoke.busbw_sizes=[1024]",
        ]
        for round_ in range(args.repeats + 1):
            for name, cmd, sink in (("bridge-launch", bl, ours), ("nemo-run", nemo, theirs)):
                t0 = time.perf_counter()
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=home)
                dt = time.perf_counter() - t0
                scancel_all(env)
                if proc.returncode:
                    sys.exit(f"{name} submit failed:\n{proc.stderr[-3000:]}")
                if name == "bridge-launch":
                    assert json.loads(proc.stdout)["job_ids"][0].isdigit()
                if round_:
                    sink.append(dt)
    print(f"(medians of {args.repeats} interleaved submissions, each job cancelled at once)")
    return report(
        [
            (
                "submit smoke -c local-slurm  vs  nemo-run SlurmExecutor submit",
                statistics.median(ours),
                statistics.median(theirs),
                0.2,
                "max",
            )
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
