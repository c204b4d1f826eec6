"""Fuzzing as a test (issue 12): thousands of random override sets, with 0, negative, huge,
non-numeric and quoted values, through submit --dry-run, plan and diff in-process. Bad input must
end in a BridgeLaunchError (one line, exit 2 at the CLI) or a result; any other exception fails.

What a newcomer meets (issue 13): diff that sees everything, user files that break nothing
else, child recipes, resume and prune with safety nets, completion, machine-clean JSON, size
suggestions that agree, and the smaller items.
"""

import dataclasses
import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge_launch.cli import commands
from bridge_launch.resolve import options
from bridge_launch.resolve import resolver as resolve
from bridge_launch.runs import lifecycle as launch
from bridge_launch.runs.registry import Registry
from bridge_launch.spec import clusters, recipes
from cli_inputs import VL_INPUTS
from conftest import run_cli
from fuzz_values import KEYS, VALUES, _fitting, _quiet

PREFIX = [""] * 12 + ["+", "++", "~"]


_PAIRS = {k: [(k, v) for v in _fitting(k)] * 3 + [(k, v) for v in VALUES] for k in KEYS}


override = st.builds(
    lambda p, kv: f"~{kv[0]}" if p == "~" else f"{p}{kv[0]}={kv[1]}",
    st.sampled_from(PREFIX),
    st.one_of(*[st.sampled_from(_PAIRS[k]) for k in KEYS]),
)


overrides = st.lists(override, min_size=0, max_size=5)


def _targets():
    names = [r["name"] for r in recipes.list_recipes()]
    cl = [(c["name"], c["nodes"]) for c in clusters.list_profiles()]
    return names, cl


@pytest.fixture(scope="module")
def targets():
    pytest.importorskip("megatron.core")  # plan's rank groups
    return _targets()


def _job_words(data, names, cl):
    recipe = data.draw(st.sampled_from(names))
    cluster, fixed = data.draw(st.sampled_from(cl))
    nodes = None if fixed else data.draw(st.sampled_from([None, 1, 2, 3, 9, 18, 36, 144]))
    return recipe, cluster, nodes, data.draw(overrides)


SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _side_parser():
    """diff's sides parsed by submit's own parser, as the CLI parses them."""
    import click
    import typer.main

    from bridge_launch.cli import app as cli

    root = typer.main.get_command(cli.app)
    return cli._side_parser(click.Context(root, info_name="bridge-launch"))


def _diff(*args):
    r = run_cli("diff", *args, "-o", "json")
    assert r.code == 0, r.err
    return {(x["section"], x["key"]): x for x in r.json()["differences"]}


@pytest.mark.usefixtures("home")
@pytest.mark.timeout(180)
@settings(max_examples=1500, **SETTINGS)
@given(data=st.data())
def test_submit_dry_run_never_raises(targets, data):
    recipe, cluster, nodes, ovs = _job_words(data, *targets)
    output = data.draw(st.sampled_from(["text", "json"]))
    opts = resolve.Options(cluster=cluster, overrides=tuple(ovs), nodes=nodes, memory_check=data.draw(st.booleans()))
    code = _quiet(commands.submit, recipe, opts, dry_run=True, follow=False, output=output)
    assert code in (0, 2)


@pytest.mark.usefixtures("home")
def test_an_eval_batch_still_to_interpolate_leaves_the_eval_estimate_unknown():
    """Found by the fuzz above: validation.eval_global_batch_size=${oc.env:X} is a string until the
    job interpolates it, and the time-limit estimate multiplied by it (a TypeError)."""
    r = run_cli(
        "submit", "qwen35-vl-sft-mxfp8", "-c", "gb200-32", "validation.eval_global_batch_size=${oc.env:X}", "--dry-run"
    )
    assert r.code == 0 and "Traceback" not in r.err, r.err


@pytest.mark.usefixtures("home")
@pytest.mark.timeout(180)
@settings(max_examples=1000, **SETTINGS)
@given(data=st.data())
def test_plan_never_raises(targets, data):
    recipe, cluster, nodes, ovs = _job_words(data, *targets)
    code = _quiet(
        commands.plan,
        recipe,
        ovs,
        cluster=cluster,
        overlays=[],
        nodes=nodes,
        tflops=data.draw(st.sampled_from([None, 0.0, -5.0, 250.0, 1e308, float("inf"), float("nan")])),
        tokens=data.draw(st.sampled_from([None, 0.0, 1.0, 1e11, 1e300, float("inf"), float("nan"), -1.0])),
        output=data.draw(st.sampled_from(["text", "json"])),
    )
    assert code in (0, 2)


@pytest.mark.usefixtures("home")
@pytest.mark.timeout(180)
@settings(max_examples=500, **SETTINGS)
@given(data=st.data())
def test_diff_never_raises(targets, data):
    a = _job_words(data, *targets)
    b = _job_words(data, *targets)

    def words(recipe, cluster, nodes, ovs):
        return [recipe, "-c", cluster, *(["--nodes", str(nodes)] if nodes else []), *ovs]

    code = _quiet(
        commands.diff,
        words(*a) + ["--"] + words(*b),
        all_keys=data.draw(st.booleans()),
        output=data.draw(st.sampled_from(["text", "json"])),
        parse_side=_side_parser(),
        not_job=(),
    )
    assert code in (0, 2)


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize(
    "extra,section,key,b",
    [
        (["-t", "02:00:00"], "scheduler", "time", "02:00:00"),
        (["-p", "debug"], "scheduler", "partition", "debug"),
        (["-A", "my-acct"], "scheduler", "account", "my-acct"),
        (["--secret", "MY_TOKEN"], "secrets", "MY_TOKEN", "passed by name"),
        (["--nodes", "4"], "job", "nodes", 4),
        (["--container", "my/image:1"], "job", "container", "my/image:1"),
        (["-e", "FOO=1"], "env", "FOO", "1"),
        (["--overlay", "validation-run"], "job", "overlays", ["validation-run"]),
        (["--until-done"], "job", "until_done", True),
        (["--until-done", "--signal-lead", "300"], "scheduler", "signal", "B:USR1@300"),
        (["~train.train_iters"], "config", "train.train_iters", "(unset)"),
    ],
)
def test_diff_sees_every_option_submit_takes(extra, section, key, b):
    base = ["qwen35-vl-sft", "-c", "gb200-32", *VL_INPUTS]
    d = _diff(*base, "--", *base, *extra)
    assert (section, key) in d, sorted(d)
    assert d[(section, key)]["b"] == b


def _submit_command():
    """The click command behind submit (what the CLI parses with)."""
    import typer.main

    from bridge_launch.cli import app as cli

    return typer.main.get_command(cli.app).commands["submit"]


def test_each_submit_parameter_is_a_job_field_or_named_as_not_one():
    """submit's parameters are the recipe, the fields of the one declaration of the job-shaping
    options (resolve/options.py) and the few on cli/app.py's NOT_JOB list (how to submit, not what)."""
    from bridge_launch.cli import app as cli

    cmd = _submit_command()
    names = [p.name for p in cmd.params]
    job = options.param_names()
    assert [n for n in names if n not in ("recipe", *job, *cli.NOT_JOB)] == []
    assert [n for n in (*job, *cli.NOT_JOB) if n not in names] == []
    assert not set(job) & set(cli.NOT_JOB)
    # every field submit does not spell is one the runs layer fills (the cluster's bad nodes, what past
    # runs measured)
    assert [f.name for f in dataclasses.fields(resolve.Options) if f not in options.flagged()] == [
        "bad_nodes",
        "measured",
    ]
    # the command line's defaults are the declaration's: nothing given is Options()
    params = cmd.make_context("submit", ["smoke"]).params
    assert options.from_params(params) == resolve.Options()


# One change per job field: side B's words after side A's (both after DIFF_BASE). A new field needs one.
DIFF_BASE = ["smoke", "-c", "gb200-8", "-t", "01:00:00"]
DIFF_CHANGES = {
    "cluster": ([], ["-c", "gb200-32"]),
    "overlays": ([], ["--overlay", "validation-run"]),
    "overrides": ([], ["train.train_iters=7"]),
    "nodes": ([], ["-N", "1"]),
    "time": ([], ["-t", "02:00:00"]),
    "partition": ([], ["-p", "debug"]),
    "account": ([], ["-A", "my-acct"]),
    "container": ([], ["--container", "nvcr.io#nvidia/pytorch:25.01-py3"]),
    "env": ([], ["-e", "FOO=1"]),
    "secrets": ([], ["--secret", "MY_TOKEN"]),
    "bridge_src": ([], ["--bridge-src", "/somewhere/Megatron-Bridge"]),
    "segment_size": ([], ["--segment-size", "smallest"]),
    "until_done": ([], ["--until-done"]),
    "max_restarts": ([], ["--max-restarts", "1"]),
    "signal_lead": ([], ["--signal-lead", "300"]),
    "max_segments": (["--until-done"], ["--until-done", "--max-segments", "2"]),
    "step_time": ([], ["--step-time", "2.5"]),
    "force": ([], ["--force"]),
    "canary": (["--canary"], ["--no-canary"]),
    "memory_check": ([], ["--no-memory-check"]),
}


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize("field", [f.name for f in options.flagged()])
def test_changing_each_job_field_changes_diffs_answer(field, capsys):
    assert field in DIFF_CHANGES, f"give DIFF_CHANGES a change of the new job field {field}"
    a, b = DIFF_CHANGES[field]
    code = commands.diff(
        [*DIFF_BASE, *a, "--", *DIFF_BASE, *a, *b], all_keys=False, output="json", parse_side=_side_parser(), not_job=()
    )
    out = capsys.readouterr().out
    assert code == 0
    assert json.loads(out)["differences"], f"diff sees no difference for {b}"


@pytest.mark.usefixtures("home")
def test_diff_sees_a_canary_and_the_memory_check():
    """issue 36: diff's list of submit's options lacked --canary and --no-memory-check ("no differences")."""
    d = _diff("smoke", "-c", "gb200-8", "--canary", "--", "smoke", "-c", "gb200-8", "--no-canary")
    assert (d[("job", "canary")]["a"], d[("job", "canary")]["b"]) == (True, False)
    d = _diff("smoke", "-c", "gb200-8", "--", "smoke", "-c", "gb200-8", "--no-memory-check")
    row = d[("job", "memory_check")]
    assert (row["a"], row["b"], row["b_source"]) == (True, False, "off (--no-memory-check)")


@pytest.mark.usefixtures("home")
def test_diff_of_equal_sides_says_so_and_a_side_with_a_bad_option_is_one_line():
    r = run_cli("diff", "smoke", "-c", "gb200-8", "--", "smoke", "-c", "gb200-8")
    assert r.code == 0 and "no differences" in r.out
    r = run_cli("diff", "smoke", "--", "smoke", "--bogus")
    assert r.code == 2 and "No such option: --bogus" in r.err and "Traceback" not in r.err
    r = run_cli("diff", "smoke", "--", "smoke", "--follow")
    assert r.code == 2 and "--follow does not describe a job" in r.err
    r = run_cli("diff", "smoke", "--", "smoke", "--sweep")
    assert r.code == 2 and "--sweep does not describe a job" in r.err


@pytest.mark.usefixtures("home")
def test_diff_help_lists_the_side_options():
    r = run_cli("diff", "--help")
    assert r.code == 0
    side = r.out.split("Options of each side", 1)[1]
    for flag in (
        "-t, --time",
        "-p, --partition",
        "-A, --account",
        "--secret",
        "-N, --nodes",
        "--overlay",
        "--until-done",
        "--container",
        "-e, --env",
        "--signal-lead",
    ):
        assert flag in side, flag
    assert "--dry-run" not in side and "--follow" not in side


@pytest.mark.usefixtures("home")
def test_diff_of_two_runs_compares_what_they_run_not_their_ids():
    reg = Registry()
    ids = []
    for _ in range(2):
        job = resolve.resolve("smoke", resolve.Options())
        run = reg.reserve("smoke", "local", "local")
        (reg.jobs_dir() / f"{run.run_id}.json").write_text(launch.job_json(job.with_run_id(run.run_id)))
        reg.update(run.run_id, state="COMPLETED")
        ids.append(run.run_id)
    r = run_cli("diff", *ids)
    assert r.code == 0 and "no differences" in r.out, r.out


@pytest.mark.usefixtures("home")
def test_diff_of_two_sets_and_of_two_runs():
    r = run_cli(
        "diff",
        "nemotron-3-nano-pretrain",
        "-c",
        "gb200-8",
        "--",
        "nemotron-3-nano-pretrain",
        "-c",
        "gb200-64",
        "--overlay",
        "nemo-ci-convergence",
        "-o",
        "json",
    )
    assert r.code == 0, r.err
    d = {(x["section"], x["key"]): x for x in r.json()["differences"]}
    gbs = d[("config", "train.global_batch_size")]
    assert (gbs["a"], gbs["a_source"], gbs["b"], gbs["b_source"]) == (
        3072,
        "recipe",
        512,
        "nemo-ci@9872449 scripts/performance/run_recipe.py:63-64",
    )
    assert d[("job", "nodes")]["a"] == 2 and d[("job", "nodes")]["b"] == 16
    assert ("config", "dataset.seq_length") not in d  # equal on both sides
    text = run_cli("diff", "qwen35-vl-sft", "-c", "gb200-32", "--", "qwen35-vl-sft-mxfp8", "-c", "gb200-32")
    assert text.code == 0 and "mixed_precision.fp8_recipe" in text.out
    # two runs: their recorded jobs
    reg = Registry()
    from bridge_launch.resolve import resolver as resolve

    ids = []
    for overrides in (("train.train_iters=5",), ("train.train_iters=7",)):
        job = resolve.resolve("smoke", resolve.Options(overrides=overrides))
        run = reg.reserve("smoke", "local", "local")
        (reg.jobs_dir() / f"{run.run_id}.json").write_text(launch.job_json(job.with_run_id(run.run_id)))
        reg.update(run.run_id, state="COMPLETED")
        ids.append(run.run_id)
    r = run_cli("diff", *ids, "-o", "json")
    keys = {x["key"]: x for x in r.json()["differences"]}
    assert keys["train.train_iters"]["a"] == 5 and keys["train.train_iters"]["b"] == 7
    assert run_cli("diff", "only-one").code == 2


def test_a_big_submit_on_a_terminal_shows_its_gpu_hours_and_asks(home):
    from conftest import on_a_terminal, run_cli, write

    write(home / "clusters" / "tiny.toml", 'name = "tiny"\nextends = "local-slurm"\nconfirm_gpu_hours = 0.1\n')
    code, out, err = on_a_terminal(["submit", "smoke", "-c", "tiny", "train.train_iters=2"], "n\n")
    assert code == 1 and "nothing submitted" in out, out + err
    assert "smoke on tiny: 2 nodes x 2 GPUs = 4 GPUs for up to 0:10:00 (the time limit) = 1 GPU-hours" in out
    assert "Submit it? (--yes skips this question) [y/N]" in out
    assert run_cli("status", "-o", "json").json() == []
    code, out, _ = on_a_terminal(["submit", "smoke", "-c", "tiny", "--dry-run"], "")
    assert code == 0 and "Submit it?" not in out  # a dry run submits nothing: no question
    write(home / "clusters" / "costly.toml", 'name = "costly"\nextends = "tiny"\ngpu_hour_cost = 3.5\n')
    code, out, _ = on_a_terminal(["submit", "smoke", "-c", "costly", "--until-done", "--step-time", "1"], "n\n")
    assert code == 1 and ", ~" in out and "at 3.5 a GPU-hour" in out and "--until-done: ~" in out, out


@pytest.mark.slow
def test_a_large_sweep_asks_on_a_terminal_and_not_elsewhere(home):
    from conftest import FAST, on_a_terminal, run_cli, write

    write(home / "clusters" / "few.toml", 'name = "few"\nextends = "local"\nconfirm_runs = 1\n')
    words = ["submit", "smoke", "-c", "few", "--sweep", "train.train_iters=range(1,3)", *FAST]
    code, out, err = on_a_terminal(words, "n\n")
    assert code == 1 and "experiment " in out and ": 2 runs on few" in out and "Submit 2 runs?" in out, out + err
    assert run_cli("status", "-o", "json").json() == []
    code, out, err = on_a_terminal(words, "y\n")
    assert code == 0 and "2 runs submitted" in out, out + err
    r = run_cli(*words)  # off a terminal nothing asks (and --yes is not needed)
    assert r.code == 0 and "2 runs submitted" in r.out and "Submit" not in r.out, r.out + r.err
    code, out, _ = on_a_terminal([*words, "--yes"], "")
    assert code == 0 and "Submit 2 runs?" not in out
    assert len(run_cli("status", "-o", "json").json()) == 6
    deadline = time.time() + 240  # the six local runs end before their state dir goes
    while time.time() < deadline and any(x["state"] == "RUNNING" for x in run_cli("status", "-o", "json").json()):
        time.sleep(2)
