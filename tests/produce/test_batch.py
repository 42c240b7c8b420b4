"""The adapter's own partition batch (`Batch`) and the accumulator's pending set, without a cluster.

`Batch` holds aiokafka's C record builder directly and leaves its accumulator's pending set as it
resolves (no done callback per batch); these tests pin what that must keep: one future per message
in order, exact counts, one error copy per message, exactly-once resolution, idempotent sequences.
"""

from __future__ import annotations

import asyncio
from collections import deque

import pytest
from aiokafka.errors import KafkaError
from aiokafka.producer.transaction_manager import TransactionManager
from aiokafka.record.default_records import DefaultRecordBatch
from aiokafka.structs import TopicPartition

from rebalancer.produce.aiokafka_adapter import Accumulator, Batch, new_builder
from rebalancer.produce.collector import BrokerBatchCollector
from rebalancer.produce.stats import DeliveryCounters

TP = TopicPartition("t", 3)


class FakeCluster:
    def leader_for_partition(self, tp: TopicPartition) -> int:
        return 1


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=30))


def make_batch(loop, counters=None, pending=None, batch_size=16_384) -> Batch:
    return Batch(TP, new_builder(batch_size, 0, False), 10.0, counters or DeliveryCounters(), loop, 1.0, pending)


def make_accumulator(loop, txn=None) -> Accumulator:
    return Accumulator(FakeCluster(), BrokerBatchCollector(), DeliveryCounters(), batch_size=16_384, compression=0,
                       ttl=10.0, txn_manager=txn, loop=loop)  # fmt: skip


def test_done_resolves_every_message_in_order_and_leaves_the_pending_set_at_once():
    async def main():
        loop = asyncio.get_running_loop()
        counters, pending = DeliveryCounters(), set()
        batch = make_batch(loop, counters, pending)
        futures = [batch.add(None, b"v%d" % i, 1.0) for i in range(5)]
        assert batch.record_count == 5 and not batch.is_empty() and batch.created == 1.0
        pending.add(batch)
        batch.done(100)
        assert pending == set()  # no loop turn needed
        assert [f.result() for f in futures] == [(3, 100), (3, 101), (3, 102), (3, 103), (3, 104)]
        assert batch.future.result() == 100 and counters.acked == 5 and counters.failed == 0
        batch.done(200)  # a second resolution changes nothing and counts nothing
        assert futures[0].result() == (3, 100) and counters.acked == 5

    run(main())


def test_failure_gives_each_message_its_own_copy_counts_once_and_closes_the_batch():
    async def main():
        loop = asyncio.get_running_loop()
        counters, pending = DeliveryCounters(), set()
        batch = make_batch(loop, counters, pending)
        futures = [batch.add(b"k", b"v", 1.0) for _ in range(3)]
        pending.add(batch)
        error = KafkaError("boom")
        batch.failure(error)
        errors = [f.exception() for f in futures]
        assert all(type(e) is KafkaError and e.args == ("boom",) for e in errors)
        assert len({id(e) for e in errors}) == 3  # one copy per message: tracebacks do not pile up
        assert batch.future.exception() is error and pending == set()
        batch.failure(KafkaError("again"))
        assert counters.failed == 3 and counters.errors == {"KafkaError": 3} and counters.acked == 0
        assert batch.add(None, b"late", 2.0) is None  # a failed batch takes nothing more

    run(main())


def test_done_noack_and_a_full_batch():
    async def main():
        loop = asyncio.get_running_loop()
        batch = make_batch(loop, batch_size=200)
        futures = []
        while (future := batch.add(None, b"x" * 50, 1.0)) is not None:
            futures.append(future)
        assert 1 < len(futures) == batch.record_count and batch.add(None, b"y", 1.0) is None
        batch.done_noack()
        assert [f.result() for f in futures] == [(3, -1)] * len(futures) and batch.future.result() is None

    run(main())


def test_the_data_buffer_is_built_once_with_the_producer_state_and_every_record():
    async def main():
        loop = asyncio.get_running_loop()
        batch = make_batch(loop)
        for i in range(4):
            batch.add(b"k%d" % i, b"v%d" % i, 1.0)
        batch.set_producer_state(7, 2, 40)
        buffer = batch.get_data_buffer()
        assert batch.get_data_buffer() is buffer and batch.add(None, b"late", 1.0) is None
        reader = DefaultRecordBatch(bytes(buffer))
        assert (reader.producer_id, reader.producer_epoch, reader.base_sequence) == (7, 2, 40)
        records = list(reader)
        assert [(r.offset, r.key, r.value) for r in records] == [(i, b"k%d" % i, b"v%d" % i) for i in range(4)]
        with pytest.raises(AssertionError):
            batch.set_producer_state(7, 2, 44)  # too late: the bytes are built

    run(main())


def test_pop_batch_sets_sequences_and_a_retry_keeps_them():
    async def main():
        loop = asyncio.get_running_loop()
        txn = TransactionManager(None, 1000)
        txn.set_pid_and_epoch(7, 3)
        accumulator = make_accumulator(loop, txn)
        first, second = (make_batch(loop, pending=accumulator._pending_batches) for _ in range(2))
        for _ in range(4):
            first.add(None, b"v", 1.0)
        second.add(None, b"v", 1.0)
        accumulator._batches[TP] = deque([first, second])
        assert accumulator._pop_batch(TP) is first and txn.sequence_number(TP) == 4
        assert accumulator._pop_batch(TP) is second and TP not in accumulator._batches
        assert txn.sequence_number(TP) == 5 and accumulator._pending_batches == {first, second}
        assert (first.retry_count, second.retry_count) == (1, 1)
        first.done(0)
        assert accumulator._pending_batches == {second}
        accumulator.reenqueue(second)  # a retry: back to the front, out of the pending set
        assert list(accumulator._batches[TP]) == [second] and accumulator._pending_batches == set()
        assert accumulator._pop_batch(TP) is second and txn.sequence_number(TP) == 5
        assert second.retry_count == 2 and accumulator._pending_batches == {second}

    run(main())


def test_fail_all_fails_queued_and_pending_batches_exactly_once():
    async def main():
        loop = asyncio.get_running_loop()
        accumulator = make_accumulator(loop)
        other = TopicPartition("t", 4)
        queued = [accumulator.append(TP, None, b"q", 1) for _ in range(3)]
        in_flight = accumulator.append(other, None, b"p", 1)
        accumulator._pop_batch(other)
        assert len(accumulator._pending_batches) == 1
        error = KafkaError("fenced")
        accumulator.fail_all(error)
        assert all(isinstance(f.exception(), KafkaError) for f in [*queued, in_flight])
        assert accumulator._pending_batches == set() and accumulator.counters.failed == 4
        with pytest.raises(KafkaError):
            accumulator.append(TP, None, b"after", 1)

    run(main())


def test_flush_for_commit_closes_the_queued_batches_and_waits_for_them():
    async def main():
        loop = asyncio.get_running_loop()
        accumulator = make_accumulator(loop)
        first = accumulator.append(TP, None, b"a", 1)
        batch = accumulator._batches[TP][-1]
        flushing = asyncio.ensure_future(accumulator.flush_for_commit())
        await asyncio.sleep(0)
        assert accumulator.waiter().done() and batch.closed and not flushing.done()
        second = accumulator.append(TP, None, b"b", 1)  # after the commit's scope: a new batch
        assert len(accumulator._batches[TP]) == 2
        accumulator._pop_batch(TP).done(10)
        await flushing
        assert first.result() == (3, 10) and not second.done()

    run(main())


def test_delivery_counters_fold_singles_and_batches_into_the_same_latencies():
    counters = DeliveryCounters()
    expected_ms = []
    for i in range(3000):  # 3000 singles and 3000 three-message batches: folds happen on the way
        counters.settle(10.0 + i, [9.5 + i])
        expected_ms.append(500.0)
        counters.settle(20.0 + i, [19.0 + i, 19.75 + i, 20.0 + i])
        expected_ms += [1000.0, 250.0, 0.0]
    assert counters.acked == 12_000
    latency = counters.latency
    assert latency.count == 12_000 and latency.max == 1000.0
    assert latency.total == pytest.approx(sum(expected_ms))
    assert latency.percentile(50) == pytest.approx(250.0, rel=0.01)
    counters.fail(2, KafkaError("x"))
    assert (counters.failed, counters.errors["KafkaError"], counters.latency.count) == (2, 2, 12_000)
