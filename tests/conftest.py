import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "golden"
WORKLOADS = REPO / "src" / "bridge_launch" / "workloads"
BRIDGE_SCRIPTS = REPO / "scripts" / "bridge"  # the real Megatron-Bridge's drivers (realbridge.py)
sys.path.insert(0, str(BRIDGE_SCRIPTS))
CLI = [sys.executable, "-m", "bridge_launch.cli.app"]


# the smoke workload's bus-bandwidth check cut to one size and one iteration
FAST = ["smoke.busbw_sizes=[1024]", "smoke.busbw_iters=1"]


def local_slurm(*args, check=True):
    """scripts/local-slurm, the two-node Slurm cluster on this machine (root)."""
    return subprocess.run(
        [str(REPO / "scripts" / "local-slurm"), *args], capture_output=True, text=True, check=check, timeout=600
    )


# The local Slurm cluster is one shared thing: tests that use it run one after another, in one lane
# (a test may drain a node, stop slurmctld or slurmdbd, or set a node DOWN, which would fail a
# neighbour's job). Everything else runs beside them in the other lanes (scripts/test runs pytest
# with xdist's loadgroup, where a test's group keeps it on one worker in collection order).
SLURM_LANE = "slurm"


def _in_slurm_lane(item) -> bool:
    return bool(item.get_closest_marker("slurm")) or "cluster" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(config, items):
    """Tests marked `slurm`, and tests that ask for the `cluster` fixture, share the Slurm lane. Under
    xdist the lane goes first (it is the longest), then the other slow tests, then the fast ones, so
    the last work handed out is the shortest; a plain run keeps the collection order."""
    for item in items:
        if _in_slurm_lane(item):
            item.add_marker(pytest.mark.xdist_group(SLURM_LANE))
            item.user_properties.append(("lane", SLURM_LANE))  # for scripts/test-times, in .test-times.xml
    if hasattr(config, "workerinput"):  # an xdist worker: every worker sorts alike, as xdist requires
        items.sort(key=lambda item: 0 if _in_slurm_lane(item) else 1 if item.get_closest_marker("slow") else 2)


@pytest.fixture(scope="module")
def cluster():
    """The local Slurm cluster, started (or found running) once per module: its SLURM_CONF."""
    local_slurm("start")
    return re.search(r"SLURM_CONF=(\S+)", local_slurm("env").stdout).group(1).strip("'\"")


def _clear_caches():
    from bridge_launch.spec import clusters, recipes

    clusters.catalog.cache_clear()
    recipes.catalog.cache_clear()
    recipes.overlay_catalog.cache_clear()


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An isolated state dir and config dir for one test; returns the config dir."""
    state = tmp_path / "state"
    config = tmp_path / "config"
    (config / "bridge-launch" / "clusters").mkdir(parents=True)
    (config / "bridge-launch" / "recipes" / "overlays").mkdir(parents=True)
    monkeypatch.setenv("BRIDGE_LAUNCH_HOME", str(state))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    _clear_caches()
    yield config / "bridge-launch"
    _clear_caches()


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


class Result:
    def __init__(self, proc):
        self.code = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def json(self):
        return json.loads(self.out)


def run_cli(*args, env=None, timeout=120, stdin=None) -> Result:
    """The CLI as a user runs it: a fresh process, its own stdout/stderr and exit code."""
    full = dict(os.environ)
    full.update(env or {})
    proc = subprocess.run(
        [*CLI, *map(str, args)], capture_output=True, text=True, env=full, timeout=timeout, input=stdin, cwd=REPO
    )
    return Result(proc)


def on_a_terminal(args, answer: str, env=None):
    """The CLI with a terminal on stdin (a confirmation is asked only there): (exit code, stdout, stderr)."""
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*CLI, *map(str, args)],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        text=True,
        env={**os.environ, **(env or {})},
    )
    os.close(slave)
    os.write(master, answer.encode())
    out, err = proc.communicate(timeout=60)
    os.close(master)
    return proc.returncode, out, err


@pytest.fixture
def cli(home):  # noqa: ARG001 - requesting home gives each CLI run its own state dir
    return run_cli


def files_holding(value: str, roots, since: float, skip=()) -> list[str]:
    """Every regular file under `roots` created or changed since `since` (ctime) that holds `value`'s
    bytes: a byte scan for secrets. Symbolic links are not followed; `skip` names files to pass over
    (the secret's own source)."""
    import stat as _stat

    needle, hits, skip = value.encode(), set(), {str(p) for p in skip}
    for root in roots:
        for dirpath, _, files in os.walk(root):
            for name in files:
                path = os.path.join(dirpath, name)
                try:
                    st = os.lstat(path)
                    if path in skip or not _stat.S_ISREG(st.st_mode) or max(st.st_ctime, st.st_mtime) < since:
                        continue
                    with open(path, "rb") as fh:
                        if needle in fh.read():
                            hits.add(path)
                except OSError:
                    continue
    return sorted(hits)


@pytest.fixture
def src(tmp_path):
    """A small synthetic Nemotron-Image-Training-v3 source tree."""
    from bridge_launch.data import synthetic

    return synthetic.make_source(tmp_path / "src", n=24, seed=1, noisy_every=5)


@pytest.fixture(scope="module")
def energon_dataset(tmp_path_factory):
    from bridge_launch.data import prepare, synthetic

    root = tmp_path_factory.mktemp("ds")
    src = synthetic.make_source(root / "src", n=8, seed=1)
    prepare.prepare(
        "nemotron-image-v3",
        src,
        root / "out",
        subsets=["clevr_2"],
        skip_integrity=True,
        validation_fraction=0.25,
        max_samples_per_tar=5,
        num_workers=1,
    )
    return root / "out"


@pytest.fixture
def preflight_mod():
    sys.path.insert(0, str(WORKLOADS))
    try:
        import fabric_checks

        yield fabric_checks
    finally:
        sys.path.remove(str(WORKLOADS))
