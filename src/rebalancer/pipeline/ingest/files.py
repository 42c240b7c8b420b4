"""What an input is (files, format, column names) and how Spark reads it into the contract's columns."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rebalancer._secrets import masked_repr, masked_url
from rebalancer.pipeline.ingest.contract import (
    REASONS as REASONS,
)
from rebalancer.pipeline.ingest.contract import REQUIRED_COLUMNS, column_mapping, text_schema
from rebalancer.pipeline.paths import split_uri

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, DataFrameReader, SparkSession
    from pyspark.sql.types import StructType

    from rebalancer.pipeline.ingest.contract import Input


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
    """`--columns ts=event_time,type=metric,...` as a full mapping. Only the text's own form is
    checked here; what a mapping may hold (`ts=` names no source) is `column_mapping`'s to refuse,
    in the words RunRequest(columns=...) gets."""
    given: dict[str, str] = {}
    for part in text.split(","):
        name, sep, source = (piece.strip() for piece in part.partition("="))
        if not sep or not name:
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

    def __repr__(self) -> str:
        return masked_repr(self)  # a password in `uri` (ftp://USER:PASSWORD@HOST/...) as ***

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


def _duplicate(names: list[str], casefold: bool) -> str | None:
    seen: set[str] = set()
    for name in names:
        key = name.lower() if casefold else name
        if key in seen:
            return next(n for n in names if (n.lower() if casefold else n) == key)
        seen.add(key)
    return None


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
