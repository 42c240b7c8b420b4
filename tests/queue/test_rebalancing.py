"""Throughput rebalancing inside the BatchQueue: the fenced handoff and its two upstream defects."""

from __future__ import annotations

import threading
import time

import pytest
from queue_helpers import ReentryDetector, item, make_types, wait_until

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


def skewed_config(**kw) -> BatchQueueConfig:
    base = dict(threads=ThreadPolicy.fixed(4), partitions=PartitionPolicy.adaptive(), buffer_size=5_000,
                strategy=BufferStrategy.BLOCKING, min_idle_ms=1, max_idle_ms=50)
    base.update(kw)
    return BatchQueueConfig(**base)


def test_rebalance_now_moves_hot_partitions_apart_and_reports():
    q = BatchQueueManager.create("rb-basic", skewed_config())
    types = make_types(8)
    violations: list[str] = []
    handlers = [ReentryDetector(violations) for _ in types]
    for t, h in zip(types, handlers):
        q.add_handler(t, h)
    # partitions 0 and 4 are both on worker 0 (round robin); make them the only hot ones
    seq = 0
    for _ in range(200):
        for k in (0, 4):
            q.produce(item(types[k], seq))
            seq += 1
    for k in (1, 2, 3, 5, 6, 7):
        q.produce(item(types[k], seq))
        seq += 1
    assert q.stats().owners[0] == q.stats().owners[4] == 0
    report = q.rebalance_now()
    assert report.moved >= 1
    assert report.ratio_after < report.ratio_before
    owners = q.stats().owners
    assert owners[0] != owners[4]
    assert sorted(set(owners)) == [0, 1, 2, 3]
    assert q.stats().last_rebalance == report
    BatchQueueManager.shutdown("rb-basic")
    assert sum(len(h.seen) for h in handlers) == seq
    assert not violations


def test_rebalance_is_ignored_with_one_worker_or_a_shared_scheduler():
    single = BatchQueueManager.create("rb-one", skewed_config(threads=ThreadPolicy.fixed(1),
                                                              rebalance_interval_ms=10))
    shared = BatchQueueManager.create("rb-shared", skewed_config(threads=None,
                                                                 shared_scheduler=("RB_POOL", ThreadPolicy.fixed(2)),
                                                                 rebalance_interval_ms=10))
    for q in (single, shared):
        assert not q.rebalancing_enabled
        report = q.rebalance_now()
        assert report.moved == 0 and report.skipped


def test_fence_is_bounded_by_one_pass_under_continuous_load():
    """Upstream waited for the old owner's whole drain *run*, which never ends under load."""
    max_idle_ms = 50
    q = BatchQueueManager.create("rb-fence", skewed_config(max_idle_ms=max_idle_ms, buffer_size=2_000))
    types = make_types(8, "F")
    violations: list[str] = []
    handlers = [ReentryDetector(violations, pause=0.001) for _ in types]
    for t, h in zip(types, handlers):
        q.add_handler(t, h)
    stop = threading.Event()
    produced = [0, 0]

    def producer(k: int, hot: tuple[int, ...]) -> None:
        n = 0
        while not stop.is_set():
            for j in hot:
                q.produce(item(types[j], n))
            n += 1
        produced[k] = n * len(hot)

    # keep every partition busy, partitions 0 and 4 (both on worker 0) much busier
    threads = [threading.Thread(target=producer, args=(0, (0, 4, 0, 4, 0, 4))),
               threading.Thread(target=producer, args=(1, (1, 2, 3, 5, 6, 7)))]
    for t in threads:
        t.start()
    # the load is injected: partitions 0 and 4 (both on worker 0) are hot, so a move is certain
    q._controller.throughput_source = lambda: [100, 1, 1, 1, 100, 1, 1, 1]
    try:
        time.sleep(0.4)
        report = q.rebalance_now()  # the producers keep going: old owners never see an empty pass
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert report.moved >= 1, report
    # one pass here is a few handler calls of ~1 ms plus draining (generous margin for a slow CI
    # host); the upstream defect waits for a drain *run*, which never ends while the producers run,
    # so it would hit the 30 s fence timeout instead
    assert report.wait_ms < max_idle_ms + 1000, report
    BatchQueueManager.shutdown("rb-fence")
    assert not violations


def test_partition_growth_after_rebalance_keeps_every_partition_drained():
    """Upstream rebuilt per-worker partition lists round-robin on growth, orphaning partitions."""
    q = BatchQueueManager.create("rb-grow", skewed_config())
    first = make_types(8, "G")
    violations: list[str] = []
    handlers = {t: ReentryDetector(violations) for t in first}
    for t in first:
        q.add_handler(t, handlers[t])
    for n in range(300):
        q.produce(item(first[0], n))
        q.produce(item(first[4], n))
    assert wait_until(lambda: q.stats().total_used == 0)
    report = q.rebalance_now()
    assert report.moved >= 1
    before = q.partition_count
    more = make_types(40, "H")
    for t in more:
        handlers[t] = ReentryDetector(violations)
        q.add_handler(t, handlers[t])
    assert q.partition_count > before
    owners = q.stats().owners
    assert len(owners) == q.partition_count and all(0 <= o < 4 for o in owners)
    every = first + more
    for t in every:
        for n in range(50):
            q.produce(item(t, n))
    assert wait_until(lambda: all(len(handlers[t].seen) == (350 if t in (first[0], first[4]) else 50)
                                  for t in every), timeout=10)
    assert q.stats().total_used == 0
    assert not violations


def test_stress_rebalancing_every_10ms_keeps_exactly_once_and_no_reentry():
    workers, ntypes, total = 8, 300, 500_000
    q = BatchQueueManager.create("rb-stress", skewed_config(threads=ThreadPolicy.fixed(workers),
                                                            rebalance_interval_ms=10, buffer_size=2_000,
                                                            max_idle_ms=5))
    types = make_types(ntypes, "S")
    violations: list[str] = []
    handlers = [ReentryDetector(violations) for _ in types]
    for t, h in zip(types, handlers):
        q.add_handler(t, h)
    # skewed and shifting: the hot types change halfway, so rebalances keep moving partitions
    producers = 4
    per = total // producers

    def producer(k: int) -> None:
        for n in range(per):
            seq = k * per + n
            hot = (seq * 7) % 13 if seq < total // 2 else 100 + (seq * 7) % 13
            t = types[hot] if n % 3 else types[seq % ntypes]
            assert q.produce(item(t, seq))

    threads = [threading.Thread(target=producer, args=(k,)) for k in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    moved_some = q.stats().last_rebalance is not None
    BatchQueueManager.shutdown("rb-stress")
    seen = [s for h in handlers for s in h.seen]
    assert len(seen) == total
    assert len(set(seen)) == total
    assert not violations
    stats = q.stats()
    assert stats.produced == stats.dispatched + stats.unhandled == total
    assert moved_some
