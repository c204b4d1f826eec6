"""Fuzzing as a test (issue 12): thousands of random override sets, with 0, negative, huge,
non-numeric and quoted values, through submit --dry-run, plan and diff in-process. Bad input must
end in a BridgeLaunchError (one line, exit 2 at the CLI) or a result; any other exception fails.

What a newcomer meets (issue 13): diff that sees everything, user files that break nothing
else, child recipes, resume and prune with safety nets, completion, machine-clean JSON, size
suggestions that agree, and the smaller items.
"""

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge_launch.cli import commands
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
    code = _quiet(
        commands.submit,
        recipe,
        ovs,
        cluster=cluster,
        overlays=[],
        nodes=nodes,
        time=None,
        partition=None,
        account=None,
        container=None,
        env=[],
        secrets=[],
        bridge_src=None,
        dry_run=True,
        follow=False,
        output=output,
        memory_check=data.draw(st.booleans()),
    )
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


@pytest.mark.usefixtures("home")
def test_diff_of_equal_sides_says_so_and_a_side_with_a_bad_option_is_one_line():
    r = run_cli("diff", "smoke", "-c", "gb200-8", "--", "smoke", "-c", "gb200-8")
    assert r.code == 0 and "no differences" in r.out
    r = run_cli("diff", "smoke", "--", "smoke", "--bogus")
    assert r.code == 2 and "No such option: --bogus" in r.err and "Traceback" not in r.err
    r = run_cli("diff", "smoke", "--", "smoke", "--follow")
    assert r.code == 2 and "--follow does not describe a job" in r.err


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
        "overlay:nemo-ci-convergence",
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
