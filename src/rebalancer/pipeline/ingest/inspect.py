"""Checking an input on the driver, before Spark reads it: formats, columns, duplicate names."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from rebalancer._secrets import masked_url
from rebalancer.pipeline.ingest.contract import FORMATS, REQUIRED_COLUMNS, column_mapping
from rebalancer.pipeline.ingest.contract import (
    REASONS as REASONS,
)
from rebalancer.pipeline.ingest.files import _BOM, EXTENSIONS, InputSpec, _duplicate
from rebalancer.pipeline.paths import HEAD_BYTES, HadoopFS, is_uri, local_path, split_uri

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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
        raise ValueError(
            f"duplicate column {duplicate!r} in {shown} (column names are compared ignoring case)"
        )
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

    from rebalancer.pipeline.session.build import spark_error_reason

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
        except (
            PySparkException,
            Py4JJavaError,
        ) as exc:  # the cause, not "An error occurred while calling o64.parquet."
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
