"""The `rebalancer-kafka` data source against the librdkafka mock cluster (batch and streaming)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from kafka_fixtures import produce

from rebalancer.pipeline.kafka._options import parse_options
from rebalancer.pipeline.kafka.datasource import KafkaBatchReader, KafkaStreamReader, register_kafka_source
from rebalancer.pipeline.kafka.tasks import DataLossError, OffsetRange

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


@pytest.fixture(scope="module")
def kafka_spark(spark):
    register_kafka_source(spark)
    return spark


def reader(spark, bootstrap, topic, **options):
    frame = spark.read.format("rebalancer-kafka").option("bootstrap.servers", bootstrap).option("topic", topic)
    for key, value in options.items():
        frame = frame.option(key, str(value))
    return frame.load()


def test_batch_read_equals_the_produced_messages(kafka_spark, any_kafka_cluster, any_kafka_topic):
    """Part of the Kafka contract: on the mock and on real brokers (tests/conftest.py)."""
    kafka_cluster = any_kafka_cluster
    topic = any_kafka_topic(3)
    messages = [(f"k{i % 11}".encode(), f"value-{i}".encode(), i % 3) for i in range(3000)]
    messages.append((None, b"no key", 1))
    messages.append((b"no value", None, 2))
    acked = produce(kafka_cluster.bootstrap_servers, topic, messages)
    frame = reader(kafka_spark, kafka_cluster.bootstrap_servers, topic, maxRecordsPerTask=400)
    assert [f.name for f in frame.schema.fields] == ["key", "value", "topic", "partition", "offset", "timestamp"]
    assert [f.dataType.simpleString() for f in frame.schema.fields] == [
        "binary", "binary", "string", "int", "bigint", "timestamp"
    ]
    rows = frame.collect()
    assert len(rows) == len(messages)
    got = Counter((r.key, r.value, r.partition) for r in rows)
    assert got == Counter((k, v, p) for k, v, p in messages)
    assert {r.topic for r in rows} == {topic}
    assert sorted((r.partition, r.offset) for r in rows) == sorted(
        (p, o) for p, offsets in acked.items() for o in offsets
    )
    # Offsets are the ones acked: each message appears at the offset the broker gave it.
    sent = {p: iter(offsets) for p, offsets in acked.items()}
    by_offset = {(r.partition, r.offset): (r.key, r.value) for r in rows}
    for key, value, partition in messages:
        assert by_offset[(partition, next(sent[partition]))] == (key, value)
    assert all(r.timestamp is not None for r in rows)


def test_json_offsets_read_exactly_the_given_ranges(kafka_spark, kafka_cluster, kafka_topic):
    topic = kafka_topic(2)
    produce(kafka_cluster.bootstrap_servers, topic, [(None, b"%d" % i, i % 2) for i in range(200)])
    frame = reader(
        kafka_spark, kafka_cluster.bootstrap_servers, topic,
        startingOffsets=json.dumps({topic: {"0": 10, "1": -2}}),
        endingOffsets=json.dumps({topic: {"0": 60, "1": 5}}),
    )
    got = sorted((r.partition, r.offset) for r in frame.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(10, 60)] + [(1, o) for o in range(5)]


def test_a_hot_partition_is_split_into_tasks_covering_each_offset_once(kafka_spark, kafka_cluster, kafka_topic):
    topic = kafka_topic(1)
    produce(kafka_cluster.bootstrap_servers, topic, [(None, b"x%d" % i, 0) for i in range(10_000)])
    from pyspark.sql import functions as F

    frame = reader(kafka_spark, kafka_cluster.bootstrap_servers, topic, maxRecordsPerTask=1000)
    assert frame.rdd.getNumPartitions() == 10
    rows = frame.select(F.spark_partition_id().alias("task"), "offset").collect()
    per_task = Counter(r.task for r in rows)
    assert sorted(per_task.values()) == [1000] * 10
    assert sorted(r.offset for r in rows) == list(range(10_000))
    baseline = reader(kafka_spark, kafka_cluster.bootstrap_servers, topic, maxRecordsPerTask=1000, planTasks="false")
    assert baseline.rdd.getNumPartitions() == 1
    assert baseline.count() == 10_000


def test_bad_options_fail_the_load_naming_the_option(kafka_spark, kafka_cluster, kafka_topic):
    topic = kafka_topic(1)
    with pytest.raises(Exception, match="maxRecordsPerTask must be a positive integer, got 'ten'"):
        reader(kafka_spark, kafka_cluster.bootstrap_servers, topic, maxRecordsPerTask="ten")
    with pytest.raises(Exception, match="option topic is required"):
        kafka_spark.read.format("rebalancer-kafka").option("bootstrap.servers", kafka_cluster.bootstrap_servers).load()
    with pytest.raises(Exception, match=r"startingOffsets: topic '.*' has no partition 5"):
        reader(kafka_spark, kafka_cluster.bootstrap_servers, topic, startingOffsets=json.dumps({topic: {"5": 0}})).count()


def _topic_with_deleted_head(kafka_cluster, kafka_topic, records: int) -> tuple[str, str]:
    """(bootstrap, topic): `records` small records, then 80 of 100 kB. The mock keeps 5 MiB per
    partition, so the 8 MiB push the first records out, as retention would."""
    topic = kafka_topic(1)
    bootstrap = kafka_cluster.bootstrap_servers
    produce(bootstrap, topic, [(None, b"early %d" % i, 0) for i in range(records)])
    produce(bootstrap, topic, [(None, b"x" * 100_000, 0) for _ in range(80)])
    return bootstrap, topic


def test_fail_on_data_loss(kafka_spark, kafka_cluster, kafka_topic):
    bootstrap, topic = _topic_with_deleted_head(kafka_cluster, kafka_topic, 100)
    from_zero = json.dumps({topic: {"0": 0}})
    with pytest.raises(Exception, match=r"partition 0: offsets 0\.\.\d+ were deleted before they were read"):
        reader(kafka_spark, bootstrap, topic, startingOffsets=from_zero).count()
    kept = reader(kafka_spark, bootstrap, topic, startingOffsets=from_zero, failOnDataLoss="false")
    offsets = sorted(r.offset for r in kept.select("offset").collect())
    assert offsets and offsets[0] > 100 and offsets[-1] == 179
    assert offsets == list(range(offsets[0], 180))
    assert reader(kafka_spark, bootstrap, topic).count() == len(offsets)  # earliest is what is left


def _foreach_batch_to(out: Path, crash_at: int | None = None):
    """Each micro-batch to OUT/batch_id=N (overwritten on replay); optionally crash after writing one."""

    def write(frame, batch_id: int) -> None:
        frame.select("partition", "offset", "value").write.mode("overwrite").parquet(str(out / f"batch_id={batch_id}"))
        if batch_id == crash_at:
            raise RuntimeError(f"injected crash after batch {batch_id}")

    return write


def _run_available_now(spark, bootstrap, topic, out, checkpoint, crash_at=None, **options):
    stream = spark.readStream.format("rebalancer-kafka").option("bootstrap.servers", bootstrap).option("topic", topic)
    for key, value in options.items():
        stream = stream.option(key, str(value))
    query = (
        stream.load()
        .writeStream.foreachBatch(_foreach_batch_to(out, crash_at))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
    finally:
        query.stop()
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_a_stream_killed_mid_way_resumes_from_its_checkpoint_with_each_record_once(
    kafka_spark, kafka_cluster, kafka_topic, tmp_path
):
    topic = kafka_topic(3)
    bootstrap = kafka_cluster.bootstrap_servers
    produce(bootstrap, topic, [(None, b"a%d" % i, i % 3) for i in range(1200)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    with pytest.raises(Exception, match="injected crash after batch 1"):
        _run_available_now(kafka_spark, bootstrap, topic, out, checkpoint, crash_at=1, maxOffsetsPerTrigger=500)
    produce(bootstrap, topic, [(None, b"b%d" % i, i % 3) for i in range(600)])
    sizes = _run_available_now(kafka_spark, bootstrap, topic, out, checkpoint, maxOffsetsPerTrigger=500)
    assert sizes and max(sizes) <= 500
    rows = kafka_spark.read.parquet(str(out)).collect()
    assert len(rows) == 1800
    assert Counter((r.partition, r.offset) for r in rows) == Counter((p, o) for p in range(3) for o in range(600))
    assert sorted(r.value for r in rows) == sorted([b"a%d" % i for i in range(1200)] + [b"b%d" % i for i in range(600)])


def test_a_stream_picks_up_partitions_its_offsets_do_not_know(kafka_cluster, kafka_topic):
    # The mock cannot grow a topic (no CreatePartitions), so the stream's last offsets name only part
    # of it: exactly what the reader sees after partitions are added.
    topic = kafka_topic(3)
    bootstrap = kafka_cluster.bootstrap_servers
    produce(bootstrap, topic, [(None, b"%d" % i, i % 3) for i in range(300)])
    stream = KafkaStreamReader(parse_options({"bootstrap.servers": bootstrap, "topic": topic}, streaming=True))
    try:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        start = {topic: {"0": 100, "1": 40}}
        end = stream.latestOffset(start, ReadAllAvailable())
        assert end == {topic: {"0": 100, "1": 100, "2": 100}}
        ranges = sorted(r for task in stream.partitions(start, end) for r in task.ranges)
        assert ranges == [OffsetRange(1, 40, 100), OffsetRange(2, 0, 100)]
        limited = stream.latestOffset(start, ReadMaxRows(80))
        assert limited == {topic: {"0": 100, "1": 100 - 60 + 30, "2": 50}}
    finally:
        stream.stop()


def test_a_stream_whose_next_offsets_were_deleted_fails_unless_told_not_to(kafka_cluster, kafka_topic):
    bootstrap, topic = _topic_with_deleted_head(kafka_cluster, kafka_topic, 50)
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    for fail, expected in (("true", DataLossError), ("false", None)):
        options = {"bootstrap.servers": bootstrap, "topic": topic, "failOnDataLoss": fail}
        stream = KafkaStreamReader(parse_options(options, streaming=True))
        try:
            start = {topic: {"0": 10}}
            end = stream.latestOffset(start, ReadAllAvailable())
            if expected is not None:
                with pytest.raises(expected, match=r"offsets 10\.\.") as info:
                    stream.partitions(start, end)
                assert "failOnDataLoss=false" in str(info.value)
            else:
                (task,) = stream.partitions(start, end)
                assert task.ranges[0].start > 50 and task.ranges[-1].end == 130
        finally:
            stream.stop()


def test_a_task_whose_offsets_vanish_after_planning_fails_or_skips_them(kafka_cluster, kafka_topic):
    # The planner saw offset 0; retention deleted it before the task ran.
    from rebalancer.pipeline.kafka._read import read_task
    from rebalancer.pipeline.kafka.tasks import KafkaTask

    bootstrap, topic = _topic_with_deleted_head(kafka_cluster, kafka_topic, 50)
    task = KafkaTask(topic, [OffsetRange(0, 0, 130)])
    strict = parse_options({"bootstrap.servers": bootstrap, "topic": topic, "pollTimeoutMs": "20000"})
    with pytest.raises(DataLossError, match=r"partition 0: offsets 0\.\.\d+ were deleted"):
        list(read_task(strict, task))
    lenient = parse_options({"bootstrap.servers": bootstrap, "topic": topic, "failOnDataLoss": "false"})
    offsets = [o for batch in read_task(lenient, task) for o in batch.column("offset").to_pylist()]
    assert offsets and offsets[0] > 50 and offsets == list(range(offsets[0], 130))


# -- offsets the driver knows cannot be read fail at planning (issue 33, item 5) -----------------
NEVER_MS = 86_400_000  # pollTimeoutMs, its bound (a day): a read that waited for records that never come would hang the test


@pytest.mark.timeout(90)
def test_an_end_offset_past_the_log_fails_at_planning_naming_it(kafka_spark, kafka_cluster, kafka_topic):
    topic = kafka_topic(1)
    produce(kafka_cluster.bootstrap_servers, topic, [(None, b"%d" % i, 0) for i in range(5)])
    frame = reader(
        kafka_spark, kafka_cluster.bootstrap_servers, topic,
        endingOffsets=json.dumps({topic: {"0": 50}}), pollTimeoutMs=NEVER_MS,
    )
    expected = f"endingOffsets: topic {topic!r} partition 0: offset 50 is past the end of the partition (high watermark 5)"
    with pytest.raises(Exception, match=re.escape(expected)):
        frame.count()
    # The last offset that exists is still a valid end.
    ending = json.dumps({topic: {"0": 5}})
    assert reader(kafka_spark, kafka_cluster.bootstrap_servers, topic, endingOffsets=ending).count() == 5


def _planned(bootstrap: str, topic: str, **options: str) -> list[OffsetRange]:
    """The ranges a batch read of `options` plans, asked of the reader as Spark's planner does."""
    batch = KafkaBatchReader(parse_options({"bootstrap.servers": bootstrap, "topic": topic, **options}))
    return sorted(r for task in batch.partitions() for r in task.ranges)


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_given_offsets_that_cannot_be_read_fail_at_planning_naming_them(kafka_cluster, kafka_topic, fail_on_data_loss):
    """A start past the end, or after the end asked for, is the user's mistake, not data loss: it is
    refused whatever failOnDataLoss says (with false it used to read nothing, silently)."""
    topic = kafka_topic(2)
    bootstrap = kafka_cluster.bootstrap_servers
    produce(bootstrap, topic, [(None, b"%d" % i, i % 2) for i in range(10)])  # 5 records per partition
    common = {"failOnDataLoss": fail_on_data_loss, "pollTimeoutMs": str(NEVER_MS)}
    cases = [
        ({"startingOffsets": json.dumps({topic: {"0": 0, "1": 7}})},
         f"startingOffsets: topic {topic!r} partition 1: offset 7 is past the end of the partition (high watermark 5)"),
        ({"startingOffsets": json.dumps({topic: {"0": 4}}), "endingOffsets": json.dumps({topic: {"0": 2}})},
         f"startingOffsets: topic {topic!r} partition 0: offset 4 is after its endingOffsets offset 2"),
        ({"endingOffsets": json.dumps({topic: {"0": -1, "1": 6}})},
         f"endingOffsets: topic {topic!r} partition 1: offset 6 is past the end of the partition (high watermark 5)"),
    ]
    for options, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            _planned(bootstrap, topic, **options, **common)
    # At the bounds: a start at the end reads nothing there, an end at the start reads nothing.
    assert _planned(
        bootstrap, topic, startingOffsets=json.dumps({topic: {"0": 5, "1": 3}}),
        endingOffsets=json.dumps({topic: {"1": 3}}), **common,
    ) == []
    assert _planned(bootstrap, topic, startingOffsets=json.dumps({topic: {"1": 2}}), **common) == [
        OffsetRange(0, 0, 5), OffsetRange(1, 2, 5)
    ]


def test_a_stream_starting_past_the_end_of_a_partition_fails_naming_it(kafka_cluster, kafka_topic):
    topic = kafka_topic(1)
    bootstrap = kafka_cluster.bootstrap_servers
    produce(bootstrap, topic, [(None, b"%d" % i, 0) for i in range(5)])
    starting = json.dumps({topic: {"0": 9}})
    stream = KafkaStreamReader(
        parse_options({"bootstrap.servers": bootstrap, "topic": topic, "startingOffsets": starting}, streaming=True)
    )
    try:
        expected = f"startingOffsets: topic {topic!r} partition 0: offset 9 is past the end of the partition (high watermark 5)"
        with pytest.raises(ValueError, match=re.escape(expected)):
            stream.initialOffset()
    finally:
        stream.stop()


def test_a_stream_batch_ending_past_the_log_fails_at_planning_unless_told_not_to(kafka_cluster, kafka_topic):
    """A replayed micro-batch planned before the log was cut ends past the high watermark: the
    planner says so instead of a task waiting pollTimeoutMs for offsets that never come."""
    topic = kafka_topic(2)
    bootstrap = kafka_cluster.bootstrap_servers
    produce(bootstrap, topic, [(None, b"%d" % i, i % 2) for i in range(10)])  # 5 records per partition
    start, end = {topic: {"0": 2, "1": 0}}, {topic: {"0": 40, "1": 5}}
    for fail in ("true", "false"):
        options = {"bootstrap.servers": bootstrap, "topic": topic, "failOnDataLoss": fail, "pollTimeoutMs": str(NEVER_MS)}
        stream = KafkaStreamReader(parse_options(options, streaming=True))
        try:
            if fail == "true":
                expected = (
                    f"topic {topic!r} partition 0: offsets 5..39 are past the end of the partition (high watermark 5; "
                    "was the topic recreated?); set failOnDataLoss=false to skip them"
                )
                with pytest.raises(DataLossError, match=re.escape(expected)):
                    stream.partitions(start, end)
            else:
                ranges = sorted(r for task in stream.partitions(start, end) for r in task.ranges)
                assert ranges == [OffsetRange(0, 2, 5), OffsetRange(1, 0, 5)]
        finally:
            stream.stop()
