"""Registry rows for the status, experiments and monitor tests."""

from __future__ import annotations

from pathlib import Path

from conftest import write


def _record(
    reg, recipe, *, state="COMPLETED", log=None, experiment=None, label="", position=0, overrides=(), nodes=None
):
    """A run as submit leaves it, with its log where the local backend reads it."""
    from bridge_launch.resolve import resolver as resolve
    from bridge_launch.runs import lifecycle as launch

    run = reg.reserve(recipe, "local", "local")
    job = resolve.resolve(recipe, resolve.Options(overrides=tuple(overrides), nodes=nodes)).with_run_id(run.run_id)
    (reg.jobs_dir() / f"{run.run_id}.json").write_text(launch.job_json(job))
    if log is not None:
        write(Path(job.run_dir) / "logs" / f"{run.run_id}.log", log)
    info = {"experiment": experiment, "member": label} if experiment else {}
    run = reg.update(run.run_id, state=state, run_dir=job.run_dir, job_ids=["1"], info=info)
    if experiment:
        reg.add_to_experiment(experiment, run.run_id, position, label)
    return run
