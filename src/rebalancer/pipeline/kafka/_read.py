"""Reading one task's offset ranges on an executor, as Arrow batches."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from rebalancer.pipeline.kafka._options import ROWS_PER_BATCH, KafkaOptions
from rebalancer.pipeline.kafka.tasks import DataLossError, KafkaTask, OffsetRange, _data_loss

if TYPE_CHECKING:
    import pyarrow as pa
    from confluent_kafka import Consumer
    from pyspark.sql.types import StructType

# The logger of the module these lines came from, so logging set up for it keeps working.
log = logging.getLogger("rebalancer.pipeline.kafka.source")


# -- reading on the executors ---------------------------------------------------------------------
def spark_schema() -> StructType:
    """SCHEMA as a StructType, built without a session (executors have none)."""
    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("timestamp", TimestampType()),
        ]
    )


def _arrow_schema() -> pa.Schema:
    """SCHEMA in Arrow, as Spark expects it; built with pyarrow alone (no pandas import per task)."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("key", pa.binary()),
            pa.field("value", pa.binary()),
            pa.field("topic", pa.string()),
            pa.field("partition", pa.int32()),
            pa.field("offset", pa.int64()),
            pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        ]
    )


class _Rows:
    """Read messages as columns, filled once per message: a second pass over the messages would call
    each accessor again (the reader's time is mostly in these per-message calls)."""

    __slots__ = ("keys", "offsets", "partitions", "timestamps", "values")

    def __init__(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.partitions: list[int] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, message: Any, partition: int, offset: int) -> None:
        self.keys.append(message.key())
        self.values.append(message.value())
        self.partitions.append(partition)
        self.offsets.append(offset)
        self.timestamps.append(message.timestamp()[1])

    def batch(self, schema: pa.Schema, topic: str) -> pa.RecordBatch:
        """The rows as one Arrow batch in SCHEMA (Kafka's timestamps are milliseconds; Spark wants
        microseconds: Arrow converts them exactly)."""
        import pyarrow as pa

        n = len(self.offsets)
        return pa.RecordBatch.from_arrays(
            [
                pa.array(self.keys, pa.binary()),
                pa.array(self.values, pa.binary()),
                pa.repeat(pa.scalar(topic, pa.string()), n),
                pa.array(self.partitions, pa.int32()),
                pa.array(self.offsets, pa.int64()),
                pa.array(self.timestamps, pa.int64())
                .cast(pa.timestamp("ms", tz="UTC"))
                .cast(pa.timestamp("us", tz="UTC")),
            ],
            schema=schema,
        )


def read_task(options: KafkaOptions, task: KafkaTask) -> Iterator[pa.RecordBatch]:
    """Read each range of `task` exactly: `[start, end)`, in offset order per partition.

    Ranges of one partition are read one after another: a round assigns at most one range per
    partition, each round with its own consumer (a re-assigned partition would wait out fetch backoffs).
    """
    schema = _arrow_schema()
    rounds: list[list[OffsetRange]] = []
    for r in task.ranges:
        for round_ranges in rounds:
            if all(other.partition != r.partition for other in round_ranges):
                round_ranges.append(r)
                break
        else:
            rounds.append([r])
    for round_ranges in rounds:
        yield from _read_round(options, task.topic, round_ranges, schema)


def _read_round(
    options: KafkaOptions, topic: str, ranges: Sequence[OffsetRange], schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """One consumer, one range per partition. A range ends at the first message at or past its end,
    at a partition EOF at or past it, or when the consumer's position passes it: transaction markers
    and aborted records never arrive, so the last offsets of a range may never be seen."""
    from confluent_kafka import KafkaError, TopicPartition

    consumer = options.consumer("reader")
    timeout_s = options.poll_timeout_ms / 1000
    end = {r.partition: r.end for r in ranges}
    next_offset = {r.partition: r.start for r in ranges}
    pending = set(end)
    finish = partial(_finish, consumer, topic, pending)
    try:
        consumer.assign([TopicPartition(topic, r.partition, r.start) for r in ranges])
        last_progress = time.monotonic()
        rows = _Rows()
        while pending:
            # Ask for no more than is left, so the call returns as soon as the range is in.
            left = sum(end[p] - next_offset[p] for p in pending)
            messages = consumer.consume(
                num_messages=max(1, min(ROWS_PER_BATCH, left)), timeout=min(0.5, timeout_s)
            )
            if messages:
                last_progress = time.monotonic()
            for message in messages:
                partition = message.partition()
                if partition not in pending:
                    continue
                error = message.error()
                if error is None:
                    offset = message.offset()
                    if offset is None or offset < next_offset[partition]:
                        continue  # fetched before a re-assignment that went back
                    if offset >= end[partition]:
                        finish(partition)
                        continue
                    rows.add(message, partition, offset)
                    next_offset[partition] = offset + 1
                    if offset >= end[partition] - 1:
                        finish(partition)
                elif error.code() == KafkaError._PARTITION_EOF:
                    eof = message.offset()
                    if eof is not None and eof >= end[partition]:
                        finish(partition)
                elif error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                    _skip_lost(consumer, options, partition, next_offset, end, finish)
                else:
                    raise RuntimeError(
                        f"reading topic {topic!r} partition {partition} at offset {next_offset[partition]}: {error.str()}"
                    )
            if pending and not messages:
                for tp in consumer.position([TopicPartition(topic, p) for p in sorted(pending)]):
                    if tp.offset >= end[tp.partition]:
                        finish(tp.partition)
                if pending and time.monotonic() - last_progress > timeout_s:
                    stuck = min(pending)
                    raise TimeoutError(
                        f"reading topic {topic!r} partition {stuck} at offset {next_offset[stuck]}: no record "
                        f"for {options.poll_timeout_ms} ms before end offset {end[stuck]} (pollTimeoutMs)"
                    )
            if len(rows) >= ROWS_PER_BATCH:
                yield rows.batch(schema, topic)
                rows = _Rows()
        if len(rows):
            yield rows.batch(schema, topic)
    finally:
        consumer.close()


def _finish(consumer: Consumer, topic: str, pending: set[int], partition: int) -> None:
    """The range of `partition` is read: stop fetching it."""
    from confluent_kafka import TopicPartition

    pending.discard(partition)
    consumer.pause([TopicPartition(topic, partition)])


def _skip_lost(
    consumer: Consumer,
    options: KafkaOptions,
    partition: int,
    next_offset: dict[int, int],
    end: Mapping[int, int],
    finish: Any,
) -> None:
    """The next offset was deleted while the query ran: fail, or skip to the earliest and count it."""
    from confluent_kafka import TopicPartition

    tp = TopicPartition(options.topic, partition)
    low, _high = consumer.get_watermark_offsets(tp, timeout=options.poll_timeout_ms / 1000, cached=False)
    if options.fail_on_data_loss:
        raise DataLossError(_data_loss(options.topic, partition, next_offset[partition], low))
    skipped = min(low, end[partition]) - next_offset[partition]
    log.warning(
        "skipping %d deleted offset(s): %s",
        skipped,
        _data_loss(options.topic, partition, next_offset[partition], low),
    )
    if low >= end[partition]:
        finish(partition)
        return
    next_offset[partition] = low
    # The partition's fetcher stopped on the error; a seek is refused, a fresh assignment is not.
    consumer.incremental_unassign([tp])
    consumer.incremental_assign([TopicPartition(options.topic, partition, low)])
