"""Telemetry through Kafka: produce the pipeline's events to a topic, and read a topic as its four columns.

Values are the events as JSON objects, one per message, exactly as the JSON Lines writer encodes
them (a bad row stays bad, for the quarantine to find); the key is the event's type, so a hot type
is a hot partition, as a hot producer key is. A value that is not a JSON object is kept: its text
goes to the `value` column and the row is quarantined as `value_not_json`.

`--input kafka://HOST:PORT/TOPIC[?option=value&...]` names a topic (query parameters are reader
options, e.g. `maxOffsetsPerTrigger`); `kafka://embedded/TOPIC[?events=N&partitions=P]` starts
`MockKafkaCluster` in-process and produces a sample there first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from rebalancer._kafka_names import TOPIC_PARTITIONS_MAX, check_topic_name
from rebalancer._numbers import parse_int
from rebalancer._secrets import MASK, has_user_info, is_secret_key, masked_pairs, masked_repr, masked_url
from rebalancer.pipeline.checks import EVENTS_MAX
from rebalancer.pipeline.ingest.contract import NOT_JSON_COLUMN, REQUIRED_COLUMNS, column_mapping
from rebalancer.pipeline.kafka._options import KAFKA_PREFIX, SOURCE_NAME, parse_options, shown_topic
from rebalancer.pipeline.kafka.datasource import register_kafka_source

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

    from rebalancer.pipeline.generate import GenerateConfig

__all__ = [
    "EMBEDDED",
    "DeliveryError",
    "GroupRead",
    "KafkaInput",
    "check_kafka_input",
    "embedded_input",
    "encode_events",
    "masked_options",
    "parse_kafka_url",
    "plan_group_run",
    "produce_events",
    "read_kafka_raw",
    "read_kafka_stream",
    "to_telemetry",
]

log = logging.getLogger(__name__)

SCHEME = "kafka://"
EMBEDDED = "embedded"
EMBEDDED_PARTITIONS = 8
EMBEDDED_KEYS = ("events", "partitions")
DEFAULT_KAFKA_TIMEOUT_S = 10.0  # --kafka-timeout; the reader's metadataTimeoutMs default too
# The writer's choices over ProducerConfig's defaults (rebalancer.produce.config has the one
# table): zstd keeps a hot partition inside the mock's 5 MiB per-partition log (librdkafka's mock
# drops the oldest record batches beyond it); JSON telemetry compresses to about 20 bytes an event
# in the larger batches of a 50 ms window. The event type (the key) goes where the Java client and
# Spark's Kafka sink put it (murmur2), so a type's partition does not depend on which writer wrote it.
# Idempotent (librdkafka's default is not): a retry after a broker crash must not store an event twice,
# or the pipeline would count it twice (the broker-fault tests, docs/testing.md).
WRITER_LINGER_MS = 50.0
WRITER_IDEMPOTENT = True
WRITER_COMPRESSION = "zstd"
WRITER_PARTITIONER = "murmur2_random"


def is_secret_option(key: str) -> bool:
    """A reader option whose value is never shown: `kafka.<secret librdkafka key>`, by its name."""
    lowered = str(key).lower()
    return is_secret_key(lowered.removeprefix(KAFKA_PREFIX))


def masked_options(options: Mapping[str, str]) -> dict[str, str]:
    """`options` as errors and reprs show them: each secret option's value as ***."""
    return {key: MASK if is_secret_option(key) else value for key, value in options.items()}


def shown_url(text: str) -> str:
    """A `kafka://` URL as an error quotes it: secret options' values and any password as ***; and
    so secret `key=value` pairs in its path, where a topic holds no '=': a '?' forgotten or mistyped
    (`kafka://h:9092/t&kafka.sasl.password=...`) leaves options there."""
    masked = masked_url(text, is_secret_option, at_in_path=False)  # a topic holds no '@': any is user info
    scheme, sep, rest = masked.partition("://")
    authority, slash, path = rest.partition("/")
    if not sep or not slash:
        return masked
    path, question, query = path.partition("?")
    return f"{scheme}{sep}{authority}{slash}{masked_pairs(path, is_secret_option)}{question}{query}"


@dataclass(frozen=True)
class KafkaInput:
    """A topic as the pipeline's input. `files` is empty: nothing on disk can overlap the output.

    `options` may hold secrets (`kafka.sasl.password`, any key librdkafka flags sensitive, such as
    `kafka.ssl.key.pem`): repr, str() and describe() show their values as ***.
    """

    url: str
    bootstrap_servers: str
    topic: str
    options: Mapping[str, str] = field(default_factory=dict, repr=False)
    columns: Mapping[str, str] = field(default_factory=column_mapping)
    embedded_events: int | None = None
    embedded_partitions: int = EMBEDDED_PARTITIONS
    format: str = "kafka"
    files: tuple[()] = ()

    def __repr__(self) -> str:
        return masked_repr(self, options=masked_options(self.options))

    @property
    def path(self) -> str:
        """What the summaries print as the input (no query: options never reach a summary)."""
        return self.url

    @property
    def embedded(self) -> bool:
        return self.bootstrap_servers == EMBEDDED

    def reader_options(self, streaming: bool) -> dict[str, str]:
        options = {"bootstrap.servers": self.bootstrap_servers, "topic": self.topic, **self.options}
        parse_options(options, streaming=streaming)
        return options

    def describe(self) -> str:
        return masked_url(self.url)

    def read_batch(self, spark: SparkSession) -> DataFrame:
        return read_kafka_raw(spark, self)

    def read_stream(self, spark: SparkSession, files_per_batch: int) -> DataFrame:
        return read_kafka_stream(spark, self)  # a topic's micro-batches follow its offsets, not files

    @property
    def group(self) -> str | None:
        """The consumer group of a `?group=NAME` batch run (its runs into one output take turns:
        `claim.py`), or None."""
        options = {"bootstrap.servers": self.bootstrap_servers, "topic": self.topic, **self.options}
        return parse_options(options, streaming=None).group

    def group_run(self) -> GroupRead | None:
        return plan_group_run(self)

    def with_timeout(self, seconds: float | None) -> KafkaInput:
        """`--kafka-timeout`: the reader's metadataTimeoutMs (the flag wins over the URL's option)."""
        if seconds is None:
            return self
        kept = {k: v for k, v in self.options.items() if k.lower() != "metadatatimeoutms"}
        return replace(self, options={**kept, "metadataTimeoutMs": str(max(1, round(seconds * 1000)))})


@dataclass(frozen=True)
class GroupRead:
    """A batch run of a `?group=NAME` input: the exact offsets it reads, and the commit that ends it.

    `batch_id` is the run's start position, the sum of its start offsets: a rerun from the same
    offsets (a run that failed before its offset commit) gets the same id and rewrites that batch's
    outputs with a superset of the records, and a run that starts later never collides with it."""

    spec: KafkaInput
    group: str
    start: Mapping[int, int]
    end: Mapping[int, int]
    cluster: str | None = None  # the id of the Kafka cluster read (None if its brokers give none)

    @property
    def batch_id(self) -> int:
        return sum(self.start.values())

    @property
    def records(self) -> int:
        """Offsets in the range (an upper bound of the records: transaction markers take offsets)."""
        return sum(max(0, self.end[p] - self.start.get(p, self.end[p])) for p in self.end)

    def commit(self) -> None:
        """The group moves to the end of this run's range; call once the outputs are committed."""
        from rebalancer.pipeline.kafka._topic import commit_group_offsets

        options = {"bootstrap.servers": self.spec.bootstrap_servers, "topic": self.spec.topic, "group": self.group}
        kept = {k: v for k, v in self.spec.options.items() if k.lower().startswith(KAFKA_PREFIX) or k == "metadataTimeoutMs"}
        commit_group_offsets(parse_options({**options, **kept}), self.end)


def plan_group_run(spec: KafkaInput) -> GroupRead | None:
    """For an input with `group`: its committed offsets to the latest, as explicit reader offsets
    (so the read is exactly the range the run commits afterwards); None without `group`."""
    import json

    from rebalancer.pipeline.kafka._topic import plan_group_range

    options = parse_options(spec.reader_options(streaming=False), streaming=False)
    if options.group is None:
        return None
    start, end, cluster = plan_group_range(options)
    explicit = {k: v for k, v in spec.options.items() if k.lower() != "group"}
    explicit["startingOffsets"] = json.dumps({spec.topic: {str(p): o for p, o in sorted(start.items())}})
    explicit["endingOffsets"] = json.dumps({spec.topic: {str(p): o for p, o in sorted(end.items())}})
    log.info("group %r: reading topic %r from %s to %s", options.group, spec.topic, start, end)
    return GroupRead(replace(spec, options=explicit), options.group, start, end, cluster)


def check_kafka_input(spec: KafkaInput, streaming: bool) -> None:
    """Ask the brokers for the topic before Spark starts: an unreachable server, a missing topic or a
    refused login fails in one line within metadataTimeoutMs (`--kafka-timeout`), not after Spark's
    and a Python worker's start-up. Planning asks again, as a library caller's read does."""
    from rebalancer.pipeline.kafka._topic import TopicView

    view = TopicView(parse_options(spec.reader_options(streaming), streaming=streaming))
    try:
        view.partitions()
    except (RuntimeError, ValueError) as exc:
        raise ValueError(f"cannot read input {spec.describe()}: {exc}") from None
    finally:
        view.close()


def is_kafka_url(text: object) -> bool:
    return isinstance(text, str) and text.lower().startswith(SCHEME)


def group_source(source: object) -> tuple[str, str] | None:
    """(group, topic) of a `kafka://…?group=NAME` input (a URL or a parsed `KafkaInput`); None for
    any other input."""
    if isinstance(source, str) and source.lower().startswith("kafka://"):
        source = parse_kafka_url(source)
    group = getattr(source, "group", None)
    return (group, str(getattr(source, "topic", ""))) if isinstance(group, str) else None


def parse_kafka_url(text: str, columns: Mapping[str, str] | None = None) -> KafkaInput:
    """`kafka://HOST:PORT[,HOST:PORT]/TOPIC[?option=value&...]`, checked before Spark starts."""
    expected = f"input: expected kafka://HOST:PORT/TOPIC or kafka://{EMBEDDED}/TOPIC, got {shown_url(text)!r}"
    if has_user_info(text):
        # bootstrap.servers has no user info: it would fail in librdkafka, after being shown everywhere.
        # Read as a person writes it: `kafka://bob:pa?ss@host/t` is a user and password, not a query.
        raise ValueError(
            f"input: a kafka:// URL takes no user or password (give the options kafka.sasl.username and "
            f"kafka.sasl.password; an '@' in an option's value: write it as %40), got {shown_url(text)!r}"
        )
    if "#" in text:  # urlsplit drops all after it: a topic or an option's value cut short, silently
        raise ValueError(
            f"input: a kafka:// URL has no '#' part (a topic holds no '#'; in an option's value write it "
            f"as %23), got {shown_url(text)!r}"
        )
    try:
        parts = urlsplit(text)
    except ValueError:  # "Invalid IPv6 URL": it names no input
        raise ValueError(expected) from None
    servers = parts.netloc
    topic = parts.path.lstrip("/")
    if parts.scheme.lower() != "kafka" or not servers or not topic or "/" in topic:
        raise ValueError(expected)
    try:  # here, not at the broker (or, for kafka://embedded, when the mock creates the topic)
        check_topic_name(topic, show=shown_topic)
    except ValueError as exc:
        raise ValueError(f"input: {exc}, in {shown_url(text)!r}") from None
    query = dict(parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False))
    embedded_events: int | None = None
    embedded_partitions = EMBEDDED_PARTITIONS
    if servers == EMBEDDED:
        for key in EMBEDDED_KEYS:
            if key in query:
                value = query.pop(key)
                lowest = 0 if key == "events" else 1
                wanted = f"input: {key} must be a {'non-negative' if lowest == 0 else 'positive'} integer, got {value!r}"
                try:
                    number = parse_int(value, field=f"input: {key}")  # not isdigit(): '²' and '٣' are digits
                except ValueError:
                    raise ValueError(wanted) from None
                if number < lowest:
                    raise ValueError(wanted)
                highest = TOPIC_PARTITIONS_MAX if key == "partitions" else EVENTS_MAX
                if number > highest:  # the mock allocates them at once: 10**9 partitions aborted the process
                    raise ValueError(f"input: {key} must be at most {highest}, got {value!r}")
                if key == "events":
                    embedded_events = number
                else:
                    embedded_partitions = number
    else:
        misplaced = [key for key in EMBEDDED_KEYS if key in query]
        if misplaced:
            raise ValueError(f"input: {misplaced[0]} is for kafka://{EMBEDDED}/... only, got it in {shown_url(text)!r}")
    spec = KafkaInput(
        url=f"{SCHEME}{servers}/{topic}",
        bootstrap_servers=servers,
        topic=topic,
        options=query,
        columns=column_mapping(columns),
        embedded_events=embedded_events,
        embedded_partitions=embedded_partitions,
    )
    parse_options({"bootstrap.servers": servers, "topic": topic, **query}, streaming=None)
    return spec


# -- producing ------------------------------------------------------------------------------------
def encode_events(frame: pd.DataFrame) -> tuple[list[bytes], list[bytes]]:
    """(keys, values): the type as key, the row as JSON the way the JSON Lines writer writes it."""
    if frame.empty:
        return [], []
    lines = frame.to_json(orient="records", lines=True).splitlines()
    values = [line.encode() for line in lines]
    keys = [str(t).encode() for t in frame["type"].tolist()]
    return keys, values


class DeliveryError(RuntimeError):
    """Messages the brokers did not take: how many of how many, and the errors by name and count."""

    def __init__(self, topic: str, failed: int, total: int, errors: Mapping[str, int]) -> None:
        self.topic = topic
        self.failed = failed
        self.total = total
        self.errors = dict(errors)
        super().__init__(f"{failed} of {total} message(s) to {topic!r} failed: {self.errors}")


async def _send_all(
    producer: Any,
    topic: str,
    keys: Sequence[bytes],
    values: Sequence[bytes],
    partitions: np.ndarray | None,
    rate: float | None,
) -> None:
    started = time.monotonic()
    send = producer.send
    for index, (key, value) in enumerate(zip(keys, values)):
        if rate and index % 1000 == 0:
            ahead = index / rate - (time.monotonic() - started)
            if ahead > 0:
                await asyncio.sleep(ahead)
        partition = None if partitions is None else int(partitions[index])
        # Each outcome is counted in the producer's stats; a Delivery left unread logs nothing.
        await send(topic, value, key=key, partition=partition)


def produce_events(
    bootstrap_servers: str,
    topic: str,
    keys: Sequence[bytes],
    values: Sequence[bytes],
    partitions: np.ndarray | None = None,
    rate: float | None = None,
    config: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """Send through `BatchingProducer` (broker-level linger) and wait for every ack; returns its stats.

    Raises DeliveryError (a RuntimeError) if any message failed: the count is in the message,
    nothing is dropped quietly.
    """
    from rebalancer.produce import BatchingProducer, ProducerConfig

    check_topic_name(topic, field="topic", show=shown_topic, internal=False)  # here, not as a broker error per message
    if rate is not None and rate < 0:
        raise ValueError(f"rate must be >= 0 events/s, got {rate}")

    async def run() -> dict[str, object]:
        settings = {
            "broker.linger.ms": WRITER_LINGER_MS,
            "compression.type": WRITER_COMPRESSION,
            "partitioner": WRITER_PARTITIONER,
            "enable.idempotence": WRITER_IDEMPOTENT,
            **(config or {}),
        }
        producer = BatchingProducer(ProducerConfig.from_dict({**settings, "bootstrap.servers": bootstrap_servers}))
        await producer.start()
        try:
            await _send_all(producer, topic, keys, values, partitions, rate)
        finally:
            await producer.stop()
        return producer.stats()

    stats = asyncio.run(run())
    failed, errors = stats["failed"], stats["errors"]
    if failed:
        assert isinstance(failed, int) and isinstance(errors, Mapping)  # BatchingProducer.stats()' types
        raise DeliveryError(topic, failed, len(values), errors)
    return stats


@contextmanager
def embedded_input(spec: KafkaInput, sample: GenerateConfig) -> Iterator[KafkaInput]:
    """A mock cluster in this process with `sample` produced to the topic; stopped on exit."""
    from rebalancer.pipeline.generate import make_frame
    from rebalancer.testing import MockKafkaCluster

    events = sample.events if spec.embedded_events is None else spec.embedded_events
    frame = make_frame(replace(sample, events=events, format="jsonl"))
    keys, values = encode_events(frame)
    with MockKafkaCluster(brokers=3) as cluster:
        cluster.create_topic(spec.topic, spec.embedded_partitions)
        stats = produce_events(cluster.bootstrap_servers, spec.topic, keys, values)
        log.info("embedded cluster: %d events produced to %r in %d requests", stats["acked"], spec.topic, stats["requests"])
        yield replace(spec, bootstrap_servers=cluster.bootstrap_servers)


# -- reading --------------------------------------------------------------------------------------
def to_telemetry(frame: DataFrame, columns: Mapping[str, str] | None = None) -> DataFrame:
    """Kafka records (the source's columns) as ts, type, entity, value text, plus the not-JSON flag.

    A value that is not a JSON object (or is null) keeps its text in `value`, its other columns null.
    """
    from pyspark.sql import functions as F

    from rebalancer.pipeline.ingest.contract import text_schema

    mapping = column_mapping(columns)
    corrupt = "_corrupt_record"
    sources = [mapping[name] for name in REQUIRED_COLUMNS]
    schema = text_schema([*sources, corrupt])
    text = F.col("value").cast("string")
    parsed = F.from_json(text, schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": corrupt})
    frame = frame.select(text.alias("_text"), parsed.alias("_json"))
    not_json = F.col("_text").isNull() | F.col("_json").isNull() | F.col(f"_json.{corrupt}").isNotNull()
    frame = frame.withColumn(NOT_JSON_COLUMN, not_json)
    picked = [
        F.when(~F.col(NOT_JSON_COLUMN), F.col("_json")[source]).alias(name)
        for name, source in zip(REQUIRED_COLUMNS, sources)
    ]
    value_index = REQUIRED_COLUMNS.index("value")
    picked[value_index] = (
        F.when(F.col(NOT_JSON_COLUMN), F.col("_text")).otherwise(F.col("_json")[sources[value_index]]).alias("value")
    )
    return frame.select(*picked, NOT_JSON_COLUMN)


def read_kafka_raw(spark: SparkSession, spec: KafkaInput) -> DataFrame:
    """The topic from `startingOffsets` (default earliest) to `endingOffsets` (latest), as telemetry."""
    register_kafka_source(spark)
    frame = spark.read.format(SOURCE_NAME).options(**spec.reader_options(streaming=False)).load()
    return to_telemetry(frame, spec.columns)


def read_kafka_stream(spark: SparkSession, spec: KafkaInput) -> DataFrame:
    register_kafka_source(spark)
    frame = spark.readStream.format(SOURCE_NAME).options(**spec.reader_options(streaming=True)).load()
    return to_telemetry(frame, spec.columns)
