"""Issue 2 performance goals, each a ratio against its anchor measured in the same run.

  bridge-launch --help            vs  python -c "import typer"                       goal <= 2.5x
  bridge-launch recipes list      vs  python -c "import typer"                       goal <= 3x
  submit qwen35-vl-sft --cluster gb200-32 --dry-run
                                  vs  nemo-run's dry run of the same Slurm + torchrun job   goal <= 0.05x
Issue 36 (the dry runs stay light: the JSON form imports no log reader, estimate or canary):
  submit qwen35-vl-sft --cluster gb200-32 --dry-run           vs  python -c "import typer"  goal <= 3x
  submit qwen35-vl-sft --cluster gb200-32 --dry-run -o json   vs  python -c "import typer"  goal <= 3x

Run: .venv/bin/python bench/cli_speed.py [--repeats N]   (nemo-run: pip install -c constraints.txt '.[cloud]')
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import bench_env, compare, report

PY = sys.executable
BL = [PY, "-m", "bridge_launch.cli.app"]
REPO = Path(__file__).resolve().parent.parent
DRY_RUN = [
    *BL,
    "submit",
    "qwen35-vl-sft",
    "--cluster",
    "gb200-32",
    "--dry-run",
    "dataset.path=/lustre/clevr2",
    "checkpoint.pretrained_checkpoint=/lustre/ckpt",
]

NEMO_RUN_DRY_RUN = r"""
import nemo_run as run
executor = run.SlurmExecutor(
    account="acct", partition="batch", nodes=8, ntasks_per_node=4, gpus_per_node=4, time="04:00:00",
    container_image="nvcr.io/nvidia/nemo:26.10", container_mounts=["/lustre/fsw:/lustre/fsw"],
    exclusive=True, mem="0", segment=8, launcher="torchrun",
    env_vars={"CUDA_DEVICE_MAX_CONNECTIONS": "1", "NCCL_NET_GDR_LEVEL": "PHB", "NCCL_NET_GDR_C2C": "1"},
    srun_args=["--mpi=pmix", "--no-container-mount-home"],
    tunnel=run.LocalTunnel(job_dir=JOB_DIR), packager=run.Packager(),
)
# the same job as bridge-launch's: its entry shim registers the shipped recipe function, then runs
# the image's run_recipe.py (workloads/bridge_recipe_entry.py)
task = run.Script(path="/lustre/fsw/job/workload/bridge_recipe_entry.py", entrypoint="python",
                  args=["/lustre/fsw/job/workload/bridge_recipes/qwen35_vl_gb200.py",
                        "/opt/Megatron-Bridge/scripts/training/run_recipe.py",
                        "--recipe", "qwen35_vl_35b_a3b_sft_long_context_32gpu_gb200_bf16_config", "--mode", "sft",
                        "dataset.path=/lustre/clevr2", "checkpoint.pretrained_checkpoint=/lustre/ckpt",
                        "model.tensor_model_parallel_size=2", "model.context_parallel_size=8",
                        "model.expert_model_parallel_size=16", "model.sequence_parallel=true"])
run.run(task, executor=executor, name="qwen35-vl-sft", dryrun=True)
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=11)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as home:
        env = bench_env(home)
        env["NEMORUN_HOME"] = os.path.join(home, "nemo_run")
        job_dir = os.path.join(env["NEMORUN_HOME"], "experiments")
        os.makedirs(job_dir)
        cases = {
            "import typer": [PY, "-c", "import typer"],
            "--help": [*BL, "--help"],
            "recipes list": [*BL, "recipes", "list"],
            "dry-run": DRY_RUN,
            "dry-run -o json": [*DRY_RUN, "-o", "json"],
        }
        try:
            import importlib.util

            have_nemo_run = importlib.util.find_spec("nemo_run") is not None
        except (ImportError, ValueError):
            have_nemo_run = False
        if have_nemo_run:
            cases["nemo-run dry run"] = [PY, "-c", f"JOB_DIR={job_dir!r}\n" + NEMO_RUN_DRY_RUN]
        t = compare(cases, args.repeats, env=env, cwd=home)
    rows = [
        ("bridge-launch --help  vs  import typer", t["--help"], t["import typer"], 2.5, "max"),
        ("bridge-launch recipes list  vs  import typer", t["recipes list"], t["import typer"], 3.0, "max"),
        ("submit qwen35-vl-sft -c gb200-32 --dry-run  vs  import typer", t["dry-run"], t["import typer"], 3.0, "max"),
        (
            "submit ... --dry-run -o json  vs  import typer",
            t["dry-run -o json"],
            t["import typer"],
            3.0,
            "max",
        ),
    ]
    if have_nemo_run:
        rows.append(
            (
                "submit qwen35-vl-sft -c gb200-32 --dry-run  vs  nemo-run dry run",
                t["dry-run"],
                t["nemo-run dry run"],
                0.05,
                "max",
            )
        )
    else:
        print("nemo-run is not installed (pip install -c constraints.txt '.[cloud]'): dry-run ratio skipped")
    print(f"(medians of {args.repeats} interleaved runs)")
    return report(rows)


if __name__ == "__main__":
    sys.exit(main())
