"""A function's result computed in a forked child while this process goes on, so that two
CPU-bound reads of a long log (regex and substring passes over tens of MB, which hold the GIL)
run on two cores at once.

The result is the same either way; only the time differs. The function runs here instead, when
its result is asked for, where this process may use one CPU only (its affinity mask: taskset, a
cpuset cgroup, Slurm's CPU binding), where another thread runs (a fork copies its locks, not the
thread that holds them), where the platform has no fork, or where the child fails in
any way (an exception, a kill, a result that does not pickle). The child sends its pickled result
through a pipe and leaves with os._exit: no atexit handler, no buffered output of the parent and
no open connection (the run registry's SQLite) is touched twice."""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _threads() -> int:
    """This process's threads, where the threading module is loaded (else one)."""
    threading = sys.modules.get("threading")
    return threading.active_count() if threading else 1


def start(fn: Callable[[], T]) -> Callable[[], T]:
    """Start `fn` in a forked child; return the function that waits for its result. Call the
    returned function once."""
    if not hasattr(os, "fork") or cpus() < 2 or _threads() > 1:
        return fn
    try:
        r, w = os.pipe()
    except OSError:
        return fn
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        return fn
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.close(r)
            data = pickle.dumps(fn(), protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(w, "wb") as out:
                out.write(data)
            code = 0
        finally:
            os._exit(code)
    os.close(w)

    def wait() -> T:
        with os.fdopen(r, "rb") as inp:
            data = inp.read()
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) == 0 and data:
            return pickle.loads(data)  # what the same code pickled a moment ago
        return fn()

    return wait
