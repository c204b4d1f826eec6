"""What a newcomer meets (issue 13): diff that sees everything, user files that break nothing
else, child recipes, resume and prune with safety nets, completion, machine-clean JSON, size
suggestions that agree, and the smaller items."""

import json
import os
import pty
import re
import subprocess
import time
from pathlib import Path

import pytest

from bridge_launch.resolve import resolver as resolve
from bridge_launch.runs import lifecycle as launch
from bridge_launch.runs.registry import Registry
from conftest import CLI, REPO, run_cli, write

VL_INPUTS = ("dataset.path=/lustre/clevr2", "checkpoint.pretrained_checkpoint=/lustre/ckpt")


# --- 1. diff sees everything that reaches the job -------------------------------------------------


def _diff(*args):
    r = run_cli("diff", *args, "-o", "json")
    assert r.code == 0, r.err
    return {(x["section"], x["key"]): x for x in r.json()["differences"]}


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


# --- 2. a broken user file breaks nothing else ----------------------------------------------------


def test_broken_user_profile_is_reported_where_used_and_affects_nothing_else(cli, home):
    write(home / "clusters" / "mine.toml", 'name = "mine\nbackend = "local"\n')  # unterminated string
    r = cli("submit", "smoke", "--dry-run")
    assert r.code == 0 and r.err == "", r.err
    r = cli("clusters", "list")
    assert r.code == 0 and "gb200-32" in r.out and "local" in r.out
    assert re.search(r"warning: left out: .*mine\.toml:1:\d+: invalid TOML", r.err), r.err
    assert [c["name"] for c in cli("clusters", "list", "-o", "json").json()].count("local") == 1
    r = cli("submit", "smoke", "-c", "mine", "--dry-run")
    assert r.code == 2 and re.search(r"mine\.toml:1:\d+: invalid TOML", r.err), r.err


def test_bad_key_in_a_user_profile_names_file_line_and_valid_keys(cli, home):
    write(home / "clusters" / "mine.toml", 'name = "mine"\nextends = "local"\n\n[slurm]\nparition = "x"\n')
    r = cli("clusters", "show", "mine")
    assert r.code == 2
    line = r.err.strip()
    assert re.search(
        r"mine\.toml:5: cluster profile 'mine': unknown \[slurm\] key 'parition'; did you mean "
        r"'partition'",
        line,
    ), line
    assert "profile keys list" not in line and "list them with" not in line  # no command that does not exist
    assert cli("clusters", "list").code == 0
    assert cli("submit", "smoke", "--dry-run").code == 0


def test_broken_user_recipe_and_overlay_leave_the_listings_whole(cli, home):
    write(home / "recipes" / "mine.toml", 'name = "mine"\nextends = "smoke"\n[config\n')
    write(home / "recipes" / "overlays" / "fast.toml", 'name = "fast"\n[config]\ntrain.train_iters = "many"\n')
    r = cli("recipes", "list", "-o", "json")
    assert r.code == 0 and len(r.json()) == 6 and "mine.toml:3" in r.err
    r = cli("overlays", "list")
    assert r.code == 0 and "validation-run" in r.out
    assert "fast.toml:3: overlay 'fast': train.train_iters expects an integer" in r.err
    r = cli("submit", "mine", "--dry-run")
    assert r.code == 2 and "mine.toml:3" in r.err
    assert cli("submit", "smoke", "--dry-run").code == 0


def test_a_broken_user_file_with_a_shipped_name_is_not_silently_replaced_by_the_shipped_one(cli, home):
    write(home / "clusters" / "gb200-8.toml", 'name = "gb200-8"\nextends = "gb200-8"\n[slurm\naccount = "me"\n')
    r = cli("submit", "smoke", "-c", "gb200-8", "--dry-run")
    assert r.code == 2 and "gb200-8.toml:3" in r.err


# --- 3. a child recipe may change any value of its parent ----------------------------------------


def test_child_recipe_overrides_an_upstream_value_and_provenance_names_it(cli, home):
    write(
        home / "recipes" / "my-sft.toml",
        """
        name = "my-sft"
        extends = "qwen35-vl-sft"
        [config]
        optimizer.lr = 1e-5
        train.global_batch_size = 64
        [env]
        USE_MNNVL = "0"
    """,
    )
    d = cli("submit", "my-sft", "-c", "gb200-32", "--dry-run", "-o", "json", *VL_INPUTS).json()
    assert d["errors"] == []
    assert d["config"]["optimizer.lr"] == 1e-5 and d["provenance"]["config"]["optimizer.lr"] == "recipe:my-sft"
    assert d["provenance"]["config"]["train.global_batch_size"] == "recipe:my-sft"  # was upstream
    assert d["provenance"]["config"]["model.context_parallel_size"] == "recipe"  # inherited, unchanged
    assert d["env"]["USE_MNNVL"] == "0" and d["provenance"]["env"]["USE_MNNVL"] == "recipe:my-sft"
    assert " optimizer.lr=1e-05 " in d["artifact"]["text"].replace("\\\n", " ").replace("\n", " ")
    # the same key in both sections of one file is still a mistake, named with its line
    write(
        home / "recipes" / "twice.toml",
        'extends = "smoke"\n[config]\noptimizer.lr = 1\n[upstream_config]\noptimizer.lr = 2\n',
    )
    r = cli("submit", "twice", "--dry-run")
    assert r.code == 2 and "twice.toml:3" in r.err and "of the same file" in r.err


# --- 4. resume refuses what cannot help (fast: a recorded run with its tracker) -------------------


def _finished_run(reached: int, iters: int = 50):
    reg = Registry()
    run = reg.reserve("smoke", "local", "local")
    job = resolve.resolve("smoke", resolve.Options(overrides=(f"train.train_iters={iters}",))).with_run_id(run.run_id)
    (reg.jobs_dir() / f"{run.run_id}.json").write_text(launch.job_json(job))
    ckpt = Path(job.config["checkpoint.save"])
    ckpt.mkdir(parents=True)
    (ckpt / "latest_checkpointed_iteration.txt").write_text(f"{reached}\n")
    reg.update(run.run_id, state="COMPLETED", run_dir=job.run_dir)
    return run.run_id, Path(job.run_dir)


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


# --- 6. prune: a list, a dry run, a question, and a way back ------------------------------------


def _old_runs(n=2, age_days=10):
    reg = Registry()
    ids = []
    for _ in range(n):
        run = reg.reserve("smoke", "local", "local")
        reg.update(run.run_id, state="COMPLETED")
        reg.db.execute("UPDATE runs SET updated = updated - ? WHERE run_id = ?", (age_days * 86400, run.run_id))
        ids.append(run.run_id)
    return ids


@pytest.mark.usefixtures("home")
def test_prune_dry_run_lists_and_changes_nothing_and_weeks_are_accepted():
    ids = _old_runs()
    r = run_cli("prune", "--older-than", "1w", "--dry-run")
    assert r.code == 0 and all(i in r.out for i in ids) and "would forget 2 finished runs" in r.out
    assert len(run_cli("status", "-o", "json").json()) == 2
    assert "nothing to forget" in run_cli("prune", "--older-than", "2w").out
    r = run_cli("prune", "--older-than", "1w")  # not a terminal: no question, the list is still printed
    assert r.code == 0 and all(i in r.out for i in ids) and "forgot 2 finished runs" in r.out
    assert "bridge-launch import RUN_DIR" in r.out
    assert run_cli("status", "-o", "json").json() == []
    r = run_cli("prune", "--older-than", "1y")
    assert r.code == 2 and "w, d, h, m or s" in r.err


def _on_a_terminal(args, answer: str):
    """The CLI with a terminal on stdin (the confirmation is asked only there)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*CLI, *args], stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, text=True
    )
    os.close(slave)
    os.write(master, answer.encode())
    out, err = proc.communicate(timeout=60)
    os.close(master)
    return proc.returncode, out, err


@pytest.mark.usefixtures("home")
def test_prune_asks_on_a_terminal_and_yes_skips_the_question():
    ids = _old_runs()
    code, out, _ = _on_a_terminal(["prune", "--older-than", "1d"], "n\n")
    assert code == 0 and "Forget 2 finished runs?" in out and "nothing forgotten" in out
    assert len(run_cli("status", "-o", "json").json()) == 2
    code, out, _ = _on_a_terminal(["prune", "--older-than", "1d"], "y\n")
    assert code == 0 and "forgot 2 finished runs" in out
    more = _old_runs(1)
    code, out, _ = _on_a_terminal(["prune", "--older-than", "1d", "--yes"], "")
    assert code == 0 and "Forget" not in out and "forgot 1 finished run" in out
    assert not {*ids, *more} & {x["run_id"] for x in run_cli("status", "-o", "json").json()}


@pytest.mark.usefixtures("home")
def test_import_refuses_a_directory_that_is_not_a_run_dir(tmp_path):
    r = run_cli("import", str(tmp_path))
    assert r.code == 2 and "is not a run dir" in r.err


# --- 7. completion ------------------------------------------------------------------------------


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize(
    "shell,marker",
    [
        ("zsh", "#compdef bridge-launch"),
        ("fish", "complete --command bridge-launch"),
        ("bash", "complete -o default -F"),
    ],
)
def test_show_completion_prints_the_named_shells_script(shell, marker):
    r = run_cli("--show-completion", shell)
    assert r.code == 0 and marker in r.out, r.out[:300]
    assert "_BRIDGE_LAUNCH_COMPLETE" in r.out


def _complete(words: str, env=None):
    """What TAB offers after `words` (bash's protocol: COMP_WORDS / COMP_CWORD)."""
    parts = words.split(" ")
    full = {"_BRIDGE_LAUNCH_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(len(parts) - 1)}
    r = run_cli(env={**full, **(env or {})})
    assert r.code == 0, r.err
    return r.out.split()


@pytest.mark.usefixtures("home")
def test_completion_of_names_run_ids_and_override_keys():
    assert "qwen35-vl-sft" in _complete("bridge-launch submit qwen")
    assert "qwen35-vl-sft-common" not in _complete("bridge-launch submit qwen35-vl")  # abstract: never offered
    assert "qwen35-vl-sft-common" not in _complete("bridge-launch recipes show q")
    assert _complete("bridge-launch submit smoke --overlay val") == ["validation-run"]
    assert _complete("bridge-launch plan smoke --overlay nemo") == ["nemo-ci-convergence"]
    assert "model.hidden_size=" in _complete("bridge-launch submit smoke model.hidden")
    assert "model." in _complete("bridge-launch submit smoke mod")
    assert "smoke.busbw_sizes=" in _complete("bridge-launch submit smoke smoke.bus")  # the recipe's own keys
    assert _complete("bridge-launch submit smoke model.sequence_parallel=t") == ["model.sequence_parallel=true"]
    assert "~model.hidden_size" in _complete("bridge-launch submit smoke ~model.hidden_s")
    reg = Registry()
    run = reg.reserve("smoke", "local", "local")
    for cmd in ("status", "logs", "cancel", "resume"):
        assert _complete(f"bridge-launch {cmd} smo") == [run.run_id], cmd
    assert "train.train_iters=" in _complete(f"bridge-launch resume {run.run_id} train.train_it")


def test_completion_offers_nothing_rather_than_failing_on_a_broken_user_file(home):
    write(home / "recipes" / "mine.toml", "[broken\n")
    assert "smoke" in _complete("bridge-launch submit sm")


# --- 8. JSON mode: stdout carries JSON only ------------------------------------------------------


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize(
    "args,code,fragment",
    [
        (["submit", "nope", "-o", "json"], 2, "unknown recipe 'nope'"),
        (["submit", "smoke", "--bogus", "--output", "json"], 2, "No such option: --bogus"),
        (["submit", "nemotron-3-nano-pretrain", "-o", "json"], 2, "needs 8 GPUs"),
        (["status", "no-such-run", "--output=json"], 2, "no run 'no-such-run'"),
        (["plan", "nemotron-3-nano-pretrain", "-o", "json"], 2, "needs 8 GPUs"),
        (["diff", "smoke", "--", "nope", "-o", "json"], 2, "unknown recipe 'nope'"),
    ],
)
def test_errors_in_json_mode_are_json_on_stdout(args, code, fragment):
    r = run_cli(*args)
    assert r.code == code
    d = json.loads(r.out)  # the whole of stdout is one JSON document
    assert fragment in d["error"] and d["exit_code"] == code


# --- 9. size suggestions agree with the limits and with each other ------------------------------


@pytest.mark.usefixtures("home")
def test_size_hint_never_suggests_nodes_the_cluster_refuses_and_plan_agrees():
    r = run_cli("submit", "nemotron-3-nano-pretrain", "--dry-run")
    assert r.code == 2
    assert "--nodes" not in r.err and "allows at most 1 node" in r.err and "--cluster gb200-8" in r.err, r.err
    assert run_cli("submit", "nemotron-3-nano-pretrain", "--cluster", "gb200-8", "--dry-run").code == 0  # it works
    p = run_cli("plan", "nemotron-3-nano-pretrain")
    assert p.code == 2 and p.err == r.err  # the same answer as submit
    r = run_cli("submit", "nemotron-3-nano-pretrain", "-c", "gb200-32", "--dry-run")
    assert "use --cluster gb200-8 or --nodes 2" in r.err
    assert run_cli("submit", "nemotron-3-nano-pretrain", "-c", "gb200-32", "--nodes", "2", "--dry-run").code == 0


@pytest.mark.usefixtures("home")
def test_nodes_on_a_profile_named_for_its_size_says_what_size_it_gives():
    d = run_cli("submit", "smoke", "-c", "gb200-32", "--nodes", "4", "--dry-run", "-o", "json").json()
    assert d["world_size"] == 16
    assert any("fixed size of 8 nodes (32 GPUs); --nodes 4 runs on 4 nodes (16 GPUs)" in w for w in d["warnings"])
    assert run_cli("submit", "smoke", "-c", "gb200-32", "--dry-run", "-o", "json").json()["warnings"] == []


# --- 10. the smaller items ------------------------------------------------------------------------


@pytest.mark.usefixtures("home")
def test_unknown_recipe_counts_and_suggests_names_not_aliases():
    r = run_cli("submit", "qwen35-vl", "--dry-run")
    line = r.err.strip()
    assert r.code == 2 and "did you mean 'qwen35-vl-sft' or 'qwen35-vl-sft-mxfp8'" in line, line
    assert "bf16" not in line.split("(valid")[0]  # an alias of qwen35-vl-sft is not a second choice
    listed = [x["name"] for x in run_cli("recipes", "list", "-o", "json").json()]
    assert line.endswith("(valid: " + ", ".join(sorted(listed)) + ")")
    assert "qwen35-vl-sft-common" not in line


def test_clusters_show_and_list(cli, home):
    r = cli("clusters", "show", "gb200-8")
    assert "[slurm]" in r.out and "[lepton]" not in r.out and "[dgxcloud]" not in r.out
    assert "account = \n" not in r.out + "\n"  # unset values are not printed
    r = cli("clusters", "show", "lepton-gb200")
    assert "[lepton]" in r.out and "[slurm]" not in r.out
    write(home / "clusters" / "mine.toml", 'name = "mine"\nextends = "local"\n')
    rows = {line.split()[0]: line.split() for line in cli("clusters", "list").out.splitlines()[1:]}
    assert "user" in rows["mine"] and "shipped" in rows["local"]
    assert {c["name"]: c["origin"] for c in cli("clusters", "list", "-o", "json").json()}["mine"] == "user"


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize(
    "value,ok",
    [
        ("99:99:99", False),
        ("1:60:00", False),
        ("10:61", False),
        ("1-24", False),
        ("1-23:59:59", True),
        ("99:00:00", True),
        ("90", True),
        ("00:30:00", True),
    ],
)
def test_time_limits_past_their_clock_range_are_refused(value, ok):
    r = run_cli("submit", "smoke", "-c", "gb200-8", "-t", value, "--dry-run")
    assert (r.code == 0) == ok, r.err
    if not ok:
        assert "Slurm would read it as" in r.err and len(r.err.strip().splitlines()) == 1


def test_one_node_is_singular(home):
    write(home / "clusters" / "tri.toml", 'extends = "local"\nname = "tri"\ngpus_per_node = 3\n')
    d = run_cli("submit", "smoke", "-c", "tri", "--dry-run", "-o", "json", "model.tensor_model_parallel_size=2").json()
    assert any("(1 node x 3)" in e for e in d["errors"]), d["errors"]
    assert not any("1 nodes" in e for e in d["errors"] + d["warnings"])


@pytest.mark.usefixtures("home")
def test_plan_tokens_wording():
    pytest.importorskip("megatron.core")
    r = run_cli("plan", "nemotron-3-nano-pretrain", "-c", "gb200-8", "--tokens", "1e11")
    assert r.code == 0, r.err
    assert "budget from a budget" not in r.out and "(--tokens: a budget of 100,000,000,000 tokens)" in r.out
    r = run_cli("plan", "nemotron-3-nano-pretrain", "-c", "gb200-8")
    assert "(train.train_iters from upstream)" in r.out


@pytest.mark.usefixtures("home")
def test_local_render_is_rank_prefixed():
    job = resolve.resolve("smoke", resolve.Options())
    from bridge_launch import backends

    text = backends.render(job).text
    assert "--tee=3" in text and "export TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[rank${rank}]: '" in text


def test_local_extra_brings_numpy():
    """torch's wheel does not require numpy, yet `import torch` without it warns in every worker."""
    import tomllib

    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["local"]
    assert any(re.match(r"numpy\b", d) for d in extra), extra


# --- slow: the real flows -------------------------------------------------------------------------

FAST = ["smoke.busbw_sizes=[1024]", "smoke.busbw_iters=1"]


@pytest.mark.usefixtures("home")
@pytest.mark.slow
def test_local_run_follow_json_resume_refusals_prune_and_import():
    r = run_cli("submit", "smoke", *FAST, "train.train_iters=2", "--follow", "-o", "json", timeout=300)
    assert r.code == 0, r.err
    final = json.loads(r.out)  # stdout: one JSON object, the run in its final state
    assert final["state"] == "COMPLETED" and final["reason"] == ""
    assert "[rank0]: " in r.err and "iteration" in r.err  # the log lines went to stderr, rank-prefixed
    assert "Failed to initialize NumPy" not in r.err
    run_id, run_dir = final["run_id"], Path(final["run_dir"])
    row = run_cli("status", "-o", "json").json()[0]
    assert re.fullmatch(r"\d\d:\d\d:\d\d", row["info"]["elapsed"]) and row["info"]["nodes"]
    text = run_cli("status").out.splitlines()[1].split()
    assert row["info"]["elapsed"] in text and row["info"]["nodes"] in text

    summary = run_dir / "summary.json"
    stamp = summary.stat().st_mtime_ns
    r = run_cli("resume", run_id)
    assert r.code == 2 and "already reached iteration 2" in r.err
    r = run_cli("resume", run_id, "model.hidden_size=66")
    assert r.code == 2 and "changes the model's shape" in r.err
    assert summary.stat().st_mtime_ns == stamp and len(run_cli("status", "-o", "json").json()) == 1
    r = run_cli("resume", run_id, "train.train_iters=3", "--follow", "-o", "json", timeout=300)
    assert r.code == 0, r.err
    second = json.loads(r.out)
    assert second["resumed_from"] == run_id and second["state"] == "COMPLETED"

    r = run_cli("prune", "--older-than", "0s", "--yes")
    assert r.code == 0 and "forgot 2 finished runs" in r.out
    assert run_cli("status", "-o", "json").json() == []
    r = run_cli("import", str(run_dir))
    assert r.code == 0 and f"{run_id}: imported (COMPLETED)" in r.out and f"{second['run_id']}: imported" in r.out
    runs = {x["run_id"]: x for x in run_cli("status", "-o", "json").json()}
    assert runs[second["run_id"]]["resumed_from"] == run_id and runs[second["run_id"]]["chain"] == run_id
    assert runs[run_id]["job_ids"] == final["job_ids"] and runs[run_id]["run_dir"] == str(run_dir)
    assert "already registered" in run_cli("import", str(run_dir)).out
    assert run_cli("resume", second["run_id"]).code == 2  # lineage and checkpoints came back with it


@pytest.fixture(scope="module")
def local_slurm():
    if os.geteuid() != 0:
        pytest.skip("the local Slurm cluster needs root")
    subprocess.run([str(REPO / "scripts" / "local-slurm"), "start"], check=True, capture_output=True, timeout=600)


def _wait_for(pattern: str, files, timeout: float = 180):
    deadline = time.time() + timeout
    while time.time() < deadline:
        for f in files():
            if re.search(pattern, f.read_text(errors="replace")):
                return
        time.sleep(0.5)
    raise AssertionError(f"{pattern!r} did not appear")


def _slurm_logs(run_dir: Path):
    # the run's log files (logs/torchrun/ is torchrun's own --log-dir, a tree)
    return lambda: sorted(f for f in (run_dir / "logs").glob("*") if f.is_file()) if (run_dir / "logs").is_dir() else []


@pytest.mark.usefixtures("home", "local_slurm")
@pytest.mark.slow
@pytest.mark.parametrize("until_done", [False, True])
def test_slurm_cancel_signals_the_trainers_not_torchrun(until_done):
    args = [
        "submit",
        "smoke",
        "-c",
        "local-slurm",
        *FAST,
        "train.train_iters=400",
        "smoke.step_sleep=0.3",
        "-o",
        "json",
    ]
    r = run_cli(*args, *(["--until-done"] if until_done else []))
    assert r.code == 0, r.err
    sub = r.json()
    run_dir = Path(sub["run_dir"])
    _wait_for(r"iteration\s+12/", _slurm_logs(run_dir))  # past the checkpoint at 10
    r = run_cli("cancel", sub["run_id"], timeout=300)
    assert r.code == 0 and "CANCELLED" in r.out, r.err
    st = run_cli("status", sub["run_id"], "-o", "json").json()[0]
    assert st["state"] == "CANCELLED"
    text = "".join(p.read_text(errors="replace") for p in _slurm_logs(run_dir)())
    assert "SignalException" not in text  # torchrun was not signalled
    assert len(re.findall(r"bridge-launch: node\d: SIGTERM to the training processes \d+", text)) == 2, text[-3000:]
    if until_done:  # the chain's trainers save on the way out
        saved = int((run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").read_text())
        assert saved >= 12 and "[exiting program after receiving SIGTERM.]" in text
        assert "bridge-launch: cancelled: the training processes are told to save and exit" in text


@pytest.mark.slow
def test_readme_main_command_in_a_fresh_local_install(tmp_path):
    """The README's first command, as written (its venv in a temporary directory): torch installed
    by the `local` extra imports cleanly in every worker."""
    readme = (REPO / "README.md").read_text()
    cmd = re.search(r"\n    (python3 -m venv \.venv && .*)\n", readme).group(1)
    venv = tmp_path / "venv"
    cmd = (
        cmd.replace(".venv", str(venv))
        .replace("'.[local]'", f"'{REPO}[local]'")
        .replace("-c constraints.txt", f"-c {REPO / 'constraints.txt'}")
    )
    cmd += " smoke.busbw_sizes=[1024] smoke.busbw_iters=1 train.train_iters=3"
    env = dict(os.environ, BRIDGE_LAUNCH_HOME=str(tmp_path / "state"), XDG_CONFIG_HOME=str(tmp_path / "cfg"))
    proc = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert ": COMPLETED" in out and "Failed to initialize NumPy" not in out
