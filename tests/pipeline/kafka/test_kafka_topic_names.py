"""A topic name Kafka would refuse fails where it is given, by Kafka's own rule, in one line: in a
`kafka://HOST:PORT/TOPIC` input (issue 42 item 21's pattern: `kafka://embedded/TOPIC` failed only
when the mock created the topic, after Spark had started), in the reader's `topic` option and in
`pipeline produce --topic`. One rule (rebalancer/_kafka_names.py) for the pipeline and the test
clusters. A URL may carry a password, so no message shows one, wherever in the URL it was put.
No Spark: every case fails before it would start.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rebalancer.pipeline.kafka._options import parse_options
from rebalancer.pipeline.kafka.telemetry import parse_kafka_url, produce_events

SECRET = "S3CRET"
CHARS = "may hold only ASCII letters, digits, '.', '_' and '-'"
LONG = "x" * 250
SHOWN_LONG = f"'{'x' * 27}...{'x' * 28}'"  # a bounded repr


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("kafka://embedded/bad$topic?events=10",
         f"input: topic name {CHARS}, got 'bad$topic', in 'kafka://embedded/bad$topic?events=10'"),
        ("kafka://h:9092/my topic", f"input: topic name {CHARS}, got 'my topic', in 'kafka://h:9092/my topic'"),
        ("kafka://h:9092/é", f"input: topic name {CHARS}, got 'é', in 'kafka://h:9092/é'"),
        ("kafka://h:9092/my%2Dtopic", f"input: topic name {CHARS}, got 'my%2Dtopic', in 'kafka://h:9092/my%2Dtopic'"),
        ("kafka://embedded/.", "input: topic name cannot be '.' or '..', got '.', in 'kafka://embedded/.'"),
        ("kafka://h:9092/..?kafka.sasl.password=S3CRET",
         "input: topic name cannot be '.' or '..', got '..', in 'kafka://h:9092/..?kafka.sasl.password=***'"),
        (f"kafka://h:9092/{LONG}",
         f"input: topic name must be at most 249 characters, got 250: {SHOWN_LONG}, in 'kafka://h:9092/{LONG}'"),
    ],
)
def test_a_topic_kafka_refuses_fails_while_the_url_is_read(url: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_kafka_url(url)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("url", "message"),
    [
        # A '?' forgotten or mistyped puts the options in the topic: their secrets are masked there too.
        (f"kafka://h:9092/t&kafka.sasl.password={SECRET}",
         f"input: topic name {CHARS}, got 't&kafka.sasl.password=***', in 'kafka://h:9092/t&kafka.sasl.password=***'"),
        (f"kafka://h:9092/kafka.ssl.key.pem={SECRET}",
         f"input: topic name {CHARS}, got 'kafka.ssl.key.pem=***', in 'kafka://h:9092/kafka.ssl.key.pem=***'"),
        (f"kafka://h:9092/t;kafka.sasl.password={SECRET}",
         f"input: topic name {CHARS}, got 't;kafka.sasl.password=***', in 'kafka://h:9092/t;kafka.sasl.password=***'"),
        (f"kafka://h:9092/t/kafka.sasl.password={SECRET}",
         "input: expected kafka://HOST:PORT/TOPIC or kafka://embedded/TOPIC, got 'kafka://h:9092/t/kafka.sasl.password=***'"),
        # urlsplit cut a '#' and all after it: the topic read was 't', the password 'pa'.
        (f"kafka://h:9092/t#kafka.sasl.password={SECRET}",
         "input: a kafka:// URL has no '#' part (a topic holds no '#'; in an option's value write it as %23), "
         "got 'kafka://h:9092/t#kafka.sasl.password=***'"),
        (f"kafka://h:9092/t?kafka.sasl.password=pa#{SECRET}",
         "input: a kafka:// URL has no '#' part (a topic holds no '#'; in an option's value write it as %23), "
         "got 'kafka://h:9092/t?kafka.sasl.password=***'"),
    ],
)
def test_a_refused_topic_never_shows_a_secret_pasted_into_it(url: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_kafka_url(url)
    assert str(info.value) == message and SECRET not in str(info.value)


def test_the_longest_legal_topic_and_every_legal_character_are_taken() -> None:
    for topic in ("a.b_c-D9", "x" * 249, "...", "_"):
        assert parse_kafka_url(f"kafka://h:9092/{topic}").topic == topic
    assert parse_kafka_url("kafka://h:9092/t?kafka.sasl.password=pa%23ss").options["kafka.sasl.password"] == "pa#ss"


def test_the_readers_topic_option_and_produce_events_use_the_same_rule() -> None:
    with pytest.raises(ValueError) as info:
        parse_options({"bootstrap.servers": "h:1", "topic": "a b"})
    assert str(info.value) == f"option topic {CHARS}, got 'a b'"
    with pytest.raises(ValueError) as info:
        produce_events("127.0.0.1:1", "t\tx", [b"k"], [b"v"])  # refused before any connection
    assert str(info.value) == f"topic {CHARS}, got 't\\tx'"


OWN = "__consumer_offsets, __transaction_state, __share_group_state, __cluster_metadata"


def test_kafkas_own_topics_may_be_read_but_not_written() -> None:
    """A broker refuses a producer's records for its internal topics: refused here, before any
    connection; reading one (a kafka:// input, the reader's option) is Kafka's to allow."""
    with pytest.raises(ValueError) as info:
        produce_events("127.0.0.1:1", "__consumer_offsets", [b"k"], [b"v"])
    assert str(info.value) == f"topic must not be one of Kafka's own topics ({OWN}), got '__consumer_offsets'"
    assert parse_kafka_url("kafka://h:9092/__consumer_offsets").topic == "__consumer_offsets"
    assert parse_options({"bootstrap.servers": "h:1", "topic": "__transaction_state"}).topic == "__transaction_state"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        # the mock allocated 10**9 partitions at once and aborted the process
        ("partitions=1000000000", "input: partitions must be at most 9999, got '1000000000'"),
        ("events=1000000000", "input: events must be at most 100000000, got '1000000000'"),
    ],
)
def test_an_embedded_topic_is_bounded_as_the_clusters_are(query: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_kafka_url(f"kafka://embedded/t?{query}")
    assert str(info.value) == message
    assert parse_kafka_url("kafka://embedded/t?partitions=9999&events=100000000").embedded_partitions == 9999


def test_one_rule_for_the_pipeline_and_the_test_clusters_and_the_pipeline_needs_no_testing() -> None:
    from rebalancer import _kafka_names
    from rebalancer.testing import _checks

    assert _checks.check_topic_name is _kafka_names.check_topic_name
    assert _checks.TOPIC_NAME_MAX == _kafka_names.TOPIC_NAME_MAX == 249
    done = subprocess.run(
        [sys.executable, "-c", "import sys, rebalancer.pipeline.kafka.telemetry; print(sorted(m for m in sys.modules "
         "if m.startswith('rebalancer.testing')))"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rebalancer.cli", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def test_the_cli_refuses_an_embedded_topic_kafka_refuses_in_one_line_before_spark(tmp_path: Path) -> None:
    url = f"kafka://embedded/bad$topic?kafka.sasl.password={SECRET}&events=10"
    done = run_cli("pipeline", "run", "--input", url, "--output", "out", "--partitions", "2", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"rebalancer: error: input: topic name {CHARS}, got 'bad$topic', "
        "in 'kafka://embedded/bad$topic?kafka.sasl.password=***&events=10'"
    ]
    assert list(tmp_path.iterdir()) == []  # no output, no spark.log: Spark never started


def test_the_cli_produce_refuses_a_topic_kafka_refuses_in_one_line(tmp_path: Path) -> None:
    done = run_cli("pipeline", "produce", "--bootstrap", "127.0.0.1:1", "--topic", "a b", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [f"rebalancer: error: topic {CHARS}, got 'a b'"]
