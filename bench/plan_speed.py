"""Issue 12 performance goals, each a ratio against its anchor measured in the same run.

  bridge-launch plan qwen35-vl-sft -c gb200-32
                                  vs  python -c "from megatron.core.parallel_state import RankGenerator"
                                      (the megatron-core module plan uses)                  goal <= 1.3x
  bridge-launch submit qwen35-vl-sft -c gb200-32 --dry-run (model facts, Megatron's rules,
  memory estimate and rank spans included)
                                  vs  python -c "import typer"                              goal <= 3x

Run: .venv/bin/python bench/plan_speed.py [--repeats N]   (needs the 'plan' extra)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import bench_env, compare, report  # noqa: E402

PY = sys.executable
BL = [PY, "-m", "bridge_launch.cli"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as home:
        env = bench_env(home)
        cases = {
            "import typer": [PY, "-c", "import typer"],
            "dry-run": [*BL, "submit", "qwen35-vl-sft", "--cluster", "gb200-32", "--dry-run",
                        "dataset.path=/lustre/fsw/clevr2", "checkpoint.pretrained_checkpoint=/lustre/fsw/ckpt"],
            "import parallel_state": [PY, "-W", "ignore", "-c",
                                      "from megatron.core.parallel_state import RankGenerator"],
            "plan": [*BL, "plan", "qwen35-vl-sft", "--cluster", "gb200-32"],
        }
        t = compare(cases, args.repeats, env=env, cwd=home)
    rows = [
        ("plan qwen35-vl-sft -c gb200-32  vs  import parallel_state", t["plan"], t["import parallel_state"], 1.3, "max"),
        ("submit qwen35-vl-sft -c gb200-32 --dry-run  vs  import typer", t["dry-run"], t["import typer"], 3.0, "max"),
    ]
    print(f"(medians of {args.repeats} interleaved runs)")
    return report(rows)


if __name__ == "__main__":
    sys.exit(main())
