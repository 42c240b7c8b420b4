"""The sink's tables: column types from Spark's, identifiers checked, and what a write reports."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType


DEFAULT_SCHEMA = "rebalancer"
BATCHES_TABLE = "rebalancer_batches"
MAX_IDENTIFIER = 63  # PostgreSQL's NAMEDATALEN - 1
STAGE_PREFIX = "_rebalancer_stage_"
# Spark's default, 10,000 rows per Arrow batch, spends more on the hand-over to Python than the
# whole COPY costs: 6.1 s of CPU for the 1.29M metric rows of the benchmark against 3.5 s with
# 200,000 (a batch of metrics is then about 25 MB).
ARROW_BATCH_CONF = "spark.sql.execution.arrow.maxRecordsPerBatch"
ARROW_BATCH_ROWS = 200_000


class SinkError(RuntimeError):
    """A write that failed after the sink was set up (the server went away, a task failed)."""


@dataclass
class TableWrite:
    """What one write did to one table."""

    table: str
    rows: int  # rows upserted (every row of the frame)
    changed: int  # of those, rows inserted or whose values changed
    tasks: int
    seconds: float
    skipped: bool = False  # a stream batch id already committed: nothing written this time
    direct: int = 0  # of `changed`, rows COPYed straight into the table (the others went through the upsert)
    refused: int = 0  # tasks whose direct COPY met existing keys: rolled back, their rows upserted instead


@dataclass(frozen=True)
class Output:
    """One frame for one table, with the table's primary key."""

    frame: DataFrame
    table: str
    key: tuple[str, ...]


def pg_type(name: str, data_type: DataType) -> str:
    """The column type for a Spark type, spelled as PostgreSQL's `format_type` spells it."""
    from pyspark.sql import types as T

    if isinstance(data_type, T.DecimalType):
        return f"numeric({data_type.precision},{data_type.scale})"
    simple: tuple[tuple[type, str], ...] = (
        (T.StringType, "text"),
        (T.LongType, "bigint"),
        (T.IntegerType, "integer"),
        (T.ShortType, "smallint"),
        (T.ByteType, "smallint"),
        (T.DoubleType, "double precision"),
        (T.FloatType, "real"),
        (T.BooleanType, "boolean"),
        (T.TimestampNTZType, "timestamp without time zone"),
        (T.TimestampType, "timestamp with time zone"),
        (T.DateType, "date"),
    )
    for spark_type, postgres_type in simple:
        if isinstance(data_type, spark_type):
            return postgres_type
    raise ValueError(
        f"column {name!r} has type {data_type.simpleString()}, which the PostgreSQL sink cannot store"
    )


def table_columns(schema: StructType) -> tuple[tuple[str, str], ...]:
    return tuple((f.name, pg_type(f.name, f.dataType)) for f in schema.fields)


def _check_identifier(what: str, value: str) -> str:
    if not isinstance(value, str) or not value or len(value.encode()) > MAX_IDENTIFIER or "\x00" in value:
        raise ValueError(f"{what} must be 1 to {MAX_IDENTIFIER} bytes without NUL, got {value!r}")
    return value


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


@contextmanager
def _arrow_batch_rows(spark: SparkSession, rows: int) -> Iterator[None]:
    """Spark hands `rows` rows per Arrow batch to the tasks for the duration; the caller's setting after."""
    previous = spark.conf.get(ARROW_BATCH_CONF, None)
    spark.conf.set(ARROW_BATCH_CONF, str(rows))
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(ARROW_BATCH_CONF)
        else:
            spark.conf.set(ARROW_BATCH_CONF, previous)


def _incompatibility(
    existing: dict[str, tuple[str, bool]],
    existing_key: tuple[str, ...],
    columns: tuple[tuple[str, str], ...],
    key: tuple[str, ...],
) -> str | None:
    for name, kind in columns:
        if name not in existing:
            return f"column {name!r} is missing"
        if existing[name][0] != kind:
            return f"column {name!r} is {existing[name][0]}, expected {kind}"
    wanted = {name for name, _ in columns}
    for name, (_, required) in existing.items():
        if required and name not in wanted:
            return f"column {name!r} is NOT NULL without a default and the frame has no such column"
    if set(existing_key) != set(key):
        found = ", ".join(existing_key) or "none"
        return f"primary key is ({found}), expected ({', '.join(key)})"
    return None


def _stage_prefix(query: str, batch_id: int | None) -> str:
    digest = hashlib.sha256(query.encode()).hexdigest()[:10]
    return f"{STAGE_PREFIX}{digest}_" + ("" if batch_id is None else f"{batch_id}")
