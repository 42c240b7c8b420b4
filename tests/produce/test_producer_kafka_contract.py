"""The producer's Kafka contract, on librdkafka's mock brokers and on real Apache Kafka brokers.

Each test runs on both (`any_kafka_cluster`). Where they disagree the real cluster is right; what the
mock cannot do is said where it is skipped. It shows aborted records to read_committed readers and
never stores transactional offsets, so on the mock the transaction test checks only that every
record reached the brokers, that each committed one is read once, in order, and the requests the
brokers counted; the real cluster is asked the rest directly.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any, TypeVar

import pytest

from kafka_helpers import Record, is_real, read_partitions
from rebalancer.produce import BatchingProducer, TopicPartition
from rebalancer.testing import KafkaCluster, MockKafkaCluster
from rebalancer.testing.mock_cluster import API_KEYS

T = TypeVar("T")
AnyCluster = MockKafkaCluster | KafkaCluster
MakeTopic = Callable[..., str]
NO_OFFSET = -1001  # OFFSET_INVALID: the group has no committed offset for the partition


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout=120))


def values(records: list[Record]) -> list[bytes]:
    """The records' values; every record these tests send has one."""
    found = [r.value for r in records if r.value is not None]
    assert len(found) == len(records), records
    return found


def group_offsets(bootstrap: str, group: str, tps: list[TopicPartition], timeout_s: float = 60.0) -> dict[int, int]:
    """{partition: committed offset} of `group`, read through the admin API (OffsetFetch).

    `require_stable`: offsets of a transaction whose markers are still being written are refused
    (UNSTABLE_OFFSET_COMMIT) rather than answered with the previous ones, so the loop waits for them.
    """
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
    from confluent_kafka import TopicPartition as CKTopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    request = [ConsumerGroupTopicPartitions(group, [CKTopicPartition(tp.topic, tp.partition) for tp in tps])]
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            result = admin.list_consumer_group_offsets(request, require_stable=True, request_timeout=30)[group].result()
            errors = [tp.error for tp in result.topic_partitions if tp.error is not None]
            if not errors:
                return {tp.partition: tp.offset for tp in result.topic_partitions}
            last = str(errors[0])
        except KafkaException as exc:
            last = str(exc)
        if time.monotonic() > deadline:
            raise AssertionError(f"group {group!r}: offsets not readable after {timeout_s} s: {last}")
        time.sleep(0.2)


# -- the batching producer, idempotent, acks=all ----------------------------------------------------
PARTITIONS = 6
PER_PARTITION = 500


def test_idempotent_acks_all_acks_every_message_once_and_keeps_the_order_per_partition(
    any_kafka_cluster: AnyCluster, any_kafka_topic: MakeTopic
) -> None:
    cluster = any_kafka_cluster
    topic = any_kafka_topic(PARTITIONS, replication_factor=3, min_insync_replicas=2)
    total = PARTITIONS * PER_PARTITION
    # Message i goes to partition i % 6 with that partition's sequence number: send order is checkable.
    sent = [(i % PARTITIONS, f"p{i % PARTITIONS}-{i // PARTITIONS:04d}".encode()) for i in range(total)]
    resolutions = [0] * total

    def resolved(index: int, _future: asyncio.Future) -> None:
        resolutions[index] += 1

    async def main() -> tuple[list[asyncio.Future], dict[str, Any], set[Any]]:
        config = {
            "bootstrap.servers": cluster.bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "broker.linger.ms": 60_000,  # nothing leaves before flush(): one request per broker
        }
        producer = BatchingProducer(config)
        await producer.start()
        cluster.start_request_tracking()
        futures = []
        for index, (partition, value) in enumerate(sent):
            future = await producer.send(topic, value, key=b"k%d" % partition, partition=partition)
            future.add_done_callback(partial(resolved, index))
            futures.append(future)
        await producer.flush()
        leaders = {producer.partition_leader(topic, q) for q in range(PARTITIONS)}
        stats = producer.stats()
        await producer.stop()
        return futures, stats, leaders

    futures, stats, leaders = run(main())
    counted = cluster.produce_requests()  # counted by the brokers
    assert resolutions == [1] * total  # every future resolved, once
    assert all(f.exception() is None for f in futures)
    assert (stats["produced"], stats["acked"], stats["failed"]) == (total, total, 0)
    # The broker's offsets, in send order: 0, 1, 2... on every partition.
    for partition in range(PARTITIONS):
        acked = [f.result() for (q, _), f in zip(sent, futures) if q == partition]
        assert acked == [(partition, offset) for offset in range(PER_PARTITION)]
    # Batched across partitions: about one ProduceRequest per leader broker, not one per partition.
    assert {b for b, n in counted.items() if n} == leaders and leaders <= {1, 2, 3}, counted
    assert sum(counted.values()) <= 2 * len(leaders), counted

    stored = read_partitions(cluster.bootstrap_servers, topic, PARTITIONS, total)
    for partition in range(PARTITIONS):
        assert values(stored[partition]) == [v for q, v in sent if q == partition]  # once each, in order
        assert [r.offset for r in stored[partition]] == list(range(PER_PARTITION))
        assert {r.key for r in stored[partition]} == {b"k%d" % partition}


# -- transactions --------------------------------------------------------------------------------
TXN_PARTITIONS = 4
TXN_RECORDS = 120


def test_read_committed_sees_each_committed_record_once_and_no_aborted_one_and_offsets_commit(
    any_kafka_cluster: AnyCluster, any_kafka_topic: MakeTopic
) -> None:
    cluster = any_kafka_cluster
    topic = any_kafka_topic(TXN_PARTITIONS, replication_factor=3, min_insync_replicas=2)
    source = any_kafka_topic(2)
    group = f"{topic}-etl"
    source_tps = [TopicPartition(source, 0), TopicPartition(source, 1)]
    bootstrap = cluster.bootstrap_servers

    async def send(producer: BatchingProducer, prefix: str) -> list[asyncio.Future]:
        return [
            await producer.send(topic, f"{prefix}-{i:03d}".encode(), partition=i % TXN_PARTITIONS)
            for i in range(TXN_RECORDS)
        ]

    async def main() -> tuple[list[asyncio.Future], list[asyncio.Future], dict[int, int], dict[int, int]]:
        producer = BatchingProducer(
            {"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn", "broker.linger.ms": 60_000}
        )
        await producer.start()
        cluster.start_request_tracking()
        await producer.begin_transaction()
        committed = await send(producer, "c1")
        await producer.send_offsets_to_transaction({source_tps[0]: 10}, group)
        await producer.commit_transaction()
        after_commit = group_offsets(bootstrap, group, source_tps) if is_real(cluster) else {}

        await producer.begin_transaction()
        aborted = await send(producer, "ab")
        await producer.send_offsets_to_transaction({source_tps[0]: 999, source_tps[1]: 999}, group)
        await producer.flush()  # the aborted records reach the brokers; the abort must hide them
        await producer.abort_transaction()
        after_abort = group_offsets(bootstrap, group, source_tps) if is_real(cluster) else {}

        await producer.begin_transaction()
        committed += await send(producer, "c2")
        await producer.send_offsets_to_transaction({source_tps[0]: 42, source_tps[1]: 7}, group)
        await producer.commit_transaction()
        await producer.stop()
        return committed, aborted, after_commit, after_abort

    committed, aborted, after_commit, after_abort = run(main())
    assert all(f.exception() is None for f in committed + aborted)  # the aborted ones were sent, then aborted
    # Counted by the brokers: three transactions ended, each with its offsets sent. Real coordinators
    # may ask for a retry (NOT_COORDINATOR while a fresh cluster loads __consumer_offsets,
    # CONCURRENT_TRANSACTIONS while the last markers are written): at least once there, exactly once
    # on the mock.
    for api in ("EndTxn", "AddOffsetsToTxn", "TxnOffsetCommit"):
        sent = sum(cluster.requests(API_KEYS[api]).values())
        assert sent >= 3 if is_real(cluster) else sent == 3, (api, sent)

    def expected(prefixes: tuple[str, ...], partition: int) -> list[bytes]:
        return [f"{p}-{i:03d}".encode() for p in prefixes for i in range(TXN_RECORDS) if i % TXN_PARTITIONS == partition]

    # Everything reached the brokers, the aborted records included.
    everything = read_partitions(bootstrap, topic, TXN_PARTITIONS, 3 * TXN_RECORDS, isolation="read_uncommitted")
    for partition in range(TXN_PARTITIONS):
        assert values(everything[partition]) == expected(("c1", "ab", "c2"), partition)

    visible = read_partitions(bootstrap, topic, TXN_PARTITIONS, 2 * TXN_RECORDS, isolation="read_committed")
    for partition in range(TXN_PARTITIONS):
        shown = values(visible[partition])
        if is_real(cluster):
            assert shown == expected(("c1", "c2"), partition)  # each committed record once, no aborted one
        else:
            # The mock shows aborted records to read_committed readers; every committed one, once, still.
            assert [v for v in shown if not v.startswith(b"ab-")] == expected(("c1", "c2"), partition)

    # The group's offsets: the committed transaction's, never the aborted one's. The mock answers
    # TxnOffsetCommit without storing the offsets (librdkafka's rdkafka_mock_handlers.c), so on the
    # mock only the requests counted above show they were sent, once per transaction.
    if is_real(cluster):
        assert after_commit == {0: 10, 1: NO_OFFSET}
        assert after_abort == {0: 10, 1: NO_OFFSET}
        assert group_offsets(bootstrap, group, source_tps) == {0: 42, 1: 7}



def test_a_second_instance_of_a_transactional_id_fences_the_first(
    any_kafka_cluster: AnyCluster, any_kafka_topic: MakeTopic
) -> None:
    """The zombie's open transaction is aborted, its pending sends fail with ProducerFenced, and it
    can neither commit nor send again; only the new instance's records are ever visible."""
    from aiokafka.errors import ProducerFenced

    if not is_real(any_kafka_cluster):
        pytest.skip(
            "the mock gives a second instance a new producer id instead of bumping the epoch, so it never "
            "fences (test_transactions.py makes it answer as a broker answers a zombie instead)"
        )
    topic = any_kafka_topic(TXN_PARTITIONS, replication_factor=3, min_insync_replicas=2)
    bootstrap = any_kafka_cluster.bootstrap_servers

    async def main() -> tuple[list[asyncio.Future], list[asyncio.Future], dict[str, Any]]:
        config = {"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn", "broker.linger.ms": 60_000}
        zombie = BatchingProducer(config)
        await zombie.start()
        await zombie.begin_transaction()
        before = [await zombie.send(topic, b"zombie-%d" % i, partition=i % TXN_PARTITIONS) for i in range(40)]
        await zombie.flush()  # written, in an open transaction
        successor = BatchingProducer(config)
        await successor.start()  # InitProducerId: bumps the epoch, aborts the zombie's transaction
        after = [await zombie.send(topic, b"late-%d" % i, partition=i % TXN_PARTITIONS) for i in range(40)]
        with pytest.raises(ProducerFenced):
            await zombie.commit_transaction()
        with pytest.raises(ProducerFenced):
            await zombie.send(topic, b"again", partition=0)
        stats = zombie.stats()
        await zombie.stop()
        await successor.begin_transaction()
        for i in range(40):
            await successor.send(topic, b"successor-%d" % i, partition=i % TXN_PARTITIONS)
        await successor.commit_transaction()
        await successor.stop()
        return before, after, stats

    before, after, stats = run(main())
    assert all(f.exception() is None for f in before)  # acked, then aborted by the successor
    assert all(isinstance(f.exception(), ProducerFenced) for f in after)
    assert stats["errors"] == {"ProducerFenced": 40}
    visible = read_partitions(bootstrap, topic, TXN_PARTITIONS, 40, isolation="read_committed")
    assert sorted(v for records in visible.values() for v in values(records)) == sorted(
        b"successor-%d" % i for i in range(40)
    )
