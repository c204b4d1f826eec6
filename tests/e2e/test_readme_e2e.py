from __future__ import annotations

import os
import re
import shlex
import subprocess

import pytest

from conftest import REPO, run_cli

pytest.importorskip("PIL")


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


@pytest.mark.slow
def test_readme_prepare_example_works_as_written(tmp_path):
    pytest.importorskip("megatron.energon")
    readme = (REPO / "docs" / "how-to" / "data.md").read_text()  # the data how-to's example, as written
    sample = re.search(r"\n    bridge-launch (data sample-source .*?)\s+#", readme).group(1)
    block = re.search(r"\n    (bridge-launch data prepare .*?)\n    bridge-launch data inspect", readme, re.S).group(1)
    words = shlex.split(block.replace("\\\n", " "))[1:]
    assert not any(w.startswith("[") for w in words), block  # nothing left for the reader to choose
    src = tmp_path / "src"
    env = {"BRIDGE_LAUNCH_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    r = run_cli(*[str(src) if w == "SRC" else w for w in shlex.split(sample)], env=env, timeout=120)
    assert r.code == 0 and (src / "clevr_2" / "clevr_2.jsonl").is_file(), r.err
    for out in ("out", "again"):
        args = [{"SRC": str(src), "OUT": str(tmp_path / out)}.get(w, w) for w in words]
        r = run_cli(*args, env=env, timeout=600)
        assert r.code == 0, r.err
        assert re.search(r"writing [\d.]+ s at [\d,]+ samples/s", r.out), r.out
    assert "Source integrity: verified" in r.out  # the second run checked against the first run's pins


# The tutorials' submits run in their page's order, after the steps they need (a profile the page writes
# first): tests/e2e/test_docs_e2e.py.
DOCS = [REPO / "README.md", *sorted(p for p in (REPO / "docs").rglob("*.md") if p.parent.name != "tutorials")]


def _readme_submits() -> list[str]:
    """Each `bridge-launch submit` example of the README and the docs site (an indented block's line or
    a console block's `$ ` line), continuation lines joined, comments cut."""
    text = "\n".join(p.read_text() for p in DOCS).replace("\\\n", " ")
    return [
        re.sub(r"\s+#.*$", "", m.group(1)).strip()
        for m in re.finditer(r"^(?:    |\$ )(bridge-launch submit .*)$", text, re.M)
        # the synopsis; --bridge-src wants the reader's checkout carrying the function (test_codepack.py)
        if "RECIPE" not in m.group(1) and "--bridge-src" not in m.group(1)
    ]


# The one thing a reader must supply: where their own files are (written '...' or ~/src in the README)
_PLACEHOLDERS = {
    "dataset.path=...": "dataset.path=/lustre/fsw/clevr2",
    "checkpoint.pretrained_checkpoint=...": "checkpoint.pretrained_checkpoint=/lustre/fsw/ckpt/q",
}


@pytest.mark.parametrize("example", _readme_submits())
def test_every_readme_submit_example_resolves_on_the_profile_it_names(example, tmp_path):
    words = shlex.split(re.sub(r"\[[^\]]*\]", "", example))[2:]  # optional flags, [--max-segments N]
    words = [_PLACEHOLDERS.get(w, w) for w in words if w not in ("...", "--follow")]
    if "--dry-run" not in words:
        words.append("--dry-run")
    env = {"BRIDGE_LAUNCH_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    r = run_cli("submit", *words, env=env, timeout=120)
    assert r.code == 0, f"{example}\n{r.err}"
