import contextlib
import fcntl
import functools
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# A test run started in the background by a non-interactive shell (`nohup ./scripts/test &`) starts
# with SIGINT ignored, and every process it starts would inherit that: the CLI would never see the
# Ctrl-C the tests send (test_ctrl_c_*: the run went on, exit 0). A handler is reset at exec, so the
# processes the tests start get SIGINT as a terminal gives it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
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


# scripts/test runs pytest in TEST_WORKERS processes (xdist, --dist loadgroup: a test's xdist group
# keeps it on one worker, in collection order; 2 by default). The suite is CPU-bound on this project's
# 2-core machines, but its Slurm tests are not all: a job's trainers mostly sleep through their steps,
# and time limits wait for slurmctld's 30 s check. The Slurm tests run in two lanes that share the
# local cluster (its nodes have 2 CPUs and a job takes one on each, so two jobs run at once): the
# time-limit tests (SECOND_LANE, mostly waiting) in one, the rest in the other, each one test after
# another; xdist hands each lane to a worker first (the largest units), and the CPU-bound rest
# (Megatron-Bridge's config builds, the local jobs, the fast tests) fills both workers after their
# lane. With TEST_WORKERS=1 everything runs in one process. A test marked `slurm_alone` (it drains a
# node, sets one DOWN, stops slurmctld or slurmdbd, fills the queue) has the cluster to itself: it
# waits for the other lane's test to end, and the other lane waits for it (slurm_hold). In one
# process the holds cost nothing.
SLURM_LANES = ("slurm-1", "slurm-2")
# Modules of the second lane: the time-limit tests (docs/test-times.md).
SECOND_LANE = {"test_until_done_e2e"}
SLURM_HOLD = Path(os.environ.get("BRIDGE_LAUNCH_TEST_HOLD", "/tmp/bridge-launch-tests.slurm-hold"))


def _in_slurm_lane(item) -> bool:
    """Marked `slurm` or `slurm_alone`, or asking for this file's `cluster` fixture (not a parameter or
    a module's own fixture of that name: test_cloud.py's contract server, a recipe x cluster grid)."""
    if item.get_closest_marker("slurm") or item.get_closest_marker("slurm_alone"):
        return True
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.get("cluster") if info else None
    return bool(defs) and getattr(defs[-1].func, "__module__", "") == __name__


def _lane_of(item) -> str:
    two_lanes = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) >= 2
    second = two_lanes and item.module.__name__.rsplit(".", 1)[-1] in SECOND_LANE
    return SLURM_LANES[1] if second else SLURM_LANES[0]


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """Tests marked `slurm` or `slurm_alone`, and tests that ask for the `cluster` fixture, go to a
    Slurm lane. Under xdist the lanes go first (they are the longest), then the other slow tests,
    then the fast ones, so the last work handed out is the shortest; a plain run keeps its order."""
    for item in items:
        if _in_slurm_lane(item):
            lane = _lane_of(item)
            item.add_marker(pytest.mark.xdist_group(lane))
            item.user_properties.append(("lane", lane))  # for scripts/test-times, in .test-times.xml
    if hasattr(config, "workerinput"):  # an xdist worker: every worker sorts alike, as xdist requires
        items.sort(key=lambda item: 0 if _in_slurm_lane(item) else 1 if item.get_closest_marker("slow") else 2)


_CPU_AT_START = pytest.StashKey[float]()


def _busy_cpu_seconds() -> float:
    """The whole machine's busy CPU time so far (/proc/stat's first line less idle and iowait): a test's
    cost on a 2-core machine is its CPU time more than its wall time, the cluster's daemons and jobs
    included."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[_CPU_AT_START] = _busy_cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """The machine's CPU seconds from the test's setup to the end of its teardown, as the junit property
    cpu_s (scripts/test-times sums them per file; exact in one process, shared time under xdist)."""
    if call.when == "teardown" and _CPU_AT_START in item.stash:
        item.user_properties.append(("cpu_s", f"{_busy_cpu_seconds() - item.stash[_CPU_AT_START]:.1f}"))
    yield


@contextlib.contextmanager
def slurm_hold(alone: bool = False):
    """Hold the cluster for a test (or a fixture that runs jobs): shared with the other lane, or
    alone. A test waiting to be alone goes before the other lane's next test: it takes the turnstile
    first and keeps it, so no new shared holder passes (flock alone would let them overtake it)."""
    SLURM_HOLD.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{SLURM_HOLD}.turnstile", "a") as turnstile, open(SLURM_HOLD, "a") as hold:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if not alone:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        fcntl.flock(hold, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(hold, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(turnstile, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def _slurm_turn(request):
    """A Slurm lane's test holds the cluster while it runs (autouse: before the test's own fixtures,
    which may drain a node); every other test passes straight through."""
    if not _in_slurm_lane(request.node):
        yield
        return
    root = request.getfixturevalue("tmp_path")
    with slurm_hold(alone=bool(request.node.get_closest_marker("slurm_alone"))):
        try:
            yield
        finally:
            _cancel_leftovers(root)


@functools.cache
def _slurm_env() -> dict | None:
    """os.environ with the local cluster's SLURM_CONF, or None where it is not set up."""
    printed = local_slurm("env", check=False)
    found = re.search(r"SLURM_CONF=(\S+)", printed.stdout)
    return dict(os.environ, SLURM_CONF=found.group(1).strip("'\"")) if found else None


def _cancel_leftovers(root: Path, timeout: float = 120) -> None:
    """Cancel what a Slurm-lane test left queued or running (jobs whose output lies under its tmp_path:
    a failed test's chain) and wait until they left the queue. A leftover holds a CPU on each node, and
    the jobs of the lanes' next tests would wait behind it until their own deadlines (CI: a failed
    test's 5-minute chain kept the next test's five runs PENDING for 300 s)."""
    env = _slurm_env()
    if env is None:
        return

    def queued() -> list[str]:
        proc = subprocess.run(
            ["squeue", "-h", "-O", "JobID: ,StdOut:"], capture_output=True, text=True, env=env, check=False
        )
        rows = (line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
        return [jid for jid, out in rows if out.strip().startswith(f"{root}/")]

    left = queued()
    if left:
        subprocess.run(["scancel", *left], env=env, check=False, capture_output=True)
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        time.sleep(1)
        left = queued()


@pytest.fixture(scope="module")
def cluster():
    """The local Slurm cluster, started (or found running) once per module: its SLURM_CONF."""
    local_slurm("start")
    env = _slurm_env()
    assert env is not None, "scripts/local-slurm env printed no SLURM_CONF"
    return env["SLURM_CONF"]


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
