"""Every shipped Megatron-Bridge recipe x GB200 profile (and the convergence overlay) checked by the
real Megatron-Bridge at the revision the recipe pins, on CPU: the job's exact run_recipe.py
arguments through that revision's own run_recipe.py main() (recipe lookup, Hydra overrides, the
runner's syncs), then runtime_config_update() and validate() at the job's world size; and the
recipe function alone, for the values bridge-launch labels upstream@<commit>. One process per
revision (scripts/bridge/realcheck.py); the venv and sources come from scripts/bridge-env."""

from __future__ import annotations

import collections
import subprocess
import sys

import pytest
import realbridge  # scripts/bridge: on the path tests/conftest.py sets

from bridge_launch.core import upstream
from bridge_launch.resolve import resolver as resolve
from bridge_launch.spec import clusters, recipes
from conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("home")]

# The seed's convergence run: the Nemotron 3 Nano recipe with NeMo-CI's template on 64 GPUs.
OVERLAYS = {"nemotron-3-nano-pretrain": [("nemo-ci-convergence", "gb200-64")]}


def _shipped() -> list[dict]:
    return [r for r in recipes.list_recipes() if r["workload"] == "megatron-bridge" and r["origin"] == "shipped"]


def _profiles() -> list[str]:
    return [p["name"] for p in clusters.list_profiles() if p["gpu_type"] == "gb200" and not p["abstract"]]


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """(jobs {id: (recipe, ResolvedJob)}, results {id: realcheck result}) for every recipe x profile."""
    env = realbridge.environment()
    tmp = tmp_path_factory.mktemp("real-bridge")
    hf = realbridge.hf_home(tmp / "hf")
    jobs: dict = {}
    requests: dict = collections.defaultdict(list)
    for rec in _shipped():
        rev = upstream.revision(rec["bridge_commit"])
        requests[rev.bridge].append(realbridge.function_request(f"function:{rec['name']}", rec))
        combos = [((), p) for p in _profiles()] + [((o,), p) for o, p in OVERLAYS.get(rec["name"], [])]
        for overlays, profile in combos:
            job = resolve.resolve(rec["name"], resolve.Options(cluster=profile, overlays=overlays))
            if job.errors:  # bridge-launch refuses it before submit (a fixed-size cluster of another size)
                continue
            job_id = f"{rec['name']}{''.join('+' + o for o in overlays)}@{profile}"
            jobs[job_id] = (rec, job)
            requests[rev.bridge].append(realbridge.job_request(job_id, job))
    results: dict = {}
    for bridge, reqs in requests.items():
        results.update(realbridge.run(env, upstream.revision(bridge), hf, reqs, tmp))
    return jobs, results


def test_every_recipe_whose_function_exists_is_accepted_at_its_revision(checked):
    jobs, results = checked
    refused = {
        job_id: f"{results[job_id].get('stage')}: {results[job_id].get('why')}"
        for job_id, (rec, _job) in jobs.items()
        if not rec.get("upstream_status") and not results[job_id]["ok"]
    }
    assert refused == {}
    # every shipped recipe and the overlay reached the check on some profile
    assert {rec["name"] for rec, _job in jobs.values()} == {r["name"] for r in _shipped()}
    assert any("+nemo-ci-convergence@" in j for j in jobs)


def test_a_recipe_said_to_be_missing_upstream_is_refused_at_recipe_lookup(checked):
    # what --dry-run warns of (upstream_status) is what the real run_recipe.py does
    jobs, results = checked
    missing = {j: results[j] for j, (rec, _job) in jobs.items() if rec.get("upstream_status")}
    assert missing
    assert {(r["ok"], r["stage"]) for r in missing.values()} == {(False, "recipe lookup")}


def test_every_value_the_dry_run_states_is_the_value_main_hands_to_training(checked):
    jobs, results = checked
    differ = {}
    for job_id, (_rec, job) in jobs.items():
        real = results[job_id]
        if not real["ok"]:
            continue
        for key, ours in job.config.items():
            theirs = real["values"].get(key, "<not in the config>")
            if theirs != ours:
                differ[f"{job_id} {key}"] = (ours, theirs)
    assert differ == {}


def test_a_value_the_trainer_changes_at_start_is_named_in_the_dry_run(checked):
    jobs, results = checked
    unnamed, changed = {}, 0
    for job_id, (_rec, job) in jobs.items():
        for key, value in (results[job_id].get("runtime") or {}).items():
            if key in job.config:
                changed += 1
                if not any(key in w and str(value) in w for w in job.warnings):
                    unnamed[f"{job_id} {key}"] = (job.config[key], value)
    assert changed  # mock data: megatron-core sets dataset.split to 1,1,1
    assert unnamed == {}


def test_every_value_labelled_upstream_is_what_the_recipe_function_sets(checked):
    _jobs, results = checked
    wrong = {}
    for rec in _shipped():
        if rec.get("upstream_status"):
            assert not results[f"function:{rec['name']}"]["ok"]
            continue
        function = results[f"function:{rec['name']}"]
        assert function["ok"], function
        for key, ours in rec["upstream_config"].items():
            theirs = function["values"].get(key, "<not set>")
            if theirs != ours:
                wrong[f"{rec['name']} {key}"] = (ours, theirs)
    assert wrong == {}


def test_the_dry_run_labels_upstream_values_with_the_pinned_commit(checked):
    jobs, _results = checked
    for _job_id, (rec, job) in jobs.items():
        labels = {s for s in job.provenance["config"].values() if s.startswith("upstream")}
        assert labels <= {f"upstream@{upstream.short(rec['bridge_commit'])}"}, labels


def test_the_classes_a_recipe_declares_are_the_ones_its_function_builds(checked):
    # what the only_in check of preflight compares keys against
    _jobs, results = checked
    for rec in _shipped():
        function = results[f"function:{rec['name']}"]
        if rec.get("upstream_status"):
            continue
        assert rec["classes"], rec["name"]
        assert rec["classes"] == {s: function["classes"][s] for s in rec["classes"]}, rec["name"]
        assert {"model", "dataset"} <= set(rec["classes"])


def test_derive_upstream_finds_nothing_to_change():
    # the script that writes the upstream layer from the real functions agrees with the shipped files
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "derive-upstream")], capture_output=True, text=True, timeout=1200
    )
    # the VL recipes' functions are in no Megatron-Bridge revision: reported, one line each
    lines = proc.stdout.splitlines()
    assert all("recipe lookup" in ln for ln in lines), proc.stdout + proc.stderr[-2000:]
    assert sorted(ln.split(":", 1)[0] for ln in lines) == sorted(
        r["name"] for r in _shipped() if r.get("upstream_status")
    )
