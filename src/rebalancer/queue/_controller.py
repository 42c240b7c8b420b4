"""The control thread: throughput rebalancing and elastic drain workers, planned by `rebalancer.balance`.

Every ownership change is planned and applied under one plan lock, through `OwnershipTable.apply`,
so a plan never targets a worker that has retired meanwhile. Throughput moves come from
`plan_rebalance` over the last interval's produce() counts; membership moves come from
`plan_count_balance` (±1 partition per worker, fewest handoffs) once the holddown has passed. The
holddown ends at the first change plus `rebalance_delay_ms`, however many changes follow (Solace's
rule), so steady churn cannot postpone rebalancing forever.

A throughput plan reads the loads and the owners under the queue's admin lock, which partition
growth holds, so both describe the same partitions; the fence itself runs outside it. The lock order
of the queue's parts is in docs/queue.md ("Locks").
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from rebalancer.balance import imbalance, plan_rebalance
from rebalancer.balance.count import plan_count_balance
from rebalancer.queue._ownership import UNOWNED, OwnershipTable
from rebalancer.queue._partitions import Partitions
from rebalancer.queue._worker import DrainWorker
from rebalancer.queue.stats import RebalanceReport

log = logging.getLogger(__name__)

RETRY_S = 1.0  # a membership handoff whose fence failed is tried again after this long


@dataclass
class Membership:
    """The elastic workers' coordinator, as `BatchQueue.membership` shows it: `status` is
    "ready", "holddown" (waiting for the delay after a change) or "handoff" (partitions moving)."""

    table: OwnershipTable
    status: str = "ready"
    handoff_count: int = 0  # partitions moved between two workers by membership changes
    changed_at: float | None = None  # the first change since the last plan
    retry_at: float = math.inf

    @property
    def assignment(self) -> dict[int, list[int]]:
        """worker -> the partitions it owns now (a partition mid-handoff is in neither)."""
        out: dict[int, list[int]] = {}
        for p, o in enumerate(self.table.snapshot()):
            if o != UNOWNED:
                out.setdefault(o, []).append(p)
        return out

    @property
    def busy(self) -> bool:
        return self.status != "ready"


class Controller:
    """Owns the plan lock, the measurements between rebalances, and the control thread."""

    def __init__(self, name: str, table: OwnershipTable, parts: Partitions, workers: list[DrainWorker],
                 wake: Callable[[int], None], spawn: Callable[[], DrainWorker], admin: threading.RLock, *,
                 interval_s: float,
                 delay_s: float, skip_ratio: float, fence_timeout_s: float, dedicated: bool,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.table = table
        self.parts = parts
        self.workers = workers
        self.wake = wake
        self.spawn = spawn
        self.admin = admin  # the queue's: partitions grow under it
        self.interval_s = interval_s
        self.delay_s = delay_s
        self.skip_ratio = skip_ratio
        self.fence_timeout_s = fence_timeout_s
        self.dedicated = dedicated
        self.clock = clock
        self.plan_lock = threading.Lock()
        self.membership: Membership | None = None
        # where per-partition load comes from; tests inject loads here instead of relying on thread timing
        self.throughput_source: Callable[[], list[int]] = self.take_throughput
        self.last_rebalance: RebalanceReport | None = None
        self.last_worker_items: tuple[int, ...] = ()
        self._measure_lock = threading.Lock()
        self._seen_demand: list[int] = []
        self._seen_items: list[int] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._closed = False  # under the plan lock: no worker is spawned once shutdown has begun

    # ---------------------------------------------------------------- workers

    def active(self) -> list[DrainWorker]:
        return [w for w in self.workers if w.active and not w.stopping]

    def _accepts(self, worker: int) -> bool:
        return 0 <= worker < len(self.workers) and self.workers[worker].active

    @property
    def periodic(self) -> bool:
        return self.interval_s > 0 and self.dedicated

    @property
    def rebalancing_enabled(self) -> bool:
        return self.periodic and len(self.active()) > 1

    # ---------------------------------------------------------------- measurements

    def take_throughput(self) -> list[int]:
        """produce() calls per partition since the previous call."""
        with self._measure_lock:
            now = [c.value() for c in self.parts.demand]
            seen = self._seen_demand + [0] * (len(now) - len(self._seen_demand))
            self._seen_demand = now
            return [now[p] - seen[p] for p in range(len(now))]

    def take_worker_items(self) -> tuple[int, ...]:
        """Items each worker took since the previous measurement: the interval's `worker_items`."""
        with self._measure_lock:
            now = [w.items for w in self.workers]
            seen = self._seen_items + [0] * (len(now) - len(self._seen_items))
            self._seen_items = now
            self.last_worker_items = tuple(now[i] - seen[i] for i in range(len(now)))
            return self.last_worker_items

    # ---------------------------------------------------------------- throughput rebalancing

    def rebalance_now(self, closed: bool) -> RebalanceReport:
        with self.plan_lock:
            report = self._rebalance(closed)
            self.last_rebalance = report
        if report.skipped:
            log.debug("BatchQueue[%s]: rebalance skipped: %s", self.name, report.skipped)
        elif report.failed:
            log.warning("BatchQueue[%s]: rebalance moved %d partitions; %s", self.name, report.moved, report.failed)
        else:
            log.info("BatchQueue[%s]: rebalanced %d partitions, max/mean worker load %.3f -> %.3f "
                     "(fence %.1f ms)", self.name, report.moved, report.ratio_before, report.ratio_after,
                     report.wait_ms)
        return report

    def _rebalance(self, closed: bool) -> RebalanceReport:
        with self.admin:  # no partition is added between the measurement and the owners it is read with
            measured = self.throughput_source()
            owners = self.table.snapshot()
        throughput = _fit(measured, len(owners))
        self.take_worker_items()
        active = [w.index for w in self.active()]
        reason = None
        if closed:
            reason = "the queue is shut down"
        elif not self.dedicated or len(active) < 2:
            reason = "rebalancing needs 2+ dedicated drain workers"
        elif self.membership is not None and self.membership.busy:
            reason = "a membership change is in progress"
        if reason is not None:
            return RebalanceReport(0, 1.0, 1.0, 0.0, reason, time.time())
        slot = {w: i for i, w in enumerate(active)}
        current = [slot.get(o, UNOWNED) for o in owners]
        before = imbalance(_loads(throughput, current, len(active)))
        if before < self.skip_ratio:
            reason = f"max/mean worker load {before:.3f} is below rebalance_skip_ratio {self.skip_ratio:g}"
            return RebalanceReport(0, before, before, 0.0, reason, time.time())
        plan = plan_rebalance(throughput, current, len(active), skip_ratio=1.0)
        if plan.skipped or not plan.moves:
            return RebalanceReport(0, before, before, 0.0, plan.skipped or "no move improves the balance",
                                   time.time())
        moves = [(p, active[old] if old >= 0 else UNOWNED, active[new]) for p, old, new in plan.moves]
        result = self.table.apply(moves, self.wake, self.fence_timeout_s, accept=self._accepts,
                                  all_or_nothing=True)
        after_owner = [slot.get(o, UNOWNED) for o in self.table.snapshot()[: len(owners)]]
        after = imbalance(_loads(throughput, after_owner, len(active)))
        return RebalanceReport(len(result.applied), before, after, result.wait_ms, None, time.time(),
                               failed=result.failed)

    # ---------------------------------------------------------------- elastic workers

    def set_threads(self, threads: int) -> None:
        """Add or retire workers now; their partitions move after the holddown (at once without one)."""
        with self.plan_lock:
            if self._closed:
                raise ValueError(f"queue {self.name!r} is shut down")
            membership = self.membership or Membership(self.table)
            self.membership = membership
            active = self.active()
            returning = [w for w in self.workers if not w.active and not w.stopping]
            for w in returning[: max(0, threads - len(active))]:
                w.active = True  # a retiring worker still alive serves again
                active.append(w)
            while len(active) < threads:
                active.append(self.spawn())
            for w in active[threads:]:
                w.active = False  # retiring: drains what it owns until that is handed off
            now = self.clock()
            if membership.changed_at is None:
                membership.changed_at = now
            membership.status = "holddown"
            if self.delay_s == 0:
                self._plan_membership()
        self.kick()

    def _membership_due(self) -> float:
        m = self.membership
        if m is None:
            return math.inf
        if m.status == "holddown" and m.changed_at is not None:
            return m.changed_at + self.delay_s
        if m.status == "handoff":
            return m.retry_at
        return math.inf

    def _plan_membership(self) -> None:
        """Count-balance the partitions over the active workers (under the plan lock)."""
        m = self.membership
        assert m is not None
        m.status = "handoff"
        flows = [w.index for w in self.active()]
        owners = self.table.snapshot()
        plan = plan_count_balance(list(owners), flows)
        moves = [(mv.partition, owners[mv.partition], int(mv.to_flow))  # type: ignore[call-overload]
                 for mv in (*plan.assignments, *plan.handoffs)]
        result = self.table.apply(moves, self.wake, self.fence_timeout_s, accept=self._accepts)
        m.handoff_count += sum(1 for _p, old, _new in result.applied if old != UNOWNED)
        counts = self.table.counts()
        for w in self.workers:
            if not w.active and not w.stopping and counts.get(w.index, 0) == 0:
                w.stopping = True  # retired: owns nothing any more; its loop ends after this pass
                self.wake(w.index)
        stranded = any(not w.active and not w.stopping for w in self.workers) or UNOWNED in counts
        if result.failed or stranded:
            m.retry_at = self.clock() + min(RETRY_S, self.fence_timeout_s)
            log.warning("BatchQueue[%s]: membership handoff incomplete (%s); retrying in %.1f s", self.name,
                        result.failed or "partitions left to place", min(RETRY_S, self.fence_timeout_s))
        else:
            m.status = "ready"
            m.changed_at = None
            m.retry_at = math.inf

    # ---------------------------------------------------------------- the control thread

    def start(self) -> None:
        """Start the control thread if there is anything for it to do (idempotent)."""
        with self._cond:
            if self._thread is not None or self._stopped:
                return
            if not self.periodic and self.membership is None:
                return  # nothing periodic, no elastic workers: no thread
            self._thread = threading.Thread(target=self._loop, name=f"BatchQueue-{self.name}-control",
                                            daemon=True)
            self._thread.start()

    def kick(self) -> None:
        """Something changed: the control thread recomputes when it is next due."""
        self.start()
        with self._cond:
            self._cond.notify_all()

    def _loop(self) -> None:
        next_rebalance = self.clock() + self.interval_s if self.periodic else math.inf
        while True:
            with self._cond:
                while not self._stopped:
                    due = min(next_rebalance, self._membership_due())
                    left = due - self.clock()
                    if left <= 0:
                        break
                    self._cond.wait(None if math.isinf(left) else left)
                if self._stopped:
                    return
            try:
                if self._membership_due() <= self.clock():
                    with self.plan_lock:
                        if self._membership_due() <= self.clock():
                            self._plan_membership()
                if self.clock() >= next_rebalance:
                    next_rebalance = self.clock() + self.interval_s
                    if self.rebalancing_enabled:
                        self.rebalance_now(closed=False)
            except Exception:
                log.exception("BatchQueue[%s]: control task failed", self.name)

    def stop(self, deadline: float) -> None:
        """Shutdown (after the ownership table is closed, so a fence in progress ends at once)."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
            thread = self._thread
        with self.plan_lock:
            self._closed = True
        if thread is not None and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))


def _fit(throughput: list[int], partitions: int) -> list[int]:
    """Loads for exactly `partitions` partitions: one added after an injected measurement was taken
    has carried no measured load yet, and a load for a partition that does not exist is dropped."""
    return list(throughput[:partitions]) + [0] * (partitions - len(throughput))


def _loads(throughput: list[int], owner: list[int], workers: int) -> list[int]:
    loads = [0] * workers
    for p, o in enumerate(owner):
        if 0 <= o < workers:
            loads[o] += throughput[p]
    return loads
