"""Issue 3 status goals, each a ratio against its anchor measured in the same run.

  bridge-launch status with 10,000 recorded runs  vs  the same with 1,000      goal <= 1.2x
  bridge-launch status with 1,000 recorded runs   vs  python -c "import typer"  goal <= 3x

The default view reads only the 50 most recent runs and asks backends only about unfinished
ones, so the registry's size should not show. Run: .venv/bin/python bench/status_speed.py
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
from _timing import bench_env, compare, populate_registry, report

PY = sys.executable


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=11)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as small, tempfile.TemporaryDirectory() as big:
        populate_registry(small, 1_000)
        populate_registry(big, 10_000)
        env_small, env_big = bench_env(small), bench_env(big)
        cases_small = {
            "import typer": [PY, "-c", "import typer"],
            "status 1k": [PY, "-m", "bridge_launch.cli.app", "status"],
        }
        # interleave the two registries by running them as separate cases with their own env
        t = {}
        for _ in range(args.repeats):
            for name, env, cmd in (
                ("import typer", env_small, cases_small["import typer"]),
                ("status 1k", env_small, cases_small["status 1k"]),
                ("status 10k", env_big, cases_small["status 1k"]),
            ):
                t.setdefault(name, []).append(compare({name: cmd}, 1, env=env)[name])
    med = {k: sorted(v)[len(v) // 2] for k, v in t.items()}
    print(f"(medians of {args.repeats} interleaved runs)")
    return report(
        [
            ("status, 10,000 runs  vs  status, 1,000 runs", med["status 10k"], med["status 1k"], 1.2, "max"),
            ("status, 1,000 runs  vs  import typer", med["status 1k"], med["import typer"], 3.0, "max"),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
