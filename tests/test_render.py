"""The launch artifacts: golden files for every seed recipe (any change to a script shows up
as a diff in review; regenerate with BRIDGE_LAUNCH_UPDATE_GOLDEN=1) plus structural checks
that hold for every script."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from bridge_launch import backends
from bridge_launch.resolve import resolver as resolve
from bridge_launch.spec.overrides import OverrideError, parse_override

GOLDEN = Path(__file__).parent / "golden"
INPUTS = (
    "dataset.path=/lustre/fsw/data/clevr2-energon",
    "checkpoint.pretrained_checkpoint=/lustre/fsw/ckpt/qwen35-35b-a3b",
)

CASES = {
    # golden name: (recipe, cluster, overlays, overrides)
    "qwen35-vl-sft.gb200-32": ("qwen35-vl-sft", "gb200-32", (), INPUTS),
    "qwen35-vl-sft-mxfp8.gb200-32": ("qwen35-vl-sft-mxfp8", "gb200-32", (), INPUTS),
    "qwen35-vl-sft.gb200-32.validation-run": ("qwen35-vl-sft", "gb200-32", ("validation-run",), INPUTS),
    "qwen35-9b-pretrain.gb200-8": ("qwen35-9b-pretrain", "gb200-8", (), ()),
    "qwen35-35b-a3b-pretrain.gb200-8": ("qwen35-35b-a3b-pretrain", "gb200-8", (), ()),
    "nemotron-3-nano-pretrain.gb200-8": ("nemotron-3-nano-pretrain", "gb200-8", (), ()),
    "nemotron-3-nano-pretrain.gb200-64.nemo-ci-convergence": (
        "nemotron-3-nano-pretrain",
        "gb200-64",
        ("nemo-ci-convergence",),
        (),
    ),
    "smoke.gb200-8": ("smoke", "gb200-8", (), ()),
    # --until-done: the segment logic, the per-node launcher that signals the trainer, the publication rule
    "nemotron-3-nano-pretrain.gb200-64.until-done": (
        "nemotron-3-nano-pretrain",
        "gb200-64",
        ("nemo-ci-convergence",),
        ("checkpoint.save_interval=100",),
        {"until_done": True, "max_segments": 200},
    ),
    "smoke.local": ("smoke", "local", (), ()),
    "qwen35-vl-sft.lepton-gb200": ("qwen35-vl-sft", "lepton-gb200", (), INPUTS),
    "qwen35-vl-sft.dgxc-gb200": ("qwen35-vl-sft", "dgxc-gb200", (), INPUTS),
}
SCRIPTS = sorted(k for k, v in CASES.items() if v[1] not in ("lepton-gb200", "dgxc-gb200"))


def _job(recipe, cluster, overlays, overrides, opts=None):
    return resolve.resolve(
        recipe, resolve.Options(cluster=cluster, overlays=overlays, overrides=overrides, **(opts or {}))
    )


def _normalized(text: str) -> str:
    """Machine-specific paths (the interpreter, the state dir) as placeholders."""
    return text.replace(sys.executable, "<PYTHON>").replace(str(Path(os.environ["BRIDGE_LAUNCH_HOME"])), "<STATE>")


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name):
    recipe, cluster, overlays, overrides, *opts = CASES[name]
    job = _job(recipe, cluster, overlays, overrides, *opts)
    assert job.errors == [], job.errors
    art = backends.render(job)
    # the artifact, then each staged file it calls by name, as --dry-run prints them
    text = _normalized(art.text + "".join(f"\n--- staged: {rel} ---\n{body}" for rel, body in art.files.items()))
    ext = {"local": "sh", "slurm": "sbatch"}.get(job.backend, "json")
    path = GOLDEN / f"{name}.{ext}"
    if os.environ.get("BRIDGE_LAUNCH_UPDATE_GOLDEN") or not path.exists():
        path.write_text(text)
        if not os.environ.get("BRIDGE_LAUNCH_UPDATE_GOLDEN"):
            pytest.fail(f"golden file {path.name} was missing and has been written; review and commit it")
    assert text == path.read_text(), f"{path.name} differs; if intended, rerun with BRIDGE_LAUNCH_UPDATE_GOLDEN=1"


def _script_args(text: str) -> list[str]:
    """The launch command's words, as bash would split them (with the batch shell's
    variables left in place)."""
    head = re.search(r"\n(with_secrets )?srun ", text)
    body = text[head.end() :] if head else text.split("trap ", 1)[1].split("\n", 1)[1]
    body = body.split("\nrc=$?", 1)[0].replace("\\\n", " ")
    return shlex.split(body)


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize("name", SCRIPTS)
def test_script_structure(name):
    recipe, cluster, overlays, overrides, *opts = CASES[name]
    job = _job(recipe, cluster, overlays, overrides, *opts)
    art = backends.render(job)
    text = art.text
    # bash accepts it, and each staged file it calls
    for body in (text, *art.files.values()):
        subprocess.run(["bash", "-n"], input=body, text=True, check=True)
    for rel in art.files:  # called by name from the script, at their place in the run dir
        assert f"{job.run_dir}/{rel}" in text, rel
    assert not re.search(r"^\s*set -[a-z]*x", text, re.M), "no tracing: it would print values into logs"
    words = _script_args(text)
    # every value the job sets is one explicit override word
    for token in job.args:
        assert token in words, token
    for key in job.config:
        assert sum(1 for w in words if _key(w) == key) == 1, key
    if job.backend == "slurm":
        assert "#SBATCH --ntasks-per-node=1" in text
        assert f"--nnodes={job.nodes}" in words and f"--nproc-per-node={job.gpus_per_node}" in words
        assert "--rdzv-backend=c10d" in words and "--rdzv-endpoint=$rdzv_host:$rdzv_port" in words
        assert "SLURM_LOCALID" not in text
        if job.container:
            env_line = next(w for w in words if w.startswith("--container-env="))
            listed = env_line.split("=", 1)[1].split(",")
            exported = re.findall(r"^export (\w+)=", text, re.M)
            assert set(exported) | set(job.secrets) == set(listed)
            assert "--no-container-mount-home" in words
        if job.profile["numa_bind"]:
            wrapper = words[words.index("--no-python") + 3]
            assert "--cpunodebind=$((LOCAL_RANK/2))" in wrapper and "--membind=$((LOCAL_RANK/2))" in wrapper


def _key(word: str):
    try:
        ov = parse_override(word)
    except OverrideError:
        return None
    return ov.key if "=" in word or word.startswith("~") else None


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize("nodes,segment", [(2, 2), (8, 8), (16, 16), (18, 18), (32, 16), (36, 18), (20, 10), (19, 1)])
def test_segment_follows_megatron_bridge_rule(nodes, segment):
    job = resolve.resolve("smoke", resolve.Options(cluster="gb200-nvl72", nodes=nodes))
    text = backends.render(job).text
    assert f"#SBATCH --segment={segment}\n" in text


def test_segment_only_where_the_profile_supports_it(home):
    (home / "clusters" / "old-slurm.toml").write_text('extends = "gb200-nvl72"\n[slurm]\nsegment = false\n')
    job = resolve.resolve("smoke", resolve.Options(cluster="old-slurm", nodes=8))
    assert "--segment" not in backends.render(job).text


@pytest.mark.usefixtures("home")
def test_dry_run_artifact_equals_submitted_one_once_the_id_is_filled_in():
    job = resolve.resolve("smoke", resolve.Options(cluster="gb200-32"))
    shown = backends.render(job).text
    real = backends.render(job.with_run_id("smoke-1130-abcd")).text
    assert shown.replace(resolve.RUN_ID_PLACEHOLDER, "smoke-1130-abcd") == real


@pytest.mark.parametrize(
    "env,expected",
    [
        # leptonai/scripts lepton_env_to_pytorch.sh since 55412730 (2025-07-21):
        # ${LEPTON_JOB_WORKER_PREFIX}-0.${LEPTON_SUBDOMAIN}
        ({"LEPTON_JOB_WORKER_PREFIX": "wp", "LEPTON_SUBDOMAIN": "sub", "LEPTON_JOB_WORKER_INDEX": "2"}, "2 wp-0.sub"),
        (
            {
                "LEPTON_JOB_WORKER_PREFIX": "wp",
                "LEPTON_SUBDOMAIN": "sub",
                "LEPTON_JOB_NAME": "j",
                "LEPTON_JOB_SERVICE_PREFIX": "svc",
                "LEPTON_WORKSPACE_ID": "ws1",
                "LEPTON_JOB_WORKER_INDEX": "0",
            },
            "0 wp-0.sub",
        ),  # the current names win
        # the names before it (f67164d2 and earlier), as the fallback
        ({"LEPTON_JOB_NAME": "myjob", "LEPTON_JOB_WORKER_INDEX": "3"}, "3 myjob-0.myjob-job-svc"),
        (
            {
                "LEPTON_JOB_NAME": "j",
                "LEPTON_JOB_SERVICE_PREFIX": "svc",
                "LEPTON_SUBDOMAIN": "sub",
                "LEPTON_JOB_WORKER_INDEX": "1",
            },
            "1 svc-0.sub",
        ),
        (
            {"LEPTON_JOB_NAME": "myjob", "LEPTON_WORKSPACE_ID": "ws1", "LEPTON_JOB_WORKER_INDEX": "1"},
            "1 myjob-0.myjob-job-svc.ws-ws1.svc.cluster.local",
        ),
        ({"LEPTON_JOB_WORKER_PREFIX": "wp", "LEPTON_JOB_NAME": "j", "LEPTON_JOB_WORKER_INDEX": "1"}, "1 j-0.j-job-svc"),
        ({}, "0 127.0.0.1"),  # a single worker outside Lepton
    ],
)
def test_lepton_rank_variables_map_to_torchrun(env, expected):
    """Lepton's worker variables become NODE_RANK / MASTER_ADDR without downloading anything."""
    from bridge_launch.backends.lepton import RANK_PRELUDE

    script = "\n".join(RANK_PRELUDE) + '\necho "$NODE_RANK $MASTER_ADDR"\n'
    out = subprocess.run(
        ["bash", "-c", script], env={"PATH": os.environ["PATH"], **env}, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == expected
