import json
import os
import subprocess
from pathlib import Path

import pytest

from bridge_launch.runs import codepack
from conftest import run_cli, write
from launch_jobs import step_words


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


def _git_checkout(path: Path, files: dict) -> Path:
    for rel, text in files.items():
        write(path / rel, text)
    for cmd in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "x"],
    ):
        subprocess.run(["git", "-C", str(path), *cmd], check=True, capture_output=True)
    return path


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
    # no repository goes along: only the commit, as git records a detached head (image_revision.py reads it)
    assert ".gitmodules" in names and not any(
        n.startswith(".git/") or "/.git/" in n or n.endswith("/.git") for n in names - {".git/HEAD"}
    )
    with tarfile.open(fileobj=io.BytesIO(packed.tar)) as tar:
        assert tar.extractfile(".git/HEAD").read() == f"{clean.commit}\n".encode()


@pytest.mark.usefixtures("home")
def test_bridge_src_dry_run_mounts_the_staged_tree(tmp_path):
    mb = _checkout(tmp_path)
    d = run_cli("submit", "smoke", "-c", "gb200-8", "--bridge-src", str(mb), "--dry-run", "-o", "json").json()
    assert f"{d['run_dir']}/bridge-src:/opt/Megatron-Bridge" in d["mounts"]
    text = d["artifact"]["text"]
    assert f"{d['run_dir']}/bridge-src:/opt/Megatron-Bridge" in text
    (launcher,) = (body for rel, body in d["artifact"]["files"].items() if rel.endswith(".node-launch.sh"))
    words = step_words(text)
    assert words[words.index("--bridge-src") + 1] == "/opt/Megatron-Bridge"
    # the launcher puts the checkout's src and Megatron-LM ahead of the image's install, then torchrun
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "torchrun").write_text('#!/bin/bash\necho "PYTHONPATH=$PYTHONPATH"\n')
    (tmp_path / "bin" / "torchrun").chmod(0o755)
    (tmp_path / "node-launch.sh").write_text(launcher)
    out = subprocess.run(
        ["bash", str(tmp_path / "node-launch.sh"), "--bridge-src", "/opt/Megatron-Bridge", "/none", "TERM"],
        env={
            "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
            "PYTHONPATH": "/img",
            "SLURM_NODEID": "1",
            "SLURM_JOB_ID": "7",
        },
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.splitlines()
    assert out[-1] == "PYTHONPATH=/opt/Megatron-Bridge/src:/opt/Megatron-Bridge/3rdparty/Megatron-LM:/img", out
    assert out[0].startswith("bridge-launch: node ") and out[0].endswith(" starts torchrun"), out
    plain = run_cli("submit", "smoke", "-c", "gb200-8", "--dry-run", "-o", "json").json()["artifact"]
    assert "--bridge-src" not in step_words(plain["text"]) and "PYTHONPATH" not in plain["text"]


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


def test_bridge_src_must_carry_the_recipe_upstream_lacks(cli, home, tmp_path):
    # a recipe of the user's own naming a function no Megatron-Bridge revision has (upstream_status)
    name = "qwen35_9b_pretrain_seed_only_config"
    write(
        home / "recipes" / "seed-only.toml",
        f"""
        name = "seed-only"
        extends = "qwen35-9b-pretrain"
        upstream = "{name}"
        upstream_status = "not in upstream Megatron-Bridge: only the seed's branch has it"
        needs_bridge_src = ""   # any checkout that has the function, not one at the parent's pin
    """,
    )
    has = _git_checkout(
        tmp_path / "mb-seed", {"src/megatron/bridge/recipes/qwen/gb200/qwen35.py": f"def {name}():\n    pass\n"}
    )
    lacks = _git_checkout(
        tmp_path / "mb-main", {"src/megatron/bridge/recipes/qwen/h100/qwen35.py": "def other():\n    pass\n"}
    )
    args = ["submit", "seed-only", "-c", "gb200-8", "--dry-run"]
    r = cli(*args, "--bridge-src", str(lacks))
    assert (
        r.code == 2 and f"no file under src/ names the recipe function {name}" in r.err and len(r.err.splitlines()) == 1
    )
    r = cli(*args, "--bridge-src", str(has))
    assert r.code == 0, r.err
    assert f"Runs from --bridge-src {has} (checked to have it)" in r.out and "is not in upstream" not in r.out
    # the VL recipes' functions travel with the job (bridge_recipe_module): any checkout will do
    vl = cli(
        "submit",
        "qwen35-vl-sft",
        "-c",
        "gb200-32",
        "--dry-run",
        "dataset.path=/d",
        "checkpoint.pretrained_checkpoint=/c",
        "--bridge-src",
        str(lacks),
    )
    assert vl.code == 0, vl.err
    assert "/workload/bridge_recipe_entry.py" in vl.out


def test_a_recipe_whose_image_lacks_its_revision_needs_bridge_src_at_that_commit(cli, tmp_path):
    # the seed's pretraining recipes pin PR #4871's heads, which no NeMo image carries
    args = ["submit", "qwen35-9b-pretrain", "-c", "gb200-8"]
    r = cli(*args, "--dry-run")
    assert (
        r.code == 0
        and "runs Megatron-Bridge dd81e66, which its image nvcr.io/nvidia/nemo:26.06 does not carry" in r.out
    )
    r = cli(*args)
    assert r.code == 2 and len(r.err.splitlines()) == 1, r.err
    assert r.err.endswith("give --bridge-src CHECKOUT at dd81e66\n"), r.err
    other = _git_checkout(tmp_path / "mb", {"src/megatron/bridge/__init__.py": ""})
    r = cli(*args, "--dry-run", "--bridge-src", str(other))
    assert r.code == 2 and len(r.err.splitlines()) == 1, r.err
    assert "HEAD is " in r.err and "but the recipe runs Megatron-Bridge dd81e664e; check out dd81e664e there" in r.err
    head = subprocess.run(["git", "-C", str(other), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert codepack.checkout(str(other), commit=head) == str(other)  # at the pinned commit: taken
    # an image of the user's choosing may carry it: said, not refused
    r = cli(*args, "--dry-run", "--container", "registry.example.com/mine:backport")
    assert r.code == 0 and "must carry that revision, or give --bridge-src at it" in r.out
