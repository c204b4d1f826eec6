"""--until-done before anything runs: the chain's rules at resolve time and how status reads a
chain's outcomes (its sizing: tests/plan/test_sizing.py). The chain on
a real cluster is in tests/e2e/test_until_done_e2e.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bridge_launch.backends.slurm import backend as slurm
from bridge_launch.core.errors import UsageError
from bridge_launch.resolve import resolver as resolve
from bridge_launch.runs import lifecycle as launch
from bridge_launch.runs.registry import Registry
from conftest import run_cli
from launch_jobs import step_words

VL = ("dataset.path=/lustre/fsw/data/clevr2", "checkpoint.pretrained_checkpoint=/lustre/fsw/ckpt/qwen35")


def _chain(recipe="smoke", cluster="local-slurm", overrides=(), **opts):
    return resolve.resolve(
        recipe, resolve.Options(cluster=cluster, overrides=tuple(overrides), until_done=True, **opts)
    )


def _finished_run(reached: int | None, iters: int = 50):
    """A COMPLETED local run whose checkpoints reached `reached` (None: it never saved)."""
    reg = Registry()
    run = reg.reserve("smoke", "local", "local")
    job = resolve.resolve("smoke", resolve.Options(overrides=(f"train.train_iters={iters}",))).with_run_id(run.run_id)
    (reg.jobs_dir() / f"{run.run_id}.json").write_text(launch.job_json(job))
    ckpt = Path(job.config["checkpoint.save"])
    ckpt.mkdir(parents=True)
    if reached is not None:
        (ckpt / "latest_checkpointed_iteration.txt").write_text(f"{reached}\n")
    reg.update(run.run_id, state="COMPLETED", run_dir=job.run_dir)
    return run.run_id, Path(job.run_dir)


@pytest.mark.usefixtures("home")
def test_the_chain_turns_on_bridges_exit_handler_and_loads_its_own_saves():
    job = _chain()
    assert job.config["train.exit_signal_handler"] is True  # the smoke workload too: it follows Bridge
    assert job.config["checkpoint.load"] == job.config["checkpoint.save"] == job.chain["save"]
    assert job.limit_save["exit_signal"] == "TERM" and job.chain["max_segments"] is None
    assert job.chain["complete_files"] == [".metadata", "metadata.json", "train_state.pt"]
    assert job.scheduler["signal"] == "B:USR1@120"
    assert "cancel_signal" not in job.scheduler  # a chain's USR1 trap tells a cancel from the limit itself
    assert _chain(overrides=["train.exit_signal=SIGUSR2"]).limit_save["exit_signal"] == "USR2"


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize(
    "overrides,opts,message",
    [
        (["checkpoint.load=/elsewhere"], {}, "checkpoint.load is /elsewhere"),
        (["checkpoint.ckpt_step=5"], {}, "would load that iteration in every segment"),
        (["train.exit_signal=SIGNOPE"], {}, "is not a signal name or number"),
        ([], {"max_segments": 0}, "--max-segments must be >= 1"),
        ([], {"step_time": -1.0}, "--step-time must be a positive number"),
    ],
)
def test_the_chain_refuses(overrides, opts, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        _chain(overrides=overrides, **opts)


def test_status_reads_the_chains_outcomes():
    text = (
        "101 continued 0 40 \n102 no-progress 40 40 the save did not finish within the signal lead of 60 s\n"
        "103 failed 40 55 exit 1, restart 1 of 3\nbogus line\n104 done 55 100 \n"
    )
    got = slurm._outcomes(text)
    assert got["101"] == {"outcome": "continued", "checkpoint": 40, "detail": ""}
    assert got["102"]["detail"] == "the save did not finish within the signal lead of 60 s"
    assert got["104"]["checkpoint"] == 100 and len(got) == 4
    from bridge_launch.cli.commands import _segment_text

    assert (
        _segment_text({"job_id": "102", "state": "TIMEOUT", **got["102"]})
        == "102 TIMEOUT (no progress: the save did not finish within the signal lead of 60 s)"
    )
    assert _segment_text({"job_id": "101", "state": "COMPLETED", **got["101"]}) == "101 COMPLETED (saved iteration 40)"


@pytest.mark.usefixtures("home")
def test_resume_of_a_finished_run_is_refused_before_submit():
    run_id, run_dir = _finished_run(reached=50)
    r = run_cli("resume", run_id)
    assert r.code == 2 and "already reached iteration 50" in r.err and "train.train_iters=N (N > 50)" in r.err
    r = run_cli("resume", run_id, "train.train_iters=40")
    assert r.code == 2 and "already reached iteration 50" in r.err
    assert [x["run_id"] for x in run_cli("status", "-o", "json").json()] == [run_id]  # nothing was reserved
    assert not (run_dir / "launch").exists()  # nor staged


@pytest.mark.usefixtures("home")
def test_resume_without_a_checkpoint_or_a_run_dir_is_refused_and_logs_and_check_say_why():
    import shutil

    run_id, run_dir = _finished_run(reached=None)
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "logs" / f"{run_id}.log").write_text("[rank0]: iteration        1/      50 | lm loss: 1.0\n")
    r = run_cli("resume", run_id)
    assert r.code == 2 and "no checkpoint in" in r.err and "would train from scratch" in r.err, r.err
    assert "submit smoke again" in r.err and len(r.err.strip().splitlines()) == 1
    r = run_cli("logs", run_id, "--rank", "7")
    assert r.code == 2 and f"--rank 7: run {run_id} has 2 ranks (0-1)" in r.err, r.err
    shutil.rmtree(run_dir)
    r = run_cli("resume", run_id)
    assert r.code == 2 and f"its run dir {run_dir} is gone" in r.err, r.err
    r = run_cli("logs", run_id)
    assert r.code == 2 and "has no log files to show" in r.err and "is gone" in r.err, r.err
    r = run_cli("check", run_id)
    assert r.code == 2 and "has no logs to judge" in r.err and "FAILED" not in r.out, r.out + r.err
    assert [x["run_id"] for x in run_cli("status", "-o", "json").json()] == [run_id]  # nothing reserved


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize(
    "override",
    [
        "model.hidden_size=66",
        "model.num_layers=3",
        "model.vocab_size=512",
        "dataset.seq_length=128",
        "++model.num_query_groups=2",
    ],
)
def test_resume_refuses_a_new_model_shape(override):
    run_id, _ = _finished_run(reached=20)
    r = run_cli("resume", run_id, override)
    assert r.code == 2 and "changes the model's shape" in r.err, r.err
    assert len(r.err.strip().splitlines()) == 1


def test_a_slurm_job_whose_function_bridge_launch_ships_stages_its_entry_and_module(home, tmp_path, monkeypatch):
    # the real Slurm backend stages into the run dir; only sbatch is left out (the local cluster runs it in
    # tests/e2e): submit hands the backend the shim and the module beside the script that starts them
    (home / "clusters" / "gb-here.toml").write_text(f'extends = "gb200-32"\njob_root = "{tmp_path}/runs"\n')
    be = slurm.Backend()
    monkeypatch.setattr(be, "submit", lambda *_a: ["4242"])
    monkeypatch.setattr(launch.backends, "backend", lambda _name: be)
    job = resolve.resolve("qwen35-vl-sft", resolve.Options(cluster="gb-here", overrides=VL, canary=False))
    assert job.refusals == [], job.refusals
    run = launch.submit(job)
    root = Path(run.run_dir)
    src = Path(launch.__file__).resolve().parents[1] / "workloads"
    assert (root / "workload" / "bridge_recipe_entry.py").read_text() == (src / "bridge_recipe_entry.py").read_text()
    module = root / "workload" / "bridge_recipes" / "qwen35_vl_gb200.py"
    assert module.read_text() == (src / "bridge_recipes" / "qwen35_vl_gb200.py").read_text()
    script = (root / "launch" / f"{run.run_id}.sbatch").read_text()
    words = step_words(script)
    at = words.index(f"{root}/workload/bridge_recipe_entry.py")
    assert words[at + 1] == str(module)
    # a recipe whose function is Megatron-Bridge's own stages workload/ only for the health step
    from bridge_launch.backends.base import needs_workload

    plain = resolve.resolve("qwen35-9b-pretrain", resolve.Options(cluster="gb200-8"))
    import dataclasses

    # every Megatron-Bridge job on a cluster (Slurm, Lepton, DGX Cloud) runs image_revision.py first; on
    # this machine (local), nothing of workload/ is needed without a module, a health step, a chain or a canary
    unchecked = dataclasses.replace(plain, scheduler={**plain.scheduler, "health_check": False})
    assert needs_workload(job) and needs_workload(plain) and needs_workload(unchecked)
    assert needs_workload(dataclasses.replace(unchecked, backend="lepton"))
    assert not needs_workload(dataclasses.replace(unchecked, backend="local"))


@pytest.mark.parametrize(
    "path,opts",
    [
        ("plain", {"max_restarts": 0}),
        ("retry", {}),
        ("chain", {"until_done": True, "step_time": 1.0}),
        ("canary", {"canary": True}),
        ("canary chain", {"canary": True, "until_done": True, "step_time": 1.0}),
    ],
)
def test_a_submit_renders_once_and_hands_the_backend_what_it_rendered(home, tmp_path, monkeypatch, path, opts):
    # as above: the real Slurm backend stages into the run dir, sbatch is left out; every render is counted
    (home / "clusters" / "gb-here.toml").write_text(f'extends = "gb200-8"\njob_root = "{tmp_path}/runs"\n')
    be = slurm.Backend()
    submitted = []

    def sbatch(job, _run, artifact, _secrets):
        submitted.append((job, artifact))
        return [str(4242 + len(submitted))]

    monkeypatch.setattr(be, "submit", sbatch)
    monkeypatch.setattr(launch.backends, "backend", lambda _name: be)
    renders = []
    from bridge_launch.backends.slurm import render as slurm_render  # what backends.render calls

    real_render = slurm_render.render
    monkeypatch.setattr(slurm_render, "render", lambda job: renders.append(job.run_id) or real_render(job))
    job = resolve.resolve(
        "smoke", resolve.Options(cluster="gb-here", overrides=("checkpoint.save=/lustre/ck",), **opts)
    )
    run = launch.submit(job)
    assert len(renders) == 1, (path, renders)
    root = Path(run.run_dir)
    script = (root / "launch" / f"{run.run_id}.sbatch").read_text()
    main_job, main = submitted[-1]
    assert main.text == script and main.waits_for is None  # what was staged is what sbatch got
    for rel, text in main.files.items():
        assert (root / rel).read_text() == text
    if "canary" in path:  # the canary first, then the job waiting for its id: filled in, not rendered again
        canary_job, canary = submitted[0]
        assert len(submitted) == 2 and canary_job.run_id == f"{run.run_id}-canary"
        assert (root / canary.filename).read_text() == canary.text and "--dependency" not in canary.text
        assert "#SBATCH --dependency=afterok:4243\n#SBATCH --kill-on-invalid-dep=yes\n" in script
        assert "--dependency=afterok:4243" in main_job.scheduler["sbatch_args"]
        assert "@CANARY_JOB_ID@" not in "".join([script, *(p.read_text() for p in (root / "launch").iterdir())])
    else:
        assert len(submitted) == 1 and "--dependency=afterok" not in script
    # the same text as a dry run of the same job, the run id filled in
    from bridge_launch import backends

    shown = backends.render(job.with_run_id(run.run_id))
    assert shown.text.replace("@CANARY_JOB_ID@", "4243") == script


@pytest.mark.usefixtures("home")
def test_the_slurm_backend_reads_the_segment_from_the_artifact_not_its_text(monkeypatch):
    # a rack-sized segment: submit asks sbatch's version for it from the artifact's field
    job = resolve.resolve("smoke", resolve.Options(cluster="gb200-64", nodes=16))
    art = slurm.render(job)
    assert art.segment and f"#SBATCH --segment={art.segment}\n" in art.text
    be = slurm.Backend()
    asked = []

    class Done(Exception):
        pass

    def command(_s, argv, **_k):
        asked.append(argv)
        raise Done

    monkeypatch.setattr(be, "command", command)
    import dataclasses

    for artifact, version_asked in ((art, True), (dataclasses.replace(art, segment=None), False)):
        asked.clear()
        with pytest.raises(Done):
            be.submit(job, None, dataclasses.replace(artifact, text="#!/bin/bash\n"), {})
        assert (asked[0] == ["sbatch", "--version"]) is version_asked, asked
