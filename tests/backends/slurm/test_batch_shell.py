"""The batch logic is shell in files of the package (backends/slurm/batch/*.sh), staged beside the
batch script and sourced by it: every file and every rendered script, with the files it sources,
is shellcheck clean, and the scripts stay short enough to read."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bridge_launch import backends
from bridge_launch.backends.slurm import render
from launch_jobs import _job

SHELL_FILES = sorted([*render.BATCH_DIR.glob("*.sh"), render.BATCH_DIR.parent / "secret_reader.sh"])
# values in a rendered script are literals, single-quoted on purpose ('[rank${rank}]: ' is torchrun's), and
# a comma list is one word (--fabric-sizes=1,2,3 in an array is not three elements written wrongly)
LITERALS = "SC2016,SC2054"
INPUTS = ("dataset.path=/lustre/fsw/data/clevr2-energon", "checkpoint.pretrained_checkpoint=/lustre/fsw/ckpt/q")
JOBS = {
    "qwen35-vl-sft on gb200-32 (a retried job with a health step and secrets)": (
        "qwen35-vl-sft",
        "gb200-32",
        INPUTS,
        {},
    ),
    "nemotron-3-nano-pretrain on gb200-64 --until-done (a chain)": (
        "nemotron-3-nano-pretrain",
        "gb200-64",
        (),
        {"until_done": True},
    ),
    "smoke on local-slurm --max-restarts 0 (a plain job, bare processes)": (
        "smoke",
        "local-slurm",
        (),
        {"max_restarts": 0},
    ),
    "smoke on local-slurm --until-done --max-segments 3": (
        "smoke",
        "local-slurm",
        (),
        {"until_done": True, "max_segments": 3},
    ),
}


def shellcheck() -> str:
    found = Path(sys.executable).with_name("shellcheck")
    return str(found) if found.exists() else shutil.which("shellcheck") or pytest.fail("no shellcheck (dev extra)")


def _staged(job, tmp_path) -> Path:
    """The artifact as submit stages it, in a run dir under tmp_path: the batch script's path."""
    art = backends.render(job)
    run_dir = tmp_path / "run"

    def place(text: str) -> str:
        return text.replace(job.run_dir, str(run_dir))

    for rel, body in {art.filename: art.text, **art.files}.items():
        (run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / rel).write_text(place(body))
    return run_dir / art.filename


def test_the_batch_logic_files_are_shellcheck_clean():
    assert {p.name for p in SHELL_FILES} >= {render.JOB, render.SEGMENT, render.ATTEMPTS, render.NODE_LAUNCH}
    r = subprocess.run([shellcheck(), "-s", "bash", *map(str, SHELL_FILES)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize("name", sorted(JOBS))
def test_a_rendered_script_and_what_it_sources_are_shellcheck_clean(name, tmp_path):
    recipe, cluster, overrides, opts = JOBS[name]
    script = _staged(_job(recipe, cluster, *overrides, **opts), tmp_path)
    r = subprocess.run(
        [shellcheck(), "-x", "-s", "bash", "-e", LITERALS, str(script)], capture_output=True, text=True, cwd=tmp_path
    )
    assert r.returncode == 0, r.stdout
    sourced = [line.split()[1] for line in script.read_text().splitlines() if line.startswith(". ")]
    assert sourced and all(os.path.isfile(p) for p in sourced), sourced  # checked above, not skipped


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize("name", sorted(n for n in JOBS if "gb200" in n))  # a profile's own paths, not a tmp dir
def test_a_rendered_script_reads_as_shell(name):
    """At most 160 lines, none of its program over 300 characters (the VL SFT's had 307 and 720)."""
    recipe, cluster, overrides, opts = JOBS[name]
    text = backends.render(_job(recipe, cluster, *overrides, **opts)).text
    lines = text.splitlines()
    assert len(lines) <= 160, len(lines)
    longest = max((line for line in lines if not line.startswith("#")), key=len)
    assert len(longest) <= 300, longest


@pytest.mark.usefixtures("home")
def test_a_profiles_lustre_layout_reaches_the_checkpoint_directory(home, tmp_path):
    """[slurm] checkpoint_stripe: the batch script runs `lfs setstripe` with the profile's options on the
    checkpoint directory before the first save; without lfs (this machine: no Lustre), or when it
    refuses, the job goes on and says so. `lfs` here is a stand-in that records its arguments and
    exits as told (Lustre's own cannot run on this machine). A wrong value is one line, exit 2."""
    from conftest import run_cli, write

    write(home / "clusters" / "striped.toml", 'extends = "gb200-8"\n[slurm]\ncheckpoint_stripe = "-c -1 -S 16M"\n')
    art = backends.render(_job("smoke", "striped"))
    text = art.text
    inputs = text[text.index("\n", text.index("# the batch logic")) + 1 : text.index("\nstop_file=")]
    assert "stripe=(-c -1 -S 16M)" in inputs
    (library,) = (body for rel, body in art.files.items() if rel.endswith(".job.sh"))
    ckpt, bin_dir = tmp_path / "ckpt", tmp_path / "bin"
    write(bin_dir / "lfs", '#!/bin/sh\necho "$@" >> "$(dirname "$0")/calls"\nexit "${LFS_RC:-0}"\n')
    (bin_dir / "lfs").chmod(0o755)

    def stripe(path: str, rc: int = 0) -> str:
        script = "\n".join([inputs, library, f"stripe_dir={ckpt}", "stripe_checkpoints"])
        env = {"PATH": path, "LFS_RC": str(rc)}
        return subprocess.run(["/bin/bash", "-c", script], capture_output=True, text=True, env=env, check=True).stderr

    said = stripe(f"{bin_dir}:/usr/bin:/bin")
    assert (bin_dir / "calls").read_text() == f"setstripe -c -1 -S 16M {ckpt}\n" and ckpt.is_dir()
    assert f"bridge-launch: checkpoints in {ckpt} are striped: lfs setstripe -c -1 -S 16M" in said
    said = stripe(f"{bin_dir}:/usr/bin:/bin", rc=22)
    assert f"bridge-launch: lfs setstripe -c -1 -S 16M {ckpt} failed: checkpoints keep the directory's layout" in said
    said = stripe("/usr/bin:/bin")
    assert f"bridge-launch: no lfs on the batch host: {ckpt} keeps its layout (checkpoint_stripe -c -1 -S 16M)" in said
    assert "stripe=" not in backends.render(_job("smoke", "gb200-8")).text  # no layout unless the profile says
    write(home / "clusters" / "striped.toml", 'extends = "gb200-8"\n[slurm]\ncheckpoint_stripe = "-c 4 /lustre/x"\n')
    r = run_cli("submit", "smoke", "-c", "striped", "--dry-run")
    assert r.code == 2 and r.err.count("\n") == 1 and "[slurm] checkpoint_stripe is `lfs setstripe`'s options" in r.err
