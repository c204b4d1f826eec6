"""Issue 16 performance goals, each a ratio against its anchor measured in the same run.

  bridge-launch status with 1,000 recorded runs        vs  python -c "import typer"      goal <= 3x
  bridge-launch status RUN of a finished 10,000-step run
    (live metrics from the tail of its log)           vs  python -c "import typer"      goal <= 4x
  bridge-launch check LOG of a 100,000-iteration log
    (every criterion of the hardware gate)            vs  python -c 're.findall(r"lm loss: (\\S+)", open(LOG).read())'
                                                                                          goal <= 2x
  bridge-launch compare A B of two 100,000-iteration logs
    (loss parity, the timing and memory lines)         vs  the same findall over each of A and B, in one process
                                                                                          goal <= 2x

check and compare read a long log in two processes where they may use two CPUs or more (logs.reader:
Log.survey, float_columns_of; core/forked.py); the rows "on one CPU" run them under `taskset -c 0`,
where they read in one, against the same anchors (information, not a goal).

The logs are what the smoke workload prints on Slurm (trainer_protocol's builders, rank-prefixed):
a Step Time line and an iteration line every step, a save every 1,000 steps, the post-training
validation and test lines. Run: .venv/bin/python bench/watch_speed.py [--repeats N]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
from _timing import bench_env, compare, populate_registry, report

PY = sys.executable
BL = [PY, "-m", "bridge_launch.cli.app"]


def write_log(path: Path, n: int, scale: float = 1.0) -> None:
    """`scale` multiplies the loss (B of the compare: 0.1% off A, within parity's 2%)."""
    from bridge_launch.workloads import trainer_protocol as P

    with open(path, "w") as fh:
        fh.write(P.starting_line(0) + "\n")
        for s in range(1, n + 1):
            fh.write("[rank0]: " + P.step_time_line(1.23, 456.7) + "\n")
            fh.write(
                "[rank7]: "
                + P.iteration_line(
                    iteration=s,
                    train_iters=n,
                    consumed=s * 512,
                    elapsed_ms=1230.4,
                    lr=3e-4,
                    global_batch=512,
                    losses={"lm loss": scale * (10.0 * math.exp(-s / (n / 4)) + 2.0), "load_balancing_loss": 1.01},
                    loss_scale=1.0,
                    grad_norm=1.2345,
                    skipped=0,
                    nan=0,
                    stamp="2026-01-01 12:00:00",
                )
                + "\n"
            )
            if s % 1000 == 0 or s == n:
                fh.write("[rank0]: " + P.saving_line(s, "/ckpt") + "\n[rank0]: " + P.saved_line(s, "/ckpt") + "\n")
        fh.write("[rank0]: " + P.barrier_and_log(P.TRAINING_DONE, stamp="2026-01-01 13:00:00") + "\n")
        for which in ("validation", "test"):
            for line in P.validation_lines(f"iteration {n} on {which} set", {"lm loss": 2.1}):
                fh.write("[rank7]: " + line + "\n")


def populate(home: str, n: int) -> None:
    populate_registry(home, n, '{"step": 100, "train_iters": 100, "loss": 2.345678}')


def finished_run(home: str, steps: int) -> str:
    """A finished local run of `steps` iterations, recorded as submit and status leave it."""
    os.environ["BRIDGE_LAUNCH_HOME"] = home
    os.environ["XDG_CONFIG_HOME"] = os.path.join(home, "config")
    from bridge_launch.resolve import resolver as resolve
    from bridge_launch.runs import lifecycle as launch
    from bridge_launch.runs.registry import Registry

    reg = Registry(Path(home))
    run = reg.reserve("smoke", "local", "local")
    job = resolve.resolve("smoke", resolve.Options(overrides=(f"train.train_iters={steps}",))).with_run_id(run.run_id)
    (reg.jobs_dir() / f"{run.run_id}.json").write_text(launch.job_json(job))
    logs = Path(job.run_dir) / "logs"
    logs.mkdir(parents=True)
    write_log(logs / f"{run.run_id}.log", steps)
    reg.update(
        run.run_id, state="COMPLETED", run_dir=job.run_dir, job_ids=["1"], info={"step": steps, "train_iters": steps}
    )
    reg.close()
    return run.run_id


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=11)
    args = ap.parse_args()
    with (
        tempfile.TemporaryDirectory() as many,
        tempfile.TemporaryDirectory() as one,
        tempfile.TemporaryDirectory() as logs,
    ):
        populate(many, 1_000)
        run_id = finished_run(one, 10_000)
        big = Path(logs) / "train.log"
        write_log(big, 100_000)
        ref = Path(logs) / "reference.log"
        write_log(ref, 100_000, scale=1.001)
        print(
            "(a 10,000-step log: "
            f"{(Path(one) / 'runs' / run_id / 'logs' / (run_id + '.log')).stat().st_size / 1e6:.1f} MB;"
            f" the 100,000-iteration log: {big.stat().st_size / 1e6:.1f} MB)"
        )
        env_many, env_one = bench_env(many), bench_env(one)
        findall = "import re, sys; [re.findall(r'lm loss: (\\S+)', open(p).read()) for p in sys.argv[1:]]"
        baseline = [PY, "-c", findall, str(big)]
        one_cpu = ["taskset", "-c", "0"] if shutil.which("taskset") else None
        cases = [
            ("import typer", env_many, [PY, "-c", "import typer"]),
            ("status 1k", env_many, [*BL, "status"]),
            ("status RUN", env_one, [*BL, "status", run_id]),
            ("findall", env_one, baseline),
            ("check", env_one, [*BL, "check", str(big)]),
            ("findall A B", env_one, [PY, "-c", findall, str(big), str(ref)]),
            ("compare", env_one, [*BL, "compare", str(big), str(ref)]),
        ]
        if one_cpu:
            cases += [
                ("check 1cpu", env_one, [*one_cpu, *BL, "check", str(big)]),
                ("compare 1cpu", env_one, [*one_cpu, *BL, "compare", str(big), str(ref)]),
            ]
        t: dict = {}
        for _ in range(args.repeats):  # interleaved, so that load on the machine hits every case alike
            for name, env, cmd in cases:
                t.setdefault(name, []).append(compare({name: cmd}, 1, env=env)[name])
    med = {k: sorted(v)[len(v) // 2] for k, v in t.items()}
    print(f"(medians of {args.repeats} interleaved runs)")
    on_one_cpu = [  # shown for information, not a goal; only where taskset ran them
        (what, med[case], med[anchor], None, "max")
        for what, case, anchor in (
            ("check on one CPU (taskset -c 0)  vs  one re.findall", "check 1cpu", "findall"),
            ("compare on one CPU  vs  re.findall of each", "compare 1cpu", "findall A B"),
        )
        if case in med
    ]
    return report(
        [
            ("status, 1,000 runs  vs  import typer", med["status 1k"], med["import typer"], 3.0, "max"),
            (
                "status RUN, finished 10,000-step run  vs  import typer",
                med["status RUN"],
                med["import typer"],
                4.0,
                "max",
            ),
            ("check, 100,000-iteration log  vs  one re.findall", med["check"], med["findall"], 2.0, "max"),
            (
                "compare, two 100,000-iteration logs  vs  re.findall of each",
                med["compare"],
                med["findall A B"],
                2.0,
                "max",
            ),
        ]
        + on_one_cpu
    )


if __name__ == "__main__":
    sys.exit(main())
