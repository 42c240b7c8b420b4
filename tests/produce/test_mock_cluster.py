"""MockKafkaCluster: a real Kafka-protocol peer; requests counted on the broker side; RTT and outages."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from confluent_kafka import Producer

from rebalancer.produce import BatchingProducer
from rebalancer.testing import MockKafkaCluster
from rebalancer.testing.mock_cluster import API_KEYS

pytestmark = pytest.mark.kafka


def test_bootstrap_lists_every_broker_on_loopback(cluster: MockKafkaCluster):
    servers = cluster.bootstrap_servers.split(",")
    assert len(servers) == 3 and all(s.startswith("127.0.0.1:") for s in servers)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match=r"^brokers must be an int in 1\.\.100, got 0 \(int\)$"):
        MockKafkaCluster(brokers=0)


def test_topic_and_broker_validation(cluster: MockKafkaCluster):
    with pytest.raises(ValueError, match=r"^partitions must be an int in 1\.\.9999, got 0 \(int\)$"):
        cluster.create_topic("zero", partitions=0)
    with pytest.raises(ValueError, match=r"broker_id must be in 1\.\.3 \(or -1 for all\), got 7"):
        cluster.set_down(7)
    with pytest.raises(ValueError, match=r"^ms must be an int in 0\.\.2147483647, got -5 \(int\)$"):
        cluster.set_rtt(1, -5)


def test_closed_cluster_refuses_use():
    mock = MockKafkaCluster(brokers=1)
    mock.close()
    mock.close()  # twice is fine
    with pytest.raises(RuntimeError, match="closed"):
        mock.create_topic("t", partitions=1)


def test_counts_produce_requests_per_broker_from_another_client(cluster: MockKafkaCluster, new_topic):
    # librdkafka as the client: each message flushed alone is one ProduceRequest to its leader.
    topic = new_topic(3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0})
    producer.produce(topic, b"warm", partition=0)
    producer.flush(10)
    cluster.start_request_tracking()
    for partition in range(3):
        producer.produce(topic, b"x", partition=partition)
        producer.flush(10)
    counts = cluster.produce_requests()
    assert sum(counts.values()) == 3
    assert set(counts) <= {1, 2, 3}
    # The same requests, one by one in arrival order, and by ApiKey.
    log = cluster.request_log()
    produce = [r for r in log if r.api_key == API_KEYS["Produce"]]
    assert len(produce) == 3 and dict(sorted(Counter(r.broker_id for r in produce).items())) == counts
    assert [r.timestamp_us for r in log] == sorted(r.timestamp_us for r in log)
    by_key = cluster.requests_by_api_key()
    assert by_key[API_KEYS["Produce"]] == 3 and sum(by_key.values()) == len(log)
    cluster.start_request_tracking()  # restarting forgets what was counted
    assert cluster.produce_requests() == {}


def test_rtt_is_felt_by_the_client_and_adaptive_mode_reacts(cluster: MockKafkaCluster, new_topic):
    topic = new_topic(3)

    async def main():
        p = BatchingProducer(
            {"bootstrap.servers": cluster.bootstrap_servers, "broker.linger.ms": 40, "broker.adaptive": True}
        )
        await p.start()
        try:
            for _ in range(10):  # baseline RTT on loopback
                await asyncio.gather(*[await p.send(topic, b"x", partition=q) for q in range(3)])
            leader = p.partition_leader(topic, 0)
            cluster.set_rtt(leader, 150)
            loop = asyncio.get_running_loop()
            started = loop.time()
            fut = await p.send(topic, b"slow", partition=0)
            await fut
            slow_ms = (loop.time() - started) * 1000
            for _ in range(4):
                await asyncio.gather(*[await p.send(topic, b"x", partition=0) for _ in range(5)])
            return slow_ms, leader, p.stats()
        finally:
            cluster.set_rtt(-1, 0)
            await p.stop()

    slow_ms, leader, stats = asyncio.run(asyncio.wait_for(main(), 60))
    assert slow_ms >= 150  # the delay is real, on the wire
    assert stats["effective_linger_ms"][leader] < 40  # congestion: the linger was cut (AIMD)


def test_in_flight_window_holds_sends_under_high_rtt(cluster: MockKafkaCluster, new_topic):
    topic = new_topic(9)

    async def main():
        p = BatchingProducer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "broker.linger.ms": 1,
                "max.in.flight.requests.per.connection": 1,
                "max.request.size": 200,  # one small message per request
            }
        )
        await p.start()
        try:
            await (await p.send(topic, b"warm", partition=0))
            leader = p.partition_leader(topic, 0)
            partitions = [q for q in range(9) if p.partition_leader(topic, q) == leader]
            cluster.set_rtt(leader, 100)
            futures = [await p.send(topic, b"y" * 50, partition=q) for q in partitions for _ in range(2)]
            await p.flush()
            return futures, partitions, p.stats()
        finally:
            cluster.set_rtt(-1, 0)
            await p.stop()

    futures, partitions, stats = asyncio.run(asyncio.wait_for(main(), 60))
    assert len(partitions) >= 2
    assert all(f.exception() is None for f in futures)
    assert stats["window_waits"] >= 1 and stats["window_wait_ms_total"] >= 50
    assert stats["in_flight"] == 0


def test_pushed_request_errors_reach_the_client(cluster: MockKafkaCluster, new_topic):
    topic = new_topic(1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0, "retries": 0,
                         "enable.idempotence": False, "acks": "all"})  # fmt: skip
    producer.produce(topic, b"warm", partition=0)
    producer.flush(10)
    errors: list[str] = []
    cluster.push_request_errors(API_KEYS["Produce"], [87])  # INVALID_RECORD: not retriable
    producer.produce(topic, b"x", partition=0, on_delivery=lambda err, _msg: errors.append(err and err.name()))
    producer.flush(10)
    producer.produce(topic, b"y", partition=0, on_delivery=lambda err, _msg: errors.append(err and err.name()))
    producer.flush(10)
    assert errors == ["INVALID_RECORD", None]  # one error, consumed by one request
    with pytest.raises(ValueError, match="errors must be a non-empty list of Kafka error codes"):
        cluster.push_request_errors(0, [])
    with pytest.raises(ValueError, match=r"api_key must be an int in 0\.\.32767, got -1"):
        cluster.push_request_errors(-1, [1])
