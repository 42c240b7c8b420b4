"""Concurrency: exactly-once delivery under many producers and workers, with re-entry-detecting handlers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from rebalancer.queue import (
    BatchQueueConfig,
    BatchQueueManager,
    BufferStrategy,
    HandlerConsumer,
    PartitionPolicy,
    ThreadPolicy,
)

WaitUntil = Callable[..., bool]


def make_types(n: int, prefix: str) -> list[type]:
    return [type(f"{prefix}{i}", (), {"__slots__": ("id",)}) for i in range(n)]


def make_item(t: type, id_: int) -> object:
    item = t()
    item.id = id_
    return item


class Accumulator(HandlerConsumer):
    """Not thread-safe on purpose: a concurrent call would corrupt `count` and trips the re-entry flag."""

    def __init__(self, expected_type: type) -> None:
        super().__init__()
        self.expected_type = expected_type
        self.inside = False
        self.reentries = 0
        self.wrong_type = 0
        self.count = 0
        self.idle_calls = 0
        self.ids: list[int] = []

    def consume(self, batch: list) -> None:
        if self.inside:
            self.reentries += 1
        self.inside = True
        try:
            count = self.count
            for item in batch:
                if type(item) is not self.expected_type:
                    self.wrong_type += 1
                self.ids.append(item.id)
            time.sleep(0)  # give a concurrent caller its chance to show up
            self.count = count + len(batch)
        finally:
            self.inside = False

    def on_idle(self) -> None:
        if self.inside:
            self.reentries += 1
        self.inside = True
        self.idle_calls += 1
        time.sleep(0)
        self.inside = False


def assert_exactly_once(handlers: list[Accumulator], expected_ids: np.ndarray) -> None:
    delivered = np.sort(np.fromiter((i for h in handlers for i in h.ids), dtype=np.int64))
    expected = np.sort(expected_ids.astype(np.int64))
    assert np.unique(expected).size == expected.size, "test bug: duplicate ids produced"
    lost = np.setdiff1d(expected, delivered).size
    duplicated = delivered.size - np.unique(delivered).size
    assert (lost, duplicated) == (0, 0), f"{lost} items lost, {duplicated} duplicated"
    assert np.array_equal(delivered, expected)


def test_four_producers_a_million_items_exactly_once() -> None:
    producers, per_producer, type_count = 4, 250_000, 200
    total = producers * per_producer
    q = BatchQueueManager.create(
        "CONCURRENCY",
        BatchQueueConfig(
            threads=ThreadPolicy.fixed(4),
            partitions=PartitionPolicy.adaptive(),
            buffer_size=10_000,
            strategy=BufferStrategy.BLOCKING,
            min_idle_ms=1,
            max_idle_ms=20,
        ),
    )
    types = make_types(type_count, "Conc")
    handlers = [Accumulator(t) for t in types]
    for t, h in zip(types, handlers):
        q.add_handler(t, h)
    assert q.thread_count == 4
    assert q.partition_count == PartitionPolicy.adaptive().resolve(4, type_count)

    # Item p*per_producer + j has type (p + j) % type_count: every producer feeds every type.
    batches = [
        [make_item(types[(p + j) % type_count], p * per_producer + j) for j in range(per_producer)]
        for p in range(producers)
    ]
    rejected = [0] * producers
    start = threading.Barrier(producers)

    def produce(p: int) -> None:
        start.wait()
        put = q.produce
        misses = 0
        for item in batches[p]:
            if not put(item):
                misses += 1
        rejected[p] = misses

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert rejected == [0] * producers
    BatchQueueManager.shutdown("CONCURRENCY")

    assert [h.reentries for h in handlers] == [0] * type_count, "a handler was entered by two threads"
    assert sum(h.wrong_type for h in handlers) == 0
    assert [h.count for h in handlers] == [total // type_count] * type_count
    assert_exactly_once(handlers, np.arange(total))
    s = q.stats()
    assert (s.produced, s.dispatched, s.unhandled, s.dropped, s.failed) == (total, total, 0, 0, 0)
    assert s.produced == s.dispatched + s.unhandled
    assert s.total_used == 0


def test_partitions_grow_while_running_without_loss_or_duplication(wait_until: WaitUntil) -> None:
    # 2 threads, adaptive(multiplier=5): threshold 10, so 120 handlers end at 10 + 110/2 = 65 partitions.
    q = BatchQueueManager.create(
        "GROWING",
        BatchQueueConfig(
            threads=ThreadPolicy.fixed(2),
            partitions=PartitionPolicy.adaptive(multiplier=5),
            buffer_size=50_000,
            strategy=BufferStrategy.BLOCKING,
            min_idle_ms=1,
            max_idle_ms=5,
        ),
    )
    assert q.partition_count == 2
    types = make_types(120, "Grow")
    handlers = [Accumulator(t) for t in types]
    registered = [0]  # types[:registered[0]] have handlers; only the adder thread writes it
    for t, h in zip(types[:2], handlers[:2]):
        q.add_handler(t, h)
    registered[0] = 2
    stop = threading.Event()
    accepted: list[list[int]] = [[], []]
    rejected = [0, 0]

    def producer(p: int) -> None:
        j = 0
        while not stop.is_set():
            item_id = 2 * j + p
            if q.produce(make_item(types[j % registered[0]], item_id)):
                accepted[p].append(item_id)
            else:
                rejected[p] += 1
            j += 1
            if j % 500 == 0:
                time.sleep(0.001)

    threads = [threading.Thread(target=producer, args=(p,)) for p in range(2)]
    for t in threads:
        t.start()
    sizes = [q.partition_count]
    for k in range(2, len(types)):
        q.add_handler(types[k], handlers[k])
        registered[0] = k + 1
        sizes.append(q.partition_count)
        time.sleep(0.003)
    time.sleep(0.1)
    stop.set()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert sizes == sorted(sizes) and sizes[-1] == 65 == q.partition_count
    BatchQueueManager.shutdown("GROWING")

    assert rejected == [0, 0]
    total = len(accepted[0]) + len(accepted[1])
    assert total > 1000
    assert sum(h.wrong_type for h in handlers) == 0
    assert [h.reentries for h in handlers] == [0] * len(handlers)
    assert_exactly_once(handlers, np.array(accepted[0] + accepted[1]))
    s = q.stats()
    assert (s.produced, s.dispatched, s.unhandled, s.dropped) == (total, total, 0, 0)


def test_one_handler_object_for_many_types_is_never_entered_twice() -> None:
    # The guarantee is per handler object: one instance registered for 12 types, whose partitions are
    # spread over 4 workers, must still see one call at a time.
    class SharedAccumulator(Accumulator):
        def consume(self, batch: list) -> None:
            if self.inside:
                self.reentries += 1
            self.inside = True
            try:
                count = self.count
                self.ids.extend(item.id for item in batch)
                time.sleep(0.0002)
                self.count = count + len(batch)
            finally:
                self.inside = False

    types = make_types(12, "Shared")
    q = BatchQueueManager.create(
        "SHARED-HANDLER",
        BatchQueueConfig(
            threads=ThreadPolicy.fixed(4),
            partitions=PartitionPolicy.fixed(12),
            buffer_size=100_000,
            min_idle_ms=1,
            max_idle_ms=2,
        ),
    )
    handler = SharedAccumulator(object)
    for t in types:
        q.add_handler(t, handler)
    total = 60_000
    for j in range(total):
        assert q.produce(make_item(types[j % 12], j))
        if j % 5000 == 0:
            time.sleep(0.005)
    BatchQueueManager.shutdown("SHARED-HANDLER")
    assert handler.reentries == 0
    assert handler.count == total
    assert_exactly_once([handler], np.arange(total))


def test_if_possible_under_contention_every_item_is_delivered_or_counted_dropped() -> None:
    producers, per_producer = 4, 50_000
    types = make_types(16, "Drop")
    q = BatchQueueManager.create(
        "DROPPING",
        BatchQueueConfig(
            threads=ThreadPolicy.fixed(2),
            partitions=PartitionPolicy.fixed(8),
            buffer_size=64,
            strategy=BufferStrategy.IF_POSSIBLE,
            min_idle_ms=1,
            max_idle_ms=5,
        ),
    )
    handlers = [Accumulator(t) for t in types]
    for t, h in zip(types, handlers):
        q.add_handler(t, h)
    accepted: list[list[int]] = [[] for _ in range(producers)]
    refused = [0] * producers
    start = threading.Barrier(producers)

    def produce(p: int) -> None:
        start.wait()
        for j in range(per_producer):
            item_id = p * per_producer + j
            if q.produce(make_item(types[item_id % 16], item_id)):
                accepted[p].append(item_id)
            else:
                refused[p] += 1

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    BatchQueueManager.shutdown("DROPPING")
    kept = [i for ids in accepted for i in ids]
    s = q.stats()
    assert s.dropped == sum(refused) > 0, "a 64-slot buffer against 4 producers must drop, and count it"
    assert s.produced == len(kept) == producers * per_producer - sum(refused)
    assert s.produced == s.dispatched + s.unhandled and s.unhandled == 0
    assert [h.reentries for h in handlers] == [0] * 16
    assert_exactly_once(handlers, np.array(kept))
