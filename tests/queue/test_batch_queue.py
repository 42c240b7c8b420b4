"""BatchQueue behaviour (issue 2 §2): partitions, scheduling, the drain loop, handlers, buffers, shutdown.

Waits poll a condition against a generous deadline. Nothing asserts throughput; the backoff tests drive
a drain worker with no thread and check its exact sleeps (they double, stop at the cap, reset on data).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from rebalancer.queue import (
    BatchQueue,
    BatchQueueConfig,
    BatchQueueManager,
    BatchQueueStats,
    BufferStrategy,
    HandlerConsumer,
    PartitionPolicy,
    ThreadPolicy,
)

WaitUntil = Callable[..., bool]


# Items and handlers ------------------------------------------------------------------------------


class Item:
    """A payload with an id (for exactly-once checks) and a routing key (for custom selectors)."""

    __slots__ = ("id", "key")

    def __init__(self, id_: int, key: int = 0) -> None:
        self.id = id_
        self.key = key

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id}, key={self.key})"


def make_types(n: int, prefix: str = "T") -> list[type[Item]]:
    return [type(f"{prefix}{i}", (Item,), {"__slots__": ()}) for i in range(n)]


class GateItem(Item):
    __slots__ = ()


class Alpha(Item):
    __slots__ = ()


class Beta(Item):
    __slots__ = ()


class Gamma(Item):
    __slots__ = ()


class UnregisteredWidgetAlpha(Item):
    __slots__ = ()


class UnregisteredWidgetBeta(Item):
    __slots__ = ()


class Recorder(HandlerConsumer):
    """Records every call. Detects overlapping calls, and its accumulator is deliberately not thread-safe."""

    def __init__(self, hold_s: float = 0.0) -> None:
        super().__init__()
        self.hold_s = hold_s
        self._busy = threading.Lock()
        self.overlaps: list[str] = []
        self.batches: list[list[Any]] = []
        self.count = 0
        self.idle_calls = 0
        self.idle_times: list[float] = []
        self.consume_times: list[float] = []
        self.threads: set[str] = set()

    def _enter(self, what: str) -> None:
        if not self._busy.acquire(blocking=False):
            self.overlaps.append(f"{what} on {threading.current_thread().name}")
            self._busy.acquire()
        self.threads.add(threading.current_thread().name)

    def _leave(self) -> None:
        if self.hold_s:
            time.sleep(self.hold_s)
        self._busy.release()

    def consume(self, batch: list) -> None:
        self._enter("consume")
        try:
            self._record(batch)
        finally:
            self._leave()

    def _record(self, batch: list) -> None:
        self.consume_times.append(time.monotonic())
        self.batches.append(list(batch))
        seen = self.count
        time.sleep(0)  # invite a thread switch inside the read-modify-write
        self.count = seen + len(batch)

    def on_idle(self) -> None:
        self._enter("on_idle")
        try:
            self.idle_times.append(time.monotonic())
            self.idle_calls += 1
        finally:
            self._leave()

    @property
    def items(self) -> list[Any]:
        return [item for batch in self.batches for item in batch]


class Gate(Recorder):
    """Blocks inside its first consume() until released, which stalls the worker that called it."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def _record(self, batch: list) -> None:
        super()._record(batch)
        if not self.entered.is_set():  # still inside consume(): a second caller now counts as an overlap
            self.entered.set()
            assert self.release.wait(10), "gate never released"


def config(**overrides: Any) -> BatchQueueConfig:
    settings: dict[str, Any] = {
        "threads": ThreadPolicy.fixed(1),
        "partitions": PartitionPolicy.fixed(1),
        "buffer_size": 10_000,
        "strategy": BufferStrategy.BLOCKING,
        "min_idle_ms": 1,
        "max_idle_ms": 10,
    }
    settings.update(overrides)
    return BatchQueueConfig(**settings)


def key_selector(item: Any, partition_count: int) -> int:
    return item.key % partition_count


def stall(q: BatchQueue, gate: Gate) -> None:
    """Park the (single) worker inside the gate handler so produced items stay in their partitions."""
    assert q.produce(GateItem(-1))
    assert gate.entered.wait(10), "worker never dispatched the gate item"


def reconciles(s: BatchQueueStats) -> bool:
    return s.produced == s.dispatched + s.unhandled


# Basics, partitions, selectors, stats ----------------------------------------------------------


def test_queue_exposes_name_and_resolved_counts(wait_until: WaitUntil, worker_threads: Any) -> None:
    q = BatchQueueManager.create(
        "basics", config(threads=ThreadPolicy.fixed(3), partitions=PartitionPolicy.fixed(6))
    )
    assert isinstance(q, BatchQueue)
    assert q.name == "basics"
    assert q.thread_count == 3
    assert q.partition_count == 6
    assert wait_until(lambda: len(worker_threads("basics")) == 3)
    s = q.stats()
    assert isinstance(s, BatchQueueStats)
    assert s.total_capacity == 6 * 10_000
    assert (s.total_used, s.produced, s.dispatched, s.dropped, s.unhandled, s.failed) == (0, 0, 0, 0, 0, 0)


def test_adaptive_partitions_grow_with_handlers() -> None:
    # 2 threads x multiplier 2: threshold 4. 0 handlers -> 2 partitions; 3 -> 3; 10 -> 4 + 6/2 = 7.
    q = BatchQueueManager.create(
        "grow",
        config(
            threads=ThreadPolicy.fixed(2), partitions=PartitionPolicy.adaptive(multiplier=2), buffer_size=100
        ),
    )
    assert q.partition_count == 2
    types = make_types(10, "Grow")
    for t in types[:3]:
        q.add_handler(t, Recorder())
    assert q.partition_count == 3
    for t in types[3:]:
        q.add_handler(t, Recorder())
    assert q.partition_count == 7
    assert q.stats().total_capacity == 7 * 100
    assert q.thread_count == 2


def test_fewer_partitions_than_threads_reduces_threads_with_warning(
    caplog: pytest.LogCaptureFixture, wait_until: WaitUntil, worker_threads: Any
) -> None:
    caplog.set_level(logging.WARNING)
    q = BatchQueueManager.create(
        "few", config(threads=ThreadPolicy.fixed(4), partitions=PartitionPolicy.fixed(2))
    )
    assert q.partition_count == 2
    assert q.thread_count == 2
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings, "reducing the thread count must log a warning"
    assert wait_until(lambda: len(worker_threads("few")) == 2)
    time.sleep(0.05)
    assert len(worker_threads("few")) == 2


def test_default_selector_pins_each_type_to_one_partition() -> None:
    q = BatchQueueManager.create("pin", config(partitions=PartitionPolicy.fixed(8), buffer_size=1000))
    gate = Gate()
    q.add_handler(GateItem, gate)
    types = make_types(12, "Pin")
    for t in types:
        q.add_handler(t, Recorder())
    stall(q, gate)
    try:
        home: dict[type, int] = {}
        for round_ in range(2):
            for k, t in enumerate(types):
                before = [q.stats().partition_used(i) for i in range(8)]
                n = 3 + k
                for j in range(n):
                    assert q.produce(t(1000 * round_ + j))
                after = [q.stats().partition_used(i) for i in range(8)]
                delta = {i: after[i] - before[i] for i in range(8) if after[i] != before[i]}
                assert list(delta.values()) == [n], f"{t.__name__} spread over partitions: {delta}"
                (partition,) = delta
                assert home.setdefault(t, partition) == partition, f"{t.__name__} moved partitions"
    finally:
        gate.release.set()


def test_custom_selector_routes_items_and_stats_report_usage() -> None:
    q = BatchQueueManager.create(
        "route", config(partitions=PartitionPolicy.fixed(4), buffer_size=50, selector=key_selector)
    )
    gate = Gate()
    q.add_handler(GateItem, gate)
    sink = Recorder()
    q.add_handler(Alpha, sink)
    stall(q, gate)
    try:
        for key, n in [(1, 5), (2, 3), (3, 1)]:
            for j in range(n):
                assert q.produce(Alpha(j, key))
        s = q.stats()
        assert [s.partition_used(i) for i in range(4)] == [0, 5, 3, 1]
        assert s.total_used == 9
        assert s.total_capacity == 200
        assert s.total_used_percentage == pytest.approx(100.0 * 9 / 200)
        top = s.top_n(2)
        assert [(u.partition, u.used, u.capacity) for u in top] == [(1, 5, 50), (2, 3, 50)]
        assert top[0].percentage == pytest.approx(10.0)
        assert top[1].percentage == pytest.approx(6.0)
        assert len(s.top_n(10)) <= 4
    finally:
        gate.release.set()
    BatchQueueManager.shutdown("route")
    assert sorted(i.id for i in sink.items) == sorted([0, 1, 2, 3, 4, 0, 1, 2, 0])


def test_dedicated_workers_own_partitions_round_robin(wait_until: WaitUntil) -> None:
    seen: list[tuple[str, list[int]]] = []
    lock = threading.Lock()

    def consumer(batch: list) -> None:
        with lock:
            seen.append((threading.current_thread().name, [item.key for item in batch]))

    q = BatchQueueManager.create(
        "rr",
        config(
            threads=ThreadPolicy.fixed(2),
            partitions=PartitionPolicy.fixed(4),
            consumer=consumer,
            selector=key_selector,
        ),
    )
    total = 0
    for round_ in range(20):
        for key in range(4):
            for j in range(5):
                assert q.produce(Item(round_ * 100 + j, key))
                total += 1
        time.sleep(0.002)
    assert wait_until(lambda: sum(len(keys) for _, keys in seen) == total)
    owner: dict[int, set[str]] = {}
    for thread, keys in seen:
        for key in keys:
            owner.setdefault(key, set()).add(thread)
    assert all(len(threads) == 1 for threads in owner.values()), owner
    by_thread: dict[str, set[int]] = {}
    for key, (thread,) in owner.items():
        by_thread.setdefault(thread, set()).add(key)
    assert sorted(sorted(keys) for keys in by_thread.values()) == [[0, 2], [1, 3]]
    assert all(thread.startswith("BatchQueue-rr-") for thread in by_thread)


# Drain loop -------------------------------------------------------------------------------------


def test_single_consumer_receives_whole_drained_batch() -> None:
    entered, release = threading.Event(), threading.Event()
    calls: list[list[Any]] = []

    def consumer(batch: list) -> None:
        calls.append(list(batch))
        if len(calls) == 1:
            entered.set()
            assert release.wait(10)

    q = BatchQueueManager.create(
        "single", config(partitions=PartitionPolicy.fixed(4), selector=key_selector, consumer=consumer)
    )
    assert q.produce(Alpha(-1))
    assert entered.wait(10)
    produced = [t(j, key=j) for j in range(40) for t in (Alpha, Beta, Gamma)]
    for item in produced:
        assert q.produce(item)
    release.set()
    BatchQueueManager.shutdown("single")
    assert len(calls) == 2, "everything queued during the stall is one pass, hence one batch"
    assert sorted(calls[1], key=lambda i: (type(i).__name__, i.id)) == sorted(
        produced, key=lambda i: (type(i).__name__, i.id)
    )
    assert {type(i) for i in calls[1]} == {Alpha, Beta, Gamma}


@pytest.mark.parametrize("spread", [False, True], ids=["default-selector", "types-span-partitions"])
def test_handler_map_one_call_per_type_per_pass_in_order(spread: bool) -> None:
    # With `spread`, every type is scattered over all 4 partitions: one call per type needs real grouping.
    selector = (lambda item, n: item.id % n) if spread else None
    q = BatchQueueManager.create("map", config(partitions=PartitionPolicy.fixed(4), selector=selector))
    gate = Gate()
    q.add_handler(GateItem, gate)
    handlers = {t: Recorder() for t in (Alpha, Beta, Gamma)}
    for t, h in handlers.items():
        q.add_handler(t, h)
    stall(q, gate)
    expected: dict[type, list[int]] = {t: [] for t in handlers}
    for j in range(30):
        for t in handlers:
            if j < 10 * (1 + list(handlers).index(t)):
                assert q.produce(t(j))
                expected[t].append(j)
    assert q.produce(GateItem(99))
    gate.release.set()
    BatchQueueManager.shutdown("map")
    for t, h in handlers.items():
        assert len(h.batches) == 1, f"{t.__name__}: one call per type per pass, got {len(h.batches)}"
        ids = [i.id for i in h.batches[0]]
        if spread:
            assert sorted(ids) == expected[t]
        else:
            assert ids == expected[t], "a type pinned to one partition keeps its produce order"
        assert all(type(i) is t for i in h.batches[0])
    assert [[i.id for i in b] for b in gate.batches] == [[-1], [99]]


def test_on_idle_called_when_idle_in_both_modes(wait_until: WaitUntil) -> None:
    handler = Recorder()
    q = BatchQueueManager.create(
        "idle-map", config(threads=ThreadPolicy.fixed(2), partitions=PartitionPolicy.fixed(2))
    )
    q.add_handler(Alpha, handler)
    for j in range(10):
        assert q.produce(Alpha(j))
    assert wait_until(lambda: handler.count == 10)
    consumed_at = handler.consume_times[-1]
    assert wait_until(lambda: any(t > consumed_at for t in handler.idle_times))

    consumer = Recorder()
    q2 = BatchQueueManager.create("idle-single", config(consumer=consumer))
    assert q2.produce(Beta(1))
    assert wait_until(lambda: consumer.count == 1)
    consumed_at = consumer.consume_times[-1]
    assert wait_until(lambda: any(t > consumed_at for t in consumer.idle_times))
    assert not handler.overlaps and not consumer.overlaps


def test_on_idle_reaches_every_handler_and_never_overlaps_consume(wait_until: WaitUntil) -> None:
    q = BatchQueueManager.create(
        "idle-owned",
        config(
            threads=ThreadPolicy.fixed(3), partitions=PartitionPolicy.fixed(6), min_idle_ms=1, max_idle_ms=2
        ),
    )
    types = make_types(12, "Own")
    handlers = [Recorder(hold_s=0.0005) for _ in types]
    for t, h in zip(types, handlers):
        q.add_handler(t, h)
    for j in range(600):
        assert q.produce(types[j % 12](j))
    assert wait_until(lambda: all(h.count == 50 for h in handlers))
    assert wait_until(lambda: all(h.idle_calls >= 3 for h in handlers))
    BatchQueueManager.shutdown("idle-owned")
    assert [h.overlaps for h in handlers] == [[] for _ in handlers]


def _lone_worker(min_idle: float, max_idle: float) -> tuple[Any, Any, Any]:
    """A drain worker with no thread: `run()` is called by the test, so the backoff is exact."""
    from rebalancer.queue import PartitionSelector
    from rebalancer.queue._ownership import OwnershipTable
    from rebalancer.queue._partitions import Partitions
    from rebalancer.queue._worker import Dispatcher, DrainWorker, HandlerRecord

    table, admin = OwnershipTable(), threading.RLock()
    parts = Partitions("lone", 100, True, PartitionSelector.type_hash(), table, admin)
    dispatch = Dispatcher("lone", parts, None, None, max_idle)
    worker = DrainWorker(0, parts, table, dispatch, min_idle, max_idle, scheduler=None)
    handler = Recorder()
    with admin:
        parts.add(0)
        parts.pin(Alpha, 0)
        dispatch.handlers[Alpha] = HandlerRecord(handler.consume, handler.on_idle, threading.Lock())
        dispatch.reindex()
    return worker, parts.make_produce(), handler


def test_idle_backoff_doubles_up_to_the_cap() -> None:
    worker, _produce, _handler = _lone_worker(0.001, 0.1)
    delays = [worker.run() for _ in range(10)]
    assert delays == pytest.approx([0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.1, 0.1, 0.1])


def test_idle_backoff_resets_on_data() -> None:
    worker, produce, handler = _lone_worker(0.002, 0.5)
    for _ in range(12):
        worker.run()
    assert worker.run() == 0.5
    assert produce(Alpha(1))
    assert worker.run() == 0.002  # the pass with data, then an empty pass: back to min_idle
    assert handler.count == 1
    assert worker.run() == 0.004


# Handlers: concurrency, errors, unhandled -------------------------------------------------------


def test_handler_never_concurrent_even_when_a_type_spans_workers(wait_until: WaitUntil) -> None:
    # Every type is sprayed over all 8 partitions, hence over all 4 workers: the queue, not the
    # selector, must keep each handler single-threaded (consume and on_idle alike).
    q = BatchQueueManager.create(
        "spread",
        config(
            threads=ThreadPolicy.fixed(4),
            partitions=PartitionPolicy.fixed(8),
            selector=lambda item, n: item.id % n,
            min_idle_ms=1,
            max_idle_ms=2,
        ),
    )
    types = make_types(5, "Spread")
    handlers = {t: Recorder(hold_s=0.0002) for t in types}
    for t, h in handlers.items():
        q.add_handler(t, h)
    n = 20_000
    for j in range(n):
        assert q.produce(types[j % 5](j))
        if j % 2000 == 0:
            time.sleep(0.01)  # let workers go idle now and then, so on_idle interleaves with consume
    BatchQueueManager.shutdown("spread")
    assert {t.__name__: h.overlaps for t, h in handlers.items()} == {t.__name__: [] for t in types}
    delivered = sorted(i.id for h in handlers.values() for i in h.items)
    assert delivered == list(range(n))
    for t, h in handlers.items():
        assert all(type(i) is t for i in h.items)
        assert h.count == n // 5
    s = q.stats()
    assert (s.produced, s.dispatched, s.unhandled, s.failed) == (n, n, 0, 0)


def test_shutdown_final_drain_never_runs_beside_a_dispatching_worker() -> None:
    # Upstream's bug: shutdown's final drain ran on the caller's thread while a worker was still inside a
    # handler. Here a worker sits inside the gate handler, more gate items wait in its partition and a
    # producer keeps the other handlers busy when shutdown starts.
    q = BatchQueueManager.create(
        "shutdown-race",
        config(threads=ThreadPolicy.fixed(2), partitions=PartitionPolicy.fixed(4), buffer_size=1_000_000),
    )
    gate = Gate()
    q.add_handler(GateItem, gate)
    types = make_types(3, "Race")
    handlers = {t: Recorder(hold_s=0.002) for t in types}
    for t, h in handlers.items():
        q.add_handler(t, h)
    stall(q, gate)
    for j in range(50):
        assert q.produce(GateItem(j))
    accepted: list[int] = []
    rejected = [0]
    stop = threading.Event()

    def producer() -> None:
        j = 0
        while not stop.is_set() and j < 500_000:
            if q.produce(types[j % 3](j)):
                accepted.append(j)
            else:
                rejected[0] += 1
                if rejected[0] > 100:
                    return
            j += 1

    thread = threading.Thread(target=producer)
    thread.start()
    time.sleep(0.1)
    done = threading.Event()
    shutter = threading.Thread(target=lambda: (BatchQueueManager.shutdown("shutdown-race"), done.set()))
    shutter.start()
    time.sleep(0.2)
    assert not done.is_set(), "shutdown must wait for the worker inside the gate handler"
    gate.release.set()
    shutter.join(10)
    stop.set()
    thread.join(10)
    assert done.is_set() and not thread.is_alive()
    assert rejected[0] > 0 or len(accepted) == 500_000
    assert gate.overlaps == [], "the final drain called the gate handler while a worker was inside it"
    assert {t.__name__: h.overlaps for t, h in handlers.items()} == {t.__name__: [] for t in types}
    assert [i.id for i in gate.items] == list(range(-1, 50))
    delivered = sorted(i.id for h in handlers.values() for i in h.items)
    assert delivered == accepted, "every accepted item is delivered exactly once"
    s = q.stats()
    assert s.produced == len(accepted) + 51 == s.dispatched
    assert s.total_used == 0


def test_single_consumer_is_called_from_workers_concurrently(wait_until: WaitUntil) -> None:
    # Single-consumer mode with several workers calls the consumer concurrently (documented; the
    # consumer must be thread-safe): both workers must be inside it at once to pass the barrier.
    barrier = threading.Barrier(2, timeout=10)
    threads_seen: set[str] = set()
    lock = threading.Lock()
    delivered: list[int] = []

    def consumer(batch: list) -> None:
        with lock:
            threads_seen.add(threading.current_thread().name)
            delivered.extend(i.id for i in batch)
        if batch[0].id < 2:
            barrier.wait()

    q = BatchQueueManager.create(
        "jdbc",
        config(
            threads=ThreadPolicy.fixed(2),
            partitions=PartitionPolicy.fixed(2),
            consumer=consumer,
            selector=key_selector,
        ),
    )
    assert q.produce(Item(0, key=0))
    assert q.produce(Item(1, key=1))
    assert wait_until(lambda: len(delivered) == 2)
    assert not barrier.broken
    assert len(threads_seen) == 2


def test_single_consumer_on_idle_never_concurrent_with_itself(wait_until: WaitUntil) -> None:
    class IdleProbe(HandlerConsumer):
        def __init__(self) -> None:
            super().__init__()
            self._busy = threading.Lock()
            self.overlaps = 0
            self.idle_calls = 0
            self.items = 0
            self._items_lock = threading.Lock()

        def consume(self, batch: list) -> None:
            with self._items_lock:  # consume may be concurrent in this mode; on_idle may not
                self.items += len(batch)

        def on_idle(self) -> None:
            if not self._busy.acquire(blocking=False):
                self.overlaps += 1
                self._busy.acquire()
            try:
                self.idle_calls += 1
                time.sleep(0.003)
            finally:
                self._busy.release()

    probe = IdleProbe()
    q = BatchQueueManager.create(
        "idle-single-4",
        config(
            threads=ThreadPolicy.fixed(4), partitions=PartitionPolicy.fixed(4), consumer=probe, max_idle_ms=2
        ),
    )
    for j in range(200):
        assert q.produce(Item(j, key=j))
    assert wait_until(lambda: probe.items == 200 and probe.idle_calls >= 40)
    BatchQueueManager.shutdown("idle-single-4")
    assert probe.overlaps == 0


def test_unhandled_types_counted_and_logged_once_per_type(
    caplog: pytest.LogCaptureFixture, wait_until: WaitUntil
) -> None:
    caplog.set_level(logging.DEBUG)
    q = BatchQueueManager.create(
        "unhandled", config(threads=ThreadPolicy.fixed(2), partitions=PartitionPolicy.fixed(4))
    )
    handled = Recorder()
    q.add_handler(Alpha, handled)
    for round_ in range(3):
        for j in range(40):
            assert q.produce(UnregisteredWidgetAlpha(j))
            assert q.produce(Alpha(j))
            if j % 2 == 0:
                assert q.produce(UnregisteredWidgetBeta(j))
        assert wait_until(lambda r=round_: q.stats().unhandled == 60 * (r + 1))
    BatchQueueManager.shutdown("unhandled")
    s = q.stats()
    assert s.unhandled == 180
    assert s.dispatched == 120 == handled.count
    assert s.produced == 300 == s.dispatched + s.unhandled
    for name in ("UnregisteredWidgetAlpha", "UnregisteredWidgetBeta"):
        mentions = [r for r in caplog.records if name in r.getMessage()]
        assert len(mentions) == 1, f"{name} logged {len(mentions)} times"


def test_handler_exception_goes_to_error_handler_and_worker_survives(wait_until: WaitUntil) -> None:
    errors: list[tuple[list[Any], BaseException]] = []

    class Boom(RuntimeError):
        pass

    class Flaky(Recorder):
        def consume(self, batch: list) -> None:
            super().consume(batch)
            if any(i.id < 0 for i in batch):
                raise Boom(f"bad batch of {len(batch)}")

    q = BatchQueueManager.create(
        "errors", config(error_handler=lambda batch, exc: errors.append((list(batch), exc)))
    )
    flaky, steady = Flaky(), Recorder()
    q.add_handler(Alpha, flaky)
    q.add_handler(Beta, steady)
    assert q.produce(Alpha(-1))
    assert wait_until(lambda: len(errors) == 1)
    batch, exc = errors[0]
    assert isinstance(exc, Boom)
    assert [i.id for i in batch] == [-1]
    assert batch == flaky.batches[0]
    for j in range(10):
        assert q.produce(Alpha(j))
        assert q.produce(Beta(j))
    assert wait_until(lambda: flaky.count == 11 and steady.count == 10), (
        "the worker must survive the exception"
    )
    BatchQueueManager.shutdown("errors")
    s = q.stats()
    assert s.failed == 1
    assert s.dispatched == 21 == s.produced
    assert len(errors) == 1


def test_handler_exception_without_error_handler_is_logged(
    caplog: pytest.LogCaptureFixture, wait_until: WaitUntil
) -> None:
    caplog.set_level(logging.DEBUG)

    def explode(batch: list) -> None:
        raise ValueError("distinctive-handler-failure")

    q = BatchQueueManager.create("errors-logged", config())
    q.add_handler(Alpha, explode)
    ok = Recorder()
    q.add_handler(Beta, ok)
    for j in range(5):
        assert q.produce(Alpha(j))
    assert wait_until(lambda: q.stats().failed == 5)
    assert q.produce(Beta(1))
    assert wait_until(lambda: ok.count == 1)
    logged = [
        r
        for r in caplog.records
        if r.levelno >= logging.WARNING
        and (
            "distinctive-handler-failure" in r.getMessage()
            or (r.exc_info and "distinctive" in str(r.exc_info[1]))
        )
    ]
    assert logged, "a handler exception without an error_handler must be logged"
    BatchQueueManager.shutdown("errors-logged")
    s = q.stats()
    assert (s.produced, s.dispatched, s.failed) == (6, 6, 5)


def test_base_exception_from_handler_goes_to_error_handler_and_worker_survives(wait_until: WaitUntil) -> None:
    # error_handler takes a BaseException: a handler may raise one that is not an Exception, such as
    # asyncio.CancelledError from async client code. The batch is still failed, the worker still lives.
    errors: list[tuple[list[Any], BaseException]] = []

    def cancelled_once(batch: list) -> None:
        if batch[0].id == 0:
            raise asyncio.CancelledError("client shut down")

    q = BatchQueueManager.create(
        "base-exception", config(error_handler=lambda batch, exc: errors.append((list(batch), exc)))
    )
    ok = Recorder()
    q.add_handler(Alpha, cancelled_once)
    q.add_handler(Beta, ok)
    assert q.produce(Alpha(0))
    assert wait_until(lambda: len(errors) == 1, timeout=5)
    assert isinstance(errors[0][1], asyncio.CancelledError)
    assert [i.id for i in errors[0][0]] == [0]
    assert q.produce(Alpha(1)) and q.produce(Beta(2))
    assert wait_until(lambda: ok.count == 1, timeout=5), "the drain worker must survive a BaseException"
    BatchQueueManager.shutdown("base-exception")
    s = q.stats()
    assert (s.produced, s.dispatched, s.failed) == (3, 3, 1)


def test_on_idle_exception_is_logged_and_worker_survives(
    caplog: pytest.LogCaptureFixture, wait_until: WaitUntil
) -> None:
    caplog.set_level(logging.DEBUG)

    class BadIdle(Recorder):
        def on_idle(self) -> None:
            super().on_idle()
            raise RuntimeError("distinctive-idle-failure")

    handler = BadIdle()
    q = BatchQueueManager.create("idle-raises", config())
    q.add_handler(Alpha, handler)
    assert q.produce(Alpha(0))
    assert wait_until(lambda: handler.count == 1 and handler.idle_calls >= 2)
    assert q.produce(Alpha(1))
    assert wait_until(lambda: handler.count == 2), "the drain worker must survive an on_idle exception"
    assert any(
        r.levelno >= logging.WARNING
        and (
            "distinctive-idle-failure" in r.getMessage()
            or (r.exc_info and "distinctive" in str(r.exc_info[1]))
        )
        for r in caplog.records
    )


def test_single_consumer_exception_goes_to_error_handler(wait_until: WaitUntil) -> None:
    errors: list[tuple[list[Any], BaseException]] = []
    good: list[int] = []

    def consumer(batch: list) -> None:
        if batch[0].id == 0:
            raise KeyError("first")
        good.extend(i.id for i in batch)

    q = BatchQueueManager.create(
        "errors-single", config(consumer=consumer, error_handler=lambda b, e: errors.append((list(b), e)))
    )
    assert q.produce(Alpha(0))
    assert wait_until(lambda: len(errors) == 1)
    assert q.produce(Alpha(1))
    assert wait_until(lambda: good == [1])
    assert [i.id for i in errors[0][0]] == [0] and isinstance(errors[0][1], KeyError)
    assert q.stats().failed == 1


# Buffers and shutdown ---------------------------------------------------------------------------


def test_blocking_blocks_producer_while_partition_full(wait_until: WaitUntil) -> None:
    q = BatchQueueManager.create("blocking", config(buffer_size=4, strategy=BufferStrategy.BLOCKING))
    gate = Gate()
    q.add_handler(GateItem, gate)
    sink = Recorder()
    q.add_handler(Alpha, sink)
    stall(q, gate)
    for j in range(4):
        assert q.produce(Alpha(j))
    s = q.stats()
    assert s.total_used == 4 and s.total_used_percentage == pytest.approx(100.0)
    result: list[bool] = []
    producer = threading.Thread(target=lambda: result.append(q.produce(Alpha(4))))
    producer.start()
    time.sleep(0.3)
    assert producer.is_alive() and result == [], "BLOCKING produce must wait while the partition is full"
    gate.release.set()
    producer.join(10)
    assert result == [True]
    assert wait_until(lambda: sink.count == 5)
    assert [i.id for i in sink.items] == [0, 1, 2, 3, 4]
    s = q.stats()
    assert (s.produced, s.dispatched, s.dropped) == (6, 6, 0), (
        "the blocked item counts as produced once accepted"
    )


def test_if_possible_drops_when_full_and_counts(wait_until: WaitUntil) -> None:
    q = BatchQueueManager.create("drop", config(buffer_size=4, strategy=BufferStrategy.IF_POSSIBLE))
    gate = Gate()
    q.add_handler(GateItem, gate)
    sink = Recorder()
    q.add_handler(Alpha, sink)
    stall(q, gate)
    results = [q.produce(Alpha(j)) for j in range(10)]
    assert results == [True] * 4 + [False] * 6
    s = q.stats()
    assert s.dropped == 6
    assert s.produced == 5  # the gate item and four Alphas
    gate.release.set()
    assert wait_until(lambda: sink.count == 4)
    BatchQueueManager.shutdown("drop")
    s = q.stats()
    assert (s.produced, s.dispatched, s.dropped, s.unhandled) == (5, 5, 6, 0)
    assert [i.id for i in sink.items] == [0, 1, 2, 3]


def test_produce_after_shutdown_returns_false() -> None:
    q = BatchQueueManager.create("closed", config())
    sink = Recorder()
    q.add_handler(Alpha, sink)
    assert q.produce(Alpha(1))
    BatchQueueManager.shutdown("closed")
    assert q.produce(Alpha(2)) is False
    s = q.stats()
    assert s.produced == 1 == s.dispatched
    assert [i.id for i in sink.items] == [1]

    q2 = BatchQueueManager.create("closed-direct", config(strategy=BufferStrategy.IF_POSSIBLE))
    q2.add_handler(Alpha, Recorder())
    q2.shutdown()
    assert q2.produce(Alpha(3)) is False
    assert q2.stats().produced == 0


def test_shutdown_waits_for_in_flight_dispatch_then_drains_everything(
    wait_until: WaitUntil, worker_threads: Any
) -> None:
    q = BatchQueueManager.create(
        "drain", config(threads=ThreadPolicy.fixed(2), partitions=PartitionPolicy.fixed(4), max_idle_ms=50)
    )
    gate = Gate()
    q.add_handler(GateItem, gate)
    types = make_types(6, "Drain")
    handlers = {t: Recorder() for t in types}
    for t, h in handlers.items():
        q.add_handler(t, h)
    stall(q, gate)
    n = 3000
    for j in range(n):
        assert q.produce(types[j % 6](j))
    for j in range(7):
        assert q.produce(UnregisteredWidgetAlpha(j))
    done = threading.Event()
    shutter = threading.Thread(target=lambda: (BatchQueueManager.shutdown("drain"), done.set()))
    shutter.start()
    time.sleep(0.2)
    assert not done.is_set(), "shutdown must wait for the dispatch in flight"
    gate.release.set()
    shutter.join(10)
    assert done.is_set()
    delivered = Counter(i.id for h in handlers.values() for i in h.items)
    assert sorted(delivered) == list(range(n)) and set(delivered.values()) == {1}
    s = q.stats()
    assert s.total_used == 0
    assert (s.produced, s.dispatched, s.unhandled, s.failed, s.dropped) == (n + 8, n + 1, 7, 0, 0)
    assert reconciles(s)
    assert wait_until(lambda: not worker_threads("drain")), "shutdown stops the drain workers"
    assert BatchQueueManager.get("drain") is None


def test_producer_blocked_at_shutdown_is_released_and_counts_reconcile(wait_until: WaitUntil) -> None:
    # A BLOCKING producer waiting on a full partition when shutdown starts must not hang: either its
    # item is accepted and delivered, or produce() returns False and the item is not counted as produced.
    q = BatchQueueManager.create(
        "blocked-at-shutdown", config(buffer_size=2, strategy=BufferStrategy.BLOCKING)
    )
    gate = Gate()
    q.add_handler(GateItem, gate)
    sink = Recorder()
    q.add_handler(Alpha, sink)
    stall(q, gate)
    assert q.produce(Alpha(0)) and q.produce(Alpha(1))
    result: list[bool] = []
    producer = threading.Thread(target=lambda: result.append(q.produce(Alpha(2))))
    producer.start()
    time.sleep(0.1)
    assert producer.is_alive(), "the partition is full: the producer must be blocked"
    shutter = threading.Thread(target=BatchQueueManager.shutdown, args=("blocked-at-shutdown",))
    shutter.start()
    time.sleep(0.1)
    gate.release.set()
    shutter.join(10)
    producer.join(10)
    assert not shutter.is_alive() and not producer.is_alive()
    assert len(result) == 1
    expected = [0, 1, 2] if result[0] else [0, 1]
    assert sorted(i.id for i in sink.items) == expected
    s = q.stats()
    assert s.produced == len(expected) + 1 == s.dispatched
    assert reconciles(s)
