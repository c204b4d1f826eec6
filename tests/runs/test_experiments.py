from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from bridge_launch.core.errors import UsageError
from bridge_launch.runs import experiments
from run_records import _record
from training_logs import training_log

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


def test_each_run_of_an_experiment_is_checked_as_one_submit_is(cli, tmp_path):
    """--bridge-src is checked for each run of several recipes or of a sweep, in the same line as for
    one recipe (issue 36: the several-recipe path skipped the check)."""
    nowhere = tmp_path / "nowhere"
    one = cli("submit", "smoke", "-c", "gb200-8", "--bridge-src", nowhere, "--dry-run")
    assert one.code == 2 and f"--bridge-src {nowhere}: no such directory" in one.err, one.err
    for words in (["smoke", "qwen35-9b-pretrain"], ["smoke", "--sweep", "train.train_iters=1,2"]):
        r = cli("submit", *words, "-c", "gb200-8", "--bridge-src", nowhere, "--dry-run")
        assert (r.code, r.err) == (one.code, one.err), (words, r.out, r.err)


@pytest.mark.usefixtures("home")
def test_an_experiment_cannot_take_a_runs_name(cli):
    from bridge_launch.runs.registry import Registry

    reg = Registry()
    run = _record(reg, "smoke", log=training_log(10, save_at={10}))
    for dry in ([], ["--dry-run"]):  # a dry run says what the submit would (issue 36: it went through)
        r = cli("submit", "smoke", "--sweep", "train.train_iters=2,3", "--experiment", run.run_id, *dry)
        assert r.code == 2 and f"--experiment '{run.run_id}' is the id of a run" in r.err, (dry, r.err)
        assert len(r.err.strip().splitlines()) == 1
    assert [x["run_id"] for x in cli("status", "-o", "json").json()] == [run.run_id]  # nothing submitted
    with pytest.raises(UsageError, match="is the id of a run"):
        reg.add_experiment(run.run_id, {})
    r = cli("status", run.run_id)  # the name still means the run
    assert r.code == 0 and "\nexperiment  " not in r.out and r.out.splitlines()[1].split()[0] == run.run_id


@pytest.mark.usefixtures("home")
def test_compare_between_runs_of_other_configurations_names_the_keys_that_differ(cli):
    """Issue 39 item 5: a verdict between two runs says where their configurations differ (their run
    ids, in every path, aside), so a parity judged against a run of another configuration is read as
    such; runs of one configuration say nothing, log files have none to say."""
    from bridge_launch.runs.registry import Registry

    reg = Registry()
    log = training_log(50, save_at={50})
    a = _record(reg, "smoke", log=log, overrides=("optimizer.lr=0.002", "train.global_batch_size=32"))
    b = _record(reg, "smoke", log=log)
    same = _record(reg, "smoke", log=log)
    r = cli("compare", a.run_id, b.run_id)
    assert r.code == 0 and "PARITY" in r.out, r.out + r.err
    assert f"config: 2 key(s) differ between {a.run_id} and {b.run_id}:" in r.out, r.out
    assert "  optimizer.lr: 0.002 vs 0.003\n  train.global_batch_size: 32 vs (unset)\n" in r.out, r.out
    d = cli("compare", a.run_id, b.run_id, "-o", "json").json()["comparisons"][0]
    assert {x["key"] for x in d["config_differences"]} == {"optimizer.lr", "train.global_batch_size"}
    r = cli("compare", same.run_id, b.run_id, "-o", "json")
    assert r.json()["comparisons"][0]["config_differences"] == []
    assert "config:" not in cli("compare", same.run_id, b.run_id).out
