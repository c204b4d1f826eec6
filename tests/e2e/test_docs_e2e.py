"""The docs' commands, run as a reader runs them: each tutorial's `$ bridge-launch` lines in order in
one directory (its bash blocks that write files too), the GB200 submits as dry runs, each shown output
line found in what the command printed; and the README's quickstart on the `local` cluster, RUN being
the run its submit started. What needs a real GB200 cluster (a run's status, its logs, a real submit
over SSH, `--bridge-src` at a checkout of the pin, `image import`) is left out, and said below."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import CLI, FAST, REPO, run_cli

pytestmark = pytest.mark.slow

TUTORIALS = sorted((REPO / "docs" / "tutorials").glob("*.md"))

# What a step of a tutorial asks the reader to do by hand before its commands, by page and section.
BY_HAND = {
    ("own-cluster.md", "## 5."): lambda home: _edit(
        home / ".config" / "bridge-launch" / "clusters" / "mysite.toml", 'partition = "gb200"', 'partiton = "gb200"'
    ),
}


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new))


def _steps(page: Path):
    """(section, kind, text, shown output) in page order: kind "bash" (a bash block) or "cli" (a `$ `
    command of a console block, continuation lines joined, with the output lines shown under it)."""
    section, block, kind = "", None, None
    for line in page.read_text().splitlines():
        if line.startswith("## "):
            section = line
        if line.startswith("```"):
            if block is None:
                block, kind = [], line[3:].strip()
                continue
            if kind == "bash":
                yield section, "bash", "\n".join(block), []
            elif kind == "console":
                cmds: list = []
                for row in "\n".join(block).replace("\\\n", " ").splitlines():
                    if row.startswith("$ "):
                        cmds.append([row[2:], []])
                    elif cmds:
                        cmds[-1][1].append(row)
                for cmd, shown in cmds:
                    yield section, "cli", cmd, shown
            block = None
            continue
        if block is not None:
            block.append(line)


def _needs_the_cluster(cmd: str) -> str:
    """Why a tutorial command cannot run here ("" when it can)."""
    words = cmd.split()
    if not cmd.startswith("bridge-launch "):
        return "not bridge-launch"
    if "RUN" in words or words[1] in ("check", "compare", "status", "logs", "cancel", "resume"):
        return "a run on the GB200 cluster"
    if "--bridge-src" in words:
        return "a Megatron-Bridge checkout at the recipe's pin"
    if words[1] == "image":
        return "the cluster's image cache"
    return ""


def _same(text: str) -> str:
    """A line as compared: what varies from run to run (timings: decimals; rates: N samples/s) and runs of
    spaces do not count; every other number does."""
    text = re.sub(r"[\d,]+(?= samples/s)", "N", re.sub(r"\d[\d,]*\.\d+", "N", text))
    return re.sub(r"\s+", " ", text).strip()


@pytest.mark.parametrize("page", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_each_tutorial_runs_as_written(page, tmp_path):
    pytest.importorskip("megatron.energon")
    home = tmp_path / "home"
    work = tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "XDG_CONFIG_HOME"}
    env.update(HOME=str(home), BRIDGE_LAUNCH_HOME=str(tmp_path / "state"), PATH=f"{Path(CLI[0]).parent}:{env['PATH']}")
    ran, left = 0, []
    done = set()
    for section, kind, text, shown in _steps(page):
        for (name, heading), step in BY_HAND.items():
            if page.name == name and section.startswith(heading) and (name, heading) not in done:
                step(home)
                done.add((name, heading))
        if kind == "bash":
            if "ssh " in text or "git " in text or "uvx " in text:
                left.append(text.splitlines()[0])
                continue
            proc = subprocess.run(["bash", "-euc", text], cwd=work, env=env, capture_output=True, text=True)
            assert proc.returncode == 0, proc.stderr
            continue
        why = _needs_the_cluster(text)
        if text.startswith("bridge-launch submit") and why in ("", "a run on the GB200 cluster"):
            if "--dry-run" not in text:
                text += " --dry-run"  # a GB200 submit, as its dry run
            why = ""
        if why:
            left.append(f"{text}  ({why})")
            continue
        proc = subprocess.run([*CLI, *text.split()[1:]], cwd=work, env=env, capture_output=True, text=True, timeout=600)
        printed = proc.stdout + proc.stderr
        fails = bool(shown) and shown[0].startswith("bridge-launch: error:")
        assert (proc.returncode != 0) == fails, f"{page.name}: {text}\n{printed[-3000:]}"
        if fails:
            assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        have = {_same(line) for line in printed.splitlines()}
        for line in shown:
            if line.strip() and "..." not in line:
                assert _same(line) in have, f"{page.name}: {text}\nshown but not printed: {line}\n{printed[-3000:]}"
        ran += 1
    assert ran >= 3, (page.name, ran)
    print(f"{page.name}: {ran} commands ran; left for the cluster: {left}")


def _quickstart() -> list[str]:
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Quickstart on this machine", 1)[1].split("\n\n")[2]  # heading, sentence, block
    return [re.sub(r"\s+#.*$", "", line).strip() for line in block.splitlines()]


def test_the_readmes_quickstart_on_the_local_cluster(tmp_path):
    """The quickstart's commands in order, RUN the run its submit started: submit, both statuses, the
    followed logs (Ctrl-C stops the following, not the run), cancel, and resume from the checkpoint."""
    pytest.importorskip("torch")
    lines = _quickstart()
    assert [line.split()[1] for line in lines] == ["submit", "status", "status", "logs", "cancel", "resume"], lines
    env = {"BRIDGE_LAUNCH_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    slow = [*FAST, "train.train_iters=40", "smoke.step_sleep=0.3", "checkpoint.save_interval=5"]
    sub = run_cli(*lines[0].split()[1:], *slow, "-o", "json", env=env)
    assert sub.code == 0, sub.err
    run = sub.json()["run_id"]

    def as_written(line: str):
        return run_cli(*line.replace("RUN", run).split()[1:], env=env)

    listed = as_written(lines[1])
    assert listed.code == 0 and run in listed.out, listed.err
    deadline = time.time() + 300
    while "successfully saved checkpoint" not in run_cli("logs", run, env=env).out:  # one save to resume from
        assert time.time() < deadline, run_cli("logs", run, env=env).out[-2000:]
        time.sleep(1)
    shown = as_written(lines[2])
    assert shown.code == 0 and run in shown.out and "RUNNING" in shown.out, shown.out + shown.err
    follow = subprocess.Popen(
        [*CLI, *lines[3].replace("RUN", run).split()[1:]],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(3)
    follow.send_signal(signal.SIGINT)
    out, _ = follow.communicate(timeout=30)
    assert "iteration" in out
    state = json.loads(run_cli("status", run, "-o", "json", env=env).out)[0]["state"]
    assert state == "RUNNING", state  # following stopped, the run did not
    assert as_written(lines[4]).code == 0
    resumed = run_cli(*lines[5].replace("RUN", run).split()[1:], "-o", "json", env=env)
    assert resumed.code == 0, resumed.err
    again = resumed.json()["run_id"]
    deadline = time.time() + 300
    while (st := json.loads(run_cli("status", again, "-o", "json", env=env).out)[0])["state"] not in (
        "COMPLETED",
        "FAILED",
        "CANCELLED",
    ):
        assert time.time() < deadline, st
        time.sleep(2)
    assert st["state"] == "COMPLETED", st
    log = run_cli("logs", again, env=env).out
    first = min(int(m) for m in re.findall(r"iteration\s+(\d+)/", log))
    assert first > 1, log[-2000:]  # resumed from the cancelled run's checkpoint, not from the start
