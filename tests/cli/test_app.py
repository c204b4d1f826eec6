"""The command line as a user meets it: exit codes, one-line errors, JSON output."""

import json
import os
import re
import subprocess
import sys

import pytest

from cli_inputs import VL_INPUTS
from conftest import REPO, run_cli, write

ERROR_CASES = [
    # (args, fragment of the one error line)
    (["submit", "smokee", "--dry-run"], "unknown recipe 'smokee'; did you mean 'smoke'?"),
    (["submit", "smoke", "-c", "gb200-23", "--dry-run"], "unknown cluster 'gb200-23'; did you mean 'gb200-32'"),
    (["submit", "smoke", "--overlay", "validation-rn", "--dry-run"], "did you mean 'validation-run'"),
    (
        ["submit", "smoke", "--dry-run", "model.num_layer=3"],
        "unknown config key 'model.num_layer'; did you mean 'model.num_layers'",
    ),
    (["submit", "smoke", "--dry-run", "train.seq_length=3"], "did you mean 'dataset.seq_length'"),
    (["submit", "smoke", "--dry-run", "model.num_layers=abc"], "model.num_layers expects an integer"),
    (["submit", "smoke", "--dry-run", "model.num_layers=2.5"], "model.num_layers expects an integer"),
    (["submit", "smoke", "--dry-run", "optimizer.lr=[1]"], "optimizer.lr expects a number"),
    (["submit", "smoke", "--dry-run", "model.cuda_graph_impl=sometimes"], "one of none, local"),
    (["submit", "smoke", "--dry-run", "model.num_layers=[1,"], "invalid override 'model.num_layers=[1,'"),
    (["submit", "smoke", "--dry-run", "model.num_layers"], "invalid override"),
    (["submit", "smoke", "--dry-run", "a b=1"], "invalid override"),
    (["submit", "smoke", "--dry-run", "+smoke.x=$(rm -rf /tmp/x)"], "invalid override"),
    (["submit", "smoke", "--dry-run", "train.train_iters=1,2"], "sweeps are not supported"),
    (["submit", "smoke", "--dry-run", "+model.num_layers=3"], "'model.num_layers' already exists"),
    (["submit", "smoke", "--dry-run", "~model.not_a_field"], "cannot remove 'model.not_a_field'"),
    (["submit", "smoke", "--dry-run", "--env", "HF_TOKEN=abc"], "pass it by name with --secret HF_TOKEN"),
    (["submit", "smoke", "--dry-run", "--env", "1X=2"], "expected NAME=VALUE"),
    (["submit", "smoke", "--dry-run", "--nodes", "2"], "2 nodes exceeds cluster 'local' maximum of 1"),
    (["submit", "smoke", "--dry-run", "--time", "01:00:00"], "--time applies to Slurm clusters"),
    (["submit", "smoke", "-c", "gb200-8", "--dry-run", "--time", "4h"], "time limit '4h' (cli) is not a Slurm time"),
    (
        [
            "submit",
            "smoke",
            "-c",
            "local-slurm",
            "--until-done",
            "--time",
            "00:01:00",
            "--signal-lead",
            "90",
            "--dry-run",
        ],
        "--signal-lead 90s is not shorter than the time limit 00:01:00 (60s)",
    ),
    # issue 12: what Megatron would refuse after the queue, refused before it
    (
        ["submit", "qwen35-9b-pretrain", "-c", "gb200-8", "--dry-run", "model.pipeline_model_parallel_size=0"],
        "model.pipeline_model_parallel_size=0: parallel sizes must be integers >= 1",
    ),
    (
        ["submit", "qwen35-9b-pretrain", "-c", "gb200-8", "--dry-run", "model.tensor_model_parallel_size=0"],
        "model.tensor_model_parallel_size=0: parallel sizes must be integers >= 1",
    ),
    (
        ["submit", "qwen35-9b-pretrain", "-c", "gb200-8", "--dry-run", "model.context_parallel_size=0"],
        "model.context_parallel_size=0: parallel sizes must be integers >= 1",
    ),
    (
        [
            "submit",
            "nemotron-3-nano-pretrain",
            "-c",
            "gb200-64",
            "--nodes",
            "36",
            "model.expert_model_parallel_size=72",
            "train.global_batch_size=2880",
            "--dry-run",
        ],
        "model.num_moe_experts=128 (models.toml nemotron-3-nano-30b-a3b [mb] [paper]) is not divisible by EP=72; "
        "valid EP values divide 128: 1, 2, 4, 8, 16, 32, 64, 128",
    ),
    (
        [
            "submit",
            "qwen35-9b-pretrain",
            "-c",
            "gb200-8",
            "--dry-run",
            "dataset.sequence_length=8192",
            "model.seq_length=4096",
        ],
        "model.seq_length=4096 and dataset.sequence_length=8192 differ",
    ),
    (
        ["submit", "qwen35-9b-pretrain", "-c", "gb200-8", "model.pipeline_model_parallel_size=0"],
        "model.pipeline_model_parallel_size=0: parallel sizes must be integers >= 1",
    ),  # submit, not only --dry-run
    (["plan", "qwen35-9b-pretrain", "-c", "gb200-8", "--tokens", "inf"], "--tokens inf: expected a positive number"),
    (["plan", "qwen35-9b-pretrain", "-c", "gb200-8", "--tflops", "-3"], "--tflops -3: expected a positive number"),
    (["recipes", "show", "nope"], "unknown recipe 'nope'"),
    (["clusters", "show", "lokal"], "did you mean 'local'"),
    (["status", "no-such-run"], "no run 'no-such-run'"),
    (["status", "--state", "DONE"], "--state 'DONE' is not a state"),
]


@pytest.mark.parametrize("args,fragment", ERROR_CASES)
def test_bad_input_is_one_line_and_exit_2(cli, args, fragment):
    r = cli(*args)
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    assert lines[0].startswith("bridge-launch: error: ") and fragment in lines[0], lines[0]
    assert "Traceback" not in r.err + r.out


def test_help_and_version(cli):
    r = cli("--help")
    assert r.code == 0 and "submit" in r.out and "status" in r.out
    r = cli("--version")
    assert r.code == 0 and r.out.startswith("bridge-launch 0.")
    assert cli("submit", "--help").code == 0


def test_listings_have_json(cli):
    recipes = cli("recipes", "list", "-o", "json").json()
    assert "smoke" in [r["name"] for r in recipes]
    clusters = cli("clusters", "list", "-o", "json").json()
    names = {c["name"]: c for c in clusters}
    assert {"local", "gb200-8", "gb200-32", "gb200-64", "gb200-nvl72", "lepton-gb200", "dgxc-gb200"} <= set(names)
    assert (names["gb200-8"]["nodes"], names["gb200-32"]["nodes"], names["gb200-64"]["nodes"]) == (2, 8, 16)
    overlays = {o["name"] for o in cli("overlays", "list", "-o", "json").json()}
    assert {"nemo-ci-convergence", "validation-run"} <= overlays
    assert cli("status", "-o", "json").json() == []
    text = cli("clusters", "list")
    assert text.code == 0 and "gb200-32" in text.out


def test_dry_run_json_has_the_contract_fields(cli):
    r = cli("submit", "smoke", "--dry-run", "-o", "json", "train.train_iters=7")
    assert r.code == 0, r.err
    d = r.json()
    for key in (
        "recipe",
        "cluster",
        "nodes",
        "gpus_per_node",
        "world_size",
        "config",
        "env",
        "provenance",
        "artifact",
        "warnings",
        "errors",
    ):
        assert key in d
    assert d["config"]["train.train_iters"] == 7
    assert d["provenance"]["config"]["train.train_iters"] == "cli"
    assert d["provenance"]["config"]["model.num_layers"] == "recipe"
    assert d["artifact"]["kind"] == "local-command"
    assert " train.train_iters=7 " in d["artifact"]["text"].replace("\\\n", " ").replace("\n", " ")


# What a dry run does without (issue 36): the Slurm backend's submit, status and log code (render.py
# is what it needs), the log reader and what it brings (its forked readers, pickle, tar), the
# registry, and the trainer's log patterns compiled (trainer_protocol compiles one when asked).
NOT_ON_A_DRY_RUN = (
    "bridge_launch.backends.slurm.backend",
    "bridge_launch.logs.reader",
    "bridge_launch.core.forked",
    "bridge_launch.runs.lifecycle",
    "bridge_launch.runs.registry",
    "bridge_launch.cli.gpu_report",
    "bridge_launch.cli.judging",
    "pickle",
    "tarfile",
    "tempfile",
    "sqlite3",
    "rich",
)
_LOADED = """
import json, re, sys
from bridge_launch.cli import app
sys.argv = ["bridge-launch", *sys.argv[1:]]
try:
    app.main()
except SystemExit as exc:
    code = exc.code
sys.stdout.flush()
P = sys.modules["bridge_launch.workloads.trainer_protocol"]
compiled = sorted(n for n, v in vars(P).items() if isinstance(v, re.Pattern))
sys.stderr.write("\\n" + json.dumps({"code": code, "modules": sorted(sys.modules), "compiled": compiled}))
"""


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize("output", ["text", "json"])
def test_a_dry_run_loads_only_what_it_shows(output):
    """The dry run of a Slurm job with a canary, both forms: the modules it loads in a fresh
    process (a regression here is what made the JSON dry run 4x `import typer`)."""
    args = ["submit", "qwen35-vl-sft", "--cluster", "gb200-32", "--dry-run", *VL_INPUTS, "-o", output]
    proc = subprocess.run([sys.executable, "-c", _LOADED, *args], capture_output=True, text=True, cwd=REPO)
    seen = json.loads(proc.stderr.rsplit("\n", 1)[-1])
    assert seen["code"] in (0, None), proc.stderr
    loaded = set(seen["modules"])
    assert "bridge_launch.backends.slurm.render" in loaded and "bridge_launch.runs.canary" in loaded  # it ran
    assert [m for m in NOT_ON_A_DRY_RUN if m in loaded or any(x.startswith(m + ".") for x in loaded)] == []
    assert seen["compiled"] == []


def test_dry_run_with_errors_prints_json_and_exits_2(cli, home):
    write(home / "clusters" / "tiny.toml", 'extends = "local"\nnodes = 1\ngpus_per_node = 3\n')
    r = cli("submit", "smoke", "-c", "tiny", "--dry-run", "-o", "json", "train.global_batch_size=8")
    assert r.code == 2
    assert any("not divisible by train.micro_batch_size*DP = 4*3 = 12" in e for e in r.json()["errors"])


def test_user_profile_extends_shipped_one(cli, home):
    write(
        home / "clusters" / "gb200-32.toml",
        """
        name = "gb200-32"
        extends = "gb200-32"
        job_root = "/scratch/me/runs"
        [slurm]
        account = "my-acct"
    """,
    )
    d = cli("submit", "smoke", "-c", "gb200-32", "--dry-run", "-o", "json").json()
    assert d["nodes"] == 8 and d["run_dir"] == "/scratch/me/runs/@RUN_ID@"
    assert "#SBATCH --account=my-acct" in d["artifact"]["text"]
    assert "#SBATCH --partition=batch" in d["artifact"]["text"]  # still inherited from gb200-nvl72


def test_cli_flags_override_the_profile(cli):
    d = cli(
        "submit",
        "smoke",
        "-c",
        "gb200-8",
        "--dry-run",
        "-o",
        "json",
        "--time",
        "00:30:00",
        "-p",
        "debug",
        "-A",
        "acct",
        "--container",
        "my/image:1",
    ).json()
    text = d["artifact"]["text"]
    for line in ("#SBATCH --time=00:30:00", "#SBATCH --partition=debug", "#SBATCH --account=acct"):
        assert line in text
    assert "--container-image=my/image:1" in text
    assert d["provenance"]["job"]["time"] == "cli" and d["provenance"]["job"]["container"] == "cli"


@pytest.mark.usefixtures("home")
def test_secret_values_never_appear(cli):
    value = "s3cr3t-VALUE-do-not-print"
    env = {"HF_TOKEN": value, "WANDB_API_KEY": value, "MY_KEY": value}
    for out in ("text", "json"):
        r = cli("submit", "smoke", "-c", "gb200-8", "--dry-run", "--secret", "MY_KEY", "-o", out, env=env)
        assert r.code == 0, r.err
        assert value not in r.out + r.err
        assert "MY_KEY" in r.out and "HF_TOKEN" in r.out


def test_tty_free_text_dry_run_shows_provenance_and_script(cli):
    r = cli("submit", "smoke", "--dry-run", "train.train_iters=9")
    assert r.code == 0
    assert "train.train_iters" in r.out and "cli" in r.out
    assert "--- local-command: launch/@RUN_ID@.sh" in r.out
    script, summary = r.out.rstrip().rsplit("\n\n=== dry run: nothing submitted.", 1)
    assert script.endswith('exit "$rc"') and summary.endswith("no warnings")


def test_sequence_lengths_bridge_accepts_pass(cli):
    # lcm(2*CP, TP*CP) = 16 for TP2 CP8 with sequence parallelism: 131088 passes (2*CP*TP = 32 does not divide it)
    r = cli(
        "submit",
        "qwen35-vl-sft",
        "-c",
        "gb200-32",
        "model.seq_length=131088",
        "dataset.seq_length=131088",
        "dataset.path=/lustre/fsw/clevr2",
        "checkpoint.pretrained_checkpoint=/lustre/fsw/ckpt",
        "--dry-run",
    )
    assert r.code == 0, r.err
    assert "model.seq_length=131088" in r.out


def test_dry_run_says_what_the_job_will_not_do_as_asked(cli):
    r = cli(
        "submit",
        "nemotron-3-nano-pretrain",
        "-c",
        "gb200-64",
        "--nodes",
        "36",
        "train.global_batch_size=2880",
        "--overlay",
        "nemo-ci-convergence",
        "--dry-run",
    )
    assert r.code == 0, r.err
    warnings = r.out.split("\nWarnings\n", 1)[1].split("\n\n", 1)[0]
    assert (
        "--nodes 36 overrides the fixed size of cluster 'gb200-64' (16 nodes, 64 GPUs): this job asks for "
        "144 GPUs (36 x 4)"
    ) in warnings
    assert "nemotron-3-nano-pretrain trains on mock data (random tokens) for 48,000 steps" in warnings
    r = cli(
        "submit",
        "qwen35-vl-sft",
        "-c",
        "gb200-32",
        "dataset.path=/home/me/clevr2",
        "checkpoint.pretrained_checkpoint=/lustre/fsw/ckpt",
        "--dry-run",
    )
    assert "! dataset.path=/home/me/clevr2 is outside every container mount (/lustre/fsw)" in r.out


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize(
    "args,code,fragment",
    [
        (["submit", "nope", "-o", "json"], 2, "unknown recipe 'nope'"),
        (["submit", "smoke", "--bogus", "--output", "json"], 2, "No such option: --bogus"),
        (["submit", "nemotron-3-nano-pretrain", "-o", "json"], 2, "needs 8 GPUs"),
        # several recipes, and a sweep's dry run, say it as one recipe does (issue 36: stdout was empty)
        (
            ["submit", "qwen35-vl-sft", "qwen35-vl-sft-mxfp8", "-c", "gb200-32", "-o", "json"],
            2,
            "qwen35-vl-sft: required input dataset.path is not set",
        ),
        (
            ["submit", "nemotron-3-nano-pretrain", "--sweep", "train.train_iters=1,2", "--dry-run", "-o", "json"],
            2,
            "needs 8 GPUs",
        ),
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


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize(
    "args,fragment",
    [
        (
            ["check", "--steps", "x", "a.log"],
            "Invalid value for '--steps': 'x' is not a valid int. (see 'bridge-launch check -h')",
        ),
        (
            ["compare", "--rules", "nope", "a", "b"],
            "'nope' is not one of 'bridge-launch', 'megatron-bridge', 'megatron-lm'",
        ),
        (["check"], "Missing argument 'sources'. (see 'bridge-launch check -h')"),
        (["submit", "smoke", "--cluster"], "Option '--cluster' requires an argument."),
        (["status", "--bogus"], "No such option: --bogus (see 'bridge-launch status -h')"),
        (["recipes", "lisst"], "No such command 'lisst'. Did you mean 'list'? (see 'bridge-launch recipes -h')"),
        (["nosuch"], "No such command 'nosuch'. (see 'bridge-launch -h')"),
    ],
)
def test_a_usage_error_of_the_parser_is_one_line(args, fragment):
    """What click finds wrong in the arguments (a type, a choice, a missing value, an unknown option
    or command) is one line on stderr, like every other error, with where the help is."""
    r = run_cli(*args)
    assert r.code == 2 and r.out == ""
    assert r.err.count("\n") == 1 and r.err.startswith("bridge-launch: error: ") and fragment in r.err, r.err


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize(
    "args,usage", [([], "Usage: bridge-launch [OPTIONS] COMMAND"), (["recipes"], "Usage: bridge-launch recipes")]
)
def test_a_group_named_alone_shows_its_help(args, usage):
    r = run_cli(*args)
    assert r.code == 2 and r.err.startswith(usage) and "Commands" in r.err and "error" not in r.err, r.err


@pytest.mark.usefixtures("home")
def test_a_missing_extra_is_one_line_naming_it_everywhere(tmp_path):
    """A command that needs an extra that is not installed says which, in one line, exit 2 (data
    inspect and a Lepton submit gave tracebacks; plan said 2 and data prepare 1); every extra's
    distribution in pyproject.toml is known by the module it installs."""
    import tomllib

    from bridge_launch.core.errors import EXTRA_MODULES

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    tools = ("dev", "docs")  # the tests' and the site's tools: the package imports none of them
    wanted = {
        (extra, re.split(r"[<>=!\[ ]", dist)[0])
        for extra, dists in extras.items()
        if extra not in tools
        for dist in dists
    }
    assert wanted == set(EXTRA_MODULES.values())
    shadow = tmp_path / "shadow"
    for module in ("PIL", "leptonai"):
        (shadow / module).mkdir(parents=True)
        (shadow / module / "__init__.py").write_text(
            f"raise ModuleNotFoundError(\"No module named '{module}'\", name={module!r})\n"
        )
    env = dict(os.environ, PYTHONPATH=str(shadow))
    for args, dist, extra in (
        (["data", "inspect", str(tmp_path)], "pillow", "data"),
        (["submit", "smoke", "-c", "lepton-gb200"], "leptonai", "cloud"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "bridge_launch.cli.app", *args], capture_output=True, text=True, env=env, timeout=120
        )
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (args, proc.stderr[-2000:])
        assert proc.stderr.strip().splitlines() == [
            f"bridge-launch: error: this needs {dist}, of the '{extra}' extra "
            f"(No module named '{'PIL' if dist == 'pillow' else dist}'): pip install 'bridge-launch[{extra}]'"
        ], proc.stderr


def test_status_keeps_run_ids_whole_on_a_terminal_and_one_long_reason_pads_no_other_row(monkeypatch, capsys):
    """A 120-column terminal cut run ids ('smoke-1…') so they could not be copied; off a terminal one
    long reason padded every row to its width."""
    from bridge_launch.cli import views

    columns = [
        "run",
        "state",
        "recipe",
        "cluster",
        "job ids",
        "elapsed",
        "nodes",
        "step",
        "loss",
        "reason",
        "submitted",
    ]
    long = "rank 2: InjectedFailure: smoke.fail_at_step=3: injected failure on rank 2 " * 3
    rows = [
        [
            "smoke-1206-b6f1",
            "COMPLETED",
            "smoke",
            "local-slurm",
            "1201",
            "00:00:40",
            "node[1-2]",
            "6/6",
            "4.1",
            "",
            "x",
        ],
        [
            "qwen35-vl-sft-1206-9a0c",
            "FAILED",
            "qwen35-vl-sft",
            "gb200-32",
            "1202,1203",
            "1:00",
            "n1",
            "",
            "",
            long,
            "x",
        ],
    ]
    views.table("runs", columns, rows)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines[1]) < 160 and len(lines[2]) > 200, [len(x) for x in lines]
    monkeypatch.setattr(views, "is_tty", lambda: True)
    monkeypatch.setenv("COLUMNS", "120")
    views.table("runs", columns, rows)
    out = capsys.readouterr().out
    assert "smoke-1206-b6f1" in out and "qwen35-vl-sft-1206-9a0c" in out and "1202,1203" in out, out
    assert max(len(line) for line in out.splitlines()) <= 120


@pytest.mark.usefixtures("home")
def test_a_dry_run_ends_on_its_warnings_where_the_eye_lands():
    """A GB200 dry run is hundreds of lines (the script and every file it sources) and ended on the
    canary's JSON spec, its warnings ~100 lines up: it now ends on a summary with them (issue 42, item 11)."""
    r = run_cli("submit", "qwen35-vl-sft", "-c", "gb200-32", "--dry-run")
    assert r.code == 0, r.err
    tail = r.out.rstrip().splitlines()[-5:]
    assert tail[0].startswith("=== dry run: nothing submitted. qwen35-vl-sft on gb200-32: 8 node(s) x 4; the sbatch")
    # what a submit would refuse first: the missing inputs, then where the job differs from the seed's run
    assert tail[0].endswith("4 warning(s):") and tail[1].startswith("  ! required input dataset.path is not set")
    assert tail[2].startswith("  ! required input checkpoint.pretrained_checkpoint") and "seed's run" in tail[3]
    r = run_cli("submit", "smoke", "--dry-run")
    assert r.out.rstrip().splitlines()[-1].endswith("; no warnings"), r.out[-500:]
