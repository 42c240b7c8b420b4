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
    ({"partitions": 2.5}, "partitions must be an int in 1..9999, got 2.5 (float)"),
    ({"partitions": "3"}, "partitions must be an int in 1..9999, got '3'"),
    ({"partitions": True}, "partitions must be an int in 1..9999, got True (bool)"),
    ({"partitions": 0}, "partitions must be an int in 1..9999, got 0 (int)"),
    # A real controller refuses 10000 (one metadata batch); 10**9 aborted the process in the mock.
    ({"partitions": 10_000}, "partitions must be an int in 1..9999, got 10000 (int)"),
    ({"partitions": 10**9}, "partitions must be an int in 1..9999, got 1000000000 (int)"),
    ({"partitions": 2**31}, "partitions must be an int in 1..9999, got 2147483648 (int)"),
    ({"partitions": None}, "partitions must be an int in 1..9999, got None (NoneType)"),
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
        (True, "brokers must be an int in 1..100, got True (bool)"),  # the mock took True as 1 broker
        (0, "brokers must be an int in 1..100, got 0 (int)"),
        (2.0, "brokers must be an int in 1..100, got 2.0 (float)"),
        ("3", "brokers must be an int in 1..100, got '3'"),
        (101, "brokers must be an int in 1..100, got 101 (int)"),
        (100_000, "brokers must be an int in 1..100, got 100000 (int)"),  # the mock aborted the process
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


@pytest.mark.parametrize("name", ["__consumer_offsets", "__transaction_state", "__share_group_state", "__cluster_metadata"])
def test_both_refuse_to_create_kafkas_own_topics(any_kafka_cluster: MockKafkaCluster | KafkaCluster, name: str) -> None:
    """The mock made them; a real broker refuses __cluster_metadata and any producer's records for the others."""
    own = "__consumer_offsets, __transaction_state, __share_group_state, __cluster_metadata"
    with pytest.raises(ValueError, match=exactly(f"topic name must not be one of Kafka's own topics ({own}), got {name!r}")):
        any_kafka_cluster.create_topic(name, partitions=1)


@pytest.mark.parametrize(
    ("api_key", "message"),
    [
        ("x", "api_key must be an int in 0..32767, got 'x'"),  # the mock counted nothing, without a word
        (-1, "api_key must be an int in 0..32767, got -1 (int)"),
        (True, "api_key must be an int in 0..32767, got True (bool)"),
        (2**15, "api_key must be an int in 0..32767, got 32768 (int)"),
    ],
)
def test_both_refuse_the_same_api_keys(
    any_kafka_cluster: MockKafkaCluster | KafkaCluster, api_key: object, message: str
) -> None:
    with pytest.raises(ValueError, match=exactly(message)):
        any_kafka_cluster.requests(api_key)  # type: ignore[arg-type]


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
def test_the_mock_refuses_what_a_broker_would_not_have(kafka_mock_cluster: MockKafkaCluster) -> None:
    """The mock itself created a topic set_leader named (with partition + 1 partitions), took a name
    that collides with another's, and let ctypes cut an ApiKey or an error code to 16 or 32 bits."""
    mock = kafka_mock_cluster
    with pytest.raises(ValueError, match=exactly("set_leader: no topic 'nosuch' here (create_topic makes one)")):
        mock.set_leader("nosuch", 0, 1)
    mock.create_topic("mock.collides", 2)
    with pytest.raises(ValueError, match=exactly("partition must be an int in 0..1, got 2 (int)")):
        mock.set_leader("mock.collides", 2, 1)
    mock.set_leader("mock.collides", 1, 2)
    with pytest.raises(ValueError, match=exactly("topic name 'mock_collides' collides with existing topic 'mock.collides'")):
        mock.create_topic("mock_collides", 1)
    with pytest.raises(ValueError, match=exactly("api_key must be an int in 0..32767, got 40000 (int)")):
        mock.clear_request_errors(40000)  # was cleared as ApiKey -25536
    with pytest.raises(
        ValueError,
        match=exactly("errors must be a non-empty list of Kafka error codes (ints in -1..32767), got [4294967343] (list)"),
    ):
        mock.push_request_errors(0, [2**32 + 47])  # was pushed as 47


FD_CHECK = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (80, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from rebalancer.testing import MockKafkaCluster
try:
    MockKafkaCluster(100)
except ValueError as exc:
    print(exc)
"""


@pytest.mark.kafka
def test_the_mock_refuses_more_brokers_than_the_process_has_files_for() -> None:
    """Out of file descriptors, librdkafka's mock aborted the process (SIGABRT in
    rd_kafka_mock_cluster_destroy): here, in a throwaway process, it is a ValueError instead."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", FD_CHECK], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.fullmatch(
        r"brokers must be at most (\d+) in this process \(a socket each; (\d+) of its 80 files, RLIMIT_NOFILE, "
        r"are open\), got 100\n",
        done.stdout,
    ), done.stdout
    at_most, in_use = map(int, re.findall(r"\d+", done.stdout)[:2])
    assert at_most == 80 - in_use - 32


@pytest.mark.kafka
def test_the_mocks_own_calls_refuse_fractions(kafka_mock_cluster: MockKafkaCluster) -> None:
    with pytest.raises(ValueError, match=exactly("ms must be an int in 0..2147483647, got 2.5 (float)")):
        kafka_mock_cluster.set_rtt(1, 2.5)  # type: ignore[arg-type]  # was cut to 2
    with pytest.raises(ValueError, match=exactly("partition must be an int in 0..9998, got '0'")):
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
