"""What past runs measured of their own steps and saves (time-limit.sh's figures, which `status`
keeps in each run's record): the candidates a new submit of the same recipe on the same cluster
sizes its save before the time limit with, over plan's estimate and the profile's write rate
(plan/sizing.measured takes the newest of the job's own step shape)."""

from __future__ import annotations

from bridge_launch.core import paths

LOOK_BACK = 20  # the newest runs of the recipe that are read


def candidates(recipe: str, cluster: str) -> tuple[tuple[str, str, float | None, float | None], ...]:
    """(run id, step shape, step s, save s) of the newest runs of `recipe` on `cluster` that measured
    anything, newest first. No registry yet (a first dry run): none, none is made, and nothing of
    the registry is imported (the dry run's speed)."""
    if not paths.registry_file().exists():
        return ()
    from bridge_launch.core.errors import LaunchError
    from bridge_launch.job.step_shape import step_shape
    from bridge_launch.runs.records import load_job
    from bridge_launch.runs.registry import Registry

    reg = Registry()
    try:
        out = []
        for run in reg.recent(LOOK_BACK, recipe=recipe):
            m = run.info.get("measured") or {}
            if run.cluster != cluster or not (m.get("step_s") or m.get("save_s")):
                continue
            try:
                job = load_job(reg, run)
            except (LaunchError, ValueError, KeyError, TypeError):
                continue  # a record this version cannot read sizes nothing
            out.append((run.run_id, step_shape(job), m.get("step_s"), m.get("save_s")))
        return tuple(out)
    finally:
        reg.close()
