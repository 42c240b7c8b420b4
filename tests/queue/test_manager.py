"""BatchQueueManager: the registry, shared ref-counted pools, and config validation (issue 2 §2)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

from rebalancer.queue import (
    BatchQueueConfig,
    BatchQueueManager,
    BufferStrategy,
    HandlerConsumer,
    PartitionPolicy,
    ThreadPolicy,
)

WaitUntil = Callable[..., bool]


class Event:
    __slots__ = ("id",)

    def __init__(self, id_: int) -> None:
        self.id = id_


class Sink(HandlerConsumer):
    """Thread-safe collector: records items and the threads that delivered them."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.ids: list[int] = []
        self.threads: set[str] = set()

    def consume(self, batch: list) -> None:
        with self._lock:
            self.ids.extend(item.id for item in batch)
            self.threads.add(threading.current_thread().name)


def dedicated(**overrides: Any) -> BatchQueueConfig:
    settings: dict[str, Any] = {
        "threads": ThreadPolicy.fixed(1),
        "partitions": PartitionPolicy.fixed(1),
        "buffer_size": 1000,
        "strategy": BufferStrategy.BLOCKING,
        "min_idle_ms": 1,
        "max_idle_ms": 10,
    }
    settings.update(overrides)
    return BatchQueueConfig(**settings)


def shared(pool: str, policy: ThreadPolicy, **overrides: Any) -> BatchQueueConfig:
    return dedicated(threads=None, shared_scheduler=(pool, policy), **overrides)


def new_threads(baseline: set[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t not in baseline and t.is_alive()]


# Registry --------------------------------------------------------------------------------------


def test_create_registers_and_get_finds_it() -> None:
    assert BatchQueueManager.get("REG") is None
    q = BatchQueueManager.create("REG", dedicated())
    assert BatchQueueManager.get("REG") is q
    assert q.name == "REG"


def test_create_with_existing_name_raises() -> None:
    first = BatchQueueManager.create("DUP", dedicated())
    with pytest.raises(ValueError, match="DUP"):
        BatchQueueManager.create("DUP", dedicated())
    assert BatchQueueManager.get("DUP") is first


def test_create_if_absent_creates_then_returns_existing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    q = BatchQueueManager.create_if_absent("CIA", dedicated())
    assert BatchQueueManager.get("CIA") is q
    again = BatchQueueManager.create_if_absent("CIA", dedicated())
    assert again is q
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], (
        "identical settings are no conflict"
    )


def test_create_if_absent_mode_conflict_raises() -> None:
    BatchQueueManager.create_if_absent("MAP-MODE", dedicated())
    with pytest.raises(ValueError):
        BatchQueueManager.create_if_absent("MAP-MODE", dedicated(consumer=lambda batch: None))

    single = BatchQueueManager.create_if_absent("SINGLE-MODE", dedicated(consumer=lambda batch: None))
    with pytest.raises(ValueError):
        BatchQueueManager.create_if_absent("SINGLE-MODE", dedicated())
    assert BatchQueueManager.get("SINGLE-MODE") is single


@pytest.mark.parametrize(
    "override",
    [
        {"buffer_size": 5000},
        {"threads": ThreadPolicy.fixed(2)},
        {"partitions": PartitionPolicy.fixed(3)},
        {"strategy": BufferStrategy.IF_POSSIBLE},
        {"max_idle_ms": 200},
    ],
    ids=["buffer_size", "threads", "partitions", "strategy", "max_idle_ms"],
)
def test_create_if_absent_differing_infrastructure_warns(
    caplog: pytest.LogCaptureFixture, override: dict[str, Any]
) -> None:
    q = BatchQueueManager.create_if_absent("INFRA", dedicated())
    caplog.clear()
    caplog.set_level(logging.WARNING)
    again = BatchQueueManager.create_if_absent("INFRA", dedicated(**override))
    assert again is q, "the existing queue wins"
    assert [r for r in caplog.records if r.levelno >= logging.WARNING], f"no warning for differing {override}"
    assert q.thread_count == 1 and q.partition_count == 1


def test_shutdown_unregisters_and_name_can_be_reused(wait_until: WaitUntil) -> None:
    q = BatchQueueManager.create("REUSE", dedicated())
    sink = Sink()
    q.add_handler(Event, sink)
    assert q.produce(Event(1))
    BatchQueueManager.shutdown("REUSE")
    assert BatchQueueManager.get("REUSE") is None
    assert sink.ids == [1]
    assert q.produce(Event(2)) is False
    q2 = BatchQueueManager.create("REUSE", dedicated())
    assert q2 is not q and BatchQueueManager.get("REUSE") is q2
    sink2 = Sink()
    q2.add_handler(Event, sink2)
    assert q2.produce(Event(3))
    assert wait_until(lambda: sink2.ids == [3])


def test_shutdown_all_drains_and_stops_everything(wait_until: WaitUntil) -> None:
    baseline = set(threading.enumerate())
    queues = [
        BatchQueueManager.create(
            f"ALL-{i}", dedicated(threads=ThreadPolicy.fixed(2), partitions=PartitionPolicy.fixed(2))
        )
        for i in range(3)
    ]
    queues.append(BatchQueueManager.create("ALL-shared", shared("ALL-POOL", ThreadPolicy.fixed(2))))
    sinks = []
    for q in queues:
        sink = Sink()
        q.add_handler(Event, sink)
        sinks.append(sink)
        for j in range(500):
            assert q.produce(Event(j))
    BatchQueueManager.shutdown_all()
    for q, sink in zip(queues, sinks):
        assert BatchQueueManager.get(q.name) is None
        assert sorted(sink.ids) == list(range(500))
        assert q.produce(Event(-1)) is False
        s = q.stats()
        assert s.produced == s.dispatched == 500
    assert wait_until(lambda: not new_threads(baseline)), f"threads left running: {new_threads(baseline)}"


# Shared schedulers -----------------------------------------------------------------------------


def test_shared_pool_is_ref_counted_and_stops_with_its_last_queue(wait_until: WaitUntil) -> None:
    baseline = set(threading.enumerate())
    q1 = BatchQueueManager.create("IO-1", shared("IO_POOL_T", ThreadPolicy.fixed(2)))
    q2 = BatchQueueManager.create("IO-2", shared("IO_POOL_T", ThreadPolicy.fixed(2)))
    sink1, sink2 = Sink(), Sink()
    q1.add_handler(Event, sink1)
    q2.add_handler(Event, sink2)
    for j in range(100):
        assert q1.produce(Event(j))
        assert q2.produce(Event(j))
    assert wait_until(lambda: len(sink1.ids) == 100 and len(sink2.ids) == 100)
    pool_threads = new_threads(baseline)
    assert pool_threads, "a shared pool runs on threads of its own"
    assert len(pool_threads) <= 2, f"fixed(2) pool, got {[t.name for t in pool_threads]}"

    BatchQueueManager.shutdown("IO-1")
    assert sorted(sink1.ids) == list(range(100))
    # The pool still serves IO-2.
    for j in range(100, 200):
        assert q2.produce(Event(j))
    assert wait_until(lambda: len(sink2.ids) == 200)
    assert any(t.is_alive() for t in pool_threads), "the pool must outlive all but its last queue"

    BatchQueueManager.shutdown("IO-2")
    assert sorted(sink2.ids) == list(range(200))
    assert wait_until(lambda: not new_threads(baseline)), "the pool shuts down with its last queue"

    # A fresh queue with the same pool name gets a fresh, working pool.
    q3 = BatchQueueManager.create("IO-3", shared("IO_POOL_T", ThreadPolicy.fixed(2)))
    sink3 = Sink()
    q3.add_handler(Event, sink3)
    assert q3.produce(Event(7))
    assert wait_until(lambda: sink3.ids == [7])


def test_shared_pool_differing_policy_warns_and_first_wins(
    caplog: pytest.LogCaptureFixture, wait_until: WaitUntil
) -> None:
    caplog.set_level(logging.WARNING)
    q1 = BatchQueueManager.create("FW-1", shared("FW_POOL", ThreadPolicy.fixed(1)))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    q2 = BatchQueueManager.create("FW-2", shared("FW_POOL", ThreadPolicy.fixed(4)))
    assert [r for r in caplog.records if r.levelno >= logging.WARNING], "a differing pool policy must warn"
    sinks = [Sink(), Sink()]
    for q, sink in zip((q1, q2), sinks):
        q.add_handler(Event, sink)
    for round_ in range(10):
        for q in (q1, q2):
            for j in range(20):
                assert q.produce(Event(round_ * 20 + j))
    assert wait_until(lambda: all(len(s.ids) == 200 for s in sinks))
    drained_on = sinks[0].threads | sinks[1].threads
    assert len(drained_on) == 1, f"the first creator's fixed(1) pool wins, but drained on {drained_on}"


def test_shared_and_dedicated_queues_coexist(wait_until: WaitUntil) -> None:
    io = BatchQueueManager.create("MIX-IO", shared("MIX_POOL", ThreadPolicy.fixed(1)))
    l1 = BatchQueueManager.create(
        "MIX-L1", dedicated(threads=ThreadPolicy.fixed(2), partitions=PartitionPolicy.fixed(4))
    )
    a, b = Sink(), Sink()
    io.add_handler(Event, a)
    l1.add_handler(Event, b)
    for j in range(300):
        assert io.produce(Event(j))
        assert l1.produce(Event(j))
    BatchQueueManager.shutdown_all()
    assert sorted(a.ids) == list(range(300)) == sorted(b.ids)
    assert not any(t.startswith("BatchQueue-MIX-L1-") for t in a.threads)


# Config validation -----------------------------------------------------------------------------


BAD_CONFIGS: list[tuple[str, dict[str, Any], list[str]]] = [
    ("buffer_size zero", {"buffer_size": 0}, ["buffer_size", "0"]),
    ("buffer_size negative", {"buffer_size": -1}, ["buffer_size", "-1"]),
    ("idle inverted", {"min_idle_ms": 50, "max_idle_ms": 10}, ["min_idle_ms", "50", "10"]),
    ("min_idle negative", {"min_idle_ms": -1}, ["min_idle_ms", "-1"]),
    ("strategy string", {"strategy": "BLOCKING"}, ["strategy", "BLOCKING"]),
    ("strategy none", {"strategy": None}, ["strategy", "None"]),
    (
        "threads and shared",
        {"shared_scheduler": ("BOTH", ThreadPolicy.fixed(1))},
        ["threads", "shared_scheduler"],
    ),
    ("neither threads nor shared", {"threads": None}, ["threads", "shared_scheduler"]),
    ("threads not a policy", {"threads": 4}, ["threads", "4"]),
    ("partitions not a policy", {"partitions": 8}, ["partitions", "8"]),
    ("rebalance negative", {"rebalance_interval_ms": -5}, ["rebalance_interval_ms", "-5"]),
    ("consumer not callable", {"consumer": 42}, ["consumer", "42"]),
    ("error_handler not callable", {"error_handler": "log"}, ["error_handler", "log"]),
    ("selector not callable", {"selector": 7}, ["selector", "7"]),
]


@pytest.mark.parametrize(
    ("override", "fragments"), [c[1:] for c in BAD_CONFIGS], ids=[c[0] for c in BAD_CONFIGS]
)
def test_bad_config_raises_value_error_naming_field_and_value(
    override: dict[str, Any], fragments: list[str]
) -> None:
    with pytest.raises(ValueError) as raised:
        BatchQueueManager.create("BAD", dedicated(**override))
    message = str(raised.value)
    missing = [f for f in fragments if f not in message]
    assert not missing, f"message {message!r} does not name {missing}"
    assert BatchQueueManager.get("BAD") is None


def test_concurrent_create_if_absent_yields_one_queue() -> None:
    barrier = threading.Barrier(8)
    got: list[object] = []
    lock = threading.Lock()

    def racer() -> None:
        barrier.wait()
        q = BatchQueueManager.create_if_absent("RACE", dedicated())
        with lock:
            got.append(q)

    threads = [threading.Thread(target=racer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(got) == 8
    assert all(q is got[0] for q in got)
    assert BatchQueueManager.get("RACE") is got[0]
