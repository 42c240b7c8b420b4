"""Reading telemetry and sorting rows into accepted and quarantined, with one reason per bad row.

Columns are found by name (a CSV header, JSON keys, the Parquet schema), never by position, and
`columns` maps the contract's names onto a source's own.
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, DataFrameReader, SparkSession
    from pyspark.sql.types import StructType

    from rebalancer.pipeline.kafka.telemetry import KafkaInput

REQUIRED_COLUMNS = ("ts", "type", "entity", "value")
EXTENSIONS = {".parquet": "parquet", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl"}
FORMATS = ("parquet", "csv", "jsonl")
# Checked in this order; a row gets the first reason that applies.
REASONS = (
    "value_not_json",  # Kafka input only: the message is not a JSON object
    "ts_missing",
    "ts_unparseable",
    "ts_out_of_range",
    "type_missing",
    "entity_missing",
    "value_missing",
    "value_not_numeric",
    "value_not_finite",
)
# Set by a Kafka input (rebalancer.pipeline.kafka.telemetry) on messages that are not JSON objects.
NOT_JSON_COLUMN = "_value_not_json"
# Epoch milliseconds: digits only (the range check, not the pattern, bounds them).
EPOCH_MS_PATTERN = r"^\s*-?[0-9]+\s*$"
# The instants every Parquet reader can represent, pandas' nanosecond timestamps included: pandas'
# lowest rounded up to a whole minute (so a row's minute is in range too), its highest in microseconds.
TS_MIN_MICROS = -9_223_372_020_000_000  # 1677-09-21T00:13:00Z
TS_MAX_MICROS = 9_223_372_036_854_775  # 2262-04-11T23:47:16.854775Z
TS_MIN_MS = -(-TS_MIN_MICROS // 1000)
TS_MAX_MS = TS_MAX_MICROS // 1000
_BOM = b"\xef\xbb\xbf"
# RFC 4180 (Excel, pandas): a quote inside a quoted field is doubled; Spark's default escape is a backslash.
CSV_OPTIONS = {"header": "true", "mode": "PERMISSIVE", "escape": '"'}


def column_mapping(columns: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every contract column -> its name in the source; unmapped columns keep their own name."""
    given = dict(columns or {})
    unknown = [name for name in given if name not in REQUIRED_COLUMNS]
    if unknown:
        raise ValueError(
            f"columns: unknown column {unknown[0]!r} (the columns are {', '.join(REQUIRED_COLUMNS)})"
        )
    full = {name: given.get(name, name) for name in REQUIRED_COLUMNS}
    seen: dict[str, str] = {}
    for name, source in full.items():
        if not source:
            raise ValueError(f"columns: the source name for {name!r} is empty")
        if source in seen:
            raise ValueError(f"columns: {source!r} is mapped twice ({seen[source]} and {name})")
        seen[source] = name
    return full


def parse_columns(text: str) -> dict[str, str]:
    """`--columns ts=event_time,type=metric,...` as a full mapping (see `column_mapping`)."""
    given: dict[str, str] = {}
    for part in text.split(","):
        name, sep, source = (piece.strip() for piece in part.partition("="))
        if not sep or not name or not source:
            raise ValueError(f"columns: expected NAME=SOURCE[,NAME=SOURCE...], got {part.strip()!r}")
        if name in given:
            raise ValueError(f"columns: {name!r} is given twice")
        given[name] = source
    return column_mapping(given)


@dataclass(frozen=True)
class InputSpec:
    """A validated input: where, which format, which files, and where each contract column is."""

    path: Path
    format: str
    files: tuple[Path, ...]
    # contract column -> its name in the source
    columns: Mapping[str, str] = field(default_factory=column_mapping)
    # CSV only: each non-empty file's header, as written (Spark reads CSV by position, so we map names)
    headers: Mapping[Path, tuple[str, ...]] = field(default_factory=dict)

    def csv_layouts(self) -> list[tuple[tuple[str, ...], list[Path]]]:
        """Files grouped by header, in file order: one Spark read per distinct header."""
        groups: dict[tuple[str, ...], list[Path]] = {}
        for file in self.files:
            if file in self.headers:
                groups.setdefault(self.headers[file], []).append(file)
        return list(groups.items())

    def header_index(self, header: tuple[str, ...], name: str) -> int:
        """Position of contract column `name` in a CSV header (names compared without surrounding spaces)."""
        source = self.columns[name]
        return [column.strip() for column in header].index(source)


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
    unknown = [p for p in files if p.suffix.lower() not in EXTENSIONS]
    if unknown:
        names = ", ".join(sorted(EXTENSIONS))
        raise ValueError(
            f"cannot tell the input format of {unknown[0]} from its extension ({names}); "
            "pass --format to read every file as one format"
        )
    by_format: dict[str, set[str]] = {}
    for p in files:
        by_format.setdefault(EXTENSIONS[p.suffix.lower()], set()).add(p.suffix.lower())
    if len(by_format) > 1:
        kinds = " and ".join(", ".join(sorted(exts)) for _fmt, exts in sorted(by_format.items()))
        raise ValueError(f"input mixes {kinds} files; give each format its own directory")
    return next(iter(by_format))


def _first_line_columns(path: Path, fmt: str) -> list[str]:
    """The header of a CSV file (as written) or the keys of a JSON Lines file's first record."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle):
            if number == 0 and raw.startswith(_BOM):
                raw = raw[len(_BOM) :]
            line = raw.decode("utf-8", errors="replace").strip("\r\n")
            if not line.strip():
                continue
            if fmt == "csv":
                return next(csv.reader([line]))
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"unreadable file {path}: first line is not JSON ({exc.msg})") from exc
            if not isinstance(record, dict):
                raise ValueError(f"unreadable file {path}: first line is not a JSON object")
            return list(record)
    return []


def _jsonl_keys(path: Path, wanted: set[str]) -> set[str]:
    """Keys over the whole file, until every wanted one is seen: JSON Lines may omit a null key on a row."""
    present: set[str] = set()
    with path.open("rb") as handle:
        for number, raw in enumerate(handle):
            if number == 0 and raw.startswith(_BOM):
                raw = raw[len(_BOM) :]
            try:
                record = json.loads(raw) if raw.strip() else None
            except ValueError:
                continue  # a corrupt line is Spark's to quarantine, row by row
            if isinstance(record, dict):
                present.update(record)
                if wanted <= present:
                    break
    return present


def _missing(missing: list[str], columns: Mapping[str, str], file: Path) -> ValueError:
    names = ", ".join(repr(columns[n]) + ("" if columns[n] == n else f" ({n})") for n in missing)
    return ValueError(f"missing column{'s' if len(missing) > 1 else ''} {names} in {file}")


def _duplicate(names: list[str], casefold: bool) -> str | None:
    seen: set[str] = set()
    for name in names:
        key = name.lower() if casefold else name
        if key in seen:
            return next(n for n in names if (n.lower() if casefold else n) == key)
        seen.add(key)
    return None


def inspect_input(
    path: str | Path, fmt: str | None = None, columns: Mapping[str, str] | None = None
) -> InputSpec:
    """Fail fast, before Spark or any output: missing path, unreadable file, missing or duplicate column."""
    mapping = column_mapping(columns)
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
    wanted = [mapping[name] for name in REQUIRED_COLUMNS]
    headers: dict[Path, tuple[str, ...]] = {}
    for file in files:
        if file.stat().st_size == 0:
            continue
        if fmt == "parquet":
            import pyarrow.parquet as pq

            try:
                names = pq.read_schema(file).names
            except Exception as exc:  # pyarrow raises several types for a bad footer
                raise ValueError(f"unreadable file {file}: {exc}") from exc
            # Spark matches Parquet columns case-insensitively and refuses a file with duplicates.
            duplicate = _duplicate(names, casefold=True)
            if duplicate is not None:
                raise ValueError(
                    f"duplicate column {duplicate!r} in {file} (column names are compared ignoring case)"
                )
            present = set(names)
        elif fmt == "csv":
            header = tuple(_first_line_columns(file, fmt))
            stripped = [name.strip() for name in header]
            duplicate = _duplicate([name for name in stripped if name in wanted], casefold=False)
            if duplicate is not None:
                raise ValueError(f"duplicate column {duplicate!r} in {file}")
            present = set(stripped)
            headers[file] = header
        else:
            present = set(_first_line_columns(file, fmt))
            if not set(wanted) <= present and present:
                present |= _jsonl_keys(file, set(wanted))
        missing = [name for name in REQUIRED_COLUMNS if mapping[name] not in present]
        if missing:
            raise _missing(missing, mapping, file)
    return InputSpec(path=path, format=fmt, files=tuple(files), columns=mapping, headers=headers)


def check_output(out: str | Path, spec: InputSpec, checkpoint: str | Path | None = None) -> None:
    """Refuse, before Spark starts, an output that would clobber the input or cannot be written."""
    out = Path(out)
    target = out.resolve()
    # An input without files (a Kafka topic) has nothing on disk to overlap.
    source = spec.path.resolve() if spec.files else None
    if out.exists() and not out.is_dir():
        if target == source:
            raise ValueError(f"output {out} is the input file; give a directory for the results")
        raise ValueError(f"output must be a directory, got a file: {out}")
    if target == source:
        raise ValueError(f"output {out} is the input directory; a re-run would read its own results")
    if source in target.parents:
        raise ValueError(f"output {out} is inside the input {spec.path}; a re-run would read its own results")
    if source is not None and target in source.parents:
        raise ValueError(
            f"input {spec.path} is inside the output {out}; the run would overwrite what it reads"
        )
    if checkpoint is not None and source is not None:
        where = Path(checkpoint).resolve()
        if where == source or source in where.parents or where in source.parents:
            raise ValueError(f"checkpoint {checkpoint} overlaps the input {spec.path}")
    existing = target
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"cannot create output {out}: {existing} is not a directory")
    for directory in (existing, target / "metrics", target / "quarantine"):
        if directory.is_dir() and not os.access(directory, os.W_OK | os.X_OK):
            raise ValueError(f"output directory is not writable: {directory}")


def text_schema(names: tuple[str, ...] | list[str] = REQUIRED_COLUMNS) -> StructType:
    """Columns as strings: CSV and JSON values are kept exactly as written."""
    from pyspark.sql.types import StringType, StructField, StructType

    return StructType([StructField(name, StringType(), True) for name in names])


def spark_path(path: Path | str) -> str:
    """A path for Spark's readers, which expand globs: `a[1].csv` would read `a1.csv` instead."""
    return re.sub(r"([\\*?\[\]{}])", r"\\\1", str(path))


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _to_contract(frame: DataFrame, spec: InputSpec) -> DataFrame:
    """The four contract columns, picked by their source names and renamed."""
    from pyspark.sql import functions as F

    return frame.select(*[F.col(_quoted(spec.columns[name])).alias(name) for name in REQUIRED_COLUMNS])


def _csv_reader(spark: SparkSession, schema: StructType) -> DataFrameReader:
    reader = spark.read.schema(schema)
    for key, value in CSV_OPTIONS.items():
        reader = reader.option(key, value)
    return reader


def read_raw(spark: SparkSession, spec: InputSpec | KafkaInput) -> DataFrame:
    """The input with the four contract columns, in their source types."""
    from pyspark.sql import functions as F

    if spec.format == "kafka":
        from rebalancer.pipeline.kafka.telemetry import read_kafka_raw

        assert not isinstance(spec, InputSpec)  # format "kafka" is a KafkaInput
        return read_kafka_raw(spark, spec)
    assert isinstance(spec, InputSpec)
    if spec.format == "parquet":
        return _to_contract(spark.read.parquet(spark_path(spec.path)), spec)
    if spec.format == "jsonl":
        sources = [spec.columns[name] for name in REQUIRED_COLUMNS]
        reader = spark.read.option("mode", "PERMISSIVE").schema(text_schema(sources))
        return reader.json([spark_path(f) for f in spec.files]).toDF(*REQUIRED_COLUMNS)
    # CSV: Spark applies a schema by position, so each header layout is read on its own with
    # positional names, and the contract columns are picked by where its header put them.
    frames = []
    for header, files in spec.csv_layouts():
        positional = text_schema([f"_c{i}" for i in range(len(header))])
        frame = _csv_reader(spark, positional).csv([spark_path(f) for f in files])
        frames.append(
            frame.select(
                *[F.col(f"_c{spec.header_index(header, name)}").alias(name) for name in REQUIRED_COLUMNS]
            )
        )
    if not frames:
        return spark.createDataFrame([], text_schema())
    return reduce(lambda left, right: left.unionAll(right), frames)


def read_stream(spark: SparkSession, spec: InputSpec | KafkaInput, files_per_batch: int) -> DataFrame:
    """The streaming file source over the input directory, with the four contract columns.

    Files arriving later must share the first files' columns: CSV headers are checked by Spark
    against the schema (`enforceSchema=false`), so a file with another layout fails the query
    instead of being read by position.
    """
    from pyspark.sql import functions as F

    if spec.format == "kafka":
        from rebalancer.pipeline.kafka.telemetry import read_kafka_stream

        assert not isinstance(spec, InputSpec)  # format "kafka" is a KafkaInput
        return read_kafka_stream(spark, spec)
    assert isinstance(spec, InputSpec)
    path = spark_path(spec.path)
    if spec.format == "parquet":
        schema = _to_contract(spark.read.parquet(path), spec).schema
        parquet = spark.readStream.schema(_source_schema(spec, schema)).option(
            "maxFilesPerTrigger", files_per_batch
        )
        return _to_contract(parquet.parquet(path), spec)
    reader = spark.readStream.option("maxFilesPerTrigger", files_per_batch)
    if spec.format == "jsonl":
        sources = [spec.columns[name] for name in REQUIRED_COLUMNS]
        return reader.schema(text_schema(sources)).json(path).toDF(*REQUIRED_COLUMNS)
    layouts = spec.csv_layouts()
    if len(layouts) != 1:
        raise ValueError(
            f"streaming CSV needs one header for every file, found {len(layouts)} different headers"
        )
    header = layouts[0][0]
    if _duplicate(list(header), casefold=True) is not None:
        raise ValueError(f"streaming CSV needs unique header names, got {', '.join(header)}")
    for key, value in {**CSV_OPTIONS, "enforceSchema": "false"}.items():
        reader = reader.option(key, value)
    frame = reader.schema(text_schema(header)).csv(path)
    return frame.select(
        *[F.col(_quoted(header[spec.header_index(header, name)])).alias(name) for name in REQUIRED_COLUMNS]
    )


def _source_schema(spec: InputSpec, contract: StructType) -> StructType:
    """The contract schema under the source's own column names."""
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(spec.columns[f.name], f.dataType, True) for f in contract.fields])


def _parse_ts(frame: DataFrame) -> tuple[Column, Column]:
    """(the instant, null unless parseable and in range; whether it parsed but is out of range).

    Epoch milliseconds are range-checked as numbers before they become timestamps, so a huge one
    never overflows. Text without an offset is UTC (the pipeline pins the session zone to UTC).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType, NumericType, StringType, TimestampNTZType, TimestampType

    kind = frame.schema["ts"].dataType
    ts = F.col("ts")

    def from_epoch_ms(number: Column, whole: Column) -> tuple[Column, Column]:
        in_range = number.between(F.lit(TS_MIN_MS), F.lit(TS_MAX_MS))
        out_of_range = number.isNotNull() & ~F.isnan(number) & ~in_range
        return F.when(in_range, F.timestamp_millis(whole)), out_of_range

    def in_range(parsed: Column) -> tuple[Column, Column]:
        micros = F.unix_micros(parsed)
        inside = micros.between(F.lit(TS_MIN_MICROS), F.lit(TS_MAX_MICROS))
        return F.when(inside, parsed), parsed.isNotNull() & ~inside

    if isinstance(kind, TimestampType | TimestampNTZType | DateType):
        return in_range(ts.cast("timestamp"))
    if isinstance(kind, NumericType):
        return from_epoch_ms(ts.try_cast("double"), ts.try_cast("bigint"))
    text = F.trim(ts.cast("string") if not isinstance(kind, StringType) else ts)
    is_epoch = text.rlike(EPOCH_MS_PATTERN)
    epoch_ts, epoch_out = from_epoch_ms(text.try_cast("double"), text.try_cast("bigint"))
    iso_ts, iso_out = in_range(F.try_to_timestamp(text))
    return F.when(is_epoch, epoch_ts).otherwise(iso_ts), F.when(is_epoch, epoch_out).otherwise(iso_out)


def classify(frame: DataFrame) -> DataFrame:
    """Adds the parsed columns (`ts_parsed`, `value_num`) and `reason` (null for a good row)."""
    from pyspark.sql import functions as F

    parsed_ts, ts_out_of_range = _parse_ts(frame)
    value_text = F.col("value").cast("string")
    value_num = F.col("value").try_cast("double")
    reason = (
        F.when(F.col("ts").isNull(), F.lit("ts_missing"))
        .when(ts_out_of_range, F.lit("ts_out_of_range"))
        .when(F.col("ts_parsed").isNull(), F.lit("ts_unparseable"))
        .when(F.col("type").isNull() | (F.trim(F.col("type").cast("string")) == ""), F.lit("type_missing"))
        .when(F.col("entity").isNull(), F.lit("entity_missing"))
        .when(F.col("value").isNull() | (F.trim(value_text) == ""), F.lit("value_missing"))
        .when(F.col("value_num").isNull(), F.lit("value_not_numeric"))
        .when(F.isnan("value_num") | (F.abs(F.col("value_num")) == float("inf")), F.lit("value_not_finite"))
    )
    if NOT_JSON_COLUMN in frame.columns:
        reason = F.when(F.col(NOT_JSON_COLUMN), F.lit("value_not_json")).otherwise(reason)
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
