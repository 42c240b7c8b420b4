"""Inputs: the `Input` contract, file inputs, inspection, and the classification of rows.

The names below load on first use (`rebalancer._lazy`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rebalancer._lazy import lazy_exports

if TYPE_CHECKING:
    from rebalancer.pipeline.ingest.classifier import accepted_rows, cacheable_rows, classify, quarantine_rows
    from rebalancer.pipeline.ingest.contract import (
        FORMATS,
        NOT_JSON_COLUMN,
        REASONS,
        REQUIRED_COLUMNS,
        column_mapping,
        text_schema,
    )
    from rebalancer.pipeline.ingest.files import (
        CSV_OPTIONS,
        EPOCH_MS_PATTERN,
        EXTENSIONS,
        TS_MAX_MICROS,
        TS_MAX_MS,
        TS_MIN_MICROS,
        TS_MIN_MS,
        InputSpec,
        input_name,
        parse_columns,
        read_raw,
        read_stream,
        spark_path,
    )
    from rebalancer.pipeline.ingest.inspect import detect_format, inspect_input

_HOMES = {
    "CSV_OPTIONS": "rebalancer.pipeline.ingest.files",
    "EPOCH_MS_PATTERN": "rebalancer.pipeline.ingest.files",
    "EXTENSIONS": "rebalancer.pipeline.ingest.files",
    "FORMATS": "rebalancer.pipeline.ingest.contract",
    "InputSpec": "rebalancer.pipeline.ingest.files",
    "NOT_JSON_COLUMN": "rebalancer.pipeline.ingest.contract",
    "REASONS": "rebalancer.pipeline.ingest.contract",
    "REQUIRED_COLUMNS": "rebalancer.pipeline.ingest.contract",
    "TS_MAX_MICROS": "rebalancer.pipeline.ingest.files",
    "TS_MAX_MS": "rebalancer.pipeline.ingest.files",
    "TS_MIN_MICROS": "rebalancer.pipeline.ingest.files",
    "TS_MIN_MS": "rebalancer.pipeline.ingest.files",
    "accepted_rows": "rebalancer.pipeline.ingest.classifier",
    "cacheable_rows": "rebalancer.pipeline.ingest.classifier",
    "classify": "rebalancer.pipeline.ingest.classifier",
    "column_mapping": "rebalancer.pipeline.ingest.contract",
    "detect_format": "rebalancer.pipeline.ingest.inspect",
    "input_name": "rebalancer.pipeline.ingest.files",
    "inspect_input": "rebalancer.pipeline.ingest.inspect",
    "parse_columns": "rebalancer.pipeline.ingest.files",
    "quarantine_rows": "rebalancer.pipeline.ingest.classifier",
    "read_raw": "rebalancer.pipeline.ingest.files",
    "read_stream": "rebalancer.pipeline.ingest.files",
    "spark_path": "rebalancer.pipeline.ingest.files",
    "text_schema": "rebalancer.pipeline.ingest.contract",
}
__all__ = ["CSV_OPTIONS", "EPOCH_MS_PATTERN", "EXTENSIONS", "FORMATS", "NOT_JSON_COLUMN", "REASONS", "REQUIRED_COLUMNS", "TS_MAX_MICROS", "TS_MAX_MS", "TS_MIN_MICROS", "TS_MIN_MS", "InputSpec", "accepted_rows", "cacheable_rows", "classify", "column_mapping", "detect_format", "input_name", "inspect_input", "parse_columns", "quarantine_rows", "read_raw", "read_stream", "spark_path", "text_schema"]
__getattr__, __dir__ = lazy_exports("rebalancer.pipeline.ingest", _HOMES)
