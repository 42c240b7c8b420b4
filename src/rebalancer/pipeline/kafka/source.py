"""Kafka in: a PySpark Python data source, `rebalancer-kafka`, that reads a topic with confluent-kafka.

Spark's own Kafka connector is a Maven jar; this source needs only the wheels. The reader owns the
offsets, as Spark's Kafka source does: no consumer group (option `group` only picks a batch read's
start from a group's committed offsets; the caller commits), each executor task `assign()`s its offset
ranges, reads exactly `[start, end)` with `isolation.level=read_committed` (so aborted records and
transaction markers never show, and offsets need not be consecutive) and closes its consumer.

Input tasks are a balancing problem: one task per topic partition makes a hot partition a straggler.
Here ranges larger than the per-task target are cut into near-equal pieces and the pieces are packed
into near-equal tasks with `rebalancer.balance.plan_rebalance` (`planTasks=false`: one task per
partition, the baseline). Streaming offsets are Spark-Kafka JSON (`{"topic": {"0": 42}}`) and live in
the query's checkpoint.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from rebalancer._json import DuplicateKeyError, loads_unique
from rebalancer._numbers import parse_int
from rebalancer.balance import plan_rebalance

if TYPE_CHECKING:
    import pyarrow as pa
    from confluent_kafka import Consumer
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "DEFAULT_MAX_RECORDS_PER_TASK",
    "SCHEMA",
    "SOURCE_NAME",
    "DataLossError",
    "KafkaBatchReader",
    "KafkaDataSource",
    "KafkaOptions",
    "KafkaStreamReader",
    "KafkaTask",
    "OffsetRange",
    "TopicView",
    "parse_options",
    "plan_input_tasks",
    "register_kafka_source",
]

log = logging.getLogger(__name__)
librdkafka_log = logging.getLogger("rebalancer.kafka.librdkafka")


class LibrdkafkaLog:
    """confluent-kafka's `logger`: librdkafka's lines at INFO (its errors) or DEBUG (the rest) on the
    `rebalancer.kafka.librdkafka` logger, so they show with -v only; in the Python workers, where
    nothing configures logging, logging's last-resort handler passes warnings and above only."""

    def log(self, level: int, fmt: str, *args: object) -> None:
        librdkafka_log.log(logging.INFO if level >= logging.ERROR else logging.DEBUG, fmt, *args)

SOURCE_NAME = "rebalancer-kafka"
SCHEMA = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
DEFAULT_MAX_RECORDS_PER_TASK = 1_000_000
EARLIEST = -2  # in JSON offsets, as in Spark's Kafka source
LATEST = -1
ROWS_PER_BATCH = 20_000  # Arrow batch handed to Spark; also the consume() batch size
OPTIONS = (
    "bootstrap.servers",
    "topic",
    "startingOffsets",
    "endingOffsets",
    "maxRecordsPerTask",
    "minPartitions",
    "planTasks",
    "maxOffsetsPerTrigger",
    "failOnDataLoss",
    "pollTimeoutMs",
    "metadataTimeoutMs",
    "group",
)
DEFAULT_METADATA_TIMEOUT_MS = 10_000
KAFKA_PREFIX = "kafka."  # kafka.<librdkafka property> is passed to the consumers (security settings...)
# Set by the reader itself; a user value would break exactly-once reads.
_RESERVED = ("group.id", "enable.auto.commit", "isolation.level", "auto.offset.reset", "enable.partition.eof")


# -- options --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KafkaOptions:
    """Validated options. `consumer_config` may hold secrets: it is left out of repr."""

    bootstrap_servers: str
    topic: str
    starting: str | dict[int, int] = "earliest"
    ending: str | dict[int, int] = "latest"
    max_records_per_task: int = DEFAULT_MAX_RECORDS_PER_TASK
    min_partitions: int | None = None
    plan_tasks: bool = True
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = 120_000
    metadata_timeout_ms: int = DEFAULT_METADATA_TIMEOUT_MS
    # a consumer group whose committed offsets a batch read starts from (and the run commits to)
    group: str | None = None
    consumer_config: Mapping[str, str] = field(default_factory=dict, repr=False)
    # which options the user gave (so batch/stream-only ones can be refused where they mean nothing)
    given: frozenset[str] = field(default_factory=frozenset, repr=False)

    def consumer_conf(self, client: str) -> dict[str, Any]:
        """The client's configuration; librdkafka's log lines go to the `rebalancer` logger, at INFO
        (shown with -v), never straight to stderr: a refused connection is logged every backoff."""
        conf: dict[str, Any] = dict(self.consumer_config)
        conf.update(
            {
                "bootstrap.servers": self.bootstrap_servers,
                "group.id": f"rebalancer-kafka-{client}",  # required by the client; never joined or committed
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": "error",
                "enable.partition.eof": True,
                "client.id": f"rebalancer-kafka-{client}",
            }
        )
        conf.setdefault("log_level", 3)
        conf["logger"] = LibrdkafkaLog()
        return conf


def _positive_int(name: str, text: str) -> int:
    """ASCII digits only: `int()` would also take `1_0` and `٣` (see rebalancer._numbers)."""
    try:
        value = parse_int(str(text), field=name)
    except ValueError:
        raise ValueError(f"{name} must be a positive integer, got {text!r}") from None
    if value < 1:
        raise ValueError(f"{name} must be a positive integer, got {text!r}")
    return value


def _bool(name: str, text: str) -> bool:
    lowered = str(text).strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"{name} must be true or false, got {text!r}")
    return lowered == "true"


def _offsets(name: str, text: str, topic: str, allowed: tuple[str, ...]) -> str | dict[int, int]:
    """`earliest`, `latest` or Spark-Kafka JSON `{"topic": {"0": 23, "1": -2}}` (-2 earliest, -1 latest)."""
    stripped = str(text).strip()
    if stripped.lower() in allowed:
        return stripped.lower()
    if stripped.lower() in ("earliest", "latest"):
        raise ValueError(
            f"{name} cannot be {stripped.lower()} here (allowed: {', '.join(allowed)} or JSON), got {text!r}"
        )
    try:
        parsed = loads_unique(stripped)
    except DuplicateKeyError as exc:  # json.loads would keep the last of the two values without a word
        raise ValueError(f"{name}: the key {exc.key!r} is given twice, in {text!r}") from None
    except ValueError:
        raise ValueError(
            f'{name} must be {" or ".join(allowed)} or JSON like {{"{topic}": {{"0": 42}}}}, got {text!r}'
        ) from None
    if not isinstance(parsed, dict) or set(parsed) != {topic} or not isinstance(parsed[topic], dict):
        raise ValueError(
            f"{name} JSON must be an object with the one key {topic!r} holding partition offsets, got {text!r}"
        )
    offsets: dict[int, int] = {}
    keys: dict[int, str] = {}
    for partition, offset in parsed[topic].items():
        try:
            number = parse_int(partition, field=f"{name}: partition")
        except ValueError:
            raise ValueError(f"{name}: partition {partition!r} is not a number, in {text!r}") from None
        if number < 0 or isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
            raise ValueError(f"{name}: offset of partition {partition} must be an int >= -2, got {offset!r}")
        if number in keys:  # "0" and "00": one offset would silently replace the other
            raise ValueError(
                f"{name}: partition {number} is given twice ({keys[number]!r} and {partition!r}), in {text!r}"
            )
        keys[number] = partition
        offsets[number] = offset
    return offsets


def parse_options(options: Mapping[str, str], streaming: bool | None = False) -> KafkaOptions:
    """Validate the reader options; a bad one raises ValueError naming it. Keys are case-insensitive.

    `streaming=None` (the mode is not known yet) skips the checks of batch-only and stream-only options.
    """
    lowered = {str(k).lower(): (str(k), v) for k, v in options.items()}
    known = {name.lower(): name for name in OPTIONS}
    consumer_config: dict[str, str] = {}
    given: set[str] = set()
    for key, (original, value) in lowered.items():
        if key in known:
            given.add(known[key])
        elif key.startswith(KAFKA_PREFIX):
            prop = original[len(KAFKA_PREFIX) :]
            if prop.lower() in _RESERVED or prop.lower() == "bootstrap.servers":
                raise ValueError(f"option {original} is set by the reader itself and cannot be given")
            consumer_config[prop] = value
        elif key != "path":
            raise ValueError(
                f"unknown option {original!r} (options: {', '.join(OPTIONS)}, or kafka.<consumer property>)"
            )

    def get(name: str) -> str | None:
        found = lowered.get(name.lower())
        return None if found is None else str(found[1])

    servers = (get("bootstrap.servers") or "").strip()
    if not servers:
        raise ValueError("option bootstrap.servers is required (host:port[,host:port])")
    topic = (get("topic") or "").strip()
    if not topic:
        raise ValueError("option topic is required")
    if "," in topic:
        raise ValueError(f"option topic names one topic, got {topic!r}")
    if streaming is True and "endingOffsets" in given:
        raise ValueError("option endingOffsets is for batch reads; a stream reads on as data arrives")
    if streaming is False and "maxOffsetsPerTrigger" in given:
        raise ValueError("option maxOffsetsPerTrigger is for streaming reads")
    group = get("group")
    if group is not None and not group.strip():
        raise ValueError("option group must name a consumer group, got an empty string")
    if streaming is True and group is not None:
        raise ValueError("option group is for batch reads; a stream keeps its offsets in its checkpoint")
    if group is not None and ("startingOffsets" in given or "endingOffsets" in given):
        raise ValueError("option group reads from the group's committed offsets to the latest: "
                         "it takes no startingOffsets or endingOffsets")
    starting_allowed = ("earliest",) if streaming is False else ("earliest", "latest")
    starting = _offsets("startingOffsets", get("startingOffsets") or "earliest", topic, starting_allowed)
    ending = _offsets("endingOffsets", get("endingOffsets") or "latest", topic, ("latest",))
    if isinstance(ending, dict) and any(offset == EARLIEST for offset in ending.values()):
        raise ValueError("endingOffsets: -2 (earliest) is not an end offset")
    if (
        isinstance(starting, dict)
        and streaming is False
        and any(offset == LATEST for offset in starting.values())
    ):
        raise ValueError("startingOffsets: -1 (latest) reads nothing in a batch read")
    min_partitions = get("minPartitions")
    max_per_trigger = get("maxOffsetsPerTrigger")
    return KafkaOptions(
        bootstrap_servers=servers,
        topic=topic,
        starting=starting,
        ending=ending,
        max_records_per_task=_positive_int(
            "maxRecordsPerTask", get("maxRecordsPerTask") or str(DEFAULT_MAX_RECORDS_PER_TASK)
        ),
        min_partitions=None if min_partitions is None else _positive_int("minPartitions", min_partitions),
        plan_tasks=_bool("planTasks", get("planTasks") or "true"),
        max_offsets_per_trigger=None
        if max_per_trigger is None
        else _positive_int("maxOffsetsPerTrigger", max_per_trigger),
        fail_on_data_loss=_bool("failOnDataLoss", get("failOnDataLoss") or "true"),
        poll_timeout_ms=_positive_int("pollTimeoutMs", get("pollTimeoutMs") or "120000"),
        metadata_timeout_ms=_positive_int(
            "metadataTimeoutMs", get("metadataTimeoutMs") or str(DEFAULT_METADATA_TIMEOUT_MS)
        ),
        group=None if group is None else group.strip(),
        consumer_config=consumer_config,
        given=frozenset(given),
    )


# -- planning input tasks -------------------------------------------------------------------------
@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets `[start, end)` of one partition. Sizes count offsets: markers included, so an upper bound."""

    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


class KafkaTask(InputPartition):
    """One Spark input task: the ranges it reads, in order. Picklable."""

    def __init__(self, topic: str, ranges: Sequence[OffsetRange]) -> None:
        super().__init__(None)
        self.topic = topic
        self.ranges = tuple(ranges)

    @property
    def records(self) -> int:
        return sum(r.size for r in self.ranges)

    def __repr__(self) -> str:
        spans = ", ".join(f"{r.partition}:[{r.start},{r.end})" for r in self.ranges)
        return f"KafkaTask({self.topic!r}, {spans})"


def _cut(ranges: Sequence[OffsetRange], piece: int) -> list[OffsetRange]:
    """Each range larger than `piece` cut into ceil(size / piece) near-equal contiguous pieces."""
    pieces = []
    for r in ranges:
        count = max(1, -(-r.size // piece))
        base, extra = divmod(r.size, count)
        start = r.start
        for index in range(count):
            end = start + base + (1 if index < extra else 0)
            pieces.append(OffsetRange(r.partition, start, end))
            start = end
    return pieces


def _merge(pieces: Sequence[OffsetRange]) -> list[OffsetRange]:
    """Adjacent pieces of one partition as one range; partition then offset order."""
    merged: list[OffsetRange] = []
    for piece in sorted(pieces):
        last = merged[-1] if merged else None
        if last is not None and last.partition == piece.partition and last.end == piece.start:
            merged[-1] = OffsetRange(last.partition, last.start, piece.end)
        else:
            merged.append(piece)
    return merged


def _level(groups: list[list[OffsetRange]], cap: int) -> None:
    """Trim every task to `cap` records and hand the offcuts to the tasks below it (in place).

    The packing leaves tasks within a piece of the mean; cutting the excess off the last range of a
    full task and filling the emptiest tasks with it makes them near-equal (none over `cap`) at the
    cost of a few more ranges. Possible whenever tasks x cap >= total.
    """
    offcuts: list[OffsetRange] = []
    for group in groups:
        excess = sum(r.size for r in group) - cap
        while excess > 0:
            last = group.pop()
            if last.size <= excess:
                offcuts.append(last)
                excess -= last.size
            else:
                group.append(OffsetRange(last.partition, last.start, last.end - excess))
                offcuts.append(OffsetRange(last.partition, last.end - excess, last.end))
                excess = 0
    for group in sorted(groups, key=lambda g: sum(r.size for r in g)):
        room = cap - sum(r.size for r in group)
        while room > 0 and offcuts:
            piece = offcuts.pop()
            if piece.size > room:
                offcuts.append(OffsetRange(piece.partition, piece.start + room, piece.end))
                piece = OffsetRange(piece.partition, piece.start, piece.start + room)
            group.append(piece)
            room -= piece.size
    assert not offcuts, "tasks x cap must cover every record"


def plan_input_tasks(
    ranges: Sequence[OffsetRange],
    max_records_per_task: int = DEFAULT_MAX_RECORDS_PER_TASK,
    min_partitions: int | None = None,
    plan_tasks: bool = True,
) -> list[list[OffsetRange]]:
    """The ranges of each input task.

    Planned: about `total / max_records_per_task` tasks (never fewer than `min_partitions`, never
    more than there are records), each within ceil(total / tasks) records. Ranges longer than that
    are cut into near-equal pieces; `plan_rebalance` packs the pieces into tasks, and `_level` evens
    out what packing whole pieces cannot. Unplanned: one task per partition range, Spark's way.
    """
    ranges = [r for r in ranges if r.size > 0]
    if not plan_tasks:
        return [[r] for r in sorted(ranges)]
    total = sum(r.size for r in ranges)
    if total == 0:
        return []
    tasks = min(max(-(-total // max_records_per_task), min_partitions or 1), total)
    cap = -(-total // tasks)  # <= max_records_per_task
    pieces = _cut(ranges, cap)
    plan = plan_rebalance([p.size for p in pieces], [-1] * len(pieces), tasks, skip_ratio=1.0)
    groups: list[list[OffsetRange]] = [[] for _ in range(tasks)]
    for piece, owner in zip(pieces, plan.owner):
        groups[owner].append(piece)
    _level(groups, cap)
    return [_merge(group) for group in groups if group]


# -- the driver's view of the topic ---------------------------------------------------------------
class DataLossError(RuntimeError):
    """Offsets to read are gone from the topic (retention, deletion) and failOnDataLoss is true."""


def _data_loss(topic: str, partition: int, start: int, available: int) -> str:
    return (
        f"topic {topic!r} partition {partition}: offsets {start}..{available - 1} were deleted before they "
        f"were read (the earliest available offset is {available}); set failOnDataLoss=false to skip them"
    )


# A partition whose leader crashed: librdkafka fails the offsets query it sent there (_DESTROY_BROKER
# once the controller has fenced the broker and the metadata drops it, _TRANSPORT, _TIMED_OUT), and
# the next query goes to the new leader. A stream must not die of one broker's crash (a real
# cluster fences it after broker.session.timeout.ms, 9 s by default), so the query is tried this many
# times, each waiting at most metadataTimeoutMs. A cluster that cannot be reached at all still fails
# within metadataTimeoutMs: `partitions()` asks the metadata first.
FAILOVER_ATTEMPTS = 3
FAILOVER_BACKOFF_S = 0.5


def _failover(error: Any) -> bool:
    """An offsets query error that a leader's crash causes and a new leader ends."""
    from confluent_kafka import KafkaError

    return bool(error.retriable()) or error.code() in (
        KafkaError._DESTROY_BROKER,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
    )


class TopicView:
    """Partition count and watermarks, through one metadata consumer kept by the planning side.

    Each call waits at most metadataTimeoutMs, so a run against brokers it cannot reach fails at
    planning, before any task, naming the servers and librdkafka's own reason (its error callback:
    "Connection refused", a failed SASL handshake), which the call's own error ("Local: Broker
    transport failure") leaves out."""

    def __init__(self, options: KafkaOptions) -> None:
        self.options = options
        self._consumer: Consumer | None = None
        self._errors: list[Any] = []

    def _client(self) -> Consumer:
        if self._consumer is None:
            from confluent_kafka import Consumer

            conf = self.options.consumer_conf("planner")
            conf["error_cb"] = self._errors.append
            self._consumer = Consumer(conf)
        return self._consumer

    @property
    def timeout_s(self) -> float:
        return self.options.metadata_timeout_ms / 1000

    def unreachable(self, error: Any) -> str:
        """One line: the servers, the wait, and the most telling error librdkafka reported."""
        from confluent_kafka import KafkaError

        if self._consumer is not None:
            self._consumer.poll(0)  # serves the error callbacks queued while the call waited
        reasons = [e for e in self._errors if e.code() != KafkaError._ALL_BROKERS_DOWN] or self._errors
        reason = reasons[-1].str() if reasons else error.str()
        return (
            f"cannot reach Kafka at {self.options.bootstrap_servers} within "
            f"{self.timeout_s:g} s (metadataTimeoutMs, --kafka-timeout): {reason}"
        )

    def partitions(self) -> list[int]:
        from confluent_kafka import KafkaException

        topic = self.options.topic
        try:
            metadata = self._client().list_topics(topic, timeout=self.timeout_s)
        except KafkaException as exc:
            raise RuntimeError(self.unreachable(exc.args[0])) from None
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            why = f" ({found.error.str()})" if found is not None and found.error is not None else ""
            raise ValueError(f"topic {topic!r} does not exist on {self.options.bootstrap_servers}{why}")
        return sorted(found.partitions)

    def watermarks(self, partitions: Sequence[int] | None = None) -> dict[int, tuple[int, int]]:
        """{partition: (earliest, latest)}; latest is the last stable offset (read_committed)."""
        from confluent_kafka import KafkaException, TopicPartition

        topic = self.options.topic
        result = {}
        for partition in self.partitions() if partitions is None else partitions:
            for attempt in range(1, FAILOVER_ATTEMPTS + 1):
                try:
                    low, high = self._client().get_watermark_offsets(
                        TopicPartition(topic, partition), timeout=self.timeout_s, cached=False
                    )
                    break
                except KafkaException as exc:
                    error = exc.args[0]
                    if attempt == FAILOVER_ATTEMPTS or not _failover(error):
                        raise RuntimeError(
                            f"topic {topic!r} partition {partition}: cannot read offsets: {self.unreachable(error)}"
                        ) from None
                    log.warning(
                        "topic %r partition %d: cannot read offsets (%s; its leader may have crashed): "
                        "attempt %d of %d, retrying",
                        topic, partition, error.str(), attempt, FAILOVER_ATTEMPTS,
                    )  # fmt: skip
                    time.sleep(FAILOVER_BACKOFF_S)
            result[partition] = (int(low), int(high))
        return result

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


# -- a consumer group's offsets (batch runs that resume) -------------------------------------------
def _group_client(options: KafkaOptions) -> Consumer:
    """A consumer that names the group but never joins it: committed() and commit() need no membership."""
    from confluent_kafka import Consumer

    assert options.group is not None
    conf = options.consumer_conf("group")
    conf["group.id"] = options.group
    return Consumer(conf)


def _retrying(options: KafkaOptions, call: Any) -> Any:
    """`call()`, again while it fails with a retriable error (NOT_COORDINATOR, a coordinator still
    loading: a group's first use on a fresh cluster) until metadataTimeoutMs has passed."""
    from confluent_kafka import KafkaError, KafkaException

    coordinator = (
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    )
    deadline = time.monotonic() + options.metadata_timeout_ms / 1000
    while True:
        try:
            return call()
        except KafkaException as exc:
            error = exc.args[0]
            if not (error.retriable() or error.code() in coordinator) or time.monotonic() >= deadline:
                raise
            log.debug("group %r: %s; retrying", options.group, error.str())
            time.sleep(0.2)


def group_offsets(options: KafkaOptions, marks: Mapping[int, tuple[int, int]]) -> dict[int, int]:
    """The next offset to read of each partition: the group's committed one, or the earliest where the
    group has none (a new group, a new partition)."""
    from confluent_kafka import KafkaException, TopicPartition

    consumer = _group_client(options)
    try:
        found = _retrying(
            options,
            partial(
                consumer.committed,
                [TopicPartition(options.topic, p) for p in sorted(marks)],
                timeout=options.metadata_timeout_ms / 1000,
            ),
        )
    except KafkaException as exc:
        raise RuntimeError(
            f"group {options.group!r}: cannot read its committed offsets of topic {options.topic!r} on "
            f"{options.bootstrap_servers}: {exc.args[0].str()}"
        ) from None
    finally:
        consumer.close()
    return {tp.partition: tp.offset if tp.offset >= 0 else marks[tp.partition][0] for tp in found}


def commit_group_offsets(options: KafkaOptions, end: Mapping[int, int]) -> None:
    """Commit `end` (the next offset to read, per partition) for the group, synchronously: the caller
    does it once its outputs are committed, so a run that fails before reads the same records again."""
    from confluent_kafka import KafkaException, TopicPartition

    if not end:
        return
    consumer = _group_client(options)
    try:
        _retrying(
            options,
            partial(
                consumer.commit,
                offsets=[TopicPartition(options.topic, p, o) for p, o in sorted(end.items())],
                asynchronous=False,
            ),
        )
    except KafkaException as exc:
        raise RuntimeError(
            f"group {options.group!r}: cannot commit offsets of topic {options.topic!r} on "
            f"{options.bootstrap_servers}: {exc.args[0].str()}"
        ) from None
    finally:
        consumer.close()
    log.info("group %r: committed offsets %s of topic %r", options.group, dict(sorted(end.items())), options.topic)


def plan_group_read(options: KafkaOptions) -> tuple[dict[int, int], dict[int, int]]:
    """(start, end) of a batch read for `options.group`: its committed offsets to the latest."""
    view = TopicView(options)
    try:
        marks = view.watermarks()
    finally:
        view.close()
    start = group_offsets(options, marks)
    return start, {p: high for p, (_low, high) in marks.items()}


def _resolve(
    spec: str | dict[int, int], marks: Mapping[int, tuple[int, int]], default: int
) -> dict[int, int]:
    """earliest/latest/JSON as concrete offsets per partition; unlisted partitions get `default`."""
    if isinstance(spec, str):
        pick = EARLIEST if spec == "earliest" else LATEST
        return {p: marks[p][0] if pick == EARLIEST else marks[p][1] for p in marks}
    resolved = {}
    for p, (low, high) in marks.items():
        offset = spec.get(p, default)
        resolved[p] = low if offset == EARLIEST else high if offset == LATEST else offset
    return resolved


def _check_listed(name: str, spec: str | dict[int, int], topic: str, partitions: Sequence[int]) -> None:
    if isinstance(spec, dict):
        unknown = sorted(set(spec) - set(partitions))
        if unknown:
            raise ValueError(
                f"{name}: topic {topic!r} has no partition {unknown[0]} (it has {len(partitions)})"
            )


def _check_readable(options: KafkaOptions, marks: Mapping[int, tuple[int, int]], batch: bool = True) -> None:
    """Refuse given offsets the driver already knows cannot be read, at planning, whatever
    failOnDataLoss says: they are the user's mistake, not data lost. A task would otherwise wait
    pollTimeoutMs for records that never come (an end past the high watermark), or the range would
    be reported as data loss, or skipped. Spark's own Kafka source refuses a start after the end too.

    Streaming checks startingOffsets only: its ends come from the watermarks.
    """
    topic = options.topic
    given = {"startingOffsets": options.starting}
    if batch:
        given = {"endingOffsets": options.ending, **given}
    for name, spec in given.items():
        if not isinstance(spec, dict):
            continue
        for partition, offset in sorted(spec.items()):
            high = marks[partition][1]
            if offset > high:
                raise ValueError(
                    f"{name}: topic {topic!r} partition {partition}: offset {offset} is past the end of the "
                    f"partition (high watermark {high})"
                )
    if batch and isinstance(options.starting, dict) and isinstance(options.ending, dict):
        for partition, begin in sorted(options.starting.items()):
            stop = options.ending.get(partition, LATEST)
            if begin >= 0 and stop >= 0 and begin > stop:
                raise ValueError(
                    f"startingOffsets: topic {topic!r} partition {partition}: offset {begin} is after its "
                    f"endingOffsets offset {stop}"
                )


def _ranges(
    options: KafkaOptions,
    start: Mapping[int, int],
    end: Mapping[int, int],
    marks: Mapping[int, tuple[int, int]],
) -> list[OffsetRange]:
    """[start, end) per partition, with deleted offsets, or offsets past the end of the log, failing the
    read (or skipped and counted)."""
    ranges = []
    lost = 0
    for partition, stop in sorted(end.items()):
        begin = start.get(partition, marks.get(partition, (0, 0))[0])
        low = marks.get(partition, (0, 0))[0]
        if begin < low:
            if options.fail_on_data_loss:
                raise DataLossError(_data_loss(options.topic, partition, begin, low))
            lost += min(low, stop) - begin
            log.warning("skipping deleted offsets: %s", _data_loss(options.topic, partition, begin, low))
            begin = min(low, stop)
        if stop < begin:
            message = f"topic {options.topic!r} partition {partition}: end offset {stop} is before start offset {begin}"
            if options.fail_on_data_loss:
                raise DataLossError(
                    message + " (was the topic recreated?); set failOnDataLoss=false to skip it"
                )
            log.warning("%s; skipped", message)
            continue
        high = marks[partition][1] if partition in marks else stop
        if stop > high:
            # A stream replaying a batch planned before the log was cut (recreated topic, unclean
            # leader election): those offsets will never come, so a task would wait pollTimeoutMs.
            gone = max(begin, high)
            message = (
                f"topic {options.topic!r} partition {partition}: offsets {gone}..{stop - 1} are past the end "
                f"of the partition (high watermark {high}; was the topic recreated?)"
            )
            if options.fail_on_data_loss:
                raise DataLossError(message + "; set failOnDataLoss=false to skip them")
            lost += stop - gone
            log.warning("skipping offsets that are gone: %s", message)
            stop = gone
        ranges.append(OffsetRange(partition, begin, stop))
    if lost:
        log.warning("topic %r: %d deleted offset(s) skipped (failOnDataLoss=false)", options.topic, lost)
    return ranges


def _tasks(options: KafkaOptions, ranges: Sequence[OffsetRange]) -> list[KafkaTask]:
    groups = plan_input_tasks(
        ranges, options.max_records_per_task, options.min_partitions, options.plan_tasks
    )
    return [KafkaTask(options.topic, group) for group in groups]


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
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(options.consumer_conf("reader"))
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
