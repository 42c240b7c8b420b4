"""The one owner array and its handoff: revoke, fence on the old owners' passes, assign.

A drain worker checks `owner[p]` for each partition of every pass, and signals the end of each pass
here. A partition taken from a worker becomes UNOWNED first; it goes to its new owner only after the
old owner has finished the pass it was in, so the new owner can never call a handler that the old
one may still be inside. A fence that does not end in time gives the partition back to its old owner,
so nothing is ever left unowned.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

UNOWNED = -1

# The drain worker running on this thread, if any: lets the queue spot calls from inside a handler.
DRAIN_CONTEXT = threading.local()


@dataclass(frozen=True)
class HandoffResult:
    """What `OwnershipTable.apply` did: moves applied, moves given back, and why."""

    applied: tuple[tuple[int, int, int], ...]
    reverted: tuple[tuple[int, int, int], ...]
    wait_ms: float
    failed: str | None = None


class OwnershipTable:
    """Owners per partition and completed passes per worker, under one condition."""

    def __init__(self) -> None:
        self.owner: list[int] = []  # read lock-free by drain workers; written under the condition
        self._cond = threading.Condition()
        self._passes: dict[int, int] = {}
        self._running: set[int] = set()  # workers whose drain loop can still end a pass
        self._scans: dict[int, tuple[int, ...]] = {}
        self._closed = False

    # ---------------------------------------------------------------- workers

    def add_worker(self, worker: int) -> None:
        with self._cond:
            self._passes[worker] = 0
            self._running.add(worker)
            self._scans[worker] = ()

    def worker_exited(self, worker: int) -> None:
        """A drain loop has ended: nobody waits on its passes any more."""
        with self._cond:
            self._running.discard(worker)
            self._cond.notify_all()

    def pass_done(self, worker: int) -> None:
        with self._cond:
            self._passes[worker] += 1
            self._cond.notify_all()

    def scan(self, worker: int) -> tuple[int, ...]:
        """The partitions `worker` owns, as published at the last change (a worker still checks
        `owner[p]` per partition: this list may be one change behind)."""
        return self._scans[worker]

    def counts(self) -> dict[int, int]:
        with self._cond:
            out: dict[int, int] = {}
            for o in self.owner:
                out[o] = out.get(o, 0) + 1
            return out

    # ---------------------------------------------------------------- partitions

    def add_partition(self, owner: int) -> None:
        with self._cond:
            self.owner.append(owner)
            self._publish()

    def snapshot(self) -> tuple[int, ...]:
        with self._cond:
            return tuple(self.owner)

    def close(self) -> None:
        """Shutdown: fences in progress end at once and give their partitions back."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _publish(self) -> None:
        scans: dict[int, list[int]] = {w: [] for w in self._scans}
        for p, o in enumerate(self.owner):
            if o in scans:
                scans[o].append(p)
        self._scans = {w: tuple(ps) for w, ps in scans.items()}

    # ---------------------------------------------------------------- the handoff

    def apply(self, moves: Sequence[tuple[int, int, int]], wake: Callable[[int], None], timeout: float,
              accept: Callable[[int], bool] = lambda w: True, all_or_nothing: bool = False) -> HandoffResult:
        """Move partitions `(p, old, new)`: revoke all, wait for each old owner's current pass to end
        (old owners are woken, so this is one pass, not a backoff sleep), then assign.

        A move whose `old` no longer owns `p` is stale and ignored. A move from an old owner whose pass
        did not end within `timeout`, or whose new owner `accept` refuses by then, is reverted; with
        `all_or_nothing` (a throughput plan, whose moves only help together) every move is."""
        started = time.perf_counter()
        with self._cond:
            live = [(p, old, new) for p, old, new in moves if self.owner[p] == old and old != new]
            fence: dict[int, int] = {}
            for p, old, _new in live:
                self.owner[p] = UNOWNED
                if old != UNOWNED and old in self._running:
                    fence.setdefault(old, self._passes[old])
            self._publish()
        for old in fence:
            wake(old)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                waiting = [o for o, seen in fence.items() if o in self._running and self._passes[o] <= seen]
                left = deadline - time.monotonic()
                if not waiting or self._closed or left <= 0:
                    break
                self._cond.wait(left)
            failed_owners = set(waiting)
            give_back = self._closed or (all_or_nothing and (bool(failed_owners)
                                                             or not all(accept(new) for _p, _o, new in live)))
            applied, reverted = [], []
            for p, old, new in live:
                if give_back or old in failed_owners or not accept(new):
                    self.owner[p] = old
                    reverted.append((p, old, new))
                else:
                    self.owner[p] = new
                    applied.append((p, old, new))
            self._publish()
        for new in {new for _p, _old, new in applied}:
            wake(new)
        failed = None
        if self._closed and reverted:
            failed = "the queue is shutting down"
        elif failed_owners:
            failed = (f"fence timed out after {timeout * 1000:.0f} ms: worker(s) "
                      f"{sorted(failed_owners)} did not finish a pass; their partitions stay with them")
        elif reverted:
            failed = "the new owner left before the handoff completed"
        return HandoffResult(tuple(applied), tuple(reverted), (time.perf_counter() - started) * 1000.0, failed)
