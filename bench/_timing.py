"""Shared benchmark helpers: wall time of whole commands, interleaved so that load on a
shared machine hits the measurement and its anchor alike; medians; the environment and the
registry the CLI benchmarks run against."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time


def wall(cmd: list[str], env: dict | None = None, cwd: str | None = None, check: bool = True) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
    dt = time.perf_counter() - t0
    if check and proc.returncode != 0:
        sys.exit(f"benchmark command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr.decode()[-2000:]}")
    return dt


_compiled = False


def byte_compile_package() -> None:
    """Measure bridge-launch as installed: `pip install .` byte-compiles a package, an editable
    install does not, and with PYTHONDONTWRITEBYTECODE set (as on these machines) every CLI run
    would compile its sources again (~80 ms of a dry run) while the anchors' site-packages
    modules are compiled. compileall writes the .pyc files regardless of that variable."""
    global _compiled
    if _compiled:
        return
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("bridge_launch")
    for d in (spec.submodule_search_locations or []) if spec else []:
        compileall.compile_dir(d, quiet=1)
    _compiled = True


def compare(cases: dict[str, list[str]], repeats: int, env: dict | None = None, cwd: str | None = None) -> dict:
    """Run every case once per round, `repeats` rounds (after one warm-up round); medians."""
    times: dict[str, list[float]] = {k: [] for k in cases}
    for round_ in range(repeats + 1):
        for name, cmd in cases.items():
            dt = wall(cmd, env=env, cwd=cwd)
            if round_:
                times[name].append(dt)
    return {k: statistics.median(v) for k, v in times.items()}


def report(rows: list[tuple[str, float, float, float | None, str]]) -> int:
    """rows: (what, seconds, anchor seconds, goal ratio, 'max'|'min'); a goal of None is a row
    shown for information. Prints; returns failures."""
    bad = 0
    print(f"{'measurement':<58} {'median s':>9} {'anchor s':>9} {'ratio':>7}  goal")
    for what, t, anchor, goal, kind in rows:
        ratio = t / anchor
        if goal is None:
            print(f"{what:<58} {t:9.3f} {anchor:9.3f} {ratio:7.3f}  information")
            continue
        ok = ratio <= goal if kind == "max" else ratio >= goal
        bad += not ok
        print(
            f"{what:<58} {t:9.3f} {anchor:9.3f} {ratio:7.3f}  {'<=' if kind == 'max' else '>='} {goal}  "
            f"{'ok' if ok else 'MISSED'}"
        )
    return bad


def bench_env(home: str) -> dict:
    """The environment of a CLI benchmark, with its state under `home`; the package is
    byte-compiled first (byte_compile_package), so every CLI benchmark measures it as installed."""
    byte_compile_package()
    env = dict(os.environ)
    env["BRIDGE_LAUNCH_HOME"] = home
    env.pop("XDG_CONFIG_HOME", None)
    env["XDG_CONFIG_HOME"] = os.path.join(home, "config")
    return env


def populate_registry(home: str, n: int, info: str = "{}") -> None:
    """n finished Slurm runs in the registry under `home` (for the status benchmarks), each with
    `info` (the JSON status keeps for it)."""
    import time
    from pathlib import Path

    from bridge_launch.runs.registry import Registry

    reg = Registry(Path(home))
    now = time.time() - n
    with reg.db:
        reg.db.execute("BEGIN")
        reg.db.executemany(
            "INSERT INTO runs (run_id, created, updated, recipe, cluster, backend, state, job_ids, run_dir, chain, "
            "info)"
            " VALUES (?, ?, ?, 'smoke', 'local-slurm', 'slurm', 'COMPLETED', ?, ?, ?, ?)",
            [
                (
                    f"smoke-0101-{i:05x}",
                    now + i,
                    now + i,
                    f'["{1000 + i}"]',
                    f"/runs/smoke-0101-{i:05x}",
                    f"smoke-0101-{i:05x}",
                    info,
                )
                for i in range(n)
            ],
        )
        reg.db.execute("COMMIT")
    reg.close()
