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

import argparse
import asyncio
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from rebalancer.pipeline.ingest import NOT_JSON_COLUMN, REQUIRED_COLUMNS, column_mapping
from rebalancer.pipeline.kafka.source import SOURCE_NAME, parse_options, register_kafka_source

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

    from rebalancer.pipeline.generate import GenerateConfig

__all__ = [
    "EMBEDDED",
    "KafkaInput",
    "add_produce_parser",
    "embedded_input",
    "encode_events",
    "parse_kafka_url",
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
# zstd keeps a hot partition inside the mock's 5 MiB per-partition log (librdkafka's mock drops
# the oldest record batches beyond it); JSON telemetry compresses to about 20 bytes an event.
PRODUCER_DEFAULTS: dict[str, object] = {"broker.linger.ms": 50, "compression.type": "zstd"}


@dataclass(frozen=True)
class KafkaInput:
    """A topic as the pipeline's input. `files` is empty: nothing on disk can overlap the output."""

    url: str
    bootstrap_servers: str
    topic: str
    options: Mapping[str, str] = field(default_factory=dict)
    columns: Mapping[str, str] = field(default_factory=column_mapping)
    embedded_events: int | None = None
    embedded_partitions: int = EMBEDDED_PARTITIONS
    format: str = "kafka"
    files: tuple[()] = ()

    @property
    def path(self) -> str:
        """What the summaries print as the input."""
        return self.url

    @property
    def embedded(self) -> bool:
        return self.bootstrap_servers == EMBEDDED

    def reader_options(self, streaming: bool) -> dict[str, str]:
        options = {"bootstrap.servers": self.bootstrap_servers, "topic": self.topic, **self.options}
        parse_options(options, streaming=streaming)
        return options


def is_kafka_url(text: object) -> bool:
    return isinstance(text, str) and text.lower().startswith(SCHEME)


def parse_kafka_url(text: str, columns: Mapping[str, str] | None = None) -> KafkaInput:
    """`kafka://HOST:PORT[,HOST:PORT]/TOPIC[?option=value&...]`, checked before Spark starts."""
    parts = urlsplit(text)
    servers = parts.netloc
    topic = parts.path.lstrip("/")
    if parts.scheme.lower() != "kafka" or not servers or not topic or "/" in topic:
        raise ValueError(f"input: expected kafka://HOST:PORT/TOPIC or kafka://{EMBEDDED}/TOPIC, got {text!r}")
    query = dict(parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False))
    embedded_events: int | None = None
    embedded_partitions = EMBEDDED_PARTITIONS
    if servers == EMBEDDED:
        for key in EMBEDDED_KEYS:
            if key in query:
                value = query.pop(key)
                if not value.isdigit() or int(value) < (0 if key == "events" else 1):
                    raise ValueError(f"input: {key} must be a {'non-negative' if key == 'events' else 'positive'} integer, got {value!r}")
                if key == "events":
                    embedded_events = int(value)
                else:
                    embedded_partitions = int(value)
    else:
        misplaced = [key for key in EMBEDDED_KEYS if key in query]
        if misplaced:
            raise ValueError(f"input: {misplaced[0]} is for kafka://{EMBEDDED}/... only, got it in {text!r}")
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

    Raises RuntimeError if any message failed: the count is in the message, nothing is dropped quietly.
    """
    from rebalancer.produce import BatchingProducer

    if rate is not None and rate < 0:
        raise ValueError(f"rate must be >= 0 events/s, got {rate}")

    async def run() -> dict[str, object]:
        producer = BatchingProducer({**PRODUCER_DEFAULTS, **(config or {}), "bootstrap.servers": bootstrap_servers})
        await producer.start()
        try:
            await _send_all(producer, topic, keys, values, partitions, rate)
        finally:
            await producer.stop()
        return producer.stats()

    stats = asyncio.run(run())
    if stats["failed"]:
        raise RuntimeError(f"{stats['failed']} of {len(values)} message(s) to {topic!r} failed: {stats['errors']}")
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

    from rebalancer.pipeline.ingest import text_schema

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


# -- `rebalancer pipeline produce` ----------------------------------------------------------------
def add_produce_parser(sub: Any, defaults: GenerateConfig) -> None:
    produce = sub.add_parser(
        "produce",
        help="send generated telemetry to a Kafka topic through BatchingProducer",
        description="Generate telemetry as `generate` does and send each event as a JSON value (key: "
        "its type) through BatchingProducer, whose linger is per broker. Bad rows stay bad, for the "
        "pipeline's quarantine. Prints the producer's stats. Read it back with "
        "`rebalancer pipeline run --input kafka://HOST:PORT/TOPIC`.",
    )
    produce.add_argument("--bootstrap", required=True, help="HOST:PORT[,HOST:PORT] of the brokers")
    produce.add_argument("--topic", required=True, help="topic to send to")
    produce.add_argument("--events", type=int, default=defaults.events, help="events to send")
    produce.add_argument("--types", type=int, default=defaults.types, help="distinct values of the type column")
    produce.add_argument("--skew", type=float, default=defaults.skew, help="Zipf exponent of type volumes")
    produce.add_argument("--entities", type=int, default=defaults.entities, help="distinct entities per type")
    produce.add_argument("--bad-rate", type=float, default=defaults.bad_rate, help="share of bad rows")
    produce.add_argument("--seed", type=int, default=defaults.seed, help="random seed")
    produce.add_argument("--rate", type=float, default=0, help="events per second (default 0: as fast as possible)")
    produce.add_argument("--linger-ms", type=float, default=PRODUCER_DEFAULTS["broker.linger.ms"], help="broker.linger.ms")
    produce.set_defaults(func=cmd_produce)


def cmd_produce(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from rebalancer.pipeline.generate import GenerateConfig, make_frame

    if not args.bootstrap.strip():
        raise ValueError("bootstrap must be HOST:PORT[,HOST:PORT], got an empty string")
    if args.rate < 0:
        raise ValueError(f"rate must be >= 0 events/s, got {args.rate}")
    if args.linger_ms < 0:
        raise ValueError(f"linger-ms must be >= 0, got {args.linger_ms}")
    config = GenerateConfig(
        events=args.events, types=args.types, skew=args.skew, entities=args.entities,
        bad_rate=args.bad_rate, seed=args.seed, format="jsonl",
    )
    config.validate()
    keys, values = encode_events(make_frame(config))
    started = time.perf_counter()
    stats = produce_events(
        args.bootstrap, args.topic, keys, values, rate=args.rate or None, config={"broker.linger.ms": args.linger_ms}
    )
    elapsed = time.perf_counter() - started
    table = Table(title=f"produced {len(values):,} events to {args.topic} in {elapsed:.2f} s", show_header=False)
    table.add_column("stat", style="bold")
    table.add_column("value")
    for name in ("acked", "failed", "requests", "msgs_per_request", "sends", "partitions_per_send_avg",
                 "latency_ms_p50", "latency_ms_p99", "retries", "errors"):
        value = stats[name]
        table.add_row(name, f"{value:.2f}" if isinstance(value, float) else str(value))
    Console(markup=False).print(table)
    return 0
