"""The README and the documentation site: the README a way in (short, the two commands first, every
link alive), the site built by mkdocs in strict mode (every page in the nav, every link and anchor
found), and the reference pages what scripts/docs-reference generates from the code now."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").rglob("*.md"))]
PKG = REPO / "src" / "bridge_launch"


def _commands_in(text: str) -> list[str]:
    """Each bridge-launch command of a page: a code block's line (indented, or fenced, `$ ` cut) and an
    inline code span, continuation lines joined."""
    text = text.replace("\\\n", " ")
    found, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        code = line[4:] if line.startswith("    ") else line if fenced else None
        if code is not None and code.strip().removeprefix("$ ").startswith("bridge-launch "):
            found.append(code.strip().removeprefix("$ "))
    return found + re.findall(r"`(bridge-launch [^`]+)`", text)


def _command_problems(root, line: str) -> list[str]:
    """What in `line` the app has not: a command (each of `a|b` alternatives) or an option of it. Output
    lines (`bridge-launch canary: ...`) and placeholders (`COMMAND`, `...`) are not commands."""
    words = re.sub(r"\s+#.*$", "", line).split()[1:]
    cmd, i = root, 0
    while hasattr(cmd, "commands") and i < len(words) and not words[i].startswith("-"):
        word = words[i]
        if word.endswith(":") or word.isupper() or word.startswith(("[", ".")):
            return []
        missing = [w for w in word.split("|") if w not in cmd.commands]
        if missing:
            return [f"no command {missing[0]!r}"]
        cmd, i = cmd.commands[word.split("|")[0]], i + 1
    if hasattr(cmd, "commands"):
        return []
    options = {o for p in cmd.params for o in [*p.opts, *p.secondary_opts]} | {"-h", "--help"}
    flags = (w.strip("[]").split("=")[0] for w in words[i:])
    return [f"{cmd.name}: no option {o}" for o in flags if re.fullmatch(r"--?[a-zA-Z][\w-]*", o) and o not in options]


def test_the_readme_is_a_way_in_with_the_two_commands_first():
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    blocks = re.findall(r"^    (\S.*)$", text, re.M)
    assert blocks[0].startswith("python3 -m venv .venv && .venv/bin/pip install") and "submit smoke" in blocks[0]
    assert blocks[1] == "./scripts/test"
    assert (REPO / ".ci" / "run").read_text().strip().endswith("./scripts/test")
    # no synopsis that reads as a shell pipe (`status | logs RUN -f` typed as is: "logs: command not found")
    assert not re.search(r"bridge-launch status \| logs", text)


def test_every_link_of_the_readme_names_a_file_of_the_repository():
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README.read_text())
    assert links
    missing = [link for link in links if not (REPO / link).exists()]
    assert not missing, missing


def test_the_reference_pages_are_what_the_code_generates():
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "docs-reference"), "--check"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


def test_the_reference_names_every_command_and_profile_key_with_what_it_does():
    from bridge_launch.spec import clusters

    commands = (REPO / "docs" / "reference" / "commands.md").read_text()
    for name in (
        "submit",
        "status",
        "logs",
        "cancel",
        "resume",
        "data prepare",
        "image import",
        "clusters forget-node",
    ):
        assert f"## bridge-launch {name}\n" in commands, name
    keys = (REPO / "docs" / "reference" / "profile-keys.md").read_text()
    rows = dict(re.findall(r"^\| `([\w.]+)` \|.*\| ([^|]*) \|$", keys, re.M))
    every = {*clusters._TOP, *(k for section in clusters._SECTIONS.values() for k in section)}
    assert every <= set(rows)
    assert not [k for k, what in rows.items() if not what.strip()], "a profile key without a description"


def test_every_command_in_the_docs_exists_with_its_options():
    import typer

    from bridge_launch.cli.app import app

    root = typer.main.get_command(app)
    bad = [
        f"{page.relative_to(REPO)}: {problem}: {line}"
        for page in PAGES
        for line in _commands_in(page.read_text())
        for problem in _command_problems(root, line)
    ]
    assert not bad, "\n".join(bad)
    # the checker finds what it should: a command and an option that do not exist
    assert _command_problems(root, "bridge-launch stats RUN") == ["no command 'stats'"]
    assert _command_problems(root, "bridge-launch logs RUN --folow") == ["logs: no option --folow"]


def _repo_paths(text: str):
    """Paths of this repository a page names in code spans: from a top-level folder (src/, scripts/,
    ...) or a package folder (backends/slurm/render.py). A path whose folder this repository does not
    have is upstream's (scripts/performance/..., cited at a pin) and not checked here."""
    folders = {d.name for d in PKG.iterdir() if d.is_dir()}
    for path in re.findall(r"`([\w./-]+/[\w-]+\.\w+)`", text):  # files: a name with an extension
        top = path.split("/")[0]
        if top in {"src", "scripts", "tests", "bench", "recipes", "clusters", "docs", ".ci"}:
            folder = (REPO / path).parent
            if all(part in ("src", "bridge_launch") for part in Path(path).parts[:-1]) or folder.is_dir():
                yield path, REPO / path
        elif top in folders and path.endswith((".py", ".sh", ".toml")):
            yield path, PKG / path


def test_every_path_the_docs_name_exists():
    bad = [
        f"{page.relative_to(REPO)}: {path}"
        for page in PAGES
        if "research" not in page.parts  # notes of what was found upstream, quoted as found
        for path, where in _repo_paths(page.read_text())
        if not where.exists()
    ]
    assert not bad, "\n".join(bad)
    assert [p for p, w in _repo_paths("`backends/torchrun_opts.py` `src/bridge_launch/models.toml`") if not w.exists()]


# Common tasks: the page that answers each, and the command it shows (issue 43's measure).
TASKS = [
    ("run the smoke job on this machine", "README.md", "bridge-launch submit smoke"),
    ("see every run, then one", "docs/how-to/runs.md", "bridge-launch status RUN"),
    ("follow a run's logs", "docs/how-to/runs.md", "bridge-launch logs RUN -f"),
    ("cancel, then resume a run", "docs/how-to/runs.md", "bridge-launch resume RUN"),
    ("print a GB200 job without submitting it", "README.md", "--dry-run"),
    ("make gb200-32 your own cluster", "docs/tutorials/own-cluster.md", "bridge-launch clusters show"),
    ("train across time limits", "docs/how-to/until-done.md", "--until-done"),
    ("check the cluster before the big job", "docs/how-to/canary.md", "--canary"),
    ("keep a bad node out", "docs/how-to/bad-nodes.md", "bridge-launch clusters forget-node"),
    ("give a job a token", "docs/how-to/secrets.md", "--secret"),
    ("prepare CLEVR2 as Energon shards", "docs/how-to/data.md", "bridge-launch data prepare"),
    ("get past a changed data source's pin", "docs/how-to/data.md", "--write-manifest"),
    ("size a job before submitting", "docs/how-to/plan.md", "bridge-launch plan"),
    ("judge a run against the gate", "docs/how-to/judging.md", "bridge-launch check RUN"),
    ("compare two runs' losses", "docs/how-to/judging.md", "bridge-launch compare"),
    ("sweep a value", "docs/how-to/experiments.md", "--sweep"),
    ("see where the GPU-hours went", "docs/how-to/gpu-hours.md", "bridge-launch report RUN"),
    ("run your own Megatron-Bridge checkout", "docs/how-to/bridge-src.md", "--bridge-src"),
    ("pull the image once", "docs/how-to/image-cache.md", "bridge-launch image import"),
    ("submit to Lepton or DGX Cloud", "docs/how-to/cloud.md", "-c lepton-gb200"),
    ("find why a run failed", "docs/how-to/failed-run.md", "bridge-launch logs RUN"),
    ("look up an option", "docs/reference/commands.md", "## bridge-launch submit"),
    ("look up a profile key", "docs/reference/profile-keys.md", "`partition`"),
    ("look up an exit code", "docs/reference/exit-codes.md", "| 2 |"),
]


@pytest.mark.parametrize(("task", "page", "shown"), TASKS, ids=[t[0] for t in TASKS])
def test_each_common_task_has_its_page_and_command(task, page, shown):
    text = (REPO / page).read_text()
    assert shown in text, f"{task}: {page} does not show {shown!r}"
    if page != "README.md":  # reachable: the page is in the site's navigation
        assert page.removeprefix("docs/") in (REPO / "mkdocs.yml").read_text(), page


@pytest.mark.slow
def test_the_site_builds_in_strict_mode(tmp_path):
    pytest.importorskip("mkdocs")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    built = tmp_path / "site"
    for page in ("reference/commands", "tutorials/own-cluster", "how-to/failed-run", "explanation/architecture"):
        assert (built / page / "index.html").is_file(), page
