"""GPU-hour accounting fixtures (runs/accounting.py, cli/gpu_report.py): Megatron-Bridge's lines written by
trainer_protocol's own line functions with stamps in this machine's time zone, two segments of a chain
(one failing after a save, one resuming from it), Slurm runs in the registry, and sacct stood in."""

from __future__ import annotations

import subprocess
import time
from datetime import datetime

from bridge_launch.runs import accounting as A
from bridge_launch.workloads import trainer_protocol as P

T0 = time.mktime(datetime(2026, 3, 1, 12, 0, 0).timetuple())
STEP_MS = 2000.0


def stamp(offset: float) -> str:
    return datetime.fromtimestamp(T0 + offset).strftime("%Y-%m-%d %H:%M:%S")


def iteration(step: int, at: float, total: int = 10, ms: float = STEP_MS) -> str:
    return "[rank7]: " + P.iteration_line(
        iteration=step,
        train_iters=total,
        consumed=step * 8,
        elapsed_ms=ms,
        lr=1e-4,
        global_batch=8,
        losses={"lm loss": 3.0},
        loss_scale=1.0,
        grad_norm=1.0,
        skipped=0,
        nan=0,
        stamp=stamp(at),
    )


def save(step: int, seconds: float) -> list[str]:
    """A save as Bridge logs it: the timer block (last rank), then rank 0's lines."""
    return [
        *("[rank7]: " + x for x in P.timers_minmax_lines({P.SAVE_TIMER: (seconds * 900, seconds * 1000)})),
        "[rank0]: " + P.saving_line(step, "/ckpt"),
        "[rank0]: " + P.saved_line(step, "/ckpt"),
    ]


def log(lines: dict, *, begin: int = 0, saves: dict | None = None, loaded: int | None = None) -> str:
    """{step: seconds after T0 of its iteration line}; saves: {step: seconds} after that step's line."""
    out = ["[rank0]: " + P.loaded_line("/ckpt", loaded)] if loaded else []
    out.append("[rank0]: " + P.starting_line(begin))
    for step, at in lines.items():
        out.append(iteration(step, at))
        out += save(step, (saves or {})[step]) if step in (saves or {}) else []
    return "\n".join(out) + "\n"


def alloc(job_id, start, end, *, state="COMPLETED", kind="segment", number=1, gpus=8, health=0.0):
    return A.Allocation(job_id, kind, number, state, gpus, T0 + start, T0 + end, end - start, T0 - 5, health, "n[1-2]")


def failed_first_segment():
    """Steps 1-7 every 2 s from 20 s in (the first began at 20), a 3 s save after step 4; the node is
    lost after step 7 and the job ends FAILED at 100 s."""
    lines = {1: 22, 2: 24, 3: 26, 4: 28, 5: 33, 6: 35, 7: 37}
    return alloc("11", 0, 100, state="FAILED"), log(lines, saves={4: 3.0})


def resumed_second_segment():
    """Loads iteration 4 and runs 5-10 (5-7 again): step 5 began at 138, a 1 s save after 8, the final
    2 s save after 10, the job ends at 200 s."""
    lines = {5: 140, 6: 142, 7: 144, 8: 146, 9: 149, 10: 151}
    return alloc("12", 110, 200, number=2), log(lines, begin=4, loaded=4, saves={8: 1.0, 10: 2.0})


def slurm_run(reg, *, info=None, job_ids=("11", "12", "13"), resumed_from=None, chain=None):
    from bridge_launch.resolve import resolver as resolve
    from bridge_launch.runs import lifecycle as launch

    run = reg.reserve("smoke", "local-slurm", "slurm", resumed_from=resumed_from, chain=chain)
    job = resolve.resolve("smoke", resolve.Options(cluster="local-slurm", until_done=True)).with_run_id(run.run_id)
    (reg.jobs_dir() / f"{run.run_id}.json").write_text(launch.job_json(job))
    return reg.update(run.run_id, state="COMPLETED", run_dir=job.run_dir, job_ids=list(job_ids), info=info or {}), job


def stand_in_sacct(monkeypatch) -> tuple[dict, list]:
    """Slurm's accounting stood in: ({job id: [sacct rows]} each test fills, [the argv of each call])."""
    from bridge_launch.backends.slurm import backend as slurm

    rows: dict = {}
    asked: list = []

    def command(self, s, argv, **_kw):  # noqa: ARG001 - Backend.command's signature
        asked.append(argv)
        ids = argv[argv.index("-j") + 1].split(",")
        out = "".join(line + "\n" for jid in ids for line in rows.get(jid, []))
        return subprocess.CompletedProcess(argv, 0, out, "")

    monkeypatch.setattr(slurm.Backend, "command", command)
    return rows, asked


def row(jid, state, start, end, nodes=2):
    """One allocation's sacct row (backends/slurm/backend.py ALLOCATION_FIELDS), submitted 5 s before it started."""
    began = int(T0 + start)
    return f"{jid}|{state}|{began - 5}|{began}|{int(T0 + end)}|{end - start}|{nodes}|cpu=2|node[1-2]"
