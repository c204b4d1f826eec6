"""What the state dir keeps of each run besides its registry row: its resolved job (jobs/<run id>.json)."""

from __future__ import annotations

import json

from bridge_launch.core.errors import LaunchError
from bridge_launch.job.resolved import ResolvedJob
from bridge_launch.job.run import Run
from bridge_launch.runs.registry import Registry


def job_json(job: ResolvedJob) -> str:
    return json.dumps(job.to_dict(), indent=2, sort_keys=False) + "\n"


def load_job(reg: Registry, run: Run) -> ResolvedJob:
    path = reg.jobs_dir() / f"{run.run_id}.json"
    try:
        return ResolvedJob.from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        raise LaunchError(f"run {run.run_id}: its resolved job ({path}) is missing") from None
