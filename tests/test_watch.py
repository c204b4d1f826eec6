"""Experiments (sweeps, several recipes, the registry's new tables), status with metrics, and the
logs filters, on recorded runs whose logs lie where their backend reads them. The same on a real
Slurm cluster: tests/test_watch_e2e.py."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from bridge_launch.core.errors import UsageError
from bridge_launch.runs import experiments
from conftest import write
from test_gate import training_log


# ------------------------------------------------------------------------------------------------
# sweeps
# ------------------------------------------------------------------------------------------------
def test_sweeps_expand_like_hydras_basic_sweeper():
    m = experiments.expand(
        ["smoke"], ["train.train_iters=5", "optimizer.lr=1e-3,3e-3", "rng.seed=range(1,3)"], sweep=True
    )
    assert [x.overrides for x in m] == [
        ["train.train_iters=5", "optimizer.lr=0.001", "rng.seed=1"],
        ["train.train_iters=5", "optimizer.lr=0.001", "rng.seed=2"],
        ["train.train_iters=5", "optimizer.lr=0.003", "rng.seed=1"],
        ["train.train_iters=5", "optimizer.lr=0.003", "rng.seed=2"],
    ]
    assert m[1].label == "optimizer.lr=0.001 rng.seed=2"
    m = experiments.expand(["a", "b"], ["+x=choice(p,q)", "y=1"], sweep=True)
    assert [(x.recipe, x.overrides, x.label) for x in m] == [
        ("a", ["+x=p", "y=1"], "a x=p"),
        ("a", ["+x=q", "y=1"], "a x=q"),
        ("b", ["+x=p", "y=1"], "b x=p"),
        ("b", ["+x=q", "y=1"], "b x=q"),
    ]
    assert [x.overrides for x in experiments.expand(["s"], ["z=range(0.5,1.6,0.5)"], sweep=True)] == [
        ["z=0.5"],
        ["z=1.0"],
        ["z=1.5"],
    ]


@pytest.mark.parametrize(
    "overrides,fragment",
    [
        (["a=1,2"], "add --sweep"),
        (["a=interval(0,1)"], "interval() is a continuous range"),
        (["a=range(1,1)"], "the sweep has no values"),
    ],
)
def test_bad_sweeps(overrides, fragment):
    with pytest.raises(UsageError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        experiments.expand(["smoke"], overrides, sweep="add --sweep" not in fragment)


def test_a_stray_comma_is_still_an_error_and_a_sweep_needs_the_flag(cli):
    r = cli("submit", "smoke", "--dry-run", "train.train_iters=1,2")
    assert r.code == 2 and "add --sweep to submit one run per value" in r.err
    r = cli("submit", "smoke", "--dry-run", "--sweep", "train.train_iters=1,2", "-o", "json")
    assert r.code == 0, r.err
    runs = r.json()["runs"]
    assert [x["config"]["train.train_iters"] for x in runs] == [1, 2]
    assert [x["label"] for x in runs] == ["train.train_iters=1", "train.train_iters=2"]
    r = cli("submit", "smoke", "--dry-run", "train.train_iters='1,2'", "-o", "json")
    assert r.code == 2  # a quoted comma is a string: the key wants an int


def test_several_recipes_with_an_overlay_are_one_experiment(cli):
    r = cli(
        "submit",
        "qwen35-vl-sft",
        "qwen35-vl-sft-mxfp8",
        "-c",
        "gb200-32",
        "--overlay",
        "validation-run",
        "dataset.path=/lustre/clevr2",
        "checkpoint.pretrained_checkpoint=/lustre/ckpt",
        "--dry-run",
        "-o",
        "json",
    )
    assert r.code == 0, r.err
    d = r.json()
    assert [x["recipe"] for x in d["runs"]] == ["qwen35-vl-sft", "qwen35-vl-sft-mxfp8"]
    assert all(x["config"]["train.train_iters"] == 100 and x["overlays"] == ["validation-run"] for x in d["runs"])
    assert d["experiment"].startswith("qwen35-vl-sft-x")


# ------------------------------------------------------------------------------------------------
# the registry: experiments beside runs; an older state dir keeps working
# ------------------------------------------------------------------------------------------------
OLD_SCHEMA = """
CREATE TABLE runs (run_id TEXT PRIMARY KEY, created REAL NOT NULL, updated REAL NOT NULL, recipe TEXT NOT NULL,
    cluster TEXT NOT NULL, backend TEXT NOT NULL, state TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '',
    job_ids TEXT NOT NULL DEFAULT '[]', run_dir TEXT NOT NULL DEFAULT '', resumed_from TEXT, chain TEXT,
    info TEXT NOT NULL DEFAULT '{}');
CREATE INDEX runs_created ON runs (created DESC);
"""


@pytest.mark.usefixtures("home")
def test_an_older_state_dir_gains_the_experiment_tables(cli):
    import os

    state = Path(os.environ["BRIDGE_LAUNCH_HOME"])
    state.mkdir(parents=True)
    db = sqlite3.connect(state / "registry.sqlite")
    db.executescript(OLD_SCHEMA)
    db.execute(
        "INSERT INTO runs (run_id, created, updated, recipe, cluster, backend, state, run_dir, chain, info) "
        "VALUES ('old-0101-abcd', 1, 1, 'smoke', 'local', 'local', 'COMPLETED', '/nowhere', 'old-0101-abcd', "
        '\'{"step": 7, "train_iters": 7}\')'
    )
    db.commit()
    db.close()
    r = cli("status", "-o", "json")
    assert r.code == 0 and r.json()[0]["run_id"] == "old-0101-abcd", r.err
    tables = {
        t
        for (t,) in sqlite3.connect(state / "registry.sqlite").execute(
            "SELECT name FROM sqlite_master WHERE type='table'"
        )
    }
    assert {"runs", "experiments", "experiment_runs"} <= tables
    r = cli("status")
    assert r.code == 0 and "7/7" in r.out


def _record(reg, recipe, *, state="COMPLETED", log=None, experiment=None, label="", position=0, overrides=()):
    """A run as submit leaves it, with its log where the local backend reads it."""
    from bridge_launch.resolve import resolver as resolve
    from bridge_launch.runs import lifecycle as launch

    run = reg.reserve(recipe, "local", "local")
    job = resolve.resolve(recipe, resolve.Options(overrides=tuple(overrides))).with_run_id(run.run_id)
    (reg.jobs_dir() / f"{run.run_id}.json").write_text(launch.job_json(job))
    if log is not None:
        write(Path(job.run_dir) / "logs" / f"{run.run_id}.log", log)
    info = {"experiment": experiment, "member": label} if experiment else {}
    run = reg.update(run.run_id, state=state, run_dir=job.run_dir, job_ids=["1"], info=info)
    if experiment:
        reg.add_to_experiment(experiment, run.run_id, position, label)
    return run


@pytest.mark.usefixtures("home")
def test_status_of_a_finished_run_shows_its_metrics_from_the_log_tail(cli):
    from bridge_launch.runs.registry import Registry

    reg = Registry()
    text = "\n".join(["[rank0]: " + x for x in ["starting"]]) + "\n" + training_log(100, save_at={50, 100})
    text += '[rank1]: Traceback (most recent call last):\n[rank1]:   File "x", line 1\n[rank1]: ValueError: boom\n'
    run = _record(reg, "smoke", log=text, overrides=("dataset.seq_length=128",))
    r = cli("status", run.run_id)
    assert r.code == 0, r.err
    out = r.out
    assert "step        100/100 (100%)" in out and "ETA" not in out  # finished: no ETA
    assert "lm loss 1.82085   grad norm 1   lr 0.0003" in out
    # 16 sequences of 128 tokens every 0.5 s
    assert "0.5 s/step   123.4 TFLOP/s/GPU   4,096 tokens/s" in out
    assert "saved       iteration 100 (the last checkpoint saved)" in out
    assert "error       rank 1: ValueError: boom" in out
    d = cli("status", run.run_id, "-o", "json").json()[0]
    m = d["metrics"]
    assert (m["step"], m["train_iters"], m["saved"], m["tokens_per_s"]) == (100, 100, 100, 4096.0)
    assert m["error"] == "rank 1: ValueError: boom"


@pytest.mark.usefixtures("home")
def test_experiments_show_and_compare_together(cli, tmp_path):
    import math

    from bridge_launch.runs.registry import Registry

    reg = Registry()
    reg.add_experiment("lr-sweep", {"recipes": ["smoke"]})

    def base(s):
        return 10.0 * math.exp(-s / 40) + 1.0

    a = _record(
        reg,
        "smoke",
        log=training_log(100, save_at={100}),
        experiment="lr-sweep",
        label="optimizer.lr=0.001",
        position=0,
    )
    b = _record(
        reg,
        "smoke",
        log=training_log(100, save_at={100}, loss=lambda s: base(s) * 1.005),
        experiment="lr-sweep",
        label="optimizer.lr=0.002",
        position=1,
    )
    c = _record(
        reg,
        "smoke",
        log=training_log(100, save_at={100}, loss=lambda s: base(s) * 1.3),
        experiment="lr-sweep",
        label="optimizer.lr=0.003",
        position=2,
    )
    lone = _record(reg, "smoke", log=training_log(10, save_at={10}))
    r = cli("status")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0].split()[:2] == ["RUN", "EXPERIMENT"] and "LOSS" in lines[0]
    order = [ln.split()[0] for ln in lines[1:]]
    assert order == [lone.run_id, c.run_id, b.run_id, a.run_id]  # the experiment's runs together
    r = cli("status", "lr-sweep")
    assert r.code == 0, r.err
    assert r.out.splitlines()[0].split()[:2] == ["RUN", "MEMBER"] and "\nexperiment  lr-sweep: 3 runs" in r.out
    assert "optimizer.lr=0.003" in r.out and r.out.count("step        100/100") == 3
    r = cli("compare", "lr-sweep", "--plot", tmp_path / "sweep.png", "-o", "json")
    assert r.code == 1  # the third run is 30% off the first
    d = r.json()
    assert d["experiment"] == "lr-sweep" and [x["parity"] for x in d["comparisons"]] == [True, False]
    assert d["comparisons"][0]["b"] == f"optimizer.lr=0.001 [{a.run_id}]"
    assert (tmp_path / "sweep.png").stat().st_size > 20_000
    r = cli("check", "lr-sweep", "-o", "json")
    assert r.code == 0 and len(r.json()["results"]) == 3, r.out + r.err
    # prune forgets the members that are gone, and the experiment with the last of them
    reg.db.execute("UPDATE runs SET updated = 0")
    assert set(reg.prune(1)) == {a.run_id, b.run_id, c.run_id, lone.run_id}
    assert reg.experiment("lr-sweep") is None


@pytest.mark.usefixtures("home")
def test_logs_rank_grep_tail(cli):
    from bridge_launch.runs.registry import Registry

    reg = Registry()
    run = _record(reg, "smoke", log=training_log(30, save_at={30}))
    r = cli("logs", run.run_id, "--rank", "3", "--grep", r"iteration\s+\d+/", "--tail", "2")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert len(lines) == 2 and all(ln.startswith("[rank3]: ") for ln in lines)
    assert "iteration       29/" in lines[0] and "iteration       30/" in lines[1]
    r = cli("logs", run.run_id, "--rank", "0", "--grep", "Step Time")
    assert r.code == 0 and len(r.out.splitlines()) == 30
    r = cli("logs", run.run_id, "--tail", "2")
    assert r.out.splitlines()[0].startswith("[rank3]:  validation loss at iteration 30 on test set")
    r = cli("logs", run.run_id, "--grep", "(")
    assert r.code == 2 and "--grep '(' is not a regular expression" in r.err


@pytest.mark.usefixtures("home")
def test_status_watch_json_is_one_object_per_line():
    """A finished run: one refresh, one line, then the watch ends."""
    import subprocess
    import sys

    from bridge_launch.runs.registry import Registry
    from conftest import CLI, REPO

    reg = Registry()
    run = _record(reg, "smoke", log=training_log(20, save_at={20}))
    t0 = time.time()
    out = subprocess.run(
        [*CLI, "status", run.run_id, "--watch", "--interval", "0.2", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 1 and time.time() - t0 < 30
    frame = json.loads(lines[0])
    assert frame["runs"][0]["run_id"] == run.run_id and frame["runs"][0]["metrics"]["step"] == 20
    assert sys.executable  # the same interpreter


def test_a_failed_runs_reason_leads_with_the_failing_ranks_error():
    from bridge_launch.runs.lifecycle import failure_reason

    err = "rank 3: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert failure_reason({"state": "FAILED", "reason": "exit code 1", "error": err}) == f"{err} (exit code 1)"
    assert failure_reason({"state": "FAILED", "reason": "", "error": err}) == err
    chain = "deterministic failure in segment 2: torch.OutOfMemoryError: CUDA out of memory"
    assert failure_reason({"state": "FAILED", "reason": chain, "error": err}) == chain  # the chain's own words stay
    assert failure_reason({"state": "RUNNING", "reason": "", "error": err}) == ""  # a warning line while running
    assert failure_reason({"state": "FAILED", "reason": "exit code 1"}) == "exit code 1"
