"""Helpers for tests that run on both Kafka peers (`any_kafka_cluster` in tests/conftest.py).

A module, not a conftest: test files in any package import it (`from kafka_helpers import ...`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from rebalancer.testing import KafkaCluster, MockKafkaCluster


class Record(NamedTuple):
    offset: int
    key: bytes | None
    value: bytes | None


def is_real(cluster: MockKafkaCluster | KafkaCluster) -> bool:
    """True for real Apache Kafka brokers, False for librdkafka's mock."""
    from rebalancer.testing import KafkaCluster

    return isinstance(cluster, KafkaCluster)


def create_topic(
    cluster: MockKafkaCluster | KafkaCluster,
    name: str,
    partitions: int,
    replication_factor: int = 1,
    min_insync_replicas: int | None = None,
) -> None:
    """Create `name` on either cluster. `min_insync_replicas` is set on a real cluster only: the mock
    neither replicates nor enforces it (docs/testing.md)."""
    from rebalancer.testing import KafkaCluster

    if isinstance(cluster, KafkaCluster):
        config = {} if min_insync_replicas is None else {"min.insync.replicas": min_insync_replicas}
        cluster.create_topic(name, partitions=partitions, replication_factor=replication_factor, config=config)
    else:
        cluster.create_topic(name, partitions=partitions, replication_factor=replication_factor)


def read_partitions(
    bootstrap: str,
    topic: str,
    partitions: int,
    expected: int,
    isolation: str = "read_committed",
    timeout_s: float = 90.0,
) -> dict[int, list[Record]]:
    """Every record of `topic` per partition from offset 0, read with a confluent-kafka consumer
    (`assign`, no group), in the order the broker returns them.

    Reads until at least `expected` records are in and every partition is at its end (a read_committed
    end is the last stable offset, which a transaction marker still being written holds back), or
    until the deadline; the caller asserts on what came back, so a shortfall or a surplus shows in
    its diff rather than as a timeout.
    """
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"contract-reader-{topic}-{isolation}",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    records: dict[int, list[Record]] = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    count = 0
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout_s
        while (count < expected or len(at_end) < partitions) and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                error, partition, offset = message.error(), message.partition(), message.offset()
                assert partition is not None and offset is not None, message
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        at_end.add(partition)
                        continue
                    raise AssertionError(f"consumer error on {topic!r}: {error}")
                at_end.discard(partition)
                records[partition].append(Record(offset, message.key(), message.value()))
                count += 1
    finally:
        consumer.close()
    return records
