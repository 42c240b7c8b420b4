"""The task clock: how `balanced_apply` and the pipeline's handlers time their calls.

One clock for both, so their task seconds compare: monotonic time less the time the calling
thread waited for a CPU (`own_clock`), which on an oversubscribed machine shows a task's own work
rather than its neighbours'.

A measured time never fails a run. `own_clock` can step back: a thread preempted between its two
reads (monotonic time, then its queued time) reads low by its wait. So task functions read it
through a `SteadyClock`, whose readings never go back, and every duration is `elapsed(start, end)`,
never below 0.0 and always finite: the planners refuse a negative or non-finite load, and one
noisy reading must not cost a run its summary.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable

Clock = Callable[[], float]

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


READ_ATTEMPTS = 3  # pairs of queued-time reads `own_clock` tries to get equal


def own_clock() -> float:
    """Monotonic seconds less the time spent waiting for a CPU: how long work would take on a core
    of its own. On a shared or oversubscribed executor, wall time also measures the neighbours'
    load, which changes between runs; a plan weighted by it would chase that noise. Monotonic, so
    a step of the system clock cannot shorten or stretch a call.

    The queued time is read on both sides of the monotonic time: a thread made to wait between two
    reads counts that wait in one and not the other, and reads off by the wait (a short call's
    seconds came out negative under load). Equal reads saw no wait; after READ_ATTEMPTS unequal
    pairs the reading may be low, which `SteadyClock` and `elapsed` absorb."""
    queued = queued_seconds()
    for _ in range(READ_ATTEMPTS):
        now = time.monotonic()
        after = queued_seconds()
        if after == queued:
            break
        queued = after
    return now - queued


def elapsed(start: float, end: float) -> float:
    """Seconds from `start` to `end` as a load: 0.0 when the clock read `end` before `start`, and
    for a non-finite reading; never negative, never NaN or infinite."""
    seconds = end - start
    return seconds if seconds > 0.0 and math.isfinite(seconds) else 0.0


class SteadyClock:
    """`source`'s readings, never going back on a thread: a reading below the thread's last (or not
    finite) gives the last one again, so a call's seconds are 0.0 rather than negative.

    Built on the driver, with the function it times: pickled, it carries `source` to the worker and
    starts afresh there. `source` defaults to `own_clock` as this module names it when the clock is
    built, so setting `rebalancer.pipeline.clock.own_clock` on the driver (as a test does, with a
    clock that steps back) reaches the Spark workers too.
    """

    def __init__(self, source: Clock | None = None) -> None:
        self.source: Clock = source if source is not None else own_clock
        self._last = threading.local()  # per thread: `own_clock` readings of two threads do not compare

    def __reduce__(self) -> tuple[type[SteadyClock], tuple[Clock]]:
        return SteadyClock, (self.source,)

    def __call__(self) -> float:
        value = float(self.source())
        last: float | None = getattr(self._last, "value", None)
        if last is not None and not (math.isfinite(value) and value >= last):
            return last
        if math.isfinite(value):
            self._last.value = value
        return value  # a first reading that is not finite: `elapsed` makes its durations 0.0


class TaskClock:
    """When this task's Python side began: set when the grouped-map function is unpickled.

    Spark sends a task's function before its rows, so the time from here to the first call is the
    task's shuffle read and sort, which no call is charged with. `now` reads the task's calls on the
    same `SteadyClock`, so a call never starts before the task did.
    """

    def __init__(self, source: Clock | None = None) -> None:
        self.now = SteadyClock(source)
        self.started = self.now()
        self._begun: set[int] = set()

    def __reduce__(self) -> tuple[type[TaskClock], tuple[Clock]]:
        return TaskClock, (self.now.source,)

    def begin(self, task: int, call_start: float) -> float | None:
        """The task's start if this call (starting at `call_start`) is the task's first, else None:
        a task's time runs from its start (reading and sorting its rows), not from its first call."""
        if task in self._begun:
            return None
        self._begun.add(task)
        return min(call_start, self.started)
