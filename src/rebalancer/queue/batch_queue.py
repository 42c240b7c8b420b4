"""BatchQueue: a partitioned, self-draining in-process queue with typed handler dispatch.

This module is the facade. The parts, each owning its own state:
- `_partitions.Partitions`: deques, demand counters, routing, the produce() hot path;
- `_ownership.OwnershipTable`: the one owner array and its fenced handoff;
- `_worker.DrainWorker` / `Dispatcher`: the drain loop, dispatch, flush-on-idle;
- `_controller.Controller`: the control thread, throughput rebalancing and elastic workers.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from rebalancer.queue._controller import Controller, Membership
from rebalancer.queue._ownership import DRAIN_CONTEXT, OwnershipTable
from rebalancer.queue._partitions import Partitions, type_name
from rebalancer.queue._worker import FINAL, Dispatcher, DrainWorker, HandlerRecord, SingleConsumer
from rebalancer.queue.config import BatchQueueConfig, HandlerConsumer
from rebalancer.queue.policies import BufferStrategy
from rebalancer.queue.scheduler import SHARED_SCHEDULERS, DedicatedScheduler, SharedScheduler
from rebalancer.queue.stats import BatchQueueStats, RebalanceReport

log = logging.getLogger(__name__)


_PRODUCE_DOC = """Route an item to its partition; False: dropped (IF_POSSIBLE and full, counted) or shut down."""


class BatchQueue:
    """Create through `BatchQueueManager.create`; see docs/queue.md for the guarantees."""

    produce: Callable[[object], bool]
    """Route an item to its partition (the partitions' closure: the hot path, no attribute lookups)."""

    def __init__(self, name: str, config: BatchQueueConfig) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        if not isinstance(config, BatchQueueConfig):
            raise ValueError(f"config must be a BatchQueueConfig, got {config!r}")
        self.name = name
        self.config = config
        self._admin = threading.RLock()  # handlers, growth, shutdown
        self._done = threading.Event()
        self._unfinished = 0
        self._pool_name: str | None = None
        self._scheduler: DedicatedScheduler | SharedScheduler
        if config.shared_scheduler is not None:
            self._pool_name, policy = config.shared_scheduler
            self._scheduler = SHARED_SCHEDULERS.acquire(self._pool_name, policy)
            workers = self._resolve_threads = 1
        else:
            assert config.threads is not None
            self._scheduler = DedicatedScheduler(name)
            workers = self._resolve_threads = config.threads.resolve()
        partitions = config.partitions.resolve(self._resolve_threads, 0)
        if partitions < workers:
            log.warning("BatchQueue[%s]: partitions(%d) < threads(%d), reducing threads to %d",
                        name, partitions, workers, partitions)
            workers = partitions

        self._table = OwnershipTable()
        self._parts = Partitions(name, config.buffer_size, config.strategy is BufferStrategy.BLOCKING,
                                 config.resolved_selector(), self._table, self._admin)
        single = None
        if config.consumer is not None:
            consumer = config.consumer
            if isinstance(consumer, HandlerConsumer):
                single = SingleConsumer(consumer.consume, consumer.on_idle)
            else:
                single = SingleConsumer(consumer, None)
        self._dispatch = Dispatcher(name, self._parts, single, config.error_handler, config.max_idle_ms / 1000.0)
        self._locks: dict[int, tuple[object, threading.Lock]] = {}
        self._records: dict[tuple[int, object], HandlerRecord] = {}
        self._workers: list[DrainWorker] = []
        self._final = self._new_worker(FINAL)
        self._controller = Controller(
            name, self._table, self._parts, self._workers, self._wake, self._spawn, self._admin,
            interval_s=config.rebalance_interval_ms / 1000.0, delay_s=config.rebalance_delay_ms / 1000.0,
            skip_ratio=config.rebalance_skip_ratio, fence_timeout_s=config.fence_timeout_ms / 1000.0,
            dedicated=self._pool_name is None)
        for _ in range(workers):
            self._workers.append(self._new_worker(len(self._workers)))
        self._grow(partitions)
        self.produce = self._parts.make_produce()
        self.produce.__doc__ = _PRODUCE_DOC
        for w in self._workers:
            self._scheduler.start(w)
        self._controller.start()

    def _new_worker(self, index: int) -> DrainWorker:
        cfg = self.config
        return DrainWorker(index, self._parts, self._table, self._dispatch, cfg.min_idle_ms / 1000.0,
                           cfg.max_idle_ms / 1000.0, self._scheduler)

    def _spawn(self) -> DrainWorker:
        w = self._new_worker(len(self._workers))
        self._workers.append(w)
        self._scheduler.start(w)
        return w

    def _wake(self, index: int) -> None:
        if 0 <= index < len(self._workers):
            self._scheduler.wake(self._workers[index])

    # ------------------------------------------------------------------ properties

    @property
    def thread_count(self) -> int:
        """Active drain workers of this queue (1 on a shared scheduler, whose pool may have more)."""
        return len(self._controller.active())

    @property
    def partition_count(self) -> int:
        return len(self._parts)

    @property
    def single_consumer(self) -> bool:
        return self.config.consumer is not None

    @property
    def is_shutdown(self) -> bool:
        return bool(self._parts.closed)  # the one closed state: the produce path reads it too

    @property
    def rebalancing_enabled(self) -> bool:
        """Periodic throughput rebalancing: a dedicated scheduler with 2+ workers and an interval."""
        return self._controller.rebalancing_enabled

    @property
    def membership(self) -> Membership | None:
        """The elastic-worker coordinator's status once `set_threads` has been called."""
        return self._controller.membership

    # ------------------------------------------------------------------ partitions and handlers

    def _grow(self, count: int) -> None:
        """Add partitions up to `count`, each to the active worker owning the fewest."""
        with self._admin:
            while len(self._parts) < count:
                counts = self._table.counts()
                active = self._controller.active() or self._workers
                owner = min(active, key=lambda w: (counts.get(w.index, 0), w.index)).index
                self._parts.add(owner)
            self._dispatch.reindex()

    def add_handler(self, item_type: type, handler: HandlerConsumer | Callable[[list[Any]], object]) -> None:
        """Register the handler for items whose exact type is `item_type`; adaptive queues grow here."""
        if self.single_consumer:
            raise ValueError(f"queue {self.name!r} is in single-consumer mode; add_handler is not allowed")
        if not isinstance(item_type, type):
            raise ValueError(f"item_type must be a type, got {item_type!r}")
        consume: Callable[[list[Any]], object]
        on_idle: Callable[[], object] | None
        if isinstance(handler, HandlerConsumer):
            consume, on_idle = handler.consume, handler.on_idle
        elif callable(handler):
            consume, on_idle = handler, None
        else:
            raise ValueError(f"handler must be a HandlerConsumer or a callable(list), got {handler!r}")
        with self._admin:
            if self.is_shutdown:
                raise ValueError(f"queue {self.name!r} is shut down")
            handlers = self._dispatch.handlers
            if self.config.partitions.is_adaptive and item_type not in handlers:
                wanted = self.config.partitions.resolve(self._resolve_threads, len(handlers) + 1)
                if wanted > len(self._parts):
                    self._grow(wanted)
            # one lock per object: `obj.consume` registered twice is two bound methods, one object
            target = handler.__self__ if inspect.ismethod(handler) else handler
            held = self._locks.setdefault(id(target), (target, threading.Lock()))
            record = self._records.get((id(target), consume))
            if record is None:
                record = HandlerRecord(consume, on_idle, held[1])
                self._records[(id(target), consume)] = record
            handlers[item_type] = record
            if self._parts.selector.pins_types and item_type not in self._parts.type_partition:
                self._parts.pin(item_type, self._parts.emptiest())  # an empty partition first
            self._dispatch.reindex()


    # ------------------------------------------------------------------ rebalancing and workers

    def _refuse_from_handler(self, what: str, scheduler_wide: bool = False) -> None:
        ctx = DRAIN_CONTEXT
        inside = getattr(ctx, "table", None) is self._table or (
            scheduler_wide and getattr(ctx, "table", None) is not None and ctx.scheduler is self._scheduler)
        if inside:
            raise RuntimeError(f"BatchQueue[{self.name}]: {what}() cannot be called from a handler or on_idle "
                               "running on this queue's drain workers (it would wait for itself); call it "
                               "from another thread")

    def rebalance_now(self) -> RebalanceReport:
        """Measure the last interval's throughput and move partitions to even out per-worker load.
        Never raises for a failed handoff: the report's `failed` says what was given back."""
        self._refuse_from_handler("rebalance_now")
        return self._controller.rebalance_now(closed=self.is_shutdown)

    def set_threads(self, threads: int) -> None:
        """Add or retire drain workers at runtime (see docs/queue.md, "Elastic drain workers")."""
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be an int >= 1, got {threads!r}")
        if self._pool_name is not None:
            raise ValueError(f"queue {self.name!r} runs on shared scheduler {self._pool_name!r}; set_threads "
                             "needs a dedicated scheduler")
        self._refuse_from_handler("set_threads")
        with self._admin:
            if self.is_shutdown:
                raise ValueError(f"queue {self.name!r} is shut down")
        self._controller.set_threads(threads)

    # ------------------------------------------------------------------ stats and shutdown

    def _taken(self) -> int:
        return sum(w.items for w in (*self._workers, self._final))

    def stats(self) -> BatchQueueStats:
        """A consistent snapshot of counters, buffers and owners; `BatchQueueStats` documents every
        field. With periodic rebalancing off, it also starts the next `worker_items` interval."""
        workers = [*self._workers, self._final]
        dropped = self._parts.dropped.value()
        controller = self._controller
        if not controller.periodic:
            controller.take_worker_items()
        with self._admin:  # partitions grow under it: these three describe the same partitions
            used = tuple(len(d) for d in self._parts.deques)
            owners = self._table.snapshot()
            types = {p: tuple(type_name(t) for t in ts) for p, ts in enumerate(self._parts.types) if ts}
        return BatchQueueStats(
            capacity_per_partition=self.config.buffer_size,
            used=used,
            produced=self._parts.entered() - dropped - self._parts.aborted.value(),
            dispatched=sum(w.dispatched for w in workers),
            dropped=dropped,
            unhandled=sum(w.unhandled for w in workers),
            failed=sum(w.failed for w in workers),
            rejected=self._parts.rejected.value(),
            owners=owners,
            worker_items=controller.last_worker_items,
            last_rebalance=controller.last_rebalance,
            partition_types=types,
            worker_items_total=tuple(w.items for w in self._workers),
            unfinished=self._unfinished,
            self_drops=self._parts.self_drops.value(),
            idle_failures=self._dispatch.idle_failures.value(),
        )

    def shutdown(self, timeout: float = 30.0) -> int:
        """Stop the workers, drain every partition a final time, give handlers a last on_idle, and
        release the scheduler, within `timeout` seconds (plus the pass in progress).

        Returns the number of items it could not hand to a handler in time (0 normally; also
        `stats().unfinished`, with a WARNING): items held by a worker stuck in a handler, or queued
        behind it. No handler call starts after it returns. Calling it from a handler raises."""
        self._refuse_from_handler("shutdown", scheduler_wide=True)
        with self._admin:
            first = not self.is_shutdown
            if first:
                self._parts.close()
        if not first:
            self._done.wait(timeout)
            return self._unfinished
        deadline = time.monotonic() + timeout
        self._table.close()
        self._controller.stop(deadline)
        workers = list(self._workers)
        for w in workers:
            w.stopping = True
            self._scheduler.wake(w)
        for w in workers:
            w.finished.wait(max(0.0, deadline - time.monotonic()))
        stuck = [w for w in workers if not w.finished.is_set()]
        held = {w.index for w in stuck}
        free = [p for p, o in enumerate(self._table.snapshot()) if o not in held]
        final = self._final
        ctx = DRAIN_CONTEXT  # handlers called from here are inside this queue too
        ctx.table, ctx.worker, ctx.scheduler = self._table, FINAL, self._scheduler
        try:
            final.drain_final(free, deadline)
            in_flight = self._parts.wait_settled(self._taken, deadline)  # a producer that passed the check
            final.drain_final(free, deadline)
            self._dispatch.final_idle(deadline)
        finally:
            ctx.table = None
        abandoned = sum(w.abandon() for w in stuck)
        final.abandon()
        stats = self.stats()
        self._unfinished = stats.produced - stats.dispatched - stats.unhandled
        if self._unfinished > 0:
            log.warning("BatchQueue[%s]: shutdown(timeout=%gs) left %d items undispatched: %d taken by "
                        "worker(s) %s stuck in a handler, %d queued behind them or a held handler lock, "
                        "%d produce() calls still in flight", self.name, timeout, self._unfinished, abandoned,
                        sorted(held), sum(len(d) for d in self._parts.deques) + final.pending, in_flight)
        for w in workers:
            if w.finished.is_set():
                self._scheduler.join(w, max(0.0, deadline - time.monotonic()))
        if self._pool_name is not None:
            SHARED_SCHEDULERS.release(self._pool_name)  # the pool closes when its last queue leaves
        else:
            self._scheduler.close()
        self._done.set()
        if final.interrupt is not None:
            raise final.interrupt  # Ctrl-C / SystemExit from a handler, once nothing is left behind
        return self._unfinished

    def __repr__(self) -> str:
        mode = "single-consumer" if self.single_consumer else f"{len(self._dispatch.handlers)} handlers"
        return (f"BatchQueue({self.name!r}, workers={self.thread_count}, partitions={self.partition_count}, "
                f"{mode})")
