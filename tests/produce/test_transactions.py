"""Transactions on the batching producer, against librdkafka's mock brokers.

The mock does not hide aborted records from read_committed consumers (checked with aiokafka's own
transactional producer), so aborts are proven on the broker side: requests counted by ApiKey, in
arrival order, and the records the brokers stored.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka.errors import ProducerFenced
from aiokafka.structs import OffsetAndMetadata
from confluent_kafka import Consumer
from confluent_kafka import KafkaError as CKKafkaError
from confluent_kafka import TopicPartition as CKTopicPartition

from rebalancer.produce import BatchingProducer, TopicPartition, TransactionAbortedError
from rebalancer.testing import MockKafkaCluster
from rebalancer.testing.mock_cluster import API_KEYS

pytestmark = pytest.mark.kafka

PRODUCE, ADD_PARTITIONS, END_TXN = API_KEYS["Produce"], API_KEYS["AddPartitionsToTxn"], API_KEYS["EndTxn"]
INVALID_PRODUCER_EPOCH = 47


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


def read_topic(bootstrap: str, topic: str, partitions: int, *, isolation: str) -> dict[int, list[bytes]]:
    """Every stored value per partition, read with a confluent-kafka consumer up to each partition's end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}-{isolation}",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([CKTopicPartition(topic, p, 0) for p in range(partitions)])
        values: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        at_end: set[int] = set()
        deadline = time.monotonic() + 30
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"partitions {sorted(set(range(partitions)) - at_end)} never reached their end"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == CKKafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise AssertionError(f"consumer error: {msg.error()}")
            at_end.discard(msg.partition())
            values[msg.partition()].append(msg.value())
        return values
    finally:
        consumer.close()


def txn_config(cluster: MockKafkaCluster, txn_id: str, **extra: object) -> dict[str, object]:
    return {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": txn_id, **extra}


# -- configuration and misuse ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"enable.idempotence": False}, "transactional.id needs enable.idempotence=true"),
        ({"acks": 1}, "acks must be all when transactional.id is set, got 1"),
        ({"transactional.id": ""}, "transactional.id must be a non-empty string, got ''"),
        ({"transaction.timeout.ms": 0}, "transaction.timeout.ms must be an integer in 1000..2147483647, got 0"),
    ],
)
def test_bad_transactional_config_raises(extra, message):
    with pytest.raises(ValueError, match=message):
        BatchingProducer({"bootstrap.servers": "x:1", "transactional.id": "etl-1", **extra})


def test_send_outside_a_transaction_raises_and_calls_need_a_transactional_id(cluster: MockKafkaCluster, new_topic):
    topic = new_topic(3)

    async def main():
        plain = BatchingProducer({"bootstrap.servers": cluster.bootstrap_servers})
        await plain.start()
        with pytest.raises(RuntimeError, match=r"transactions need transactional\.id"):
            await plain.begin_transaction()
        await plain.stop()
        p = BatchingProducer(txn_config(cluster, "misuse"))
        await p.start()
        with pytest.raises(RuntimeError, match="send\\(\\) outside a transaction on a transactional producer"):
            await p.send(topic, b"x", partition=0)
        with pytest.raises(RuntimeError, match="commit_transaction\\(\\) while the transaction is ready"):
            await p.commit_transaction()
        await p.begin_transaction()
        with pytest.raises(RuntimeError, match="begin_transaction\\(\\) while a transaction is in_transaction"):
            await p.begin_transaction()
        with pytest.raises(ValueError, match="group_id must be a non-empty string"):
            await p.send_offsets_to_transaction({TopicPartition(topic, 0): 1}, "")
        await p.abort_transaction()
        stats = p.stats()
        await p.stop()
        return stats

    stats = run(main())
    assert stats["produced"] == 0 and stats["transaction_state"] == "ready"


@pytest.mark.parametrize(
    ("offset", "shown"),
    [(-5, "-5"), (OffsetAndMetadata(-1, "m"), "-1"), ((-3, "m"), "-3"), (True, "True"), (1.5, "1.5")],
    ids=["int", "OffsetAndMetadata", "tuple", "bool", "float"],
)
def test_a_negative_or_non_int_offset_is_refused_before_anything_is_sent(
    cluster: MockKafkaCluster, new_topic, offset, shown
):
    topic, source = new_topic(1), new_topic(2)

    async def main():
        p = BatchingProducer(txn_config(cluster, f"bad-offset-{topic}"))
        await p.start()
        await p.begin_transaction()
        await (await p.send(topic, b"x", partition=0))
        cluster.start_request_tracking()
        with pytest.raises(ValueError) as error:
            await p.send_offsets_to_transaction({TopicPartition(source, 1): 7, TopicPartition(source, 0): offset}, "g")
        refused = cluster.requests_by_api_key()
        await p.send_offsets_to_transaction({TopicPartition(source, 0): 0}, "g")  # the transaction goes on
        await p.commit_transaction()
        await p.stop()
        return str(error.value), refused

    message, refused = run(main())
    assert message == f"offsets: topic {source!r} partition 0: offset must be an int >= 0, got {shown}"
    assert refused.get(API_KEYS["AddOffsetsToTxn"], 0) == 0 and refused.get(API_KEYS["TxnOffsetCommit"], 0) == 0
    by_api = cluster.requests_by_api_key()
    assert by_api[API_KEYS["AddOffsetsToTxn"]] == 1 and by_api[API_KEYS["TxnOffsetCommit"]] == 1 and by_api[END_TXN] == 1


# -- commit ----------------------------------------------------------------------------------------
def test_committed_messages_are_visible_to_read_committed_consumer(cluster: MockKafkaCluster, new_topic):
    topic, source = new_topic(12), new_topic(2)

    async def main():
        p = BatchingProducer(txn_config(cluster, "commit-1", **{"broker.linger.ms": 60_000}))
        await p.start()
        cluster.start_request_tracking()
        futures = []
        for txn in range(2):
            await p.begin_transaction()
            futures += [await p.send(topic, f"t{txn}-{i}".encode(), partition=i % 12) for i in range(240)]
            await p.send_offsets_to_transaction({TopicPartition(source, 0): 42 + txn}, "etl-group")
            await p.commit_transaction()  # a 60 s linger: only the commit's flush can have sent them
        stats = p.stats()
        await p.stop()
        return futures, stats

    futures, stats = run(main())
    assert all(f.done() and f.exception() is None for f in futures)
    by_api = cluster.requests_by_api_key()
    assert by_api[END_TXN] == 2 and by_api[API_KEYS["AddOffsetsToTxn"]] == 2 and by_api[API_KEYS["TxnOffsetCommit"]] == 2
    assert by_api[PRODUCE] <= 2 * 3  # one flush per commit: about one request per broker
    assert stats["triggers_by_reason"]["flush"] == stats["sends"] and stats["acked"] == 480
    stored = read_topic(cluster.bootstrap_servers, topic, 12, isolation="read_committed")
    for partition in range(12):
        expected = [f"t{txn}-{i}".encode() for txn in range(2) for i in range(240) if i % 12 == partition]
        assert stored[partition] == expected  # every committed message, once, in order


def test_partitions_reach_the_collector_only_after_add_partitions_to_txn(cluster: MockKafkaCluster, new_topic):
    topic = new_topic(9)

    async def main():
        p = BatchingProducer(txn_config(cluster, "gate-1", **{"broker.linger.ms": 0}))
        await p.start()
        cluster.start_request_tracking()
        for _ in range(3):
            await p.begin_transaction()
            futures = [await p.send(topic, b"x", partition=i % 9) for i in range(90)]
            await asyncio.gather(*futures)  # a zero linger: sent as soon as the partitions are added
            await p.commit_transaction()
        await p.stop()

    run(main())
    log = [r.api_key for r in cluster.request_log() if r.api_key in (PRODUCE, ADD_PARTITIONS, END_TXN)]
    # Each transaction: AddPartitionsToTxn, then its ProduceRequests, then EndTxn; never a Produce first.
    transactions, current = [], []
    for key in log:
        current.append(key)
        if key == END_TXN:
            transactions.append(current)
            current = []
    assert len(transactions) == 3 and current == []
    for keys in transactions:
        assert keys[0] == ADD_PARTITIONS and keys[-1] == END_TXN and PRODUCE in keys, keys
        assert keys.index(PRODUCE) > keys.index(ADD_PARTITIONS)


def test_requests_still_batch_across_partitions_inside_a_transaction(cluster: MockKafkaCluster, new_topic):
    topic = new_topic(300)

    async def main():
        p = BatchingProducer(txn_config(cluster, "batch-1", **{"broker.linger.ms": 1000}))
        await p.start()
        await p.begin_transaction()
        await (await p.send(topic, b"warm-up", partition=0))
        await p.commit_transaction()
        cluster.start_request_tracking()
        await p.begin_transaction()
        futures = [await p.send(topic, b"x" * 100, partition=i % 300) for i in range(6000)]
        await asyncio.gather(*futures)  # the 1 s window, not a flush, sends them
        await p.commit_transaction()
        stats = p.stats()
        await p.stop()
        return stats

    stats = run(main())
    produce = sum(cluster.requests(PRODUCE).values())
    assert produce <= 2 * 3, produce  # one window: about one request per broker
    assert produce * 50 < 300  # far fewer requests than partitions
    assert cluster.requests(ADD_PARTITIONS) and sum(cluster.requests(END_TXN).values()) == 1
    assert stats["acked"] == 6001 and stats["failed"] == 0


# -- abort -----------------------------------------------------------------------------------------
def test_abort_drops_unsent_records_and_sends_nothing_after_it(cluster: MockKafkaCluster, new_topic):
    topic = new_topic(30)

    async def main():
        p = BatchingProducer(txn_config(cluster, "abort-1", **{"broker.linger.ms": 60_000}))
        await p.start()
        cluster.start_request_tracking()
        await p.begin_transaction()
        sent = [await p.send(topic, f"sent-{i}".encode(), partition=i % 30) for i in range(60)]
        await p.flush()  # these reach the brokers inside the transaction
        unsent = [await p.send(topic, f"unsent-{i}".encode(), partition=i % 30) for i in range(300)]
        produce_before_abort = sum(cluster.requests(PRODUCE).values())
        await p.abort_transaction()
        log_after_abort = cluster.request_log()
        await p.begin_transaction()
        committed = [await p.send(topic, f"next-{i}".encode(), partition=i % 30) for i in range(30)]
        await p.commit_transaction()
        stats = p.stats()
        await p.stop()
        return sent, unsent, committed, produce_before_abort, log_after_abort, stats

    sent, unsent, committed, produce_before_abort, log_after_abort, stats = run(main())
    assert all(f.exception() is None for f in sent + committed)
    assert all(isinstance(f.exception(), TransactionAbortedError) for f in unsent)
    keys = [r.api_key for r in log_after_abort]
    assert keys.count(END_TXN) == 1 and keys[-1] == END_TXN  # EndTxn(abort) is the last request
    assert keys.count(PRODUCE) == produce_before_abort  # no record was sent after abort_transaction()
    assert stats["aborted"] == 300 and stats["failed"] == 300 and stats["errors"] == {"TransactionAbortedError": 300}
    assert stats["acked"] + stats["failed"] == stats["produced"] == 390
    # The dropped records never reached a broker (the mock keeps aborted records, so read uncommitted).
    stored = read_topic(cluster.bootstrap_servers, topic, 30, isolation="read_uncommitted")
    values = {v for vs in stored.values() for v in vs}
    assert not any(v.startswith(b"unsent-") for v in values)
    assert {f"sent-{i}".encode() for i in range(60)} | {f"next-{i}".encode() for i in range(30)} == values


# -- fencing ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("api_key", [ADD_PARTITIONS, PRODUCE], ids=["AddPartitionsToTxn", "Produce"])
def test_fenced_producer_fails_every_pending_future_and_refuses_sends(cluster: MockKafkaCluster, new_topic, api_key):
    # The mock gives a second instance of a transactional.id a new producer id instead of bumping the
    # epoch, so it never fences; it is made to answer as a broker answers a fenced (zombie) producer.
    topic = new_topic(12)

    async def main():
        p = BatchingProducer(txn_config(cluster, f"fenced-{api_key}", **{"broker.linger.ms": 60_000}))
        await p.start()
        await p.begin_transaction()
        if api_key == PRODUCE:
            await p.send(topic, b"first", partition=0)
            await p.flush()  # partition 0 added and sent: the fence now answers a Produce
        # A fenced producer's every later request is refused, on every broker. However many requests
        # the sender splits the batches into (it varies with timing), each one gets the error.
        cluster.push_request_errors(api_key, [INVALID_PRODUCER_EPOCH] * 1000)
        futures = [await p.send(topic, b"x", partition=i % 12) for i in range(240)]
        with pytest.raises(ProducerFenced):
            await p.commit_transaction()
        with pytest.raises(ProducerFenced):
            await p.send(topic, b"after", partition=0)
        with pytest.raises(ProducerFenced):
            await p.begin_transaction()
        stats = p.stats()
        await p.stop()
        return futures, stats

    try:
        futures, stats = run(main())
    finally:
        cluster.clear_request_errors(api_key)
    assert all(f.done() for f in futures)
    assert all(isinstance(f.exception(), ProducerFenced) for f in futures)  # none acked after the fence
    assert stats["errors"]["ProducerFenced"] == 240
    assert stats["acked"] + stats["failed"] == stats["produced"]
