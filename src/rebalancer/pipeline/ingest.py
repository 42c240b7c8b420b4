"""Reading telemetry and sorting rows into accepted and quarantined, with one reason per bad row.

Columns are found by name (a CSV header, JSON keys, the Parquet schema), never by position, and
`columns` maps the contract's names onto a source's own.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rebalancer._secrets import masked_url
from rebalancer.pipeline.contract import (  # re-exported: callers import them from here
    FORMATS,
    NOT_JSON_COLUMN,
    REQUIRED_COLUMNS,
    column_mapping,
    text_schema,
)
from rebalancer.pipeline.contract import (
    REASONS as REASONS,
)
from rebalancer.pipeline.paths import HEAD_BYTES, HadoopFS, OutputPath, is_uri, local_path, split_uri

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, DataFrameReader, SparkSession
    from pyspark.sql.types import StructType

    from rebalancer.pipeline.contract import Input

EXTENSIONS = {".parquet": "parquet", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl"}
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
    # The input as the URI it was given as (file://, hdfs://, s3a://, ...), handed to Spark unchanged;
    # `path` and `files` are then paths inside that URI's filesystem. None for a plain local path.
    uri: str | None = None

    def reads_from(self, file: Path | None = None) -> str:
        """What Spark's readers get for the input, or for one of its files (globs escaped)."""
        if self.uri is None:
            return spark_path(self.path if file is None else file)
        if file is None:
            return spark_path(self.uri)
        parts = split_uri(self.uri)
        assert parts is not None  # `uri` is only ever set to a URI
        return spark_path(parts[1] + file.as_posix())

    def is_directory(self) -> bool:
        """A directory of files, not one file (known without looking again, wherever it is)."""
        return self.files != (self.path,)

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

    def describe(self) -> str:
        return input_name(self)

    def read_batch(self, spark: SparkSession) -> DataFrame:
        return read_raw(spark, self)

    def read_stream(self, spark: SparkSession, files_per_batch: int) -> DataFrame:
        return read_stream(spark, self, files_per_batch)

    def group_run(self) -> None:
        return None


def _is_data_file(path: Path) -> bool:
    """Not a hidden file, nor a writer's marker (`_SUCCESS`) or checksum (`.x.crc`)."""
    return not path.name.startswith((".", "_")) and not path.name.endswith(".crc")


def _data_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and _is_data_file(p))


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


def _open_head(path: Path, head: bytes | None) -> io.BufferedIOBase:
    """The file, or the first bytes of a remote one already read through Hadoop."""
    return io.BytesIO(head) if head is not None else path.open("rb")


def _first_line_columns(path: Path | str, fmt: str, head: bytes | None = None) -> list[str]:
    """The header of a CSV file (as written) or the keys of a JSON Lines file's first record."""
    with _open_head(Path(path), head) as handle:
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


def _jsonl_keys(path: Path, wanted: set[str], head: bytes | None = None) -> set[str]:
    """Keys over the whole file (of a remote one, its first bytes), until every wanted one is seen:
    JSON Lines may omit a null key on a row."""
    present: set[str] = set()
    with _open_head(path, head) as handle:
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


def _missing(missing: list[str], columns: Mapping[str, str], file: Path | str) -> ValueError:
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
    path: str | Path,
    fmt: str | None = None,
    columns: Mapping[str, str] | None = None,
    spark: SparkSession | None = None,
) -> InputSpec:
    """Fail fast, before any output: missing path, unreadable file, missing or duplicate column.

    A local path or `file:` URI is checked before Spark starts; any other URI (hdfs://, s3a://, ...)
    through Spark's Hadoop FileSystem API, so it needs `spark`.
    """
    if isinstance(path, str) and is_uri(path):
        local = local_path(path)
        if local is None:
            return _inspect_remote(path, fmt, columns, spark)
        return replace(_inspect_local(local, fmt, columns, shown=path), uri=path)
    return _inspect_local(Path(path), fmt, columns)


def _inspect_local(
    path: Path, fmt: str | None, columns: Mapping[str, str] | None, shown: str | None = None
) -> InputSpec:
    mapping = column_mapping(columns)
    if not path.exists():
        raise FileNotFoundError(f"input path does not exist: {shown or path}")
    files = _data_files(path)
    if not files:
        raise ValueError(f"input path has no data files: {shown or path}")
    for file in files:
        if not os.access(file, os.R_OK):
            raise ValueError(f"unreadable file: {file}")
    fmt = detect_format(files, fmt)
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
            _check_parquet_columns(names, mapping, file)
            continue
        header = _check_text_columns(file, fmt, mapping, file)
        if header is not None:
            headers[file] = header
    return InputSpec(path=path, format=fmt, files=tuple(files), columns=mapping, headers=headers)


def _check_parquet_columns(names: list[str], mapping: Mapping[str, str], shown: Path | str) -> None:
    # Spark matches Parquet columns case-insensitively and refuses a file with duplicates.
    duplicate = _duplicate(names, casefold=True)
    if duplicate is not None:
        raise ValueError(f"duplicate column {duplicate!r} in {shown} (column names are compared ignoring case)")
    missing = [name for name in REQUIRED_COLUMNS if mapping[name] not in set(names)]
    if missing:
        raise _missing(missing, mapping, shown)


def _check_text_columns(
    file: Path, fmt: str, mapping: Mapping[str, str], shown: Path | str, head: bytes | None = None
) -> tuple[str, ...] | None:
    """Checks a CSV or JSON Lines file's columns; returns a CSV file's header, as written."""
    wanted = [mapping[name] for name in REQUIRED_COLUMNS]
    header = None
    if fmt == "csv":
        header = tuple(_first_line_columns(shown, fmt, head))
        stripped = [name.strip() for name in header]
        duplicate = _duplicate([name for name in stripped if name in wanted], casefold=False)
        if duplicate is not None:
            raise ValueError(f"duplicate column {duplicate!r} in {shown}")
        present = set(stripped)
    else:
        present = set(_first_line_columns(shown, fmt, head))
        if not set(wanted) <= present and present:
            present |= _jsonl_keys(file, set(wanted), head)
    missing = [name for name in REQUIRED_COLUMNS if mapping[name] not in present]
    if missing:
        raise _missing(missing, mapping, shown)
    return header


def _inspect_remote(
    uri: str, fmt: str | None, columns: Mapping[str, str] | None, spark: SparkSession | None
) -> InputSpec:
    """The same checks through Hadoop: a text file's first 64 KiB, a Parquet input's schema as Spark reads it."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    from rebalancer.pipeline.session import spark_error_reason

    shown = masked_url(uri)  # what errors quote: a password in the URI as *** (ftp://USER:PASSWORD@HOST)
    if spark is None:
        raise ValueError(f"input {shown} is on a remote filesystem: it is checked once Spark has started")
    mapping = column_mapping(columns)
    fs = HadoopFS(spark)
    parts = split_uri(uri)
    assert parts is not None
    _scheme, prefix, root = parts
    status = fs.status(uri)
    if status is None:
        raise FileNotFoundError(f"input path does not exist: {shown}")
    if status.isDirectory():
        listed = [(Path(p), size) for p, size in fs.list_files(uri) if _is_data_file(Path(p))]
    else:
        listed = [(Path(root), int(status.getLen()))]
    if not listed:
        raise ValueError(f"input path has no data files: {shown}")
    files = [file for file, _size in listed]
    fmt = detect_format(files, fmt)
    spec = InputSpec(path=Path(root or "/"), format=fmt, files=tuple(files), columns=mapping, uri=uri)
    if fmt == "parquet":
        try:
            names = spark.read.parquet(spec.reads_from()).columns
        except (PySparkException, Py4JJavaError) as exc:  # the cause, not "An error occurred while calling o64.parquet."
            raise ValueError(f"unreadable input {shown}: {spark_error_reason(exc)}") from None
        _check_parquet_columns(names, mapping, shown)
        return spec
    headers: dict[Path, tuple[str, ...]] = {}
    for file, size in listed:
        if size == 0:
            continue
        where = prefix + file.as_posix()
        header = _check_text_columns(file, fmt, mapping, masked_url(where), fs.read_bytes(where, HEAD_BYTES))
        if header is not None:
            headers[file] = header
    return replace(spec, headers=headers)


def check_output(
    out: str | Path | OutputPath,
    spec: InputSpec | Input,
    checkpoint: str | Path | OutputPath | None = None,
    spark: SparkSession | None = None,
) -> None:
    """Refuse an output that would clobber the input or cannot be written.

    A local output (a path or a `file:` URI) is checked before Spark starts; a remote one (hdfs://,
    s3a://, ...) through Spark's Hadoop FileSystem, so it needs `spark`, and nothing local is touched.
    """
    out_text = out if isinstance(out, Path) else str(out)
    where = None if checkpoint is None else checkpoint if isinstance(checkpoint, Path) else str(checkpoint)
    local_out = local_path(out_text)
    local_checkpoint = None if where is None else local_path(where)
    if local_out is None or (where is not None and local_checkpoint is None):
        _check_remote_output(out_text, spec, where, spark)
    if local_out is not None:
        _check_local_output(local_out, spec, local_checkpoint)


def _local_source(spec: Any) -> Path | None:  # an InputSpec, or a topic (no files)
    """The input's resolved local path; None for a Kafka topic or a remote URI (nothing local to overlap)."""
    uri = getattr(spec, "uri", None)  # a KafkaInput has no files and no uri
    if not spec.files or (uri is not None and local_path(uri) is None):
        return None
    return spec.path.resolve()


def _check_local_output(out: Path, spec: Any, checkpoint: Path | None) -> None:
    target = out.resolve()
    source = _local_source(spec)
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
        where = checkpoint.resolve()
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


def _under(inner: str, outer: str) -> bool:
    return inner.startswith(outer.rstrip("/") + "/")


def _check_remote_output(out: str | Path, spec: Any, checkpoint: str | Path | None, spark: Any) -> None:
    """The same refusals, with URIs qualified by their Hadoop filesystem (scheme and authority filled in)."""
    if spark is None:
        raise ValueError(f"output {out} is on a remote filesystem: it is checked once Spark has started")
    fs = HadoopFS(spark)
    uri = getattr(spec, "uri", None)
    source = fs.qualified(uri or str(spec.path.resolve())) if spec.files else None
    shown = uri or spec.path
    if local_path(out) is None:
        status = fs.status(str(out))
        target = fs.qualified(str(out))
        if status is not None and not status.isDirectory():
            raise ValueError(f"output must be a directory, got a file: {out}")
        if source is not None and target == source:
            raise ValueError(f"output {out} is the input directory; a re-run would read its own results")
        if source is not None and _under(target, source):
            raise ValueError(f"output {out} is inside the input {shown}; a re-run would read its own results")
        if source is not None and _under(source, target):
            raise ValueError(f"input {shown} is inside the output {out}; the run would overwrite what it reads")
    if checkpoint is not None and source is not None:
        where = fs.qualified(str(checkpoint))
        if where == source or _under(where, source) or _under(source, where):
            raise ValueError(f"checkpoint {checkpoint} overlaps the input {shown}")


def input_name(spec: Any) -> str:
    """The input as the summaries and errors show it: the URI as given (a password in it as ***, as
    Hadoop's ftp:// takes one), a local path, or a Kafka URL (which has no query, nor user info)."""
    uri = getattr(spec, "uri", None)
    return masked_url(uri) if uri else str(spec.path)


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


def read_raw(spark: SparkSession, spec: InputSpec | Input) -> DataFrame:
    """The input with the four contract columns, in their source types."""
    from pyspark.sql import functions as F

    if not isinstance(spec, InputSpec):  # a topic reads itself (the `Input` protocol)
        return spec.read_batch(spark)
    if spec.format == "parquet":
        return _to_contract(spark.read.parquet(spec.reads_from()), spec)
    if spec.format == "jsonl":
        sources = [spec.columns[name] for name in REQUIRED_COLUMNS]
        reader = spark.read.option("mode", "PERMISSIVE").schema(text_schema(sources))
        return reader.json([spec.reads_from(f) for f in spec.files]).toDF(*REQUIRED_COLUMNS)
    # CSV: Spark applies a schema by position, so each header layout is read on its own with
    # positional names, and the contract columns are picked by where its header put them.
    frames = []
    for header, files in spec.csv_layouts():
        positional = text_schema([f"_c{i}" for i in range(len(header))])
        frame = _csv_reader(spark, positional).csv([spec.reads_from(f) for f in files])
        frames.append(
            frame.select(
                *[F.col(f"_c{spec.header_index(header, name)}").alias(name) for name in REQUIRED_COLUMNS]
            )
        )
    if not frames:
        return spark.createDataFrame([], text_schema())
    return reduce(lambda left, right: left.unionAll(right), frames)


def read_stream(spark: SparkSession, spec: InputSpec | Input, files_per_batch: int) -> DataFrame:
    """The streaming file source over the input directory, with the four contract columns.

    Files arriving later must share the first files' columns: CSV headers are checked by Spark
    against the schema (`enforceSchema=false`), so a file with another layout fails the query
    instead of being read by position.
    """
    from pyspark.sql import functions as F

    if not isinstance(spec, InputSpec):  # a topic reads itself (the `Input` protocol)
        return spec.read_stream(spark, files_per_batch)
    path = spec.reads_from()
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


# Intermediate columns of `classify`, each computed once per row and dropped at the end.
_TS_TEXT, _TS_EPOCH, _TS_NUMBER, _TS_ISO, _TS_OUT = (
    "__ts_text", "__ts_epoch", "__ts_number", "__ts_iso", "__ts_out_of_range"
)


def _parse_ts(frame: DataFrame) -> DataFrame:
    """`frame` plus `ts_parsed` (null unless parseable and in range) and `_TS_OUT` (parsed, but out of range).

    Epoch milliseconds are range-checked as numbers before they become timestamps, so a huge one
    never overflows. Text without an offset is UTC (the pipeline pins the session zone to UTC).
    The trimmed text and each parse are columns of their own: as nested expressions Spark would
    evaluate them once per reference, and this pass is most of the pipeline's first read.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType, NumericType, StringType, TimestampNTZType, TimestampType

    kind = frame.schema["ts"].dataType
    ts = F.col("ts")

    def epoch_in_range(number: Column) -> Column:
        return number.between(F.lit(TS_MIN_MS), F.lit(TS_MAX_MS))

    def epoch_out_of_range(number: Column) -> Column:
        return number.isNotNull() & ~F.isnan(number) & ~epoch_in_range(number)

    def instant_in_range(parsed: Column) -> Column:
        return F.unix_micros(parsed).between(F.lit(TS_MIN_MICROS), F.lit(TS_MAX_MICROS))

    if isinstance(kind, TimestampType | TimestampNTZType | DateType):
        frame = frame.withColumn(_TS_ISO, ts.cast("timestamp"))
        iso = F.col(_TS_ISO)
        return frame.withColumn("ts_parsed", F.when(instant_in_range(iso), iso)).withColumn(
            _TS_OUT, iso.isNotNull() & ~instant_in_range(iso)
        )
    if isinstance(kind, NumericType):
        frame = frame.withColumn(_TS_NUMBER, ts.try_cast("double"))
        number = F.col(_TS_NUMBER)
        return frame.withColumn(
            "ts_parsed", F.when(epoch_in_range(number), F.timestamp_millis(ts.try_cast("bigint")))
        ).withColumn(_TS_OUT, epoch_out_of_range(number))
    text = F.trim(ts.cast("string") if not isinstance(kind, StringType) else ts)
    frame = frame.withColumn(_TS_TEXT, text).withColumn(_TS_EPOCH, F.col(_TS_TEXT).rlike(EPOCH_MS_PATTERN))
    epoch = F.col(_TS_EPOCH)
    frame = frame.withColumn(_TS_NUMBER, F.when(epoch, F.col(_TS_TEXT).try_cast("double"))).withColumn(
        _TS_ISO, F.when(~epoch, F.try_to_timestamp(F.col(_TS_TEXT)))
    )
    number, iso = F.col(_TS_NUMBER), F.col(_TS_ISO)
    parsed = F.when(epoch, F.when(epoch_in_range(number), F.timestamp_millis(F.col(_TS_TEXT).try_cast("bigint"))))
    out_of_range = F.when(epoch, epoch_out_of_range(number)).otherwise(iso.isNotNull() & ~instant_in_range(iso))
    return frame.withColumn("ts_parsed", parsed.otherwise(F.when(instant_in_range(iso), iso))).withColumn(
        _TS_OUT, out_of_range
    )


def classify(frame: DataFrame) -> DataFrame:
    """Adds the parsed columns (`ts_parsed`, `value_num`) and `reason` (null for a good row)."""
    from pyspark.sql import functions as F

    frame = _parse_ts(frame).withColumn("value_num", F.col("value").try_cast("double"))
    value_text = F.col("value").cast("string")
    reason = (
        F.when(F.col("ts").isNull(), F.lit("ts_missing"))
        .when(F.col(_TS_OUT), F.lit("ts_out_of_range"))
        .when(F.col("ts_parsed").isNull(), F.lit("ts_unparseable"))
        .when(F.col("type").isNull() | (F.trim(F.col("type").cast("string")) == ""), F.lit("type_missing"))
        .when(F.col("entity").isNull(), F.lit("entity_missing"))
        .when(F.col("value").isNull() | (F.trim(value_text) == ""), F.lit("value_missing"))
        .when(F.col("value_num").isNull(), F.lit("value_not_numeric"))
        .when(F.isnan("value_num") | (F.abs(F.col("value_num")) == float("inf")), F.lit("value_not_finite"))
    )
    if NOT_JSON_COLUMN in frame.columns:
        reason = F.when(F.col(NOT_JSON_COLUMN), F.lit("value_not_json")).otherwise(reason)
    helpers = [name for name in (_TS_TEXT, _TS_EPOCH, _TS_NUMBER, _TS_ISO, _TS_OUT) if name in frame.columns]
    return frame.withColumn("reason", reason).drop(*helpers)


def cacheable_rows(classified: DataFrame) -> DataFrame:
    """`classified` as a run caches it for its later passes: a good row's raw `ts` and `value` are
    null (it goes on as `ts_parsed` and `value_num`); a quarantined row keeps its text for
    OUT/quarantine/. The raw timestamp text was the largest part of the cache and of its cost.
    """
    from pyspark.sql import functions as F

    quarantined = F.col("reason").isNotNull()
    columns = [
        F.when(quarantined, F.col(name)).alias(name) if name in ("ts", "value") else F.col(name)
        for name in classified.columns
    ]
    return classified.select(*columns)


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
