"""Reading telemetry and sorting rows into accepted and quarantined, with one reason per bad row."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

REQUIRED_COLUMNS = ("ts", "type", "entity", "value")
EXTENSIONS = {".parquet": "parquet", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl"}
FORMATS = ("parquet", "csv", "jsonl")
# Checked in this order; a row gets the first reason that applies.
REASONS = (
    "ts_missing",
    "ts_unparseable",
    "type_missing",
    "entity_missing",
    "value_missing",
    "value_not_numeric",
    "value_not_finite",
)
# Epoch milliseconds: digits only, short enough never to overflow a timestamp.
EPOCH_MS_PATTERN = r"^\s*-?[0-9]{1,15}\s*$"


@dataclass(frozen=True)
class InputSpec:
    """A validated input: where, which format, which files."""

    path: Path
    format: str
    files: tuple[Path, ...]


def _data_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(
        p
        for p in path.rglob("*")
        if p.is_file() and not p.name.startswith((".", "_")) and not p.name.endswith(".crc")
    )


def detect_format(files: list[Path], explicit: str | None) -> str:
    if explicit is not None:
        if explicit not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {explicit!r}")
        return explicit
    found = {EXTENSIONS.get(p.suffix.lower()) for p in files}
    found.discard(None)
    if len(found) != 1:
        names = ", ".join(sorted(EXTENSIONS))
        raise ValueError(f"cannot tell the input format from the file extensions ({names}); pass --format")
    return found.pop()  # type: ignore[return-value]


def _first_line_columns(path: Path, fmt: str) -> list[str]:
    with path.open("rb") as handle:
        for raw in handle:
            line = raw.decode("utf-8", errors="replace").strip()
            if not line:
                continue
            if fmt == "csv":
                return [name.strip().strip('"') for name in line.split(",")]
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"unreadable file {path}: first line is not JSON ({exc.msg})") from exc
            if not isinstance(record, dict):
                raise ValueError(f"unreadable file {path}: first line is not a JSON object")
            return list(record)
    return []


def inspect_input(path: str | Path, fmt: str | None = None) -> InputSpec:
    """Fail fast, before Spark or any output: missing path, unreadable file, missing column."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"input path does not exist: {path}")
    files = _data_files(path)
    if not files:
        raise ValueError(f"input path has no data files: {path}")
    for file in files:
        if not os.access(file, os.R_OK):
            raise ValueError(f"unreadable file: {file}")
    fmt = detect_format(files, fmt)
    for file in files:
        if file.stat().st_size == 0:
            continue
        if fmt == "parquet":
            import pyarrow.parquet as pq

            try:
                columns = pq.read_schema(file).names
            except Exception as exc:  # pyarrow raises several types for a bad footer
                raise ValueError(f"unreadable file {file}: {exc}") from exc
        else:
            columns = _first_line_columns(file, fmt)
        missing = [name for name in REQUIRED_COLUMNS if name not in columns]
        if missing and (fmt != "jsonl" or len(missing) == len(REQUIRED_COLUMNS)):
            raise ValueError(f"missing column {missing[0]!r} in {file}")
        if missing and fmt == "jsonl":
            # JSON Lines may omit null keys on a row, so only a key absent from the whole file counts.
            present = set(columns)
            with file.open("rb") as handle:
                for raw in handle:
                    if raw.strip():
                        present.update(json.loads(raw))
                        if all(name in present for name in REQUIRED_COLUMNS):
                            break
            missing = [name for name in REQUIRED_COLUMNS if name not in present]
            if missing:
                raise ValueError(f"missing column {missing[0]!r} in {file}")
    return InputSpec(path=path, format=fmt, files=tuple(files))


def text_schema() -> StructType:
    """All four columns as strings: CSV and JSON values are kept exactly as written."""
    from pyspark.sql.types import StringType, StructField, StructType

    return StructType([StructField(name, StringType(), True) for name in REQUIRED_COLUMNS])


def source_schema(spark: SparkSession, spec: InputSpec) -> StructType:
    if spec.format == "parquet":
        return spark.read.parquet(str(spec.path)).select(*REQUIRED_COLUMNS).schema
    return text_schema()


def read_raw(spark: SparkSession, spec: InputSpec) -> DataFrame:
    """The input with the four contract columns, in their source types."""
    path = str(spec.path)
    if spec.format == "parquet":
        frame = spark.read.parquet(path)
    elif spec.format == "csv":
        frame = spark.read.option("header", True).option("mode", "PERMISSIVE").schema(text_schema()).csv(path)
    else:
        frame = spark.read.option("mode", "PERMISSIVE").schema(text_schema()).json(path)
    return frame.select(*REQUIRED_COLUMNS)


def _parse_ts(frame: DataFrame) -> Column:
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType, NumericType, StringType, TimestampNTZType, TimestampType

    kind = frame.schema["ts"].dataType
    ts = F.col("ts")
    if isinstance(kind, TimestampType | TimestampNTZType | DateType):
        return ts.cast("timestamp")
    if isinstance(kind, NumericType):
        return F.timestamp_millis(ts.try_cast("bigint"))
    text = ts.cast("string") if not isinstance(kind, StringType) else ts
    return F.when(text.rlike(EPOCH_MS_PATTERN), F.timestamp_millis(F.trim(text).try_cast("bigint"))).otherwise(
        F.try_to_timestamp(F.trim(text))
    )


def classify(frame: DataFrame) -> DataFrame:
    """Adds the parsed columns (`ts_parsed`, `value_num`) and `reason` (null for a good row)."""
    from pyspark.sql import functions as F

    parsed_ts = _parse_ts(frame)
    value_text = F.col("value").cast("string")
    value_num = F.col("value").try_cast("double")
    reason = (
        F.when(F.col("ts").isNull(), F.lit("ts_missing"))
        .when(F.col("ts_parsed").isNull(), F.lit("ts_unparseable"))
        .when(F.col("type").isNull() | (F.trim(F.col("type").cast("string")) == ""), F.lit("type_missing"))
        .when(F.col("entity").isNull(), F.lit("entity_missing"))
        .when(F.col("value").isNull() | (F.trim(value_text) == ""), F.lit("value_missing"))
        .when(F.col("value_num").isNull(), F.lit("value_not_numeric"))
        .when(F.isnan("value_num") | (F.abs(F.col("value_num")) == float("inf")), F.lit("value_not_finite"))
    )
    return (
        frame.withColumn("ts_parsed", parsed_ts)
        .withColumn("value_num", value_num)
        .withColumn("reason", reason)
    )


def quarantine_rows(classified: DataFrame) -> DataFrame:
    """Bad rows: the original values as strings and the reason."""
    from pyspark.sql import functions as F

    return classified.filter(F.col("reason").isNotNull()).select(
        *[F.col(name).cast("string").alias(name) for name in REQUIRED_COLUMNS], "reason"
    )


def accepted_rows(classified: DataFrame) -> DataFrame:
    """Good rows in the dispatch shape: type, entity, minute (epoch seconds, UTC floor), value."""
    from pyspark.sql import functions as F

    minute = (F.floor(F.unix_micros(F.col("ts_parsed")) / F.lit(60_000_000)) * 60).cast("bigint")
    return classified.filter(F.col("reason").isNull()).select(
        F.col("type").cast("string").alias("type"),
        F.col("entity").cast("string").alias("entity"),
        minute.alias("minute"),
        F.col("value_num").alias("value"),
    )
