"""The Spark data source classes: batch and streaming readers, and their registration."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from rebalancer.pipeline.kafka._options import EARLIEST, LATEST, SOURCE_NAME, KafkaOptions, parse_options
from rebalancer.pipeline.kafka._read import read_task, spark_schema
from rebalancer.pipeline.kafka._topic import TopicView, group_offsets
from rebalancer.pipeline.kafka.tasks import (
    DataLossError,
    KafkaTask,
    _check_listed,
    _check_readable,
    _ranges,
    _resolve,
    _tasks,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

# The logger of the module these lines came from, so logging set up for it keeps working.
log = logging.getLogger("rebalancer.pipeline.kafka.source")


# -- the Spark data source ------------------------------------------------------------------------
def _offset_json(topic: str, offsets: Mapping[int, int]) -> dict[str, Any]:
    return {topic: {str(p): int(o) for p, o in sorted(offsets.items())}}


def _offset_dict(topic: str, payload: Mapping[str, Any]) -> dict[int, int]:
    return {int(p): int(o) for p, o in payload.get(topic, {}).items()}


class KafkaBatchReader(DataSourceReader):
    def __init__(self, options: KafkaOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        view = TopicView(self.options)
        try:
            marks = view.watermarks()
        finally:
            view.close()
        _check_listed("startingOffsets", self.options.starting, self.options.topic, list(marks))
        _check_listed("endingOffsets", self.options.ending, self.options.topic, list(marks))
        _check_readable(self.options, marks)
        if self.options.group is not None:  # the group's committed offsets; the caller commits
            start = group_offsets(self.options, marks)
        else:
            start = _resolve(self.options.starting, marks, EARLIEST)
        end = _resolve(self.options.ending, marks, LATEST)
        tasks = _tasks(self.options, _ranges(self.options, start, end, marks))
        log.info(
            "topic %r: %d input task(s) over %d record(s)",
            self.options.topic,
            len(tasks),
            sum(t.records for t in tasks),
        )
        return tasks or [KafkaTask(self.options.topic, [])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaTask)
        return read_task(self.options, partition)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets `{"topic": {"partition": next offset}}` in the checkpoint; new partitions start at earliest."""

    def __init__(self, options: KafkaOptions) -> None:
        self.options = options
        self._view: TopicView | None = None
        self._available_now: dict[int, int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_view"] = None  # a live consumer stays on the planning side
        return state

    def view(self) -> TopicView:
        if self._view is None:
            self._view = TopicView(self.options)
        return self._view

    def initialOffset(self) -> dict:
        marks = self.view().watermarks()
        _check_listed("startingOffsets", self.options.starting, self.options.topic, list(marks))
        _check_readable(self.options, marks, batch=False)
        return _offset_json(self.options.topic, _resolve(self.options.starting, marks, EARLIEST))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = {p: high for p, (_low, high) in self.view().watermarks().items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = _offset_dict(self.options.topic, start)
        marks = self.view().watermarks()
        latest = {p: high for p, (_low, high) in marks.items()}
        if self._available_now is not None:
            latest = {
                p: min(high, self._available_now[p]) for p, high in latest.items() if p in self._available_now
            }
        origin = {p: begin.get(p, marks[p][0]) for p in latest}
        for p in latest:
            if latest[p] < origin[p] and self.options.fail_on_data_loss:
                raise DataLossError(
                    f"topic {self.options.topic!r} partition {p}: the latest offset {latest[p]} is before the "
                    f"offset {origin[p]} already read (was the topic recreated?); set failOnDataLoss=false to go on"
                )
        # A partition behind its start (recreated topic) is left to partitions() to report.
        backlog = {p: max(0, latest[p] - max(origin[p], marks[p][0])) for p in latest}
        if isinstance(limit, ReadMaxRows):
            grant = _prorate(backlog, limit.max_rows)
        else:
            grant = backlog
        end = {p: max(origin[p], marks[p][0]) + grant[p] if grant[p] else origin[p] for p in latest}
        for p, offset in begin.items():
            end.setdefault(p, offset)  # a partition gone from the metadata keeps its offset
        return _offset_json(self.options.topic, end)

    def reportLatestOffset(self) -> dict | None:
        return _offset_json(
            self.options.topic, {p: high for p, (_low, high) in self.view().watermarks().items()}
        )

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin = _offset_dict(self.options.topic, start)
        stop = _offset_dict(self.options.topic, end)
        marks = self.view().watermarks(sorted(stop))
        return _tasks(self.options, _ranges(self.options, begin, stop, marks))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaTask)
        return read_task(self.options, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, never in a consumer group."""

    def stop(self) -> None:
        if self._view is not None:
            self._view.close()
            self._view = None


def _prorate(backlog: Mapping[int, int], limit: int) -> dict[int, int]:
    """Split `limit` records over partitions in proportion to their backlog (largest remainders), exactly."""
    total = sum(backlog.values())
    if total <= limit:
        return dict(backlog)
    shares = {p: backlog[p] * limit / total for p in backlog}
    grant = {p: int(share) for p, share in shares.items()}
    left = limit - sum(grant.values())
    for p in sorted(backlog, key=lambda q: (grant[q] - shares[q], q))[:left]:
        grant[p] += 1
    return grant


class KafkaDataSource(DataSource):
    """`spark.read.format("rebalancer-kafka")`; see the module docstring and docs/pipeline.md."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        parse_options(options, streaming=None)  # fail at load(), naming the option, not in a task

    def schema(self) -> StructType:
        return spark_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(parse_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(parse_options(self.options, streaming=True))


def register_kafka_source(spark: SparkSession) -> None:
    """Register `rebalancer-kafka` on this session (idempotent)."""
    spark.dataSource.register(KafkaDataSource)
