"""Throughput rebalancing while adaptive partitions grow (issue 33, item 4).

A rebalance measures per-partition throughput and reads the ownership table; `add_handler` on an
adaptive queue adds partitions to both. The rebalance must plan over one consistent snapshot, never
raise, and never lose or duplicate an item or run a handler twice at once.
"""

from __future__ import annotations

import threading

import pytest
from queue_helpers import ReentryDetector, item, make_types

from rebalancer.queue import (
    BatchQueueConfig,
    BatchQueueManager,
    BufferStrategy,
    PartitionPolicy,
    ThreadPolicy,
)


@pytest.fixture(autouse=True)
def clean_registry():
    yield
    BatchQueueManager.shutdown_all()


def _config(threads: int = 2) -> BatchQueueConfig:
    return BatchQueueConfig(threads=ThreadPolicy.fixed(threads), partitions=PartitionPolicy.adaptive(multiplier=4),
                            strategy=BufferStrategy.BLOCKING, buffer_size=10_000)


def test_partitions_added_during_the_measurement_are_planned_with_zero_load():
    """Deterministic interleaving: the growth happens inside the rebalance's own measurement (the
    admin lock is re-entrant, so the same thread can add a handler there), which is exactly the
    window in which another thread's growth used to land."""
    q = BatchQueueManager.create("rg-inside", _config())
    types = make_types(40, "Inside")
    violations: list[str] = []
    handlers = [ReentryDetector(violations) for _ in types]
    for t, h in zip(types[:4], handlers[:4]):
        q.add_handler(t, h)
    controller = q._controller
    grown: list[int] = []

    def measure_then_grow() -> list[int]:
        measured = controller.take_throughput()
        before = q.partition_count
        for t, h in zip(types[4:], handlers[4:]):
            q.add_handler(t, h)  # adaptive: each new type adds partitions
        grown.append(q.partition_count - before)
        return measured

    controller.throughput_source = measure_then_grow
    seq = 0
    for _ in range(300):  # one hot type, so the rebalance has something to plan
        q.produce(item(types[0], seq))
        seq += 1
    for t in types[1:4]:
        q.produce(item(t, seq))
        seq += 1
    report = q.rebalance_now()
    assert grown and grown[0] > 0
    assert report.failed is None
    assert len(q.stats().owners) == q.partition_count
    for t in types[4:]:
        q.produce(item(t, seq))
        seq += 1
    BatchQueueManager.shutdown("rg-inside")
    assert sorted(s for h in handlers for s in h.seen) == list(range(seq))
    assert not violations


@pytest.mark.parametrize("round_", range(3))
def test_rebalance_never_raises_while_handlers_grow_the_queue(round_: int):
    """The issue's repro, many iterations: one thread rebalances in a loop while another adds 400
    handler types (each growing the adaptive queue) and produces into them. Whatever the
    interleaving, no rebalance raises, every report's ratios are finite, every item is handled
    exactly once, and no handler runs twice at once."""
    name = f"rg-race-{round_}"
    q = BatchQueueManager.create(name, _config())
    types = make_types(400, f"Race{round_}_")
    violations: list[str] = []
    handlers = [ReentryDetector(violations) for _ in types]
    errors: list[BaseException] = []
    reports = []
    growing = threading.Event()
    done = threading.Event()

    def rebalance_loop() -> None:
        growing.wait()
        try:
            while not done.is_set():
                reports.append(q.rebalance_now())
        except BaseException as exc:  # the assertion below shows it
            errors.append(exc)

    def grow() -> None:
        growing.set()
        seq = 0
        try:
            for t, h in zip(types, handlers):
                q.add_handler(t, h)
                for _ in range(3):
                    q.produce(item(t, seq))
                    seq += 1
        finally:
            done.set()

    threads = [threading.Thread(target=rebalance_loop), threading.Thread(target=grow)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert reports, "the rebalance loop ran at least once"
    assert all(r.ratio_before == r.ratio_before and r.ratio_after == r.ratio_after for r in reports)
    stats = q.stats()
    assert len(stats.owners) == q.partition_count
    assert all(0 <= o < 2 for o in stats.owners)
    BatchQueueManager.shutdown(name)
    assert sorted(s for h in handlers for s in h.seen) == list(range(3 * len(types)))
    assert not violations


def test_an_injected_throughput_of_another_length_is_fitted_to_the_table():
    """Tests and users inject loads through `throughput_source`; a list shorter or longer than the
    ownership table (partitions added since it was measured) is fitted, not an IndexError."""
    q = BatchQueueManager.create("rg-fit", _config())
    types = make_types(8, "Fit")
    for t in types:
        q.add_handler(t, lambda batch: None)
    n = q.partition_count
    controller = q._controller
    for loads in ([100, 0], [100] + [0] * (n + 5)):
        controller.throughput_source = lambda loads=loads: list(loads)
        report = q.rebalance_now()
        assert report.failed is None
        assert len(q.stats().owners) == n


def test_stats_describe_one_set_of_partitions_while_the_queue_grows():
    """The same pattern in `stats()`: its per-partition fields are read together, so `used` and
    `owners` always have one entry per partition, whatever growth runs beside them."""
    q = BatchQueueManager.create("rg-stats", _config())
    types = make_types(400, "Stats")
    mismatched: list[tuple[int, int]] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            s = q.stats()
            if len(s.used) != len(s.owners):
                mismatched.append((len(s.used), len(s.owners)))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for t in types:
            q.add_handler(t, lambda batch: None)
    finally:
        done.set()
        watcher.join()
    assert not mismatched
    s = q.stats()
    assert len(s.used) == len(s.owners) == q.partition_count
