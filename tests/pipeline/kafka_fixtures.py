"""The librdkafka mock cluster for the Kafka-source tests: one per test session, on loopback."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd
import pytest

from rebalancer.testing import MockKafkaCluster

_topic_ids = itertools.count()
Message = tuple[bytes | None, bytes | None, int]  # key, value, partition
KEY = ["type", "entity", "minute"]


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


def cluster_id(bootstrap: str) -> str:
    """The cluster's id, as its brokers' metadata gives it."""
    from confluent_kafka.admin import AdminClient

    found = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).cluster_id
    assert isinstance(found, str) and found
    return found


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


def _metric_frame(frame: pd.DataFrame) -> pd.DataFrame:
    frame["minute"] = pd.to_datetime(frame["minute"]).dt.tz_localize(None) if frame["minute"].dt.tz else frame["minute"]
    frame = frame[[*KEY, "count", "sum", "min", "max"]].sort_values(KEY).reset_index(drop=True)
    return frame.astype({"count": "int64", "sum": "float64", "min": "float64", "max": "float64"})


def all_at_once(spark: object, url: str, out: Path) -> pd.DataFrame:
    """The metrics of one run over the whole topic, without a group: what the increments must add up to."""
    from rebalancer.pipeline.batch import run_batch
    from rebalancer.pipeline.kafka.telemetry import parse_kafka_url

    run_batch(spark, parse_kafka_url(url), out, partitions=2, report=False)  # type: ignore[arg-type]
    return _metric_frame(pd.read_parquet(out / "metrics"))


def batches_folded(out: Path) -> pd.DataFrame:
    """A group run output's metrics folded over its batch ids: count and sum add, min and max combine."""
    frame = pd.read_parquet(out / "metrics")
    folded = frame.groupby(KEY, as_index=False).agg(
        {"count": "sum", "sum": "sum", "min": "min", "max": "max"}
    )
    return _metric_frame(folded)


def assert_same_totals(database: pd.DataFrame, expected: pd.DataFrame) -> None:
    left, right = database.reset_index(drop=True), expected[database.columns].reset_index(drop=True)
    for frame in (left, right):
        frame["minute"] = frame["minute"].astype("datetime64[ns]")
    pd.testing.assert_frame_equal(left, right, check_exact=False, rtol=1e-9)
