"""A function's result computed in a forked child while this process goes on, so that two
CPU-bound reads of a long log (regex and substring passes over tens of MB, which hold the GIL)
run on two cores at once.

The result is the same either way; only the time differs. The function runs here instead, when
its result is asked for, where this process may use one CPU only (its affinity mask: taskset, a
cpuset cgroup, Slurm's CPU binding), where another thread runs (a fork copies its locks, not the
thread that holds them), where the platform has no fork, or where the child fails in any way (an
exception, a kill, a result that does not pickle). The child sends its pickled result through a
pipe and leaves with os._exit: no atexit handler, no buffered output of the parent and no open
connection (the run registry's SQLite) is touched twice. Leaving the `with` block without the
result (an exception, Ctrl-C) kills the child and reaps it."""

from __future__ import annotations

import os
import pickle
import signal
import sys
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


def cpus(cpu_max: str = "/sys/fs/cgroup/cpu.max") -> int:
    """The CPUs this process may run on: its affinity mask, and at most its cgroup's CPU quota
    (cgroup v2 cpu.max, "QUOTA PERIOD" or "max PERIOD": `docker run --cpus`, a systemd CPUQuota)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    try:
        with open(cpu_max) as fh:
            quota, period = fh.read().split()[:2]
        if quota != "max":
            n = min(n, max(1, int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    return n


def _threads() -> int:
    """This process's threads, where the threading module is loaded (else one)."""
    threading = sys.modules.get("threading")
    return threading.active_count() if threading else 1


class Child(Generic[T]):
    """`fn` started in a forked child (with fork=False, or where none can start: left to run
    here). Use it as a context manager and take `result()` inside the block."""

    def __init__(self, fn: Callable[[], T], *, fork: bool = True):
        self.fn = fn
        self.pid = 0
        self.pipe = -1
        if fork and hasattr(os, "fork") and cpus() > 1 and _threads() == 1:
            self._start()

    def _start(self) -> None:
        try:
            r, w = os.pipe()
        except OSError:
            return
        code = 1  # the child's exit code until it has sent its result
        try:
            pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            return
        if pid == 0:  # the child: never returns
            try:
                os.close(r)
                data = pickle.dumps(self.fn(), protocol=pickle.HIGHEST_PROTOCOL)
                with os.fdopen(w, "wb") as out:
                    out.write(data)
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        self.pid, self.pipe = pid, r

    def result(self) -> T:
        """The child's result (waiting for it), or fn() run here where there is none."""
        if not self.pid:
            return self.fn()
        fd, self.pipe = self.pipe, -1  # the file object owns it now, and closes it however it ends
        with os.fdopen(fd, "rb") as inp:
            data = inp.read()
        ok = self._reap() == 0 and data
        return pickle.loads(data) if ok else self.fn()  # what the same code pickled a moment ago

    def _reap(self) -> int:
        _, status = os.waitpid(self.pid, 0)
        self.pid = 0
        return os.waitstatus_to_exitcode(status)

    def __enter__(self) -> Child[T]:
        return self

    def __exit__(self, *exc) -> None:
        """A child whose result was not taken is killed and reaped."""
        if self.pipe >= 0:
            os.close(self.pipe)
            self.pipe = -1
        if self.pid:
            os.kill(self.pid, signal.SIGKILL)
            self._reap()
