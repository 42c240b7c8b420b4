"""The BatchQueue core's invariants (issue 10): nothing left unowned, flush-on-idle under load,
the seed's selectors, per-interval stats, and each defect found by the adversarial suite.

Loads are injected (`throughput_source`) and stalls are Events the test releases, so no assertion
depends on thread timing; deadlines are generous upper bounds for a loaded 2-core machine.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from queue_helpers import ReentryDetector, item, make_types, wait_until

from rebalancer.queue import (
    BatchQueueConfig,
    BatchQueueManager,
    BufferStrategy,
    HandlerConsumer,
    PartitionPolicy,
    PartitionSelector,
    ThreadPolicy,
)

SAFETY_S = 20.0  # a stalled handler is always released after this long, so a regression fails, not hangs


def cfg(**kw) -> BatchQueueConfig:
    base = dict(threads=ThreadPolicy.fixed(2), partitions=PartitionPolicy.fixed(4), buffer_size=1_000,
                strategy=BufferStrategy.BLOCKING, min_idle_ms=1, max_idle_ms=20)
    base.update(kw)
    return BatchQueueConfig(**base)


class Stall(HandlerConsumer):
    """consume() blocks on the first call until released; records every batch."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.batches: list[list] = []
        self.calls_after_release = 0
        threading.Timer(SAFETY_S, self.release.set).start()

    def consume(self, batch: list) -> None:
        self.batches.append(batch)
        if len(self.batches) == 1:
            self.entered.set()
            self.release.wait()


class Count(HandlerConsumer):
    def __init__(self) -> None:
        self.seen: list = []
        self.idle_calls = 0
        self.lock = threading.Lock()

    def consume(self, batch: list) -> None:
        with self.lock:
            self.seen.extend(batch)

    def on_idle(self) -> None:
        self.idle_calls += 1


@contextlib.contextmanager
def continuous_load(produce, t: type) -> Iterator[threading.Thread]:
    """A producer thread that keeps `t`'s partition non-empty until the block ends."""
    stop = threading.Event()

    def load() -> None:
        n = 0
        while not stop.is_set():
            produce(item(t, n))
            n += 1

    producer = threading.Thread(target=load)
    producer.start()
    try:
        yield producer
    finally:
        stop.set()
        producer.join()


def live_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(f"BatchQueue-{name}-") and t.is_alive()]


# -- ownership: a failed fence reverts, nothing is ever unowned ----------------------------------

def test_fence_timeout_reverts_its_moves_and_the_queue_keeps_draining(caplog):
    q = BatchQueueManager.create("fence-timeout", cfg(fence_timeout_ms=200))
    types = make_types(4, "FT")
    stall, others = Stall(), [Count() for _ in range(3)]
    for t, h in zip(types, [stall, *others]):
        q.add_handler(t, h)
    assert q.stats().owners == (0, 1, 0, 1)
    assert q.produce(item(types[0], 0))
    assert stall.entered.wait(10)  # worker 0 is stuck inside the handler of partition 0
    q._controller.throughput_source = lambda: [100, 1, 100, 1]  # worker 0 holds both hot partitions
    with caplog.at_level(logging.WARNING, logger="rebalancer.queue"):
        report = q.rebalance_now()
    assert report.moved == 0 and report.skipped is None
    assert report.failed is not None and "fence timed out after 200 ms" in report.failed, report
    assert q.stats().owners == (0, 1, 0, 1)  # given back: never -1
    assert any("fence timed out" in r.getMessage() for r in caplog.records)
    for n in range(50):  # worker 1's partitions drain while worker 0 is stuck
        assert q.produce(item(types[1], n)) and q.produce(item(types[3], n))
    assert wait_until(lambda: len(others[0].seen) == 50 and len(others[2].seen) == 50)
    stall.release.set()
    for n in range(50):
        assert q.produce(item(types[0], n + 1)) and q.produce(item(types[2], n))
    assert wait_until(lambda: sum(len(b) for b in stall.batches) == 51 and len(others[1].seen) == 50)
    assert BatchQueueManager.shutdown("fence-timeout")
    s = q.stats()
    assert s.produced == s.dispatched == 201 and s.unfinished == 0


def test_rebalance_report_quotes_the_ratio_it_skips_on(caplog):
    q = BatchQueueManager.create("skip-ratio", cfg(rebalance_skip_ratio=1.5))
    for t in make_types(4, "SK"):
        q.add_handler(t, Count())
    q._controller.throughput_source = lambda: [10, 10, 12, 10]
    with caplog.at_level(logging.DEBUG, logger="rebalancer.queue"):
        report = q.rebalance_now()
    assert report.moved == 0 and report.ratio_before == pytest.approx(22 / 21)
    assert report.skipped == f"max/mean worker load {22 / 21:.3f} is below rebalance_skip_ratio 1.5"
    assert any(r.levelno == logging.DEBUG and "rebalance skipped" in r.getMessage() for r in caplog.records)
    q._controller.throughput_source = lambda: [100, 1, 100, 1]
    with caplog.at_level(logging.INFO, logger="rebalancer.queue"):
        moved = q.rebalance_now()
    assert moved.moved >= 1 and moved.ratio_before == pytest.approx(200 / 101) and moved.ratio_after == 1.0
    assert any(r.levelno == logging.INFO and f"rebalanced {moved.moved} partitions" in r.getMessage() for r in caplog.records)


# -- flush on idle ---------------------------------------------------------------------------------

def test_on_idle_reaches_a_cold_handler_while_its_worker_is_busy():
    """Upstream (and our first version) called on_idle only from an empty pass: never under load."""
    q = BatchQueueManager.create("idle-busy", cfg(threads=ThreadPolicy.fixed(1), partitions=PartitionPolicy.fixed(2),
                                                  max_idle_ms=20))
    hot_t, cold_t = make_types(2, "IB")

    class Hot(HandlerConsumer):
        def __init__(self) -> None:
            self.calls = 0

        def consume(self, batch: list) -> None:
            self.calls += 1
            time.sleep(0.001)

    hot, cold = Hot(), Count()
    q.add_handler(hot_t, hot)
    q.add_handler(cold_t, cold)
    assert q.produce(item(cold_t, 0))
    assert wait_until(lambda: len(cold.seen) == 1)
    with continuous_load(q.produce, hot_t) as producer:
        assert wait_until(lambda: hot.calls >= 5)
        start = cold.idle_calls
        assert wait_until(lambda: cold.idle_calls >= start + 3), "a busy worker starved a cold handler's flush"
        assert producer.is_alive()


def test_on_idle_is_rate_limited_and_follows_new_data():
    """At once after data, then at most once per max_idle while the partitions stay empty."""
    from rebalancer.queue._ownership import OwnershipTable
    from rebalancer.queue._partitions import Partitions
    from rebalancer.queue._worker import Dispatcher, HandlerRecord

    table, admin = OwnershipTable(), threading.RLock()
    parts = Partitions("rate", 10, True, PartitionSelector.type_hash(), table, admin)
    dispatch = Dispatcher("rate", parts, None, None, max_idle=0.05)
    calls: list[float] = []
    t = make_types(1, "RL")[0]
    with admin:
        parts.add(0)
        parts.pin(t, 0)
        record = HandlerRecord(lambda b: None, lambda: calls.append(1.0), threading.Lock())
        dispatch.handlers[t] = record
        dispatch.reindex()
    for now in (1.0, 1.01, 1.04):
        dispatch.idle([0], True, now)
    assert len(calls) == 1  # 1.01 and 1.04 are within max_idle of 1.0
    dispatch.idle([0], True, 1.05)
    assert len(calls) == 2
    record.dirty = True  # consumed since: flush at the next empty pass, not max_idle later
    dispatch.idle([0], True, 1.06)
    assert len(calls) == 3
    parts.make_produce()(item(t, 1))
    dispatch.idle([0], True, 2.0)  # its partition is not empty: not idle
    assert len(calls) == 3


# -- selectors -------------------------------------------------------------------------------------

def test_round_robin_is_the_single_consumer_default_and_spreads_over_every_worker():
    seen = Count()
    q = BatchQueueManager.create("rr", cfg(threads=ThreadPolicy.fixed(4), partitions=PartitionPolicy.fixed(4),
                                           consumer=seen.consume))
    for n in range(20_000):
        assert q.produce(n)
    assert wait_until(lambda: len(seen.seen) == 20_000)
    per_worker = q.stats().worker_items_total
    mean = 20_000 / 4
    assert all(abs(w - mean) <= 0.2 * mean for w in per_worker), per_worker
    assert per_worker == (5_000, 5_000, 5_000, 5_000)  # item i goes to partition i mod 4
    assert sorted(seen.seen) == list(range(20_000))


def test_type_hash_is_the_handler_default_and_a_custom_callable_still_works():
    q = BatchQueueManager.create("th", cfg())
    assert q._parts.selector == PartitionSelector.type_hash()
    a, b = make_types(2, "TH")
    q.add_handler(a, Count())
    q.add_handler(b, Count())
    assert q.stats().partition_types[0] == (f"{a.__module__}.{a.__qualname__}",)
    custom = BatchQueueManager.create("th-custom", cfg(selector=lambda x, n: x.seq % n))
    assert custom._parts.selector.kind == "custom"


def test_selector_may_return_any_integral_value():
    got = Count()
    q = BatchQueueManager.create("np-int", cfg(consumer=got.consume, selector=lambda x, n: np.int64(1)))
    assert q.produce("a")
    assert wait_until(lambda: got.seen == ["a"])
    assert q.stats().worker_items_total[1] == 1  # partition 1 is worker 1's
    bad = BatchQueueManager.create("bad-sel", cfg(consumer=got.consume, selector=lambda x, n: 1.5))
    with pytest.raises(ValueError, match=r"selector returned 1.5 for str; expected an int in 0..3"):
        bad.produce("b")
    flag = BatchQueueManager.create("bool-sel", cfg(consumer=got.consume, selector=lambda x, n: True))
    with pytest.raises(ValueError, match="selector returned True"):
        flag.produce("c")


# -- stats -----------------------------------------------------------------------------------------

def test_worker_items_is_the_last_interval_and_worker_items_total_counts_from_the_start():
    got = Count()
    q = BatchQueueManager.create("interval", cfg(consumer=got.consume))
    for n in range(100):
        q.produce(n)
    assert wait_until(lambda: len(got.seen) == 100)
    first = q.stats()
    assert sum(first.worker_items) == 100 and sum(first.worker_items_total) == 100
    for n in range(50):
        q.produce(n)
    assert wait_until(lambda: len(got.seen) == 150)
    second = q.stats()
    assert sum(second.worker_items) == 50 and sum(second.worker_items_total) == 150
    assert sum(q.stats().worker_items) == 0


def test_with_rebalancing_the_interval_is_between_rebalances():
    got = [Count() for _ in range(4)]
    q = BatchQueueManager.create("interval-rb", cfg(rebalance_interval_ms=3_600_000))
    types = make_types(4, "IR")
    for t, h in zip(types, got):
        q.add_handler(t, h)
    for n in range(40):
        q.produce(item(types[n % 4], n))
    assert wait_until(lambda: sum(len(h.seen) for h in got) == 40)
    q.stats()  # does not close the interval here: rebalances do
    q.rebalance_now()
    assert sum(q.stats().worker_items) == 40
    q.rebalance_now()
    assert sum(q.stats().worker_items) == 0 and sum(q.stats().worker_items_total) == 40


# -- defect 6: plans applied after their target retired ----------------------------------------

def test_rebalance_then_set_threads_never_gives_partitions_to_retired_workers():
    q = BatchQueueManager.create("d6", cfg(threads=ThreadPolicy.fixed(4), partitions=PartitionPolicy.fixed(8),
                                           strategy=BufferStrategy.IF_POSSIBLE))
    types = make_types(8, "D6")
    handlers = [Count() for _ in types]
    for t, h in zip(types, handlers):
        q.add_handler(t, h)
    q._controller.throughput_source = lambda: [100, 1, 1, 1, 100, 1, 1, 1]
    assert q.rebalance_now().moved >= 1
    q.set_threads(2)
    assert set(q.stats().owners) == {0, 1}
    for n in range(48):
        assert q.produce(item(types[n % 8], n))
    assert wait_until(lambda: sum(len(h.seen) for h in handlers) == 48)
    assert q.stats().dropped == 0
    assert wait_until(lambda: len([t for t in live_threads("d6") if not t.name.endswith("-control")]) == 2)


# -- defects 7 and 8: exceptions of every kind ---------------------------------------------------

class Boom(BaseException):
    pass


@pytest.mark.parametrize("exc", [ValueError, KeyboardInterrupt, SystemExit, GeneratorExit, Boom])
def test_a_raising_error_handler_loses_nothing_and_kills_no_worker(exc, caplog):
    ok, bad = make_types(2, "D7")
    good = Count()

    def failing(batch: list) -> None:
        raise exc("handler")

    def error_handler(batch: list, error: BaseException) -> None:
        raise exc("error handler")

    q = BatchQueueManager.create("d7", cfg(threads=ThreadPolicy.fixed(1), error_handler=error_handler))
    q.add_handler(bad, failing)
    q.add_handler(ok, good)
    for n in range(100):
        assert q.produce(item(bad, n)) and q.produce(item(ok, n))
    assert wait_until(lambda: len(good.seen) == 100)
    for n in range(100):  # the worker is still alive
        assert q.produce(item(ok, 100 + n))
    assert wait_until(lambda: len(good.seen) == 200)
    assert BatchQueueManager.shutdown("d7")
    s = q.stats()
    assert (s.produced, s.dispatched, s.failed) == (300, 300, 100)
    assert any("error_handler raised" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt, SystemExit, Boom])
def test_a_raising_single_consumer_on_idle_kills_no_worker(exc):
    class Consumer(HandlerConsumer):
        def __init__(self) -> None:
            self.seen: list = []

        def consume(self, batch: list) -> None:
            self.seen.extend(batch)

        def on_idle(self) -> None:
            raise exc("on_idle")

    c = Consumer()
    q = BatchQueueManager.create("d7-idle", cfg(threads=ThreadPolicy.fixed(1), partitions=PartitionPolicy.fixed(1),
                                                consumer=c, buffer_size=10))
    for n in range(200):  # BLOCKING with a buffer of 10: a dead worker would hang this loop
        assert q.produce(n)
    assert wait_until(lambda: len(c.seen) == 200)
    assert wait_until(lambda: q.stats().idle_failures >= 1)
    assert q.shutdown(timeout=10) == 0
    assert q.stats().dispatched == 200


def test_system_exit_in_the_final_drain_loses_no_other_items_and_is_raised_after():
    gate_t, exit_t, rest_t = make_types(3, "D8")
    gate, rest = Stall(), Count()

    def exits(batch: list) -> None:
        raise SystemExit(3)

    q = BatchQueueManager.create("d8", cfg(threads=ThreadPolicy.fixed(1), partitions=PartitionPolicy.fixed(3)))
    q.add_handler(gate_t, gate)
    q.add_handler(exit_t, exits)
    q.add_handler(rest_t, rest)
    assert q.produce(item(gate_t, 0))
    assert gate.entered.wait(10)
    for n in range(50):
        assert q.produce(item(exit_t, n))
    for n in range(51):
        assert q.produce(item(rest_t, n))

    def release_once_closing() -> None:
        wait_until(lambda: q.is_shutdown)
        gate.release.set()

    threading.Thread(target=release_once_closing).start()
    with pytest.raises(SystemExit):
        q.shutdown(timeout=SAFETY_S)
    assert len(rest.seen) == 51
    s = q.stats()
    assert (s.produced, s.dispatched, s.failed, s.unfinished) == (102, 102, 50, 0)
    assert not live_threads("d8")


# -- defect 9: shutdown(timeout) is bounded and honest -------------------------------------------

def test_shutdown_timeout_is_bounded_and_reports_what_it_left(caplog):
    stall_t, free_t = make_types(2, "D9")
    stall, free = Stall(), Count()
    q = BatchQueueManager.create("d9", cfg(partitions=PartitionPolicy.fixed(2)))
    q.add_handler(stall_t, stall)
    q.add_handler(free_t, free)
    assert q.produce(item(stall_t, 0))
    assert stall.entered.wait(10)
    for n in range(10):
        assert q.produce(item(stall_t, n + 1))  # queued behind the stuck worker
    for n in range(20):
        assert q.produce(item(free_t, n))
    assert wait_until(lambda: len(free.seen) == 20)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="rebalancer.queue"):
        left = q.shutdown(timeout=0.5)
    elapsed = time.monotonic() - started
    assert elapsed < 10, f"shutdown(timeout=0.5) took {elapsed:.1f} s"  # not bounded: it would wait SAFETY_S
    assert left == 10
    s = q.stats()
    assert (s.produced, s.dispatched, s.unhandled, s.unfinished) == (31, 21, 0, 10)
    assert any("left 10 items undispatched" in r.getMessage() for r in caplog.records)
    stall.release.set()
    assert wait_until(lambda: not live_threads("d9"))
    assert len(stall.batches) == 1 and q.stats().dispatched == 21  # nothing dispatched after return


def test_shutdown_never_dispatches_a_stuck_pass_after_it_returns():
    gate_t, stall_t, rest_t = make_types(3, "D9b")
    gate, stall, rest = Stall(), Stall(), Count()
    q = BatchQueueManager.create("d9b", cfg(threads=ThreadPolicy.fixed(1), partitions=PartitionPolicy.fixed(3)))
    q.add_handler(gate_t, gate)
    q.add_handler(stall_t, stall)
    q.add_handler(rest_t, rest)
    assert q.produce(item(gate_t, 0))
    assert gate.entered.wait(10)
    assert q.produce(item(stall_t, 0))
    for n in range(40):
        assert q.produce(item(rest_t, n))
    gate.release.set()  # the next pass takes the stall item and the 40 others together
    assert stall.entered.wait(10)
    assert q.shutdown(timeout=0.3) == 40
    stall.release.set()
    assert wait_until(lambda: not live_threads("d9b"))
    assert rest.seen == []
    s = q.stats()
    assert (s.produced, s.dispatched, s.unfinished) == (42, 2, 40)


# -- defect 10: control calls from inside a handler ----------------------------------------------

def test_control_calls_from_inside_a_handler_raise_a_clear_error():
    errors: list[BaseException] = []
    q = BatchQueueManager.create("d10", cfg())
    t = make_types(1, "D10")[0]

    def handler(batch: list) -> None:
        for call in (q.shutdown, q.rebalance_now, lambda: q.set_threads(3)):
            try:
                call()
            except RuntimeError as e:
                errors.append(e)

    q.add_handler(t, handler)
    assert q.produce(item(t, 0))
    assert wait_until(lambda: len(errors) == 3)
    assert [str(e).split(":")[1].split("(")[0].strip() for e in errors] == ["shutdown", "rebalance_now",
                                                                            "set_threads"]
    assert "cannot be called from a handler or on_idle" in str(errors[0])
    assert q.shutdown(timeout=10) == 0 and q.stats().dispatched == 1


# -- defect 11: a shared pool serves its queues fairly -------------------------------------------

def test_a_busy_queue_on_a_shared_pool_does_not_starve_its_neighbour():
    pool = ("FAIR", ThreadPolicy.fixed(1))
    busy_t = make_types(1, "FB")[0]

    def slow(batch: list) -> None:
        time.sleep(0.001)

    busy = BatchQueueManager.create("fair-busy", BatchQueueConfig(shared_scheduler=pool, buffer_size=100))
    busy.add_handler(busy_t, slow)
    neighbour_seen = Count()
    neighbour = BatchQueueManager.create("fair-quiet", BatchQueueConfig(shared_scheduler=pool,
                                                                        consumer=neighbour_seen.consume))
    with continuous_load(busy.produce, busy_t) as producer:
        time.sleep(0.2)  # the busy queue's task is in its drain loop by now
        assert neighbour.produce("hello")
        assert wait_until(lambda: neighbour_seen.seen == ["hello"], timeout=10), "the neighbour starved"
        assert producer.is_alive()


# -- defect 12: a handler producing into its own full partition ----------------------------------

def test_a_handler_producing_into_its_own_full_partition_drops_and_counts_instead_of_hanging(caplog):
    t = make_types(1, "D12")[0]
    q = BatchQueueManager.create("d12", cfg(threads=ThreadPolicy.fixed(1), partitions=PartitionPolicy.fixed(1),
                                            buffer_size=2))
    seen: list = []
    results: list[bool] = []

    def handler(batch: list) -> None:
        seen.extend(x.seq for x in batch)
        if batch[0].seq == 0:
            results.extend(q.produce(item(t, n)) for n in (1, 2, 3))  # capacity 2: the third cannot fit

    q.add_handler(t, handler)
    assert q.produce(item(t, 0))
    assert wait_until(lambda: sorted(seen) == [0, 1, 2])
    assert results == [True, True, False]
    s = q.stats()
    assert (s.self_drops, s.dropped) == (1, 1)
    assert any("its own drain worker" in r.getMessage() for r in caplog.records)
    assert q.shutdown(timeout=10) == 0


# -- holddown (Solace's rule) ----------------------------------------------------------------------

def test_membership_holddown_ends_at_the_first_change_plus_the_delay():
    q = BatchQueueManager.create("hold-first", cfg(rebalance_delay_ms=5_000))
    clock = [20.0]
    q._controller.clock = lambda: clock[0]
    q.set_threads(3)
    clock[0] = 24.0
    q.set_threads(4)
    assert q.membership.status == "holddown"
    assert q._controller._membership_due() == 25.0  # not 29: later changes do not slide it


# -- the stress test -------------------------------------------------------------------------------

def test_stress_producers_churn_and_concurrent_rebalances_keep_exactly_once():
    ntypes, producers, per = 300, 16, 6_000
    total = producers * per
    q = BatchQueueManager.create("stress-core", cfg(threads=ThreadPolicy.fixed(4), partitions=PartitionPolicy.adaptive(),
                                                    buffer_size=500, max_idle_ms=5, rebalance_skip_ratio=1.0))
    types = make_types(ntypes, "SC")
    violations: list[str] = []
    handlers = [ReentryDetector(violations) for _ in types]
    for t, h in zip(types, handlers):
        q.add_handler(t, h)
    done = threading.Event()

    def produce(k: int) -> None:
        for n in range(per):
            seq = k * per + n
            hot = (seq * 7) % 11 if n % 3 else seq % ntypes
            assert q.produce(item(types[hot], seq))

    def churn() -> None:
        sizes = [2, 5, 1, 3, 6, 2, 4]
        i = 0
        while not done.is_set():
            q.set_threads(sizes[i % len(sizes)])
            i += 1

    def rebalance() -> None:
        while not done.is_set():
            q.rebalance_now()

    workers = [threading.Thread(target=produce, args=(k,)) for k in range(producers)]
    control = [threading.Thread(target=churn)] + [threading.Thread(target=rebalance) for _ in range(3)]
    for t in workers + control:
        t.start()
    for t in workers:
        t.join()
    done.set()
    for t in control:
        t.join()
    assert q.shutdown(timeout=SAFETY_S) == 0
    seen = [s for h in handlers for s in h.seen]
    assert len(seen) == total and len(set(seen)) == total
    assert not violations
    s = q.stats()
    assert s.produced == s.dispatched + s.unhandled == total and s.unfinished == 0
    assert not live_threads("stress-core")
