"""core/forked.py: a result computed in a forked child, or here where the child cannot give it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from bridge_launch.core import forked
from conftest import REPO


@pytest.fixture
def two_cpus(monkeypatch):
    """Two CPUs and no other thread (a thread another test may leave running in this process must not
    decide whether these fork)."""
    monkeypatch.setattr(forked, "cpus", lambda: 2)
    monkeypatch.setattr(forked, "_threads", lambda: 1)


def no_children_left() -> bool:
    """No child of this process, running or a zombie (one left would be reaped here)."""
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


@pytest.mark.usefixtures("two_cpus")
def test_the_result_comes_from_a_child_and_the_child_is_reaped():
    here = os.getpid()
    with forked.Child(lambda: (os.getpid(), os.getppid(), list(range(100_000)))) as child:
        pid, parent, big = child.result()  # a result larger than a pipe's buffer
    assert pid != here and parent == here and big == list(range(100_000))
    assert no_children_left()


@pytest.mark.usefixtures("two_cpus")
@pytest.mark.parametrize("how", ["raises", "killed", "exits", "unpicklable"])
def test_a_child_that_fails_leaves_the_work_to_this_process(how):
    here = os.getpid()

    def work():
        if os.getpid() != here:  # in the child only
            if how == "raises":
                raise RuntimeError("boom")
            if how == "killed":
                os.kill(os.getpid(), signal.SIGKILL)
            if how == "exits":
                sys.exit(3)
            return lambda: None  # a result that does not pickle
        return os.getpid()

    with forked.Child(work) as child:
        assert child.result() == here
    assert no_children_left()


def test_one_cpu_runs_it_here_when_asked(monkeypatch):
    monkeypatch.setattr(forked, "cpus", lambda: 1)
    calls = []
    with forked.Child(lambda: calls.append(os.getpid()) or len(calls)) as child:
        assert calls == []  # nothing ran yet: it runs when its result is asked for
        assert child.result() == 1 and calls == [os.getpid()]
    with forked.Child(os.getpid, fork=False) as child:
        assert child.result() == os.getpid()


def test_a_process_with_another_thread_does_not_fork(monkeypatch):
    monkeypatch.setattr(forked, "cpus", lambda: 2)
    before = forked._threads()
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert forked._threads() == before + 1 > 1
        with forked.Child(os.getpid) as child:
            assert child.result() == os.getpid()
    finally:
        stop.set()
        other.join()


def test_cpus_is_the_affinity_mask_within_the_cgroup_quota(tmp_path):
    want = len(os.sched_getaffinity(0))
    assert forked.cpus(str(tmp_path / "none")) == want
    quota = tmp_path / "cpu.max"
    for text, cpus in (("max 100000\n", want), ("150000 100000\n", 1), ("50000 100000\n", 1), ("junk", want)):
        quota.write_text(text)
        assert forked.cpus(str(quota)) == min(want, cpus), text
    quota.write_text(f"{100000 * (want + 4)} 100000\n")
    assert forked.cpus(str(quota)) == want
    if not shutil.which("taskset"):
        pytest.skip("no taskset here")
    out = subprocess.run(
        ["taskset", "-c", "0", sys.executable, "-c", "from bridge_launch.core import forked; print(forked.cpus())"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    assert out.stdout.strip() == "1"


def test_the_child_writes_none_of_this_processs_buffered_output():
    """os._exit in the child: what this process printed but had not flushed is printed once."""
    code = (
        "import sys; from bridge_launch.core import forked\n"
        "forked.cpus = lambda: 2\n"
        "sys.stdout.write('before\\n')\n"  # a pipe: block-buffered, not flushed before the fork
        "with forked.Child(lambda: 41 + 1) as child:\n"
        "    print(child.result())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout == "before\n42\n" and out.stderr == ""


@pytest.mark.usefixtures("two_cpus")
def test_leaving_without_the_result_kills_and_reaps_the_child(tmp_path):
    """An exception (or Ctrl-C) in this process while the child works: the child is killed, not
    waited for, and nothing of it is left."""
    mark = tmp_path / "finished"
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt), forked.Child(lambda: time.sleep(30) or mark.write_text("x")):
        raise KeyboardInterrupt
    assert time.monotonic() - t0 < 10 and not mark.exists()
    assert no_children_left()


@pytest.mark.usefixtures("two_cpus")
def test_ctrl_c_while_waiting_for_the_result_kills_and_reaps_the_child(tmp_path):
    """The wait for the result is where Ctrl-C lands most often: it propagates as itself, and the
    child is killed and reaped, not left to finish."""
    mark = tmp_path / "finished"

    def interrupt(*_):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt), forked.Child(lambda: time.sleep(30) or mark.write_text("x")) as child:
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            child.result()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert time.monotonic() - t0 < 10 and not mark.exists()
    assert no_children_left()
