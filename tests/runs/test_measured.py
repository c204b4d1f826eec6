"""runs/measured.py: what past runs measured of their steps and saves (kept in their records by
status) sizes the save of a new job of the same step shape. The whole path on the cluster (a job
measures, status keeps it, the next dry run shows it): tests/e2e/test_until_done_e2e.py."""

import time

import pytest

from bridge_launch.core import paths
from bridge_launch.job.step_shape import step_shape
from bridge_launch.resolve import resolver as resolve
from bridge_launch.runs import measured
from bridge_launch.runs.records import job_json
from bridge_launch.runs.registry import Registry
from conftest import run_cli


def _record(reg, run_id, cluster, overrides, figures, age):
    job = resolve.resolve("smoke", resolve.Options(cluster=cluster, overrides=tuple(overrides))).with_run_id(run_id)
    (reg.jobs_dir() / f"{run_id}.json").write_text(job_json(job))
    reg.insert(
        {
            "run_id": run_id,
            "created": time.time() - age,
            "recipe": "smoke",
            "cluster": cluster,
            "backend": job.backend,
            "state": "STOPPED",
            "run_dir": job.run_dir,
            "info": {"measured": figures} if figures else {},
        }
    )
    return job


@pytest.mark.usefixtures("home")
def test_the_newest_run_of_the_jobs_step_shape_sizes_its_save():
    assert measured.candidates("smoke", "local-slurm") == ()
    assert not paths.registry_file().exists()  # a dry run before any run makes no registry
    reg = Registry()
    slow = ["smoke.step_sleep=45", "smoke.save_sleep=20"]
    old = _record(reg, "smoke-old", "local-slurm", slow, {"step_s": 30.0, "save_s": 5.0}, age=300)
    _record(reg, "smoke-mid", "local-slurm", [*slow, "train.train_iters=7"], {"step_s": 46.5, "save_s": 21.0}, 200)
    _record(reg, "smoke-quick", "local-slurm", ["smoke.step_sleep=1"], {"step_s": 1.1, "save_s": 0.1}, 100)
    _record(reg, "smoke-none", "local-slurm", slow, None, 50)  # measured nothing (yet)
    _record(reg, "smoke-other", "local", slow, {"step_s": 9.0, "save_s": 1.0}, 10)  # another cluster
    reg.close()
    got = measured.candidates("smoke", "local-slurm")
    assert [c[0] for c in got] == ["smoke-quick", "smoke-mid", "smoke-old"]
    assert got[1][1] == got[2][1] == step_shape(old) != got[0][1]  # the target is not part of the shape
    r = run_cli("submit", "smoke", "-c", "local-slurm", *slow, "train.train_iters=50", "--dry-run")
    assert r.code == 0, r.err
    assert "estimate: ~46 s a step (measured by run smoke-mid), ~21 s a save (measured by run smoke-mid, its" in r.out
    r = run_cli("submit", "smoke", "-c", "local-slurm", "smoke.step_sleep=2", "--dry-run")
    assert "estimate: step time unknown (plan has no throughput figure for smoke on cpu; --step-time)" in r.out
