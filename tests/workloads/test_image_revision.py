"""The image-revision line (workloads/image_revision.py): which Megatron-Bridge and megatron-core a
job's image really runs, read from the checkout's files, against the recipe's pins. The line in a
real job on the local cluster: tests/e2e/test_slurm_e2e.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import WORKLOADS

sys.path.insert(0, str(WORKLOADS))
import image_revision

BRIDGE_PIN = "067f987df03b8355b03192d88d70f1709fedf51a"
CORE_PIN = "2a75ac12c0000000000000000000000000000000"


def _checkout(root: Path, package: str, commit: str | None, version=("0", "7", "0")) -> Path:
    """A checkout's layout: megatron/<package> (under src/ for Megatron-Bridge) with package_info.py,
    and .git with HEAD on a branch whose loose ref holds `commit` (no .git when None). Returns the
    directory that goes on sys.path."""
    pkg = root / ("src" if package == "bridge" else "") / "megatron" / package
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise SystemExit('imported: the check must only find it')\n")
    major, minor, patch = version
    (pkg / "package_info.py").write_text(f"MAJOR = {major}\nMINOR = {minor}\nPATCH = {patch}\nPRE_RELEASE = ''\n")
    if commit:
        (root / ".git" / "refs" / "heads").mkdir(parents=True)
        (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
        (root / ".git" / "refs" / "heads" / "main").write_text(commit + "\n")
    return pkg.parent.parent  # the directory that goes on sys.path


def test_a_checkouts_commit_is_read_from_its_own_git_dir_only(tmp_path):
    root = tmp_path / "Megatron-Bridge"
    pkg = root / "src" / "megatron" / "bridge"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    assert image_revision.git_commit(str(pkg / "__init__.py")) is None
    (root / ".git" / "refs" / "heads").mkdir(parents=True)
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / ".git" / "refs" / "heads" / "main").write_text(BRIDGE_PIN + "\n")
    assert image_revision.git_commit(str(pkg / "__init__.py")) == BRIDGE_PIN
    (root / ".git" / "refs" / "heads" / "main").unlink()  # packed, as after git gc
    (root / ".git" / "packed-refs").write_text(f"# pack-refs with: peeled\n{BRIDGE_PIN} refs/heads/main\n")
    assert image_revision.git_commit(str(pkg / "__init__.py")) == BRIDGE_PIN
    inside = tmp_path / "outer" / "vendor" / "megatron" / "core"
    inside.mkdir(parents=True)
    (tmp_path / "outer" / ".git").mkdir()
    (tmp_path / "outer" / ".git" / "HEAD").write_text("0123456789abcdef\n")
    assert image_revision.git_commit(str(inside / "__init__.py")) is None  # the repository around it is not its own


def test_a_short_or_full_pin_compares_by_prefix():
    assert image_revision.compare({"commit": BRIDGE_PIN}, "067f987df") == "same"
    assert image_revision.compare({"commit": "067f987"}, BRIDGE_PIN) == "same"
    assert image_revision.compare({"commit": BRIDGE_PIN}, "987244934") == "different"
    assert image_revision.compare({"commit": None}, BRIDGE_PIN) == "unknown"


def _run(tmp_path, pythonpath: str, *pins) -> tuple[str, dict]:
    report = tmp_path / "rev.json"
    proc = subprocess.run(
        [sys.executable, str(WORKLOADS / "image_revision.py"), *pins, f"--report={report}"],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=pythonpath),
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip(), json.loads(report.read_text())


def test_the_line_names_what_the_image_runs_against_the_pins(tmp_path):
    bridge = _checkout(tmp_path / "Megatron-Bridge", "bridge", BRIDGE_PIN)
    core = _checkout(tmp_path / "Megatron-LM", "core", None, version=("0", "20", "0"))
    path = f"{bridge}:{core}"
    line, report = _run(tmp_path, path, f"--bridge={BRIDGE_PIN}", f"--core={CORE_PIN}")
    assert line == (
        "bridge-launch: image revision: Megatron-Bridge 0.7.0 @ 067f987df = the pin 067f987df; "
        "megatron-core 0.20.0 (no git checkout: its commit is unknown); the recipe pins 2a75ac12c"
    )
    assert report["megatron_bridge"] == "same" and report["megatron_core"] == "unknown"
    # the seed's revision against an image of main: said, with what would run the pin
    line, report = _run(tmp_path, path, "--bridge=98724493411ca166e09ea8bed8959c1129252703", f"--core={CORE_PIN}")
    assert "Megatron-Bridge 0.7.0 @ 067f987df, NOT the pin 987244934;" in line
    assert line.endswith("(the job runs the image's code, not the pinned revision: --bridge-src at the pin runs that)")
    assert report["megatron_bridge"] == "different"
    # no Megatron-Bridge at all (a bare-process profile)
    line, _ = _run(tmp_path, str(core), f"--bridge={BRIDGE_PIN}", f"--core={CORE_PIN}")
    assert line.startswith("bridge-launch: image revision: Megatron-Bridge not found (")


def test_a_cloud_jobs_node_0_says_it_before_torchrun(home, tmp_path):
    """Lepton and DGX Cloud run the same script on every node: node 0 says the line first, into its
    node log and image-revision/<run>.json; the other nodes go straight to torchrun."""
    from bridge_launch.backends import cloud, lepton
    from bridge_launch.backends.base import workload_files
    from bridge_launch.core import upstream
    from bridge_launch.resolve import resolver as resolve
    from conftest import write

    write(home / "clusters" / "c.toml", f'extends = "lepton-gb200"\njob_root = "{tmp_path}/runs"\n')
    opts = resolve.Options(cluster="c", overrides=["dataset.path=/d", "checkpoint.pretrained_checkpoint=/c"])
    job = resolve.resolve("qwen35-vl-sft", opts).with_run_id("r1")
    run_dir = tmp_path / "runs" / "r1"
    for rel, text in workload_files().items():
        write(run_dir / rel, text)
    bindir = tmp_path / "bin"
    write(bindir / "torchrun", '#!/bin/bash\necho "torchrun ran"\n').chmod(0o755)
    write(bindir / "python3", f'#!/bin/bash\nexec {sys.executable} "$@"\n').chmod(0o755)
    script = cloud.job_script(job, lepton.RANK_PRELUDE)
    for index in ("0", "1"):
        env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", LEPTON_JOB_WORKER_INDEX=index, PYTHONPATH="")
        proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)
        assert proc.returncode == 0, proc.stderr
        log = (run_dir / "logs" / f"r1-node{index}.log").read_text().splitlines()
        if index == "0":
            assert log[0].startswith("bridge-launch: image revision: Megatron-Bridge not found (") and (
                f"the recipe pins {upstream.BRIDGE_MAIN[:9]}" in log[0]
            ), log
            report = json.loads((run_dir / "image-revision" / "r1.json").read_text())
            assert report["pins"]["bridge"] == upstream.BRIDGE_MAIN
        else:
            assert not any("image revision" in ln for ln in log), log
        assert log[-1] == "torchrun ran"
