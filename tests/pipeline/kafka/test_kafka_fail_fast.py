"""Issue 34 section 5: a Kafka input or output that cannot work fails in one line, exit 2, within
--kafka-timeout, and librdkafka's log lines stay off stderr unless -v.

The CLI runs as a subprocess (`python -m rebalancer.cli`): its whole stderr is the user's console. Each
call has a generous `timeout=` as a guard; the wall time is not asserted (a loaded box is slow)."""

from __future__ import annotations

import logging
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rebalancer._librdkafka import LibrdkafkaLog
from rebalancer.pipeline.kafka._options import parse_options
from rebalancer.pipeline.kafka._topic import TopicView
from rebalancer.testing import MockKafkaCluster

pytestmark = pytest.mark.kafka

LIBRDKAFKA_LINE = re.compile(r"^%\d\|\d+\.\d+\|[A-Z_]+\|", re.M)  # %3|1795692263.431|FAIL|...
GUARD_S = 120


def closed_port() -> int:
    """A loopback port nothing listens on: bound, then released."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rebalancer.cli", *args],
        capture_output=True,
        text=True,
        timeout=GUARD_S,
        cwd=cwd,
    )


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """Exit 2, and exactly one stderr line, the error; no librdkafka line, no traceback."""
    lines = result.stderr.splitlines()
    assert result.returncode == 2, result.stderr[-2000:]
    assert not LIBRDKAFKA_LINE.search(result.stderr), result.stderr[:2000]
    assert "Traceback" not in result.stderr
    assert len(lines) == 1, result.stderr[:2000]
    assert lines[0].startswith("rebalancer: error: ")
    return lines[0]


def test_run_with_nothing_listening_fails_in_one_line(tmp_path: Path) -> None:
    port = closed_port()
    result = cli(
        "pipeline", "run", "--input", f"kafka://127.0.0.1:{port}/telemetry", "--output", str(tmp_path / "out"),
        "--kafka-timeout", "3", cwd=tmp_path,
    )
    line = one_error_line(result)
    assert f"kafka://127.0.0.1:{port}/telemetry" in line
    assert f"cannot reach Kafka at 127.0.0.1:{port} within 3 s" in line
    assert "Connection refused" in line
    assert not (tmp_path / "out").exists()


def test_run_on_a_missing_topic_fails_in_one_line(tmp_path: Path, kafka_cluster: MockKafkaCluster) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    result = cli(
        "pipeline", "run", "--input", f"kafka://{bootstrap}/no-such-topic", "--output", str(tmp_path / "out"),
        cwd=tmp_path,
    )
    line = one_error_line(result)
    assert f"cannot read input kafka://{bootstrap}/no-such-topic: topic 'no-such-topic' does not exist on {bootstrap}" in line


def test_run_refused_by_authentication_fails_in_one_line(tmp_path: Path, kafka_cluster: MockKafkaCluster) -> None:
    """The mock has no SASL: a SASL client fails its handshake, as a refused login fails, before any
    data; the password stays out of the line."""
    bootstrap = kafka_cluster.bootstrap_servers
    kafka_cluster.create_topic("fail-fast-sasl", partitions=1)
    url = (
        f"kafka://{bootstrap}/fail-fast-sasl?kafka.security.protocol=SASL_PLAINTEXT&kafka.sasl.mechanism=PLAIN"
        "&kafka.sasl.username=etl&kafka.sasl.password=hunter2-do-not-print"
    )
    result = cli("pipeline", "run", "--input", url, "--output", str(tmp_path / "out"), "--kafka-timeout", "2", cwd=tmp_path)
    line = one_error_line(result)
    assert f"cannot reach Kafka at {bootstrap} within 2 s" in line
    assert "SASL" in line
    assert "hunter2" not in result.stderr


def test_produce_with_nothing_listening_fails_in_one_line(tmp_path: Path) -> None:
    port = closed_port()
    result = cli(
        "pipeline", "produce", "--bootstrap", f"127.0.0.1:{port}", "--topic", "t", "--events", "100",
        "--kafka-timeout", "3", cwd=tmp_path,
    )
    line = one_error_line(result)
    assert f"127.0.0.1:{port}" in line
    assert "Connection refused" in line


def test_verbose_shows_librdkafka_lines_through_logging(tmp_path: Path) -> None:
    """-v: librdkafka's own lines, as log records of rebalancer.kafka.librdkafka (never raw %3|... lines)."""
    port = closed_port()
    result = cli(
        "-v", "pipeline", "run", "--input", f"kafka://127.0.0.1:{port}/telemetry", "--output",
        str(tmp_path / "out"), "--kafka-timeout", "2", cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert not LIBRDKAFKA_LINE.search(result.stderr)
    assert re.search(r"INFO rebalancer\.kafka\.librdkafka: FAIL .*Connection refused", result.stderr), result.stderr[:2000]


def test_topic_view_waits_metadata_timeout_and_keeps_librdkafka_off_stderr(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """In-process (the driver's and the executors' consumers use the same configuration): the error
    names the servers and librdkafka's reason; librdkafka wrote nothing to fd 2 itself."""
    port = closed_port()
    options = parse_options({"bootstrap.servers": f"127.0.0.1:{port}", "topic": "t", "metadataTimeoutMs": "1500"})
    view = TopicView(options)
    with caplog.at_level(logging.DEBUG, logger="rebalancer.kafka.librdkafka"), pytest.raises(RuntimeError) as raised:
        try:
            view.watermarks()
        finally:
            view.close()
    assert f"cannot reach Kafka at 127.0.0.1:{port} within 1.5 s" in str(raised.value)
    assert "Connection refused" in str(raised.value)
    assert not LIBRDKAFKA_LINE.search(capfd.readouterr().err)
    routed = [r for r in caplog.records if r.name == "rebalancer.kafka.librdkafka"]
    assert routed and all(r.levelno <= logging.INFO for r in routed)


def test_librdkafka_errors_are_info_and_the_rest_debug(caplog: pytest.LogCaptureFixture) -> None:
    """Never WARNING or above: the Python workers' last-resort handler would print those."""
    with caplog.at_level(logging.DEBUG, logger="rebalancer.kafka.librdkafka"):
        LibrdkafkaLog().log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", "refused")
        LibrdkafkaLog().log(logging.DEBUG, "%s [%s] %s", "FETCH", "rdkafka#consumer-1", "fetch")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "FAIL [rdkafka#consumer-1] refused"),
        (logging.DEBUG, "FETCH [rdkafka#consumer-1] fetch"),
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"metadataTimeoutMs": "0"}, "metadataTimeoutMs must be a positive integer"),
        ({"metadataTimeoutMs": "1.5"}, "metadataTimeoutMs must be a positive integer"),
    ],
)
def test_metadata_timeout_option_is_checked(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_options({"bootstrap.servers": "b:9092", "topic": "t", **options})


def test_kafka_timeout_flag_sets_the_reader_option() -> None:
    from rebalancer.pipeline.kafka.telemetry import parse_kafka_url

    spec = parse_kafka_url("kafka://b:9092/t?metadataTimeoutMs=99999")
    assert parse_options(spec.with_timeout(2.5).reader_options(False)).metadata_timeout_ms == 2500
    assert parse_options(spec.with_timeout(None).reader_options(False)).metadata_timeout_ms == 99999
    assert parse_options(parse_kafka_url("kafka://b:9092/t").reader_options(False)).metadata_timeout_ms == 10_000


def test_kafka_timeout_flag_is_for_kafka_inputs(tmp_path: Path) -> None:
    result = cli("pipeline", "run", "--input", str(tmp_path), "--kafka-timeout", "3", cwd=tmp_path)
    assert one_error_line(result) == "rebalancer: error: kafka-timeout: is for a kafka:// input, got 3"


def test_kafka_timeout_flag_must_be_positive(tmp_path: Path) -> None:
    for command in (["pipeline", "run", "--input", "kafka://b:9092/t"], ["pipeline", "produce", "--bootstrap", "b:9092", "--topic", "t"]):
        result = cli(*command, "--kafka-timeout", "0", cwd=tmp_path)
        assert result.returncode == 2
        assert "kafka-timeout" in result.stderr and "must be a finite number > 0" in result.stderr



def test_produce_demo_prints_nothing_on_stderr(tmp_path: Path) -> None:
    result = cli("produce", "demo", "--messages", "200", "--partitions", "4", "--brokers", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr == ""
