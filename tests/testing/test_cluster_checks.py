"""Issue 42 item 21: MockKafkaCluster and KafkaCluster check their arguments alike, by the real broker's rules.

The same bad call gets the same ValueError from both (one validation, testing/_checks.py); topic
names follow Kafka's Topic.validate, and on the real cluster the broker itself is shown to refuse
each name the check refuses, bypassing the check through an AdminClient.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from rebalancer.testing import KafkaCluster, MockKafkaCluster

LONG = "x" * 250
BAD_TOPICS: list[tuple[object, str]] = [
    ("", "topic name must not be empty, got ''"),
    (".", "topic name cannot be '.' or '..', got '.'"),
    ("..", "topic name cannot be '.' or '..', got '..'"),
    (LONG, f"topic name must be at most 249 characters, got 250: '{'x' * 27}...{'x' * 28}'"),
    ("with space", "topic name may hold only ASCII letters, digits, '.', '_' and '-', got 'with space'"),
    ("tab\there", "topic name may hold only ASCII letters, digits, '.', '_' and '-', got 'tab\\there'"),
    ("slash/t", "topic name may hold only ASCII letters, digits, '.', '_' and '-', got 'slash/t'"),
    ("é", "topic name may hold only ASCII letters, digits, '.', '_' and '-', got 'é'"),
    ("ｔ", "topic name may hold only ASCII letters, digits, '.', '_' and '-', got 'ｔ'"),
    (5, "topic name must be a str, got 5 (int)"),
    (b"t", "topic name must be a str, got b't' (bytes)"),
]
BAD_COUNTS: list[tuple[dict[str, Any], str]] = [
    ({"partitions": 2.5}, "partitions must be an int in 1..2147483647, got 2.5 (float)"),
    ({"partitions": "3"}, "partitions must be an int in 1..2147483647, got '3'"),
    ({"partitions": True}, "partitions must be an int in 1..2147483647, got True (bool)"),
    ({"partitions": 0}, "partitions must be an int in 1..2147483647, got 0 (int)"),
    ({"partitions": 2**31}, "partitions must be an int in 1..2147483647, got 2147483648 (int)"),
    ({"partitions": None}, "partitions must be an int in 1..2147483647, got None (NoneType)"),
    ({"partitions": 1, "replication_factor": 4}, "replication_factor must be an int in 1..3, got 4 (int)"),
    ({"partitions": 1, "replication_factor": 1.0}, "replication_factor must be an int in 1..3, got 1.0 (float)"),
    ({"partitions": 1, "replication_factor": True}, "replication_factor must be an int in 1..3, got True (bool)"),
]


def exactly(message: str) -> str:
    return f"^{re.escape(message)}$"


@pytest.mark.parametrize("cls", [MockKafkaCluster, KafkaCluster])
@pytest.mark.parametrize(
    ("brokers", "message"),
    [
        (True, "brokers must be an int >= 1, got True (bool)"),  # the mock took True as 1 broker
        (0, "brokers must be an int >= 1, got 0 (int)"),
        (2.0, "brokers must be an int >= 1, got 2.0 (float)"),
        ("3", "brokers must be an int >= 1, got '3'"),
    ],
)
def test_both_refuse_the_same_broker_counts(cls: Callable[[object], object], brokers: object, message: str) -> None:
    with pytest.raises(ValueError, match=exactly(message)):
        cls(brokers)  # KafkaCluster checks before it looks for Java or the jars


@pytest.mark.parametrize(("name", "message"), BAD_TOPICS, ids=[str(i) for i in range(len(BAD_TOPICS))])
def test_both_refuse_a_topic_name_kafka_refuses(
    any_kafka_cluster: MockKafkaCluster | KafkaCluster, name: object, message: str
) -> None:
    with pytest.raises(ValueError, match=exactly(message)):
        any_kafka_cluster.create_topic(name, partitions=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(("kwargs", "message"), BAD_COUNTS, ids=[str(i) for i in range(len(BAD_COUNTS))])
def test_both_refuse_the_same_counts(
    any_kafka_cluster: MockKafkaCluster | KafkaCluster, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=exactly(message)):
        any_kafka_cluster.create_topic("counts", **kwargs)


def test_both_refuse_the_same_broker_ids(any_kafka_cluster: MockKafkaCluster | KafkaCluster) -> None:
    every = " (or -1 for all)" if isinstance(any_kafka_cluster, MockKafkaCluster) else ""  # -1: a mock's fault
    for broker_id, shown in ((True, "True (bool)"), (7, "7 (int)"), (1.0, "1.0 (float)"), ("1", "'1'")):
        with pytest.raises(ValueError, match=exactly(f"broker_id must be in 1..3{every}, got {shown}")):
            any_kafka_cluster.set_down(broker_id)  # type: ignore[arg-type]


def test_both_take_the_longest_and_every_legal_character(any_kafka_cluster: MockKafkaCluster | KafkaCluster) -> None:
    prefix = "mock" if isinstance(any_kafka_cluster, MockKafkaCluster) else "real"
    for name in (f"{prefix}.a_Z-9", prefix + "y" * (249 - len(prefix))):
        any_kafka_cluster.create_topic(name, partitions=1)


@pytest.mark.kafka
def test_the_mocks_own_calls_refuse_fractions(kafka_mock_cluster: MockKafkaCluster) -> None:
    with pytest.raises(ValueError, match=exactly("ms must be an int in 0..2147483647, got 2.5 (float)")):
        kafka_mock_cluster.set_rtt(1, 2.5)  # type: ignore[arg-type]  # was cut to 2
    with pytest.raises(ValueError, match=exactly("partition must be an int in 0..2147483647, got '0'")):
        kafka_mock_cluster.set_leader("t", "0", 1)  # type: ignore[arg-type]  # was a ctypes.ArgumentError
    with pytest.raises(ValueError, match=exactly("topic name must be a str, got None (NoneType)")):
        kafka_mock_cluster.set_leader(None, 0, 1)  # type: ignore[arg-type]


@pytest.mark.kafka_real
@pytest.mark.parametrize(("name", "message"), [t for t in BAD_TOPICS if isinstance(t[0], str)])
def test_the_real_broker_refuses_each_name_the_check_refuses(
    kafka_real_cluster: KafkaCluster, name: str, message: str
) -> None:
    """The check is Kafka's rule, not a stricter one: bypassing it, the broker refuses the name too."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_real_cluster.bootstrap_servers, "log_level": 0})
    try:
        futures = admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)], request_timeout=30)
    except (KafkaException, ValueError) as exc:  # the client refuses the empty name itself
        assert name == "", exc
        return
    with pytest.raises(KafkaException) as refused:
        futures[name].result(timeout=60)
    assert refused.value.args[0].code() == 17  # Kafka's INVALID_TOPIC_EXCEPTION (librdkafka: TOPIC_EXCEPTION)
