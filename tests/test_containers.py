"""Containers without a cluster: image references as pyxis and the registries expect them,
--mpi from the profile, the image cache record and the import job's script, --bridge-src packing."""

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bridge_launch import backends
from bridge_launch.backends.slurm import backend as slurm
from bridge_launch.backends.slurm import image_import
from bridge_launch.core import image_cache, image_ref
from bridge_launch.core.errors import UsageError
from bridge_launch.resolve import resolver as resolve
from bridge_launch.runs import codepack
from conftest import run_cli, write


@pytest.mark.parametrize(
    "given,pyxis",
    [
        ("nvcr.io/nvidia/nemo:26.10", "nvcr.io#nvidia/nemo:26.10"),
        ("nvcr.io#nvidia/nemo:26.10", "nvcr.io#nvidia/nemo:26.10"),
        ("user@nvcr.io#nvidia/nemo:26.10", "user@nvcr.io#nvidia/nemo:26.10"),
        ("localhost:5000/team/img:1", "localhost:5000#team/img:1"),
        ("localhost/img", "localhost#img"),
        ("registry.example.com:443/a/b/c@sha256:" + "0" * 64, "registry.example.com:443#a/b/c@sha256:" + "0" * 64),
        ("ubuntu:22.04", "ubuntu:22.04"),  # Docker Hub names have no registry part
        ("nvidia/cuda:12.4.0-base", "nvidia/cuda:12.4.0-base"),
        ("/lustre/images/nemo.sqsh", "/lustre/images/nemo.sqsh"),
        ("./nemo.sqsh", "./nemo.sqsh"),
    ],
)
def test_pyxis_reference_forms(given, pyxis):
    assert image_ref.pyxis_ref(given) == pyxis
    assert image_ref.pyxis_ref(pyxis) == pyxis  # idempotent


@pytest.mark.parametrize(
    "given,docker",
    [
        ("nvcr.io#nvidia/nemo:26.10", "nvcr.io/nvidia/nemo:26.10"),
        ("user@nvcr.io#nvidia/nemo:26.10", "nvcr.io/nvidia/nemo:26.10"),
        ("nvcr.io/nvidia/nemo:26.10", "nvcr.io/nvidia/nemo:26.10"),
        ("nvcr.io/nvidia/nemo@sha256:" + "a" * 64, "nvcr.io/nvidia/nemo@sha256:" + "a" * 64),
    ],
)
def test_registry_reference_forms(given, docker):
    assert image_ref.docker_ref(given) == docker


@pytest.mark.usefixtures("home")
def test_a_bare_squashfs_name_is_refused_not_pulled():
    r = run_cli("submit", "smoke", "-c", "gb200-8", "--container", "nemo.sqsh", "--dry-run")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and "absolute path" in r.err, r.err
    with pytest.raises(UsageError):
        image_ref.docker_ref("/lustre/images/nemo.sqsh")


@pytest.mark.usefixtures("home")
def test_gb200_renders_pyxis_form_workdir_and_no_mpi():
    d = run_cli("submit", "smoke", "-c", "gb200-8", "--dry-run", "-o", "json").json()
    text = d["artifact"]["text"]
    assert d["container"] == "nvcr.io/nvidia/nemo:26.10"  # the job keeps the user's form
    assert "'--container-image=nvcr.io#nvidia/nemo:26.10' \\" in text  # quoted: '#' starts a shell comment
    assert "--container-image=nvcr.io/" not in text
    assert text.count("--mpi=") == 1 and "--mpi=none \\" in text and "pmix" not in text
    assert f"--container-workdir={d['run_dir']} \\" in text


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
    assert text.count("--mpi=") == 1 and "--mpi=pmix \\" in text
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
    launcher = backends.render(job).files[slurm.node_launcher_path(job)]
    assert '\ntorchrun --node-rank="$SLURM_NODEID"' in launcher  # the image's torchrun, not this machine's interpreter
    env_names = text.split("--container-env=")[1].split(" ")[0].split(",")
    assert "TOKENIZERS_PARALLELISM" in env_names and "OMP_NUM_THREADS" in env_names


# --- the image cache ------------------------------------------------------------------------------

DIGEST = "sha256:" + "ab" * 32


def test_submit_starts_from_the_cached_squashfs(home):
    image_cache.remember(
        "gb200-8",
        "nvcr.io#nvidia/nemo:26.10",
        {
            "digest": DIGEST,
            "squashfs": f"/lustre/fsw/enroot-cache/sha256-{'ab' * 32}.sqsh",
            "cache_dir": "/lustre/fsw/enroot-cache",
            "source": "nvcr.io#nvidia/nemo:26.10",
        },
    )
    d = run_cli("submit", "smoke", "-c", "gb200-8", "--dry-run", "-o", "json").json()
    assert d["container"] == f"/lustre/fsw/enroot-cache/sha256-{'ab' * 32}.sqsh"
    assert "image cache sha256:abab" in d["provenance"]["job"]["container"]
    assert f"--container-image=/lustre/fsw/enroot-cache/sha256-{'ab' * 32}.sqsh \\" in d["artifact"]["text"]
    # the user may write the registry either way; a record for another profile or cache is not used
    same = run_cli(
        "submit", "smoke", "-c", "gb200-8", "--container", "nvcr.io#nvidia/nemo:26.10", "--dry-run", "-o", "json"
    ).json()
    assert same["container"] == d["container"]
    other = run_cli("submit", "smoke", "-c", "gb200-32", "--dry-run", "-o", "json").json()
    assert other["container"] == "nvcr.io/nvidia/nemo:26.10"
    write(home / "clusters" / "gb200-8-moved.toml", 'extends = "gb200-8"\nname = "gb200-8-moved"\n')
    image_cache.remember(
        "gb200-8-moved",
        "nvcr.io#nvidia/nemo:26.10",
        {"digest": DIGEST, "squashfs": "/old/x.sqsh", "cache_dir": "/old", "source": "nvcr.io#nvidia/nemo:26.10"},
    )
    assert (
        run_cli("submit", "smoke", "-c", "gb200-8-moved", "--dry-run", "-o", "json").json()["container"]
        == "nvcr.io/nvidia/nemo:26.10"
    )
    lepton = run_cli("submit", "smoke", "-c", "lepton-gb200", "--dry-run", "-o", "json").json()
    assert lepton["container"] == "nvcr.io/nvidia/nemo:26.10"


@pytest.mark.usefixtures("home")
def test_a_damaged_record_is_one_line():
    (Path(os.environ["BRIDGE_LAUNCH_HOME"])).mkdir(parents=True, exist_ok=True)
    (Path(os.environ["BRIDGE_LAUNCH_HOME"]) / "images.json").write_text("{not json")
    r = run_cli("submit", "smoke", "-c", "gb200-8", "--dry-run")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and "images.json" in r.err


def _run_import(script: str, job_id: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-s"],
        input=script,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, SLURM_JOB_ID=str(job_id)),
    )


def test_import_job_is_keyed_by_digest_and_safe_when_two_race(tmp_path):
    """The import job's own script (a squashfs file as the image: hash, copy, hard link), run
    eight times at once: every run reports the same digest and file, one file remains, no partials."""
    src = tmp_path / "img.sqsh"
    src.write_bytes(os.urandom(3 << 20))
    cache = tmp_path / "cache"
    script = image_import.import_script(str(src), str(cache))
    with ThreadPoolExecutor(8) as pool:
        procs = list(pool.map(lambda i: _run_import(script, 100 + i), range(8)))
    results = [image_import.parse_result(p.stdout) for p in procs]
    assert all(p.returncode == 0 for p in procs), [p.stderr for p in procs]
    import hashlib

    digest = "sha256:" + hashlib.sha256(src.read_bytes()).hexdigest()
    assert {r[0] for r in results} == {digest} and {r[1] for r in results} == {str(cache / f"sha256-{digest[7:]}.sqsh")}
    assert sum(r[2] == "imported" for r in results) >= 1
    assert sorted(p.name for p in cache.iterdir()) == [f"sha256-{digest[7:]}.sqsh"]
    assert (cache / f"sha256-{digest[7:]}.sqsh").read_bytes() == src.read_bytes()
    again = _run_import(script, 200)
    assert image_import.parse_result(again.stdout)[2] == "cached"
    # a tag that moved is a new digest, so a new file beside the old one
    src.write_bytes(os.urandom(1 << 20))
    moved = image_import.parse_result(_run_import(script, 201).stdout)
    assert moved[0] != digest and len(list(cache.iterdir())) == 2


def test_import_failure_reports_enroots_line():
    out = (
        "[INFO] Querying registry for permission grant\n[INFO] Authenticating with user: <anonymous>\n"
        "curl: (6) Could not resolve host: nvcr.io\n[ERROR] URL https://nvcr.io/v2/ returned error code: 6\n"
        "enroot digest failed\n"
    )
    assert image_import.failure_line(out) == "curl: (6) Could not resolve host: nvcr.io"
    assert image_import.parse_result(out) is None


def test_image_import_refuses_profiles_it_cannot_use(home):
    r = run_cli("image", "import", "nvcr.io/nvidia/nemo:26.10", "-c", "local-slurm")
    assert r.code == 2 and "bare processes" in r.err and len(r.err.strip().splitlines()) == 2  # progress + error
    r = run_cli("image", "import", "nvcr.io/nvidia/nemo:26.10", "-c", "lepton-gb200")
    assert r.code == 2 and "lepton" in r.err
    write(home / "clusters" / "nocache.toml", 'extends = "gb200-8"\n[slurm]\nimage_cache = ""\n')
    r = run_cli("image", "import", "nvcr.io/nvidia/nemo:26.10", "-c", "nocache")
    assert r.code == 2 and "image_cache" in r.err
    r = run_cli("image", "import", "img.sqsh", "-c", "gb200-8")
    assert r.code == 2 and "absolute path" in r.err


# --- --bridge-src ---------------------------------------------------------------------------------


def _git(repo, *args):
    subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "protocol.file.allow=always",
            *args,
        ],
        check=True,
        capture_output=True,
    )


def _checkout(root: Path) -> Path:
    """A Megatron-Bridge-shaped checkout with Megatron-LM as a real submodule."""
    lm = root / "Megatron-LM"
    write(lm / "megatron" / "core" / "__init__.py", 'ORIGIN = "submodule"\n')
    _git(root, "init", "-q", str(lm))
    _git(lm, "add", "-A")
    _git(lm, "commit", "-qm", "lm")
    mb = root / "Megatron-Bridge"
    write(mb / "src" / "megatron" / "bridge" / "__init__.py", 'ORIGIN = "committed"\n')
    write(mb / "scripts" / "training" / "run_recipe.py", "print('hi')\n")
    (mb / "scripts" / "training" / "run_recipe.py").chmod(0o755)
    write(mb / "gone.txt", "x\n")
    _git(root, "init", "-q", str(mb))
    _git(mb, "submodule", "add", "-q", str(lm), "3rdparty/Megatron-LM")
    _git(mb, "add", "-A")
    _git(mb, "commit", "-qm", "mb")
    return mb


def test_pack_takes_tracked_files_as_edited_with_submodules(tmp_path):
    import io
    import tarfile

    mb = _checkout(tmp_path)
    clean = codepack.pack(str(mb))
    assert clean.dirty is False and len(clean.commit) == 40
    (mb / "src" / "megatron" / "bridge" / "__init__.py").write_text('ORIGIN = "edited"\n')
    write(mb / "untracked.py", "secret = 1\n")
    (mb / "gone.txt").unlink()
    write(mb / "staged.py", "x = 1\n")
    _git(mb, "add", "staged.py")
    packed = codepack.pack(str(mb))
    assert packed.dirty is True and packed.commit == clean.commit
    with tarfile.open(fileobj=io.BytesIO(packed.tar)) as tar:
        names = set(tar.getnames())
        assert tar.extractfile("src/megatron/bridge/__init__.py").read() == b'ORIGIN = "edited"\n'
        assert tar.extractfile("3rdparty/Megatron-LM/megatron/core/__init__.py").read() == b'ORIGIN = "submodule"\n'
        assert tar.getmember("scripts/training/run_recipe.py").mode == 0o755
    assert "staged.py" in names and "untracked.py" not in names and "gone.txt" not in names
    assert ".gitmodules" in names and not any(
        n.startswith(".git/") or "/.git/" in n or n.endswith("/.git") for n in names
    )


@pytest.mark.usefixtures("home")
def test_bridge_src_dry_run_mounts_the_staged_tree(tmp_path):
    mb = _checkout(tmp_path)
    d = run_cli("submit", "smoke", "-c", "gb200-8", "--bridge-src", str(mb), "--dry-run", "-o", "json").json()
    assert f"{d['run_dir']}/bridge-src:/opt/Megatron-Bridge" in d["mounts"]
    text = d["artifact"]["text"]
    assert f"{d['run_dir']}/bridge-src:/opt/Megatron-Bridge" in text
    (launcher,) = (body for rel, body in d["artifact"]["files"].items() if rel.endswith(".node-launch.sh"))
    assert (
        "\nexport PYTHONPATH=/opt/Megatron-Bridge/src:/opt/Megatron-Bridge/3rdparty/Megatron-LM"
        "${PYTHONPATH:+:$PYTHONPATH}\n"
        "stop=$1 sig=$2\nshift 2\ntorchrun --node-rank" in launcher
    )
    plain = run_cli("submit", "smoke", "-c", "gb200-8", "--dry-run", "-o", "json").json()["artifact"]
    assert "PYTHONPATH" not in plain["text"] and "PYTHONPATH" not in "".join(plain["files"].values())


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize(
    "args,fragment",
    [
        (["-c", "gb200-8", "--bridge-src", "/no/such/dir"], "no such directory"),
        (["-c", "gb200-8", "--bridge-src", "/tmp"], "not a git checkout"),
        (["-c", "local-slurm", "--bridge-src", "."], "needs a container"),
        (["-c", "lepton-gb200", "--bridge-src", "."], "Slurm job"),
    ],
)
def test_bridge_src_errors_are_one_line(args, fragment):
    r = run_cli("submit", "smoke", *args, "--dry-run")
    lines = r.err.strip().splitlines()
    assert r.code == 2 and len(lines) == 1 and fragment in lines[0], r.err


@pytest.mark.usefixtures("home")
def test_bridge_src_inside_a_checkout_asks_for_its_top(tmp_path):
    mb = _checkout(tmp_path)
    r = run_cli("submit", "smoke", "-c", "gb200-8", "--bridge-src", str(mb / "src"), "--dry-run")
    assert r.code == 2 and "give its top directory" in r.err


def test_staging_unpacks_the_tree_in_the_run_dir(tmp_path):
    from bridge_launch.backends.base import Tree, stage_locally

    mb = _checkout(tmp_path)
    packed = codepack.pack(str(mb))
    run_dir = tmp_path / "run"
    stage_locally(str(run_dir), {"bridge-src": Tree(packed.tar), "launch/x.json": "{}"}, new_dir=True)
    assert (
        run_dir / "bridge-src" / "src" / "megatron" / "bridge" / "__init__.py"
    ).read_text() == 'ORIGIN = "committed"\n'
    assert os.access(run_dir / "bridge-src" / "scripts" / "training" / "run_recipe.py", os.X_OK)
    assert json.loads((run_dir / "launch" / "x.json").read_text()) == {}


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
            str(Path(__file__).parent / "test_containers_e2e.py"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYXIS_SRC=str(missing)),
        cwd=Path(__file__).parent.parent,
    )
    assert r.returncode in (0, 5) and "1 skipped" in r.stdout, r.stdout + r.stderr  # 5: nothing else collected
    assert f"container tests need the pyxis and enroot sources: {missing} is missing (set PYXIS_SRC)" in r.stdout
