"""Where drain tasks run: a thread per task (dedicated) or a named, ref-counted pool (shared).

A drain task is any object with `run() -> float | None` (run until idle; return the seconds to sleep,
or None once it has stopped) and a `finished` Event. The scheduler never runs one task on two
threads at once, so a task's own counters have a single writer.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from typing import Protocol

from rebalancer.queue.policies import ThreadPolicy

log = logging.getLogger(__name__)


class DrainTask(Protocol):
    finished: threading.Event

    def run(self) -> float | None: ...


class DedicatedScheduler:
    """One thread per task; a task sleeps on its own Event so that `wake()` cuts the sleep short."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._threads: dict[int, threading.Thread] = {}
        self._wakeups: dict[int, threading.Event] = {}
        self._ids = itertools.count()

    def start(self, task: DrainTask) -> None:
        wakeup = threading.Event()
        thread = threading.Thread(
            target=self._loop, args=(task, wakeup), name=f"BatchQueue-{self._name}-{next(self._ids)}", daemon=True
        )
        self._threads[id(task)] = thread
        self._wakeups[id(task)] = wakeup
        thread.start()

    @staticmethod
    def _loop(task: DrainTask, wakeup: threading.Event) -> None:
        try:
            while True:
                delay = task.run()
                if delay is None:
                    return
                if wakeup.wait(delay):
                    wakeup.clear()
        except BaseException:
            log.exception("drain task crashed")
            raise
        finally:
            task.finished.set()

    def wake(self, task: DrainTask) -> None:
        wakeup = self._wakeups.get(id(task))
        if wakeup is not None:
            wakeup.set()

    def join(self, task: DrainTask, timeout: float | None = None) -> None:
        thread = self._threads.pop(id(task), None)
        self._wakeups.pop(id(task), None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def close(self) -> None:
        """Nothing to release: each thread ends with its task."""


class SharedScheduler:
    """A fixed pool of threads running many queues' drain tasks, each due at its own time."""

    def __init__(self, name: str, policy: ThreadPolicy) -> None:
        self.name = name
        self.policy = policy
        self.thread_count = policy.resolve()
        self._cond = threading.Condition()
        self._heap: list[list[object]] = []  # [due, seq, task, valid]
        self._entries: dict[int, list[object]] = {}
        self._seq = itertools.count()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._worker, name=f"BatchQueue-shared-{name}-{i}", daemon=True)
            for i in range(self.thread_count)
        ]
        for t in self._threads:
            t.start()

    def start(self, task: DrainTask) -> None:
        self._schedule(task, 0.0)

    def _schedule(self, task: DrainTask, delay: float) -> None:
        with self._cond:
            old = self._entries.get(id(task))
            if old is not None:
                old[3] = False
            entry: list[object] = [time.monotonic() + delay, next(self._seq), task, True]
            self._entries[id(task)] = entry
            heapq.heappush(self._heap, entry)
            self._cond.notify()

    def wake(self, task: DrainTask) -> None:
        with self._cond:
            entry = self._entries.get(id(task))
            if entry is None or not entry[3]:
                return  # running right now: it will look at its partitions again soon
        self._schedule(task, 0.0)

    def join(self, task: DrainTask, timeout: float | None = None) -> None:
        self.wake(task)
        task.finished.wait(timeout)

    def _worker(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    while self._heap and not self._heap[0][3]:
                        heapq.heappop(self._heap)
                    if self._heap:
                        wait = float(self._heap[0][0]) - time.monotonic()  # type: ignore[arg-type]
                        if wait <= 0:
                            entry = heapq.heappop(self._heap)
                            break
                    else:
                        wait = None
                    self._cond.wait(wait)
                task: DrainTask = entry[2]  # type: ignore[assignment]
                del self._entries[id(task)]
            try:
                delay = task.run()
            except BaseException:
                log.exception("drain task crashed on shared scheduler %s", self.name)
                delay = None
            if delay is None:
                task.finished.set()
            else:
                self._schedule(task, delay)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join()


class SharedSchedulerRegistry:
    """Named pools, created on first use and shut down when the last queue using one leaves."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pools: dict[str, tuple[SharedScheduler, int]] = {}

    def acquire(self, name: str, policy: ThreadPolicy) -> SharedScheduler:
        with self._lock:
            found = self._pools.get(name)
            if found is None:
                pool = SharedScheduler(name, policy)
                self._pools[name] = (pool, 1)
                return pool
            pool, refs = found
            if pool.policy != policy:
                log.warning(
                    "shared scheduler %r exists with threads=%s; ignoring threads=%s (the first creator wins)",
                    name, pool.policy, policy,
                )
            self._pools[name] = (pool, refs + 1)
            return pool

    def release(self, name: str) -> None:
        with self._lock:
            pool, refs = self._pools[name]
            if refs > 1:
                self._pools[name] = (pool, refs - 1)
                return
            del self._pools[name]
        pool.close()

    def references(self, name: str) -> int:
        with self._lock:
            found = self._pools.get(name)
            return found[1] if found else 0

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._pools)


SHARED_SCHEDULERS = SharedSchedulerRegistry()
