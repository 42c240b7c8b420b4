"""The librdkafka mock cluster for the Kafka-source tests: one per test session, on loopback."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import pytest

from rebalancer.testing import MockKafkaCluster

_topic_ids = itertools.count()
Message = tuple[bytes | None, bytes | None, int]  # key, value, partition


@pytest.fixture(scope="session")
def kafka_cluster(kafka_mock_cluster: MockKafkaCluster) -> MockKafkaCluster:
    """The session's mock cluster (tests/conftest.py), shared with the Kafka contract tests."""
    return kafka_mock_cluster


@pytest.fixture
def kafka_topic(kafka_cluster: MockKafkaCluster) -> Callable[[int], str]:
    """make(partitions) -> a new topic's name."""

    def make(partitions: int) -> str:
        name = f"kafka-source-{next(_topic_ids)}"
        kafka_cluster.create_topic(name, partitions=partitions)
        return name

    return make


def produce(bootstrap: str, topic: str, messages: Sequence[Message]) -> dict[int, list[int]]:
    """Send and wait for every ack; returns {partition: offsets} in send order (fails on any error)."""
    from confluent_kafka import Producer

    # Idempotent: a retried request must not store a message twice (a real broker may ask for retries).
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 3, "enable.idempotence": True})
    offsets: dict[int, list[int]] = {}
    errors: list[str] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            offsets.setdefault(msg.partition(), []).append(msg.offset())

    for index, (key, value, partition) in enumerate(messages):
        producer.produce(topic, value=value, key=key, partition=partition, on_delivery=on_delivery)
        if index % 5000 == 4999:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors[:3]
    return offsets
