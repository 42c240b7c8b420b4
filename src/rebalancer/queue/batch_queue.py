"""BatchQueue: a partitioned, self-draining in-process queue with typed handler dispatch.

Producers append to a bounded partition chosen by the item's type; drain workers each own a set of
partitions, drain all of them into one batch per pass and dispatch it, grouped by type. Ownership is
the single source of truth for which worker drains which partition: the drain loop checks it per
partition per pass, and every change of owner goes through a two-phase handoff fenced by the old
owner's pass counter, so a handler is never called by the new owner while the old one may still be
inside it. A lock per handler object backs that guarantee for custom selectors and shared handlers.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import math
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat, starmap
from typing import TYPE_CHECKING, Any

from rebalancer.queue.config import BatchQueueConfig, HandlerConsumer
from rebalancer.queue.policies import BufferStrategy
from rebalancer.queue.scheduler import SHARED_SCHEDULERS, DedicatedScheduler, SharedScheduler
from rebalancer.queue.stats import BatchQueueStats, RebalanceReport

if TYPE_CHECKING:
    from rebalancer.consumers import PartitionedQueue

log = logging.getLogger(__name__)

UNOWNED = -1


def _count_value(counter: itertools.count) -> int:
    """The next value an itertools.count would return; `next()` on one is atomic under the GIL."""
    return int(repr(counter)[6:-1])


def _type_name(t: type) -> str:
    return f"{t.__module__}.{t.__qualname__}"


@dataclass(slots=True)
class _Handler:
    consume: Callable[[list[Any]], object]
    on_idle: Callable[[], object] | None
    lock: threading.Lock
    home: int  # the partition whose owner calls on_idle


class _Worker:
    """A drain task. Only the thread running it writes its counters, so plain ints are safe."""

    __slots__ = (
        "cycles", "dispatched", "failed", "finished", "idle", "index", "items", "queue",
        "scan", "stopping", "unhandled",
    )

    def __init__(self, queue: BatchQueue, index: int) -> None:
        self.queue = queue
        self.index = index
        self.scan: tuple[int, ...] = ()
        self.cycles = 0  # completed passes: the handoff fence
        self.items = 0  # items taken out of partitions
        self.dispatched = 0
        self.unhandled = 0
        self.failed = 0
        self.idle = 0
        self.stopping = False
        self.finished = threading.Event()

    def run(self) -> float | None:
        return self.queue._run(self)


class BatchQueue:
    """Create through `BatchQueueManager.create`; see the package docs for the guarantees."""

    def __init__(self, name: str, config: BatchQueueConfig) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        if not isinstance(config, BatchQueueConfig):
            raise ValueError(f"config must be a BatchQueueConfig, got {config!r}")
        self.name = name
        self.config = config
        self._single = config.consumer is not None
        self._capacity = config.buffer_size
        self._blocking = config.strategy is BufferStrategy.BLOCKING
        self._min_idle = config.min_idle_ms / 1000.0
        self._max_idle = config.max_idle_ms / 1000.0
        self._admin = threading.RLock()  # add_handler, growth, ownership changes, shutdown
        self._rebalance_lock = threading.Lock()  # one handoff at a time
        self._space = threading.Condition()  # BLOCKING producers wait here for room
        self._blocked = 0  # producers waiting on _space; written under its lock
        self._closed = False
        self._closed_flag = [False]  # the same, as a cell the produce closure reads cheaply

        if config.shared_scheduler is not None:
            pool_name, policy = config.shared_scheduler
            self._pool_name: str | None = pool_name
            self._scheduler: DedicatedScheduler | SharedScheduler = SHARED_SCHEDULERS.acquire(pool_name, policy)
            workers = 1
            self._resolve_threads = 1
        else:
            assert config.threads is not None
            self._pool_name = None
            self._scheduler = DedicatedScheduler(name)
            workers = config.threads.resolve()
            self._resolve_threads = workers
        partitions = config.partitions.resolve(self._resolve_threads, 0)
        if partitions < workers:
            log.warning(
                "BatchQueue[%s]: partitions(%d) < threads(%d), reducing threads to %d",
                name, partitions, workers, partitions,
            )
            workers = partitions

        self._parts: list[deque[Any]] = []
        self._demand: list[itertools.count] = []  # produce() calls per partition, before put/offer
        self._part_routes: list[tuple[deque[Any], itertools.count]] = []
        self._types: list[tuple[type, ...]] = []  # types routed to each partition (default selector)
        self._owner: list[int] = []
        self._routes: dict[type, tuple[deque[Any], itertools.count]] = {}
        self._handlers: dict[type, _Handler] = {}
        self._locks: dict[int, tuple[object, threading.Lock]] = {}
        self._dropped = itertools.count()
        self._rejected = itertools.count()  # refused because the queue was shut down
        self._aborted = itertools.count()  # of those, the ones whose demand was already counted
        self._idle_lock = threading.Lock()  # single-consumer on_idle is never concurrent with itself
        self._warn_lock = threading.Lock()
        self._warned_types: set[type] = set()
        self._seen_demand: list[int] = []
        self._seen_items: list[int] = []
        self._last_worker_items: tuple[int, ...] = ()
        self._last_rebalance: RebalanceReport | None = None
        self._control: threading.Thread | None = None  # periodic rebalancing and membership sync
        self._stop_control = threading.Event()
        self._membership: PartitionedQueue | None = None  # set by the first set_threads()
        self._pending_moves: list[tuple[int, int, int]] = []
        self._clock_last = 0.0

        self._workers: list[_Worker] = [_Worker(self, i) for i in range(workers)]
        self._final = _Worker(self, UNOWNED)
        self._grow(partitions)
        self._produce = self._produce_selected if config.selector is not None else self._make_produce()
        self.produce = self._produce  # type: ignore[method-assign]
        for w in self._workers:
            self._scheduler.start(w)
        if self.rebalancing_enabled:
            self._start_control()

    # ------------------------------------------------------------------ properties

    @property
    def thread_count(self) -> int:
        """Drain workers of this queue (1 on a shared scheduler, whose pool may have more threads)."""
        return sum(1 for w in self._workers if not w.stopping)

    @property
    def partition_count(self) -> int:
        return len(self._parts)

    @property
    def single_consumer(self) -> bool:
        return self._single

    @property
    def is_shutdown(self) -> bool:
        return self._closed

    @property
    def rebalancing_enabled(self) -> bool:
        """Throughput rebalancing runs on dedicated schedulers with at least two drain workers."""
        return self.config.rebalance_interval_ms > 0 and self._pool_name is None and self.thread_count > 1

    @property
    def membership(self) -> PartitionedQueue | None:
        """The worker-membership coordinator once `set_threads` has been called (read it, don't drive it)."""
        return self._membership

    # ------------------------------------------------------------------ partitions and routing

    def _grow(self, count: int) -> None:
        """Add partitions up to `count`, each given to the worker owning the fewest (or, with elastic
        workers, to whom the membership coordinator says); every view derives from the owner array."""
        with self._admin:
            if self._membership is not None:
                self._grow_elastic(count)
                return
            while len(self._parts) < count:
                part: deque[Any] = deque()
                demand = itertools.count()
                owned = {w.index: 0 for w in self._workers if not w.stopping}
                for o in self._owner:
                    if o in owned:
                        owned[o] += 1
                owner = min(owned, key=lambda i: (owned[i], i))
                self._parts.append(part)
                self._demand.append(demand)
                self._part_routes.append((part, demand))
                self._types.append(())
                self._seen_demand.append(0)
                self._owner.append(owner)
            self._publish_scans()

    def _add_partition(self, owner: int) -> None:
        part: deque[Any] = deque()
        demand = itertools.count()
        self._parts.append(part)
        self._demand.append(demand)
        self._part_routes.append((part, demand))
        self._types.append(())
        self._seen_demand.append(0)
        self._owner.append(owner)

    def _grow_elastic(self, count: int) -> None:
        if count <= len(self._parts):
            return
        while len(self._parts) < count:
            self._add_partition(UNOWNED)
        assert self._membership is not None
        self._membership.set_partition_count(count, now=self._now())
        # assignments of the new partitions apply at once; handoffs need a fence, so the control
        # thread runs them (a fence must not be awaited under the admin lock)
        self._pending_moves.extend(self._apply_membership(self._membership.poll(now=self._now())))

    def _publish_scans(self) -> None:
        """Each worker's partition list, derived from the owner array (the one source of truth)."""
        scans: dict[int, list[int]] = {w.index: [] for w in self._workers}
        for p, o in enumerate(self._owner):
            if o in scans:
                scans[o].append(p)
        for w in self._workers:
            w.scan = tuple(scans[w.index])

    def _route_type(self, t: type, partition: int) -> tuple[deque[Any], itertools.count]:
        route = self._part_routes[partition]
        self._types[partition] = (*self._types[partition], t)  # published before the route
        self._routes[t] = route
        return route

    def _default_partition(self, t: type) -> int:
        return zlib.crc32(_type_name(t).encode()) % len(self._parts)

    # ------------------------------------------------------------------ handlers

    def add_handler(self, item_type: type, handler: HandlerConsumer | Callable[[list[Any]], object]) -> None:
        """Register the handler for items whose exact type is `item_type`; adaptive queues grow here."""
        if self._single:
            raise ValueError(f"queue {self.name!r} is in single-consumer mode; add_handler is not allowed")
        if not isinstance(item_type, type):
            raise ValueError(f"item_type must be a type, got {item_type!r}")
        if isinstance(handler, HandlerConsumer):
            consume, on_idle = handler.consume, handler.on_idle
        elif callable(handler):
            consume, on_idle = handler, None
        else:
            raise ValueError(f"handler must be a HandlerConsumer or a callable(list), got {handler!r}")
        with self._admin:
            if self._closed:
                raise ValueError(f"queue {self.name!r} is shut down")
            replacing = item_type in self._handlers
            if self.config.partitions.is_adaptive and not replacing:
                wanted = self.config.partitions.resolve(self._resolve_threads, len(self._handlers) + 1)
                if wanted > len(self._parts):
                    self._grow(wanted)
            route = self._routes.get(item_type)
            if route is not None:
                home = next(p for p, r in enumerate(self._part_routes) if r is route)
            elif self.config.selector is None:
                kinds = self._types
                home = min(range(len(kinds)), key=lambda p: (len(kinds[p]), p))  # an empty partition first
            else:
                home = len(self._handlers) % len(self._parts)
            # one lock per object: `obj.consume` registered twice is two bound methods, one object
            target = getattr(handler, "__self__", None) if inspect.ismethod(handler) else handler
            held = self._locks.get(id(target))
            if held is None:
                held = (target, threading.Lock())
                self._locks[id(target)] = held
            self._handlers[item_type] = _Handler(consume, on_idle, held[1], home)
            if self.config.selector is None and route is None:
                self._route_type(item_type, home)

    # ------------------------------------------------------------------ produce

    def produce(self, item: object) -> bool:
        """Route `item` to its partition. False: dropped (IF_POSSIBLE and full) or the queue is shut down.

        The instance's `produce` is a closure over the routing table (see `_make_produce`); this
        method only serves calls made through the class."""
        return self._produce(item)

    def _make_produce(self) -> Callable[[object], bool]:
        """The hot path as a closure over locals (no attribute lookups).

        Demand is counted before the shut-down check: shutdown waits until every counted call has
        landed, been dropped or been refused, so an item can never slip in after the final drain."""
        routes_get = self._routes.get
        capacity = self._capacity
        new_type = self._produce_new_type
        full = self._produce_full
        closed = self._closed_flag
        refuse = self._refuse_counted

        def produce(item: object) -> bool:
            route = routes_get(type(item))
            if route is None:
                return new_type(item)
            part, demand = route
            next(demand)  # counted before put/offer, so refused items still show as load
            if closed[0]:
                return refuse()
            if len(part) < capacity:
                part.append(item)
                return True
            return full(part, item)

        produce.__doc__ = BatchQueue.produce.__doc__
        return produce

    def _refuse_counted(self) -> bool:
        next(self._aborted)
        next(self._rejected)
        return False

    def _produce_new_type(self, item: object) -> bool:
        t = type(item)
        with self._admin:  # shutdown closes under this lock, so demand is counted before it can
            if self._closed:
                next(self._rejected)
                return False
            part, demand = self._routes.get(t) or self._route_type(t, self._default_partition(t))
            next(demand)
        if len(part) < self._capacity:
            part.append(item)
            return True
        return self._produce_full(part, item)

    def _produce_selected(self, item: object) -> bool:
        n = len(self._part_routes)
        p = self.config.selector(item, n)  # type: ignore[misc]
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < n:
            raise ValueError(f"selector returned partition {p!r} for {type(item).__name__}; expected 0..{n - 1}")
        part, demand = self._part_routes[p]
        next(demand)
        if self._closed:
            return self._refuse_counted()
        if len(part) < self._capacity:
            part.append(item)
            return True
        return self._produce_full(part, item)

    def _produce_full(self, part: deque[Any], item: object) -> bool:
        if not self._blocking:
            next(self._dropped)
            return False
        with self._space:
            self._blocked += 1
            try:
                while len(part) >= self._capacity:
                    if self._closed:
                        return self._refuse_counted()
                    self._space.wait(self._max_idle)
                part.append(item)
            finally:
                self._blocked -= 1
        return True

    # ------------------------------------------------------------------ drain loop

    def _run(self, w: _Worker) -> float | None:
        """Passes until one comes back empty; then idle callbacks and the backoff delay."""
        while not w.stopping:
            got = self._collect(w)
            if got:
                w.idle = 0
                self._dispatch(w, got)
                w.cycles += 1
                continue
            self._notify_idle(w)
            w.cycles += 1
            delay = min(self._min_idle * (1 << min(w.idle, 20)), self._max_idle)
            w.idle += 1
            return delay
        return None

    def _collect(self, w: _Worker) -> list[tuple[int, list[Any]]]:
        owner = self._owner
        parts = self._parts
        me = w.index
        got = []
        taken = 0
        for p in w.scan:
            if owner[p] != me:
                continue  # revoked: the new owner takes it after our pass ends
            part = parts[p]
            n = len(part)
            if n:
                pop = part.popleft
                got.append((p, list(starmap(pop, repeat((), n)))))  # popleft n times, in C
                taken += n
        if taken:
            w.items += taken
            if self._blocked:
                with self._space:
                    self._space.notify_all()
        return got

    def _dispatch(self, w: _Worker, got: list[tuple[int, list[Any]]]) -> None:
        if self._single:
            batch = got[0][1] if len(got) == 1 else [item for _, chunk in got for item in chunk]
            self._call(w, None, batch)
            return
        groups: dict[type, list[Any]] = {}
        pinned = self.config.selector is None
        kinds = self._types
        for p, chunk in got:
            types = kinds[p] if pinned else ()
            if len(types) == 1:  # the default selector pins types to partitions: no per-item grouping
                t = types[0]
                g = groups.get(t)
                if g is None:
                    groups[t] = chunk
                else:
                    g.extend(chunk)
                continue
            for item in chunk:
                t = type(item)
                g = groups.get(t)
                if g is None:
                    groups[t] = [item]
                else:
                    g.append(item)
        handlers = self._handlers
        for t, batch in groups.items():
            h = handlers.get(t)
            if h is None:
                w.unhandled += len(batch)
                self._warn_unhandled(t, len(batch))
            else:
                self._call(w, h, batch)

    def _call(self, w: _Worker, h: _Handler | None, batch: list[Any]) -> None:
        try:
            if h is None:
                consumer = self.config.consumer
                if isinstance(consumer, HandlerConsumer):
                    consumer.consume(batch)
                else:
                    consumer(batch)  # type: ignore[misc]
            else:
                with h.lock:
                    h.consume(batch)
        except BaseException as exc:  # the worker must survive whatever a handler raises
            w.failed += len(batch)
            self._on_error(batch, exc)
            if isinstance(exc, KeyboardInterrupt | SystemExit) and threading.current_thread() is threading.main_thread():
                raise  # the shutdown drain runs on the caller's thread: let Ctrl-C through there
        finally:
            w.dispatched += len(batch)

    def _on_error(self, batch: list[Any], exc: BaseException) -> None:
        handler = self.config.error_handler
        if handler is None:
            log.error("BatchQueue[%s]: handler failed on a batch of %d", self.name, len(batch), exc_info=exc)
            return
        try:
            handler(batch, exc)
        except Exception:
            log.exception("BatchQueue[%s]: error_handler raised", self.name)

    def _warn_unhandled(self, t: type, n: int) -> None:
        if t in self._warned_types:
            return
        with self._warn_lock:
            if t in self._warned_types:
                return
            self._warned_types.add(t)
        log.warning(
            "BatchQueue[%s]: no handler for type %s; its items are counted as unhandled (first batch: %d)",
            self.name, _type_name(t), n,
        )

    def _notify_idle(self, w: _Worker) -> None:
        if self._single:
            on_idle = getattr(self.config.consumer, "on_idle", None)
            if on_idle is not None and self._idle_lock.acquire(blocking=False):
                try:
                    on_idle()
                except Exception:
                    log.exception("BatchQueue[%s]: consumer.on_idle raised", self.name)
                finally:
                    self._idle_lock.release()
            return
        owner = self._owner
        me = w.index
        for h in list(self._handlers.values()):
            if h.on_idle is not None and (me == UNOWNED or owner[h.home] == me):
                self._idle_call(h)

    def _idle_call(self, h: _Handler) -> None:
        with h.lock:
            try:
                h.on_idle()  # type: ignore[misc]
            except BaseException:
                log.exception("BatchQueue[%s]: on_idle raised", self.name)

    # ------------------------------------------------------------------ ownership changes

    def _handoff(self, moves: Sequence[tuple[int, int, int]]) -> float:
        """Two-phase handoff: revoke every moved partition, wait for each old owner's pass counter to
        advance (old owners are woken, so the wait is one pass, not a backoff), then assign.
        Returns the fence wait in milliseconds."""
        if not moves:
            return 0.0
        with self._admin:
            fence = self._revoke([p for p, _old, _new in moves])
        wait_ms = self._await_fence(fence)
        with self._admin:
            for p, _old, new in moves:
                self._owner[p] = new
            self._publish_scans()
        for new in {new for _, _, new in moves}:
            self._scheduler.wake(self._workers[new])
        return wait_ms

    def _revoke(self, partitions: Iterable[int]) -> dict[int, int]:
        """Phase 1 (under the admin lock): unown the partitions; returns each old owner's pass count."""
        fence: dict[int, int] = {}
        for p in partitions:
            old = self._owner[p]
            self._owner[p] = UNOWNED
            if old != UNOWNED:
                fence[old] = self._workers[old].cycles
        self._publish_scans()
        return fence

    def _await_fence(self, fence: dict[int, int], timeout: float = 30.0) -> float:
        """Wait, for all old owners in parallel, until each has finished the pass it was in."""
        started = time.perf_counter()
        for o in fence:
            self._scheduler.wake(self._workers[o])
        deadline = time.monotonic() + timeout
        for o, seen in fence.items():
            w = self._workers[o]
            while w.cycles <= seen and not w.finished.is_set():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"BatchQueue[{self.name}]: worker {o} did not finish its pass in {timeout}s")
                time.sleep(0.0002)
        return (time.perf_counter() - started) * 1000.0

    def _take_throughput(self) -> list[int]:
        """Per-partition produce() calls since the previous call."""
        now = [_count_value(c) for c in self._demand]
        seen = self._seen_demand
        delta = [now[p] - seen[p] for p in range(len(now))]
        self._seen_demand = now
        return delta

    def _take_worker_items(self) -> tuple[int, ...]:
        now = [w.items for w in self._workers]
        seen = self._seen_items + [0] * (len(now) - len(self._seen_items))
        self._seen_items = now
        self._last_worker_items = tuple(now[i] - seen[i] for i in range(len(now)))
        return self._last_worker_items

    def rebalance_now(self) -> RebalanceReport:
        """Measure the last interval's throughput and move partitions to even out per-worker load."""
        from rebalancer.balance import imbalance, plan_rebalance

        with self._rebalance_lock:
            with self._admin:
                throughput = self._take_throughput()
                self._take_worker_items()
                active = [w.index for w in self._workers if not w.stopping]
                reason = None
                if self._closed or self._pool_name is not None or len(active) < 2:
                    reason = "rebalancing needs 2+ dedicated drain workers"
                elif self._pending_moves or (self._membership is not None and self._membership.status != "ready"):
                    reason = "a membership change is in progress"
                if reason is not None:
                    report = RebalanceReport(0, 1.0, 1.0, 0.0, reason, time.time())
                    self._last_rebalance = report
                    return report
                slot = {w: i for i, w in enumerate(active)}
                plan = plan_rebalance(
                    throughput, [slot.get(o, UNOWNED) for o in self._owner], len(active),
                    skip_ratio=self.config.rebalance_skip_ratio,
                )
            before = imbalance(plan.load_before)
            moves = [(p, active[old] if old >= 0 else UNOWNED, active[new]) for p, old, new in plan.moves]
            if plan.skipped or not moves:
                report = RebalanceReport(0, before, before, 0.0, plan.skipped or "no move improves the balance",
                                         time.time())
            else:
                wait_ms = self._handoff(moves)
                if self._membership is not None:
                    with self._admin:
                        for p, _old, new in moves:
                            self._membership.move(p, new, now=self._now())
                        self._membership.poll(now=self._now())
                report = RebalanceReport(plan.moved, before, imbalance(plan.load_after), wait_ms, None, time.time())
                log.debug(
                    "rebalanced %d partitions, max thread load delta: %.1f%%",
                    report.moved, _max_delta_pct(plan.load_after),
                )
            self._last_rebalance = report
            return report

    # ------------------------------------------------------------------ elastic drain workers

    def set_threads(self, threads: int) -> None:
        """Add or retire drain workers at runtime. Workers are the flows of a `PartitionedQueue`:
        partitions move between them count-balanced (±1, minimal handoffs) after the
        `rebalance_delay_ms` holddown, through the same fenced handoff as throughput rebalancing.
        A retiring worker finishes its in-flight pass first; its partitions wait, undrained but
        never lost, until the coordinator gives them to another worker."""
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be an int >= 1, got {threads!r}")
        if self._pool_name is not None:
            raise ValueError(f"queue {self.name!r} runs on shared scheduler {self._pool_name!r}; set_threads "
                             "needs a dedicated scheduler")
        with self._rebalance_lock:
            with self._admin:
                if self._closed:
                    raise ValueError(f"queue {self.name!r} is shut down")
                membership = self._ensure_membership()
                delay = membership.rebalance_delay_s
                if delay == 0:  # no holddown: plan once for the whole change, not once per worker
                    membership.rebalance_delay_s = 1e9
                active = [w for w in self._workers if not w.stopping]
                for _ in range(threads - len(active)):
                    w = _Worker(self, len(self._workers))
                    self._workers.append(w)
                    self._scheduler.start(w)
                    membership.bind(w.index, now=self._now())
                retiring = active[threads:]
                gone = {w.index for w in retiring}
                fence = self._revoke([p for p, o in enumerate(self._owner) if o in gone])
            self._await_fence(fence)
            for w in retiring:
                w.stopping = True
                self._scheduler.wake(w)
                self._scheduler.join(w)
            with self._admin:
                for w in retiring:
                    membership.unbind(w.index, now=self._now())
                if delay == 0:
                    membership.rebalance_delay_s = 0.0
                    membership.rebalance_now(now=self._now())
                moves = self._apply_membership(membership.poll(now=self._now()))
            self._handoff(moves)
        self._start_control()

    def _ensure_membership(self) -> PartitionedQueue:
        """Adopt the current workers and ownership into a coordinator (called under the admin lock)."""
        if self._membership is None:
            from rebalancer.consumers import PartitionedQueue

            membership = PartitionedQueue(
                partition_count=len(self._parts),
                rebalance_delay_s=1e9,  # no plan while the existing workers bind one by one
                max_handoff_time_s=math.inf,  # the queue's own fence decides when a handoff is safe
            )
            active = [w.index for w in self._workers if not w.stopping]
            for w in active:
                membership.bind(w, now=self._now())
            for w in active:
                owned = [p for p, o in enumerate(self._owner) if o == w]
                if owned:
                    membership.assign(w, owned, now=self._now())
            membership.rebalance_delay_s = self.config.rebalance_delay_ms / 1000.0
            membership.rebalance_now(now=self._now())
            self._pending_moves.extend(self._apply_membership(membership.poll(now=self._now())))
            self._membership = membership
        return self._membership

    def _apply_membership(self, events: Iterable[object]) -> list[tuple[int, int, int]]:
        """Apply the coordinator's direct assignments now; return its handoffs, which need a fence."""
        from rebalancer.consumers import HandoffCompleted, PartitionsAssigned

        moves: list[tuple[int, int, int]] = []
        assigned = False
        for e in events:
            if isinstance(e, PartitionsAssigned):
                for p in e.partitions:
                    self._owner[p] = e.flow  # type: ignore[assignment]
                assigned = True
            elif isinstance(e, HandoffCompleted) and self._owner[e.partition] != e.to_flow:
                moves.append((e.partition, e.from_flow, e.to_flow))  # type: ignore[arg-type]
        if assigned:
            self._publish_scans()
            for w in self._workers:
                self._scheduler.wake(w)
        return moves

    def _sync_membership(self) -> None:
        """Advance the coordinator's timers (holddown) and carry out what it decided."""
        with self._rebalance_lock:
            with self._admin:
                if self._membership is None or self._closed:
                    return
                moves = self._pending_moves + self._apply_membership(self._membership.poll(now=self._now()))
                self._pending_moves = []
            self._handoff(moves)

    def _now(self) -> float:
        """A monotonic clock that never goes backwards between threads (read under the admin lock)."""
        self._clock_last = max(self._clock_last, time.monotonic())
        return self._clock_last

    def _start_control(self) -> None:
        with self._admin:
            if self._control is not None or self._closed:
                return
            if self._membership is None and not (self.config.rebalance_interval_ms > 0 and self._pool_name is None):
                return
            self._control = threading.Thread(target=self._control_loop, name=f"BatchQueue-{self.name}-control",
                                             daemon=True)
            self._control.start()

    def _control_loop(self) -> None:
        interval = self.config.rebalance_interval_ms / 1000.0
        next_rebalance = time.monotonic() + interval if interval > 0 else math.inf
        while True:
            wait = next_rebalance - time.monotonic()
            if self._membership is not None:
                wait = min(wait, 0.01)
            if self._stop_control.wait(max(0.0, wait)):
                return
            try:
                if self._membership is not None:
                    self._sync_membership()
                if time.monotonic() >= next_rebalance:
                    next_rebalance = time.monotonic() + interval
                    if self.rebalancing_enabled:
                        self.rebalance_now()
            except Exception:
                log.exception("BatchQueue[%s]: control task failed", self.name)

    # ------------------------------------------------------------------ stats and shutdown

    def stats(self) -> BatchQueueStats:
        workers = [*self._workers, self._final]
        demand = sum(_count_value(c) for c in self._demand)
        dropped = _count_value(self._dropped)
        rejected = _count_value(self._rejected)
        return BatchQueueStats(
            capacity_per_partition=self._capacity,
            used=tuple(len(p) for p in self._parts),
            produced=demand - dropped - _count_value(self._aborted),
            dispatched=sum(w.dispatched for w in workers),
            dropped=dropped,
            unhandled=sum(w.unhandled for w in workers),
            failed=sum(w.failed for w in workers),
            rejected=rejected,
            owners=tuple(self._owner),
            worker_items=self._last_worker_items if self.rebalancing_enabled else tuple(
                w.items for w in self._workers
            ),
            last_rebalance=self._last_rebalance,
            partition_types={p: tuple(_type_name(t) for t in ts) for p, ts in enumerate(self._types) if ts},
        )

    def _in_flight(self) -> int:
        """produce() calls that were counted but have not yet landed, been dropped or been rejected."""
        landed = sum(len(p) for p in self._parts)  # read the "left" side first: both sides only grow
        landed += sum(w.items for w in (*self._workers, self._final))
        landed += _count_value(self._dropped) + _count_value(self._aborted)
        entered = sum(_count_value(c) for c in self._demand)
        return entered - landed

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop the workers, wait for in-flight dispatch, drain every partition a final time, release
        the scheduler. Nothing accepted is lost; handlers get a last on_idle to flush."""
        with self._admin:
            if self._closed:
                already = True
            else:
                already = False
                self._closed = True
                self._closed_flag[0] = True
        if already:
            self._final.finished.wait(timeout)
            return
        self._stop_control.set()
        if self._control is not None and self._control is not threading.current_thread():
            self._control.join(timeout)
        with self._space:
            self._space.notify_all()
        for w in self._workers:
            w.stopping = True
            self._scheduler.wake(w)
        for w in self._workers:
            self._scheduler.join(w, timeout)
        deadline = time.monotonic() + timeout
        final = self._final
        final.scan = tuple(range(len(self._parts)))
        while True:
            got = [(p, self._drain_all(p)) for p in range(len(self._parts))]
            got = [(p, chunk) for p, chunk in got if chunk]
            if got:
                final.items += sum(len(c) for _, c in got)
                self._dispatch(final, got)
                continue
            settled = self._in_flight() <= 0 and not any(self._parts)
            if settled or time.monotonic() > deadline:
                break
            time.sleep(0.001)  # a producer passed the closed check just before shutdown
        leftover = self._in_flight()
        if leftover > 0:
            log.error("BatchQueue[%s]: %d produce() calls still in flight after shutdown", self.name, leftover)
        if self._single:
            self._notify_idle(final)
        else:
            for h in list(self._handlers.values()):
                if h.on_idle is not None:
                    self._idle_call(h)
        if self._pool_name is not None:
            SHARED_SCHEDULERS.release(self._pool_name)  # the pool closes when its last queue leaves
        else:
            self._scheduler.close()
        final.finished.set()

    def _drain_all(self, p: int) -> list[Any]:
        part = self._parts[p]
        pop = part.popleft
        return list(starmap(pop, repeat((), len(part))))

    def __repr__(self) -> str:
        mode = "single-consumer" if self._single else f"{len(self._handlers)} handlers"
        return (f"BatchQueue({self.name!r}, workers={self.thread_count}, partitions={self.partition_count}, "
                f"{mode})")


def _max_delta_pct(loads: Iterable[float]) -> float:
    values = list(loads)
    if not values or max(values) == 0:
        return 0.0
    return 100.0 * (max(values) - min(values)) / max(values)
