"""The task clock: how `balanced_apply` and the pipeline's handlers time their calls.

One clock for both, so their task seconds compare: monotonic time less the time the calling
thread waited for a CPU (`own_clock`), which on an oversubscribed machine shows a task's own work
rather than its neighbours'.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

_SCHEDSTAT = "/proc/thread-self/schedstat"
_schedstat = threading.local()  # per thread: its open schedstat file and the last value read


def queued_seconds() -> float:
    """Seconds this thread has been runnable but waiting for a CPU (Linux's schedstat); 0.0 elsewhere.

    The file stays open per thread (and process: a forked worker opens its own) and is re-read in
    place, a tenth of the cost of opening it per call. A read that fails gives the last value read,
    never 0.0 after a good one: a clock that lost a thread's whole queued time would jump.
    """
    state = _schedstat.__dict__
    try:
        handle = state.get("handle")
        if handle is None or state.get("opened") != (os.getpid(), _SCHEDSTAT):
            if handle is not None:
                handle.close()
            handle = open(_SCHEDSTAT, "rb", buffering=0)
            state["handle"], state["opened"] = handle, (os.getpid(), _SCHEDSTAT)
        value = int(os.pread(handle.fileno(), 256, 0).split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return float(state.get("last", 0.0))
    state["last"] = value
    return value


def own_clock() -> float:
    """Monotonic seconds less the time spent waiting for a CPU: how long work would take on a core
    of its own. On a shared or oversubscribed executor, wall time also measures the neighbours'
    load, which changes between runs; a plan weighted by it would chase that noise. Monotonic, so
    a step of the system clock cannot shorten or stretch a call."""
    return time.monotonic() - queued_seconds()


class TaskClock:
    """When this task's Python side began (`own_clock`): set when the grouped-map function is unpickled.

    Spark sends a task's function before its rows, so the time from here to the first call is the
    task's shuffle read and sort, which no call is charged with.
    """

    def __init__(self) -> None:
        self.started = own_clock()
        self._begun: set[int] = set()

    def __reduce__(self) -> tuple[Callable[[], TaskClock], tuple[()]]:
        return TaskClock, ()

    def begin(self, task: int, call_start: float) -> float | None:
        """The task's start if this call (starting at `call_start`) is the task's first, else None:
        a task's time runs from its start (reading and sorting its rows), not from its first call."""
        if task in self._begun:
            return None
        self._begun.add(task)
        return min(call_start, self.started)
