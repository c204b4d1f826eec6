"""Every shipped Megatron-Bridge recipe x GB200 profile (and the convergence overlay) checked by the
real Megatron-Bridge at the revision the recipe pins, on CPU: the job's exact run_recipe.py
arguments through that revision's own run_recipe.py main() (recipe lookup, Hydra overrides, the
runner's syncs), then runtime_config_update() and validate() at the job's world size; and the
recipe function alone, for the values bridge-launch labels upstream@<commit>. One process per
revision (scripts/bridge/realcheck.py); the venv and sources come from scripts/bridge-env."""

from __future__ import annotations

import collections
import os
import subprocess
import sys

import pytest
import realbridge  # scripts/bridge: on the path tests/conftest.py sets

from bridge_launch.backends.base import entry_command
from bridge_launch.core import upstream
from bridge_launch.resolve import resolver as resolve
from bridge_launch.spec import clusters, recipes
from conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("home")]

# The seed's convergence runs: its two candidates with NeMo-CI's template on 64 GPUs.
OVERLAYS = {
    "nemotron-3-nano-pretrain": [("nemo-ci-convergence", "gb200-64")],
    "qwen35-9b-pretrain": [("nemo-ci-convergence", "gb200-64")],
}
# ... and as NeMo-CI launches them: the seed's command line for its entry, scripts/performance/
# run_recipe.py (argument names at 987244934 and dd81e664e: argument_parser.py; --gpu is required
# there, and --wandb_experiment_name, since get_library_recipe joins it into the output paths,
# utils/utils.py:302-305).
NEMO_CI = {
    "nemotron-3-nano-pretrain": ("nemotronh", "nemotron_3_nano_gb200"),
    "qwen35-9b-pretrain": ("qwen", "qwen35_9b"),
}
NEMO_CI_ARGS = (
    "--task pretrain --num_gpus 64 --gpus_per_node 4 --global_batch_size 512 --micro_batch_size 2 "
    "--seq_length 4096 --max_steps 48000 --gpu gb200 --wandb_experiment_name convergence"
).split()
# What NeMo-CI's run and bridge-launch's may set differently, and why: the dataset and tokenizer
# (the script replaces the dataset with its mock config, run_recipe.py:101-151; a bridge-launch run
# names its data), the output paths (/nemo_run/NAME there, utils/utils.py:301-314; the run dir here),
# and bridge-launch's own additions (the time-limit save's handler, checkpoint retention).
NEMO_CI_EXCEPT = (
    "dataset.",
    "tokenizer.",
    "checkpoint.save",
    "checkpoint.load",
    "logger.tensorboard_dir",
    "logger.wandb_",
    "train.exit_signal_handler",
    "checkpoint.most_recent_k",
)


def _shipped() -> list[dict]:
    return [r for r in recipes.list_recipes() if r["workload"] == "megatron-bridge" and r["origin"] == "shipped"]


def _profiles() -> list[str]:
    return [p["name"] for p in clusters.list_profiles() if p["gpu_type"] == "gb200" and not p["abstract"]]


def _inputs(rec: dict, root) -> tuple:
    """The caller's inputs a recipe requires, as paths that exist (validate() opens the pretrained
    checkpoint's directory): dataset.path and checkpoint.pretrained_checkpoint for the VL recipes."""
    out = []
    for key in rec["required"]:
        path = root / key.replace(".", "-")
        path.mkdir(parents=True, exist_ok=True)
        out.append(f"{key}={path}")
    return tuple(out)


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
            opts = resolve.Options(cluster=profile, overlays=overlays, overrides=_inputs(rec, tmp / "inputs"))
            job = resolve.resolve(rec["name"], opts)
            if job.errors:  # bridge-launch refuses it before submit (a fixed-size cluster of another size)
                continue
            job_id = f"{rec['name']}{''.join('+' + o for o in overlays)}@{profile}"
            jobs[job_id] = (rec, job)
            request = realbridge.job_request(job_id, job)
            requests[rev.bridge].append(request)
            if "module" in request:  # the same arguments without the entry's registration: what it is for
                bare = {k: v for k, v in request.items() if k != "module"}
                requests[rev.bridge].append(dict(bare, id="without-module:" + job_id))
        if rec["name"] in NEMO_CI:
            family, name = NEMO_CI[rec["name"]]
            argv = ["--model_family_name", family, "--model_recipe_name", name, *NEMO_CI_ARGS]
            requests[rev.bridge].append({"id": f"nemo-ci:{rec['name']}", "nemo_ci": argv, "world_size": 64})
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
    # the VL recipes, whose functions bridge-launch ships, on the 32-GPU profile they are written for
    assert {"qwen35-vl-sft@gb200-32", "qwen35-vl-sft-mxfp8@gb200-32"} <= set(jobs)


def test_the_vl_recipes_functions_are_found_only_through_the_jobs_entry(checked):
    # the entry's registration (workloads/bridge_recipe_entry.py) is what makes the real run_recipe.py find
    # them: the same arguments without it stop at its recipe lookup
    jobs, results = checked
    shipped = {j: job for j, (rec, job) in jobs.items() if rec.get("bridge_recipe_module")}
    assert {j.split("@")[0] for j in shipped} == {"qwen35-vl-sft", "qwen35-vl-sft-mxfp8"}
    for job_id, job in shipped.items():
        assert results[job_id]["ok"] and results[job_id]["mode"] == "finetune", results[job_id]
        bare = results["without-module:" + job_id]
        assert (bare["ok"], bare["stage"]) == (False, "recipe lookup"), bare
        assert f"Recipe '{job.upstream}' not found in megatron.bridge.recipes" in bare["why"]
        # the values the seed states and the native-packing ones, as main() hands them to training
        values = results[job_id]["values"]
        assert values["dataset.packing_buffer_size"] == 8 and values["model.mtp_num_layers"] == 0
        assert values["model.context_parallel_size"] == 8 and values["model.expert_model_parallel_size"] == 16
        assert values["dataset.task_encoder.max_visual_tokens"] == 2048


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


def test_the_convergence_runs_are_nemo_cis_own_at_each_pin(checked):
    """The seed's two convergence candidates with the nemo-ci-convergence overlay hand training the
    config NeMo-CI's entry builds from the seed's command line, at each recipe's pin: every value
    after validate() equal outside NEMO_CI_EXCEPT, and each of the overlay's values labelled with
    its line in that script."""
    jobs, results = checked

    def validated(result: dict) -> dict:
        return {**result["values"], **(result.get("runtime") or {})}

    for recipe_name in NEMO_CI:
        theirs_result = results[f"nemo-ci:{recipe_name}"]
        assert theirs_result["ok"], theirs_result
        rec, job = jobs[f"{recipe_name}+nemo-ci-convergence@gb200-64"]
        ours_result = results[f"{recipe_name}+nemo-ci-convergence@gb200-64"]
        assert ours_result["ok"], ours_result
        ours, theirs = validated(ours_result), validated(theirs_result)
        # the script sets the deprecated train.eval_interval (run_recipe.py:209), which validate() copies into
        # validation.eval_interval and keeps; the job sets validation.eval_interval itself
        assert theirs.pop("train.eval_interval") == ours["validation.eval_interval"] == 800
        assert ours.pop("train.eval_interval", None) is None
        differ = {
            key: (ours.get(key, "<unset>"), theirs.get(key, "<unset>"))
            for key in sorted(set(ours) | set(theirs))
            if ours.get(key, "<unset>") != theirs.get(key, "<unset>") and not key.startswith(NEMO_CI_EXCEPT)
        }
        assert differ == {}, recipe_name
        # the run controls the script sets for a run of more than 100 steps
        assert (theirs["scheduler.lr_warmup_iters"], theirs["checkpoint.save_interval"]) == (480, 1000)
        assert (theirs["validation.eval_interval"], theirs["logger.log_interval"]) == (800, 1)
        short = upstream.short(rec["bridge_commit"])
        for key in ("scheduler.lr_warmup_iters", "checkpoint.save_interval", "validation.eval_interval"):
            assert job.provenance["config"][key].startswith(f"nemo-ci@{short} scripts/performance/run_recipe.py:")


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


def test_every_value_labelled_upstream_or_bridge_launch_fn_is_what_the_recipe_function_sets(checked):
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
        labels = {s for s in job.provenance["config"].values() if s.startswith(("upstream", "bridge-launch-fn"))}
        # a function bridge-launch ships is not labelled upstream's
        who = "bridge-launch-fn" if rec.get("bridge_recipe_module") else "upstream"
        assert labels <= {f"{who}@{upstream.short(rec['bridge_commit'])}"}, labels


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
    # every recipe's function builds, the VL recipes' through the module bridge-launch ships
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr[-2000:]


def test_the_jobs_entry_itself_runs_the_real_run_recipe_py(tmp_path):
    # workload/bridge_recipe_entry.py as torchrun starts it (the job's own arguments after the module and
    # run_recipe.py), under the bridge venv with Megatron-Bridge 067f987's run_recipe.py; its --dry-run
    # writes the config main() built instead of training
    env = realbridge.environment()
    bridge, core = realbridge.sources(env, upstream.revision(upstream.BRIDGE_MAIN))
    hf = realbridge.hf_home(tmp_path / "hf")
    rec = recipes.load("qwen35-vl-sft-mxfp8")
    job = resolve.resolve(rec["name"], resolve.Options(cluster="gb200-32", overrides=_inputs(rec, tmp_path)))
    cmd = entry_command(job)
    assert cmd[0].endswith("/workload/bridge_recipe_entry.py") and cmd[2] == upstream.RUN_RECIPE
    workloads = REPO / "src" / "bridge_launch" / "workloads"
    out = tmp_path / "config.yaml"
    proc = subprocess.run(
        [
            env["BRIDGE_PY"],
            str(workloads / "bridge_recipe_entry.py"),
            str(workloads / "bridge_recipes" / cmd[1].rsplit("/", 1)[1]),
            f"{bridge}/scripts/training/run_recipe.py",
            *cmd[3:],
            "--dry-run",
            f"logger.save_config_filepath={out}",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
        env=dict(
            os.environ,
            PYTHONPATH=f"{REPO / 'scripts' / 'bridge' / 'site'}:{bridge}/src:{core}",
            HF_HOME=hf,
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            WORLD_SIZE="32",
            RANK="0",
            LOCAL_RANK="0",
            BRIDGE_LAUNCH_FAKE_GPU="NVIDIA GB200:10:0",
        ),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    for line in (
        "packing_buffer_size: 8",
        "max_visual_tokens: 2048",
        "context_parallel_size: 8",
        "mtp_num_layers: 0",
        "fp8_recipe: mxfp8",
        "fp8_param_gather: false",
        f"hf_processor_revision: {job.config['dataset.task_encoder.hf_processor_revision']}",
    ):
        assert f" {line}\n" in text, line
    assert f"Loading library recipe '{job.upstream}' from megatron.bridge.recipes" in proc.stdout + proc.stderr
