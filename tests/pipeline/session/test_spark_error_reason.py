"""Issue 33, item 14: a Spark failure is reported by its cause's own line, not by Spark's first line.

PySpark's errors carry the Python traceback of a data source or a task as text; the user needs the
exception at its end ("topic 'missing' does not exist"), not "Traceback (most recent call last):".
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from rebalancer.pipeline.kafka.datasource import register_kafka_source
from rebalancer.pipeline.session.build import spark_error_reason

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

UNKNOWN_TOPIC = "(Broker: Unknown topic or partition)"


@pytest.fixture(scope="module")
def kafka_spark(spark):
    register_kafka_source(spark)
    return spark


def _raised(action) -> BaseException:
    with pytest.raises(Exception) as info:
        action()
    return info.value


def test_a_missing_topic_at_the_cli_exits_2_naming_the_input_the_topic_and_the_cause(kafka_cluster, tmp_path):
    bootstrap = kafka_cluster.bootstrap_servers
    url = f"kafka://{bootstrap}/missing"
    done = subprocess.run(
        [sys.executable, "-m", "rebalancer.cli", "pipeline", "run", "--input", url, "--output", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=240,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1] == (
        f"rebalancer: error: cannot read input {url}: topic 'missing' does not exist on {bootstrap} {UNKNOWN_TOPIC}"
    ), done.stderr
    assert "Traceback (most recent call last)" not in done.stderr
    assert len(lines) == 1, done.stderr  # no JVM ERROR lines either
    assert not (tmp_path / "out").exists()


def test_a_stream_from_a_missing_topic_at_the_cli_exits_2_naming_the_topic_and_the_cause(kafka_cluster, tmp_path):
    bootstrap = kafka_cluster.bootstrap_servers
    url = f"kafka://{bootstrap}/missing"
    argv = ["pipeline", "run", "--stream", "--available-now", "--input", url, "--output", str(tmp_path / "out")]
    done = subprocess.run([sys.executable, "-m", "rebalancer.cli", *argv], capture_output=True, text=True, timeout=240)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    # The topic is checked before Spark starts (--kafka-timeout), so no query runs and the JVM logs nothing.
    assert lines == [
        f"rebalancer: error: cannot read input {url}: topic 'missing' does not exist on {bootstrap} {UNKNOWN_TOPIC}"
    ], done.stderr


def test_a_data_source_error_is_its_exception_line(kafka_spark, kafka_cluster):
    bootstrap = kafka_cluster.bootstrap_servers
    frame = kafka_spark.read.format("rebalancer-kafka").option("bootstrap.servers", bootstrap).option("topic", "absent")
    error = _raised(lambda: frame.load().count())
    assert str(error).startswith("[PYTHON_DATA_SOURCE_ERROR]")  # what the CLI used to print, and nothing more
    assert spark_error_reason(error) == f"topic 'absent' does not exist on {bootstrap} {UNKNOWN_TOPIC}"
    bad = frame.option("maxRecordsPerTask", "ten")
    assert spark_error_reason(_raised(bad.load)) == "maxRecordsPerTask must be a positive integer, got 'ten'"


def _fails_in_a_task(spark, exc: Exception) -> BaseException:
    def tasks(batches):
        for batch in batches:
            raise exc
            yield batch

    return _raised(lambda: spark.range(4).mapInArrow(tasks, "id long").collect())


def test_a_task_error_is_its_exception_line(spark):
    # Raised in an executor's Python worker: the traceback is inside the JVM's task failure text.
    error = _fails_in_a_task(spark, ValueError("row 3 is bad: 'x'"))
    assert "Traceback (most recent call last)" in str(error)
    assert spark_error_reason(error) == "row 3 is bad: 'x'"
    # A message over several lines is one line; a type that says something is kept.
    assert spark_error_reason(_fails_in_a_task(spark, RuntimeError("first\n  second"))) == "first second"
    assert spark_error_reason(_fails_in_a_task(spark, KeyError("entity"))) == "KeyError: 'entity'"


def test_an_error_without_a_python_traceback_is_its_first_line_without_the_sqlstate(spark, tmp_path):
    error = _raised(lambda: spark.read.parquet(str(tmp_path / "none")).count())
    assert "SQLSTATE" in str(error)
    assert spark_error_reason(error) == f"[PATH_NOT_FOUND] Path does not exist: file:{tmp_path / 'none'}."
    assert spark_error_reason(ValueError("")) == "ValueError"
    assert spark_error_reason(OSError("disk full\nmore")) == "disk full"


def test_a_java_error_is_its_root_cause_not_py4js_call_line(spark, tmp_path):
    from py4j.protocol import Py4JJavaError

    missing = tmp_path / "none"
    with pytest.raises(Py4JJavaError) as info:  # a JVM call PySpark does not convert
        spark.sparkContext._jsc.textFile(str(missing)).count()
    assert str(info.value).startswith("An error occurred while calling ")
    kind, _, message = spark_error_reason(info.value).partition(": ")
    assert kind in ("java.io.IOException", "org.apache.hadoop.mapred.InvalidInputException")
    assert message == f"Input path does not exist: file:{missing}"


def test_a_long_reason_is_cut(spark):
    error = _fails_in_a_task(spark, ValueError("x" * 1000))
    assert spark_error_reason(error, limit=50) == "x" * 50
