"""The resolved job is frozen, deeply: a change raises, and its dict and JSON forms are as before."""

import copy
import dataclasses
import json
import pickle

import pytest

from bridge_launch.job.frozen import FrozenError
from bridge_launch.resolve import resolver as resolve


def _job(**opts):
    return resolve.resolve("smoke", resolve.Options(cluster="gb200-8", **opts))


@pytest.mark.usefixtures("home")
def test_a_resolved_job_refuses_every_change():
    job = _job(time="01:00:00")
    assert job.scheduler["signal"] == "B:USR1@120" and job.limit_save["estimate"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.nodes = 4  # type: ignore[misc]
    changes = [
        lambda: job.scheduler.__setitem__("signal", "B:USR1@60"),
        lambda: job.scheduler.update(signal="B:USR1@60"),
        lambda: job.limit_save["estimate"].__setitem__("segments", 3),
        lambda: job.limit_save.pop("estimate"),
        lambda: job.config.setdefault("train.train_iters", 1),
        lambda: job.provenance["job"].__setitem__("signal", "x"),
        lambda: job.args.append("train.train_iters=1"),
        lambda: job.mounts.extend(["/a:/a"]),
    ]
    for change in changes:
        with pytest.raises(FrozenError):
            change()
    with pytest.raises(FrozenError):
        job.profile.clear()
    with pytest.raises(AttributeError):  # the findings are a tuple of frozen records
        job.findings.append(job.findings[0] if job.findings else None)  # type: ignore[attr-defined]
    # errors and warnings are views: changing a view leaves the job as it was
    job.errors.append("x")
    assert "x" not in job.errors and "x" not in job.to_dict()["errors"]


@pytest.mark.usefixtures("home")
def test_the_frozen_job_is_json_and_dicts_as_before():
    job = _job(until_done=True, step_time=1.0, overrides=("checkpoint.save=/lustre/ck",))
    data = job.to_dict()
    assert type(data["scheduler"]) is dict and type(data["limit_save"]["estimate"]) is dict
    assert type(data["args"]) is list and type(data["config"]) is dict
    data["scheduler"]["signal"] = "changed"  # a plain copy
    assert job.scheduler["signal"] == "B:USR1@120"
    again = resolve.ResolvedJob.from_dict(json.loads(json.dumps(job.to_dict())))
    assert again == job and json.dumps(again.to_dict()) == json.dumps(job.to_dict())
    assert copy.deepcopy(job) == job and pickle.loads(pickle.dumps(job)) == job
    # a changed job is a new job
    other = dataclasses.replace(job, scheduler={**job.scheduler, "partition": "other"})
    with pytest.raises(FrozenError):
        other.scheduler["partition"] = "x"
    assert job.scheduler["partition"] == "batch"


@pytest.mark.usefixtures("home")
def test_the_dry_run_and_a_submit_get_the_same_job_and_each_finding_says_if_it_blocks_one(monkeypatch):
    monkeypatch.delenv("MY_TOKEN", raising=False)
    job = resolve.resolve("smoke", resolve.Options(secrets=("MY_TOKEN",)))
    assert job == resolve.resolve("smoke", resolve.Options(secrets=("MY_TOKEN",)))
    blocking = [f for f in job.findings if f.blocks_submit]
    assert [f.error for f in blocking] == [False]  # the dry run shows it as a warning; a submit refuses it
    assert job.errors == [] and "secret MY_TOKEN (--secret) is not set in your environment: submit would refuse" in (
        job.warnings
    )
    assert job.refusals == ["secret MY_TOKEN (--secret) is not set in your environment"]
    assert job.submit_warnings == [w for w in job.warnings if "submit would refuse" not in w]
