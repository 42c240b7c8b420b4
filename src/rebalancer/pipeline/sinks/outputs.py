"""The pipeline's outputs as sink tables: which key each has, and what the run records in summary.json.

- `metrics`: primary key `(type, entity, minute)`.
- `quarantine`: a surrogate key `row_key`, the SHA-256 of the row's original values, its reason and
  its occurrence (1, 2, … among identical bad rows), so duplicates are kept, not merged.
- Streaming adds `batch_id` to every table and to its key: a micro-batch holds partial aggregates,
  and a minute that spans two batches has a row for each, as `OUT/metrics/batch_id=N/` does.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict

from rebalancer.pipeline.sinks._pg_types import DEFAULT_SCHEMA, Output, TableWrite
from rebalancer.pipeline.sinks.postgres import PostgresSink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from rebalancer.pipeline.paths import OutputPath
    from rebalancer.pipeline.routing.handler_map import Pipeline

METRICS_TABLE = "metrics"
QUARANTINE_TABLE = "quarantine"
METRICS_KEY = ("type", "entity", "minute")
QUARANTINE_KEY = ("row_key",)
BATCH_ID = "batch_id"
OUTPUT_KEYS = {METRICS_TABLE: METRICS_KEY, QUARANTINE_TABLE: QUARANTINE_KEY}


class TableTotals(TypedDict):
    """One table's rows written: upserted, changed, by direct COPY, refused."""

    rows: int
    changed: int
    direct: int
    refused: int


class SinkSection(TypedDict):
    """summary.json's `sink` (and a stream state's): where the tables are, what each got, how long it
    took; a stream's counts its batches too."""

    url: str
    schema: str
    tables: dict[str, TableTotals]
    seconds: float
    batches: NotRequired[int]
    skipped_batches: NotRequired[int]


def open_sink(url: str | None, schema: str = DEFAULT_SCHEMA) -> PostgresSink | None:
    """The sink for `--sink URL`, checked by one connection (ValueError: unreachable, bad login); None without a URL."""
    if url is None:
        return None
    sink = PostgresSink(url, schema)
    sink.check()
    return sink


def with_row_key(quarantine: DataFrame) -> DataFrame:
    """Quarantine rows with `occurrence` and `row_key`: a stable identity for rows that have no natural key."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    columns = quarantine.columns
    same_row = Window.partitionBy(*columns).orderBy(*columns)
    numbered = quarantine.withColumn("occurrence", F.row_number().over(same_row).cast("int"))
    # to_json leaves a null field out and writes "" for an empty one, so the two never hash alike.
    digest = F.sha2(F.to_json(F.struct(*columns, "occurrence")), 256)
    return numbered.select(digest.alias("row_key"), *columns, "occurrence")


def sink_outputs(
    outputs: Mapping[str, DataFrame],
    batch_id: int | None = None,
    keys: Mapping[str, tuple[str, ...]] | None = None,
) -> list[Output]:
    """Each named output with its table key; stream batches add a `batch_id` column and key part.

    `keys` gives the key of every other output (a handler's table: `routing.handler_map.Handler.table_key`).
    """
    from pyspark.sql import functions as F

    known = {**OUTPUT_KEYS, **(keys or {})}
    result = []
    for name, frame in outputs.items():
        if name not in known:
            raise ValueError(f"output must be one of {', '.join(known)}, got {name!r}")
        key = known[name]
        if name == QUARANTINE_TABLE:
            frame = with_row_key(frame)
        if batch_id is not None:
            frame = frame.withColumn(BATCH_ID, F.lit(batch_id).cast("bigint"))
            key = (*key, BATCH_ID)
        result.append(Output(frame, name, key))
    return result


def prepare_sink(
    sink: PostgresSink, spark: SparkSession, stream: bool = False, handlers: Pipeline | None = None
) -> None:
    """Create or check the run's tables before any work, from the outputs' schemas.

    The schemas do not depend on the input (its columns are cast by name), so an empty frame of the
    input contract gives them without reading anything and without a Spark job. Each of `handlers`
    gets a table of its own, from its declared schema, keyed by its `table_key`.
    """
    from rebalancer.pipeline.handler.dispatch import dispatch
    from rebalancer.pipeline.ingest.classifier import accepted_rows, classify, quarantine_rows
    from rebalancer.pipeline.ingest.contract import text_schema
    from rebalancer.pipeline.routing.handler_map import with_date

    classified = classify(spark.createDataFrame([], text_schema()))
    outputs = {
        METRICS_TABLE: dispatch(accepted_rows(classified), "hash", 1).metrics,
        QUARANTINE_TABLE: quarantine_rows(classified),
    }
    keys: dict[str, tuple[str, ...]] = {}
    for handler in handlers.handlers if handlers is not None else []:
        frame, _ = with_date(spark.createDataFrame([], handler.schema))
        outputs[handler.name] = frame
        keys[handler.name] = handler.table_key(frame.schema)
    sink.prepare(sink_outputs(outputs, batch_id=0 if stream else None, keys=keys))


def _section(sink: PostgresSink) -> SinkSection:
    return {"url": sink.display_url, "schema": sink.schema, "tables": {}, "seconds": 0.0}


def _add(section: SinkSection, writes: list[TableWrite], seconds: float) -> None:
    for write in writes:
        table = section["tables"].setdefault(write.table, {})  # type: ignore[typeddict-item]
        # .get: a stream's totals may come from a state saved before a count was added
        table["rows"] = table.get("rows", 0) + write.rows
        table["changed"] = table.get("changed", 0) + write.changed
        table["direct"] = table.get("direct", 0) + write.direct
        table["refused"] = table.get("refused", 0) + write.refused
    section["seconds"] = round(section["seconds"] + seconds, 3)


def write_outputs(
    sink: PostgresSink,
    outputs: Mapping[str, DataFrame],
    keys: Mapping[str, tuple[str, ...]] | None = None,
    batch_id: int | None = None,
) -> SinkSection:
    """Batch run: upsert every output; returns summary.json's `sink` section.

    `batch_id` (a run of a Kafka input with a consumer group) keys the rows by batch, as a stream's
    are: a rerun of the same batch replaces its rows by plain upsert, with the records of the failed
    run and any that came since (see `telemetry.GroupRead`).

    The frames should be persisted by the caller: each table is one more Spark job over its frame.
    """
    started = time.perf_counter()
    writes = sink.write_all(sink_outputs(outputs, batch_id=batch_id, keys=keys))
    section = _section(sink)
    _add(section, writes, time.perf_counter() - started)
    return section


def stream_query_id(checkpoint: str | OutputPath) -> str:
    """Spark's id for the query of `checkpoint` (kept across restarts, new for a new checkpoint).

    A remote checkpoint comes as a `UriPath`, and its metadata is read through Hadoop, where Spark wrote it.
    """
    metadata = (Path(checkpoint) if isinstance(checkpoint, str) else checkpoint) / "query" / "metadata"
    try:
        return str(json.loads(metadata.read_text().splitlines()[0])["id"])
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise ValueError(f"checkpoint has no readable query metadata: {metadata}") from exc


def write_stream_outputs(
    sink: PostgresSink,
    outputs: Mapping[str, DataFrame],
    checkpoint: str | OutputPath,
    batch_id: int,
    totals: SinkSection,
    keys: Mapping[str, tuple[str, ...]] | None = None,
) -> None:
    """One micro-batch, exactly once: its tables and its `rebalancer_batches` row commit together.

    `totals` (the stream state's `sink` section) gains this batch's rows; a replayed batch that was
    already committed adds the rows recorded by the commit, so the totals count every row once.
    """
    started = time.perf_counter()
    writes = sink.write_batch(
        sink_outputs(outputs, batch_id, keys), query=stream_query_id(checkpoint), batch_id=batch_id
    )
    if not totals:
        totals.update(_section(sink))
        totals.update(batches=0, skipped_batches=0)
    _add(totals, writes, time.perf_counter() - started)
    totals["batches"] = totals.get("batches", 0) + 1
    totals["skipped_batches"] = totals.get("skipped_batches", 0) + int(all(w.skipped for w in writes))


def describe(section: SinkSection) -> str:
    """The terminal table's `sink` cell."""
    tables = ", ".join(f"{name} {counts['rows']:,}" for name, counts in section["tables"].items())
    return (
        f"{tables} rows upserted in {section['seconds']:.1f} s\n{section['url']}, schema {section['schema']}"
    )
