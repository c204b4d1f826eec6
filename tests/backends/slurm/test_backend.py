"""Containers without a cluster: image references as pyxis and the registries expect them,
--mpi from the profile, the image cache record and the import job's script, --bridge-src packing.

The launch artifacts: golden files for every seed recipe (any change to a script shows up
as a diff in review; regenerate with BRIDGE_LAUNCH_UPDATE_GOLDEN=1) plus structural checks
that hold for every script.

The framing of logs fetched from a Slurm login host (backends/slurm._frames).
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bridge_launch import backends
from bridge_launch.backends.slurm import render as slurm_render
from bridge_launch.backends.slurm.backend import _frames
from bridge_launch.resolve import resolver as resolve
from bridge_launch.spec.overrides import OverrideError, parse_override
from conftest import GOLDEN, REPO, run_cli, write
from launch_jobs import step_words

# pyxis 0.24.0 + enroot 4.1.2 on the local cluster, --container-image=nvcr.io#nvidia/nemo:26.10 without
# network: the start of a node's step log, as it was written
PYXIS_PULL_FAILURE = """\
slurmstepd-node1: error: pyxis: child 25229 failed with error code: 6
slurmstepd-node1: error: pyxis: failed to import docker image: nvcr.io#nvidia/nemo:26.10
slurmstepd-node1: error: pyxis: printing enroot log file:
slurmstepd-node1: error: pyxis:     [INFO] Querying registry for permission grant
slurmstepd-node1: error: pyxis:     curl: (6) Could not resolve host: nvcr.io
slurmstepd-node1: error: spank: required plugin spank_pyxis.so: task_init() failed with rc=-1
slurmstepd-node1: error: Failed to invoke spank plugin stack
slurmstepd-node1: error: pyxis: child 25296 failed with error code: 1
"""


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


def _key(word: str):
    try:
        ov = parse_override(word)
    except OverrideError:
        return None
    return ov.key if "=" in word or word.startswith("~") else None


def _frame(name: str, body: bytes) -> bytes:
    return b"@@bridge-launch %d %s\n" % (len(body), name.encode()) + body


@pytest.mark.usefixtures("home")
def test_gb200_renders_pyxis_form_workdir_and_no_mpi():
    d = run_cli("submit", "smoke", "-c", "gb200-8", "--dry-run", "-o", "json").json()
    text = d["artifact"]["text"]
    assert d["container"] == "nvcr.io/nvidia/nemo:26.10"  # the job keeps the user's form
    assert "'--container-image=nvcr.io#nvidia/nemo:26.10'" in text  # quoted: '#' starts a shell comment
    assert "--container-image=nvcr.io/" not in text
    train = step_words(text)  # the training step: srun's shared options and its own
    assert [w for w in train if w.startswith("--mpi=")] == ["--mpi=none"] and "pmix" not in text
    assert f"--container-workdir={d['run_dir']}" in train


@pytest.mark.usefixtures("home")
def test_lepton_and_runai_keep_registry_slash_form():
    for cluster in ("lepton-gb200", "dgxc-gb200"):
        d = run_cli(
            "submit", "smoke", "-c", cluster, "--container", "nvcr.io#nvidia/nemo:26.10", "--dry-run", "-o", "json"
        ).json()
        assert d["container"] == "nvcr.io/nvidia/nemo:26.10", cluster
        assert "nvcr.io#" not in d["artifact"]["text"], cluster


def test_mpi_comes_from_the_profile(home):
    write(home / "clusters" / "pmix.toml", 'extends = "gb200-8"\n[slurm]\nmpi = "pmix"\n')
    text = run_cli("submit", "smoke", "-c", "pmix", "--dry-run", "-o", "json").json()["artifact"]["text"]
    assert [w for w in step_words(text) if w.startswith("--mpi=")] == ["--mpi=pmix"]
    assert [w for w in step_words(text, "health") if w.startswith("--mpi=")] == ["--mpi=pmix"]
    write(home / "clusters" / "twice.toml", 'extends = "gb200-8"\n[slurm]\nsrun_args = ["--mpi=pmi2"]\n')
    r = run_cli("submit", "smoke", "-c", "twice", "--dry-run")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and "[slurm] mpi" in r.err, r.err
    write(home / "clusters" / "odd.toml", 'extends = "gb200-8"\n[slurm]\nmpi = "pmix; rm -rf /"\n')
    r = run_cli("submit", "smoke", "-c", "odd", "--dry-run")
    assert r.code == 2 and "[slurm] mpi" in r.err


@pytest.mark.usefixtures("home")
def test_local_slurm_pyxis_uses_the_gb200_code_path():
    job = resolve.resolve("smoke", resolve.Options(cluster="local-slurm-pyxis"))
    assert job.errors == [] and job.container.endswith("/containers/images/local-torch.sqsh")
    text = backends.render(job).text
    for flag in (
        "--container-image=",
        "--container-mounts=",
        "--container-env=",
        "--container-workdir=",
        "--no-container-mount-home",
        "--container-writable",
        "--mpi=none",
    ):
        assert flag in text, flag
    assert f"{job.job_root}:{job.job_root}" in job.mounts  # the job root is mounted at the same path
    train = step_words(text)
    launcher = train.index(f"{job.run_dir}/{slurm_render.node_launcher_path(job)}")
    assert "--python" not in train[launcher:]  # the image's torchrun, not this machine's interpreter
    env_names = next(w for w in train if w.startswith("--container-env=")).split("=", 1)[1].split(",")
    assert "TOKENIZERS_PARALLELISM" in env_names and "OMP_NUM_THREADS" in env_names


def test_status_reason_is_pyxis_and_enroots_own_lines():
    from bridge_launch.backends.slurm.backend import container_failure

    assert (
        container_failure(["[rank0]: hello\n", PYXIS_PULL_FAILURE])
        == "pyxis: failed to import docker image: nvcr.io#nvidia/nemo:26.10: curl: (6) Could not resolve host: nvcr.io"
    )
    missing = "slurmstepd-node2: error: pyxis: [ERROR] No such file or directory: /x/y.sqsh\n"
    assert container_failure([missing]) == "pyxis: [ERROR] No such file or directory: /x/y.sqsh"
    assert container_failure(["Traceback ...\nRuntimeError: boom\n", None]) is None


def test_container_tests_skip_with_one_line_without_the_sources(tmp_path):
    """A clone without ../shared/vendor (here: PYXIS_SRC pointing nowhere) skips the container
    tests and says why, instead of failing or building anything."""
    import sys

    if os.geteuid() != 0:
        pytest.skip("the container tests skip for non-root before they look for sources")
    missing = tmp_path / "no-pyxis.tar.gz"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            str(REPO / "tests" / "e2e" / "test_containers_e2e.py"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYXIS_SRC=str(missing)),
        cwd=REPO,
    )
    assert r.returncode in (0, 5) and "1 skipped" in r.stdout, r.stdout + r.stderr  # 5: nothing else collected
    assert f"container tests need the pyxis and enroot sources: {missing} is missing (set PYXIS_SRC)" in r.stdout


def test_imex_channels_as_the_container_sees_them(preflight_mod, tmp_path):
    root = tmp_path / "nvidia-caps-imex-channels"
    assert preflight_mod.imex_channels(str(root)) == {"visible": False, "channels": []}
    root.mkdir()
    assert preflight_mod.imex_channels(str(root)) == {"visible": True, "channels": []}
    (root / "channel0").touch()
    assert preflight_mod.imex_channels(str(root)) == {"visible": True, "channels": ["channel0"]}


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


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize("name", SCRIPTS)
def test_script_structure(name):
    recipe, cluster, overlays, overrides, *opts = CASES[name]
    job = _job(recipe, cluster, overlays, overrides, *opts)
    art = backends.render(job)
    text = art.text
    # bash accepts it, and each staged shell file it calls
    for body in (text, *(v for k, v in art.files.items() if k.endswith(".sh"))):
        subprocess.run(["bash", "-n"], input=body, text=True, check=True)
    for rel in art.files:  # called by name from the script, at their place in the run dir
        assert f"{job.run_dir}/{rel}" in text, rel
    assert not re.search(r"^\s*set -[a-z]*x", text, re.M), "no tracing: it would print values into logs"
    words = (
        step_words(text) if job.backend == "slurm" else shlex.split(text.split("' TERM\n", 1)[1].split("\nrc=$?")[0])
    )
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
            env_line = [w for w in words if w.startswith("--container-env=")][-1]  # the training step's
            listed = env_line.split("=", 1)[1].split(",")
            exported = re.findall(r"^export (\w+)=", text, re.M)
            assert set(exported) | set(job.secrets) == set(listed)
            assert "--no-container-mount-home" in words
        if job.profile["numa_bind"]:
            wrapper = words[words.index("--no-python") + 3]
            assert "--cpunodebind=$((LOCAL_RANK/2))" in wrapper and "--membind=$((LOCAL_RANK/2))" in wrapper


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize(
    "nodes,segment,smallest", [(2, 2, 1), (8, 8, 1), (18, 18, 1), (32, 16, 1), (36, 18, 1), (20, 10, 1), (19, 1, 1)]
)
def test_segment_is_the_rule_over_the_jobs_groups(nodes, segment, smallest):
    """The smoke workload has no group that needs NVLink past a node. By default (Megatron-Bridge's
    rule) a job that fits a rack is held to one, a larger one gets the largest divisor <= 18; with
    --segment-size smallest, segments of one node (the job starts on any free nodes). The HybridEP
    cases are in tests/plan/test_topology.py."""
    for size, expected in (("domain", segment), ("smallest", smallest)):
        job = resolve.resolve("smoke", resolve.Options(cluster="gb200-nvl72", nodes=nodes, segment_size=size))
        assert f"#SBATCH --segment={expected}\n" in backends.render(job).text, size


def test_segment_only_where_the_profile_supports_it(home):
    (home / "clusters" / "old-slurm.toml").write_text('extends = "gb200-nvl72"\n[slurm]\nsegment = false\n')
    job = resolve.resolve("smoke", resolve.Options(cluster="old-slurm", nodes=8))
    assert "--segment" not in backends.render(job).text


def test_frames_round_trip_binary_and_newlines():
    a, b = b"line 1\nline 2\n\x00\xff no newline", b"@@bridge-launch 5 fake\n"  # a body may look like a header
    out = _frame("sbatch-12.out", a) + _frame("12-node1.log", b)
    assert _frames(out) == {"sbatch-12.out": a, "12-node1.log": b}


def test_a_short_or_strange_frame_ends_the_parse_keeping_what_came_before():
    good = _frame("sbatch-3.out", b"ok\n")
    assert _frames(good + b"@@bridge-launch 100 3-n.log\nonly this") == {"sbatch-3.out": b"ok\n"}
    assert _frames(good + _frame("../../etc/passwd", b"x")) == {"sbatch-3.out": b"ok\n"}  # not a log name
    assert _frames(good + b"garbage\n") == {"sbatch-3.out": b"ok\n"}
    assert _frames(b"") == {}


def test_a_packed_trees_long_names_stay_under_its_directory_in_the_ssh_stream(tmp_path):
    # Megatron-LM has paths over ustar's 100 characters (megatron/core/distributed/fsdp/src/...): their
    # PAX path record must name the staged place, not the packed tree's own (they landed in the run dir)
    import io
    import tarfile

    from bridge_launch.backends.slurm.backend import stage_stream
    from bridge_launch.job.artifact import Tree
    from bridge_launch.runs import codepack

    long_rel = "3rdparty/Megatron-LM/megatron/core/distributed/fsdp/src/megatron_fsdp/" + "x" * 60 + ".py"
    write(tmp_path / "co" / long_rel, "print('deep')\n")
    write(tmp_path / "co" / "src" / "a.py", "A = 1\n")
    git = ["git", "-C", str(tmp_path / "co"), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    packed = codepack.pack(str(tmp_path / "co"))
    stream = stage_stream({"bridge-src": Tree(packed.tar), "launch/x.sh": "echo\n"})
    with tarfile.open(fileobj=io.BytesIO(stream)) as tar:
        tar.extractall(tmp_path / "out", filter="data")
    assert (tmp_path / "out" / "bridge-src" / long_rel).read_text() == "print('deep')\n"
    assert (tmp_path / "out" / "bridge-src" / "src" / "a.py").exists()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["bridge-src", "launch"]


def test_the_image_is_materialised_once_in_its_own_step_before_the_health_steps_bound(home):
    """pyxis imports and unpacks an image inside the first step that names it, counted against that
    step's --time: the image step alone carries --container-image (no --time of its own), the health
    and training steps start the job's named container, and the health step's bound is the profile's."""
    write(
        home / "clusters" / "slowhealth.toml", 'extends = "gb200-8"\n[slurm]\nhealth_minutes = 5\nimage_space_gb = 80\n'
    )
    d = run_cli("submit", "smoke", "-c", "slowhealth", "--dry-run", "-o", "json").json()
    text = d["artifact"]["text"]
    image, health, train = (step_words(text, a) for a in ("image", "health", "train"))
    assert image[:1] == ["srun"] and image[-2:] == ["--container-name=$container", "true"]
    assert "--container-image=nvcr.io#nvidia/nemo:26.10" in image and not [w for w in image if w.startswith("--time")]
    for words in (health, train):
        assert "--container-name=$container:no_exec" in words
        assert not [w for w in words if w.startswith("--container-image")]
    assert [w for w in health if w.startswith("--time")] == ["--time=5"]
    assert 'container=bridge-launch.@RUN_ID@."$SLURM_JOB_ID"' in text and "image_space_gb=80" in text
    calls = text.splitlines()[-1]
    assert calls == "attempt_begin; prepare; single_step; attempt_after_step", calls
    assert set(d["artifact"]["files"]) >= {
        "launch/@RUN_ID@.containers.sh",
        "launch/@RUN_ID@.node-containers.sh",
    }
    shown = run_cli("submit", "smoke", "-c", "slowhealth", "--dry-run").out
    (line,) = [x for x in shown.splitlines() if x.startswith("Image      ")]
    assert "once a node and job, in a step of its own before the health step" in line and "80 GB free" in line
    assert "with or without pyxis' use_squashfuse" in line, line
    assert "at most 5 min from the checks' start" in shown
    # bare processes: no image, no image step
    bare = run_cli("submit", "smoke", "-c", "local-slurm", "--dry-run", "-o", "json").json()["artifact"]
    assert "has_image=0" in bare["text"] and "containers.sh" not in bare["text"] and "\nimage=(" not in bare["text"]
    for key, value, says in (
        ("health_minutes", "0", "[slurm] health_minutes is the health step's --time in whole minutes"),
        ("image_space_gb", "-1", "[slurm] image_space_gb is the free space (GB) enroot's data path needs"),
    ):
        write(home / "clusters" / "bad.toml", f'extends = "gb200-8"\n[slurm]\n{key} = {value}\n')
        r = run_cli("submit", "smoke", "-c", "bad", "--dry-run")
        assert r.code == 2 and says in r.err and len(r.err.strip().splitlines()) == 1, r.err


@pytest.mark.skipif(shutil.which("sbatch") is None, reason="needs Slurm's sbatch (scripts/test installs it)")
def test_a_slurm_that_does_not_answer_is_said_before_any_segment_advice(home, tmp_path):
    """sbatch that cannot read its configuration (no controller to talk to) was reported as 'an
    unknown Slurm, whose sbatch has no working --segment': the real cause came only after the profile
    dropped its segment. (An empty file: a missing one makes sbatch retry for 60 s first.)"""
    (tmp_path / "slurm.conf").write_text("")
    write(home / "clusters" / "noctl.toml", f'extends = "gb200-8"\n[slurm]\nslurm_conf = "{tmp_path}/slurm.conf"\n')
    r = run_cli("submit", "smoke", "-c", "noctl")
    assert r.code == 1 and "--segment" not in r.err, r.err
    assert r.err.strip().splitlines() == [
        "bridge-launch: error: sbatch does not answer on cluster 'noctl': sbatch: fatal: Unable to process "
        "configuration file"
    ], r.err
