"""Issue 12 performance goals, each a ratio against its anchor measured in the same run.

  bridge-launch plan qwen35-vl-sft -c gb200-32
                                  vs  python -c "from megatron.core.parallel_state import RankGenerator"
                                      (the megatron-core module plan uses)                  goal <= 1.3x
  bridge-launch submit qwen35-vl-sft -c gb200-32 --dry-run (model facts, Megatron's rules,
  the memory estimate and the rank placement included)
                                  vs  python -c "import typer"                              goal <= 3x

Wall time is the goal (medians of interleaved rounds); CPU time (user + system of the child) is
printed beside it, since on a shared machine it moves less with the load. Python writes and
reads bytecode here as it does for an installed tool (PYTHONDONTWRITEBYTECODE is dropped), so
bridge-launch's own modules are not compiled on every run while the anchors' are cached.

Where plan's time goes (python -X importtime, cProfile; issue 12): importing megatron-core is
the command (torch, then megatron.core's package __init__, which pulls in tensor_parallel,
transformer_config and with them torch.compile's dynamo/inductor); bridge-launch itself adds
~0.1 s. The rest was the interpreter's teardown of those ~3,000 modules at exit, about a quarter
of the CPU time: plan now ends without it (cli._exit_now).

Run: .venv/bin/python bench/plan_speed.py [--repeats N]   (needs the 'plan' extra)
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import bench_env, report

PY = sys.executable
BL = [PY, "-m", "bridge_launch.cli.app"]


def _run(cmd, env, cwd) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"benchmark command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr.decode()[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as home:
        env = bench_env(home)
        cases = {
            "import typer": [PY, "-c", "import typer"],
            "dry-run": [
                *BL,
                "submit",
                "qwen35-vl-sft",
                "--cluster",
                "gb200-32",
                "--dry-run",
                "dataset.path=/lustre/fsw/clevr2",
                "checkpoint.pretrained_checkpoint=/lustre/fsw/ckpt",
            ],
            "import parallel_state": [
                PY,
                "-W",
                "ignore",
                "-c",
                "from megatron.core.parallel_state import RankGenerator",
            ],
            "plan": [*BL, "plan", "qwen35-vl-sft", "--cluster", "gb200-32"],
        }
        wall: dict = {k: [] for k in cases}
        cpu: dict = {k: [] for k in cases}
        for round_ in range(args.repeats + 1):  # round 0 warms caches
            for name, cmd in cases.items():
                w, c = _run(cmd, env, home)
                if round_:
                    wall[name].append(w)
                    cpu[name].append(c)
    t = {k: statistics.median(v) for k, v in wall.items()}
    c = {k: statistics.median(v) for k, v in cpu.items()}
    rows = [
        (
            "plan qwen35-vl-sft -c gb200-32  vs  import parallel_state",
            t["plan"],
            t["import parallel_state"],
            1.3,
            "max",
        ),
        ("submit qwen35-vl-sft -c gb200-32 --dry-run  vs  import typer", t["dry-run"], t["import typer"], 3.0, "max"),
    ]
    print(
        f"(medians of {args.repeats} interleaved runs; CPU time: plan {c['plan']:.2f} s vs "
        f"{c['import parallel_state']:.2f} s "
        f"= {c['plan'] / c['import parallel_state']:.2f}x, dry-run {c['dry-run']:.3f} s vs {c['import typer']:.3f} s "
        f"= {c['dry-run'] / c['import typer']:.2f}x)"
    )
    return report(rows)


if __name__ == "__main__":
    sys.exit(main())
