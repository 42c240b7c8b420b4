"""Reading telemetry and sorting rows into accepted and quarantined, with one reason per bad row.

Columns are found by name (a CSV header, JSON keys, the Parquet schema), never by position, and
`columns` maps the contract's names onto a source's own.

The code lives in private modules (`_ingest_input`, `_ingest_inspect`, `_ingest_output`,
`_ingest_classify`); this module keeps the names importable where they always were.
"""

from rebalancer.pipeline._ingest_classify import accepted_rows, cacheable_rows, classify, quarantine_rows
from rebalancer.pipeline._ingest_input import (
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
from rebalancer.pipeline._ingest_inspect import detect_format, inspect_input
from rebalancer.pipeline._ingest_output import check_output
from rebalancer.pipeline.contract import (  # re-exported: callers import them from here
    FORMATS,
    NOT_JSON_COLUMN,
    REASONS,
    REQUIRED_COLUMNS,
    column_mapping,
    text_schema,
)

__all__ = [
    "CSV_OPTIONS",
    "EPOCH_MS_PATTERN",
    "EXTENSIONS",
    "FORMATS",
    "NOT_JSON_COLUMN",
    "REASONS",
    "REQUIRED_COLUMNS",
    "TS_MAX_MICROS",
    "TS_MAX_MS",
    "TS_MIN_MICROS",
    "TS_MIN_MS",
    "InputSpec",
    "accepted_rows",
    "cacheable_rows",
    "check_output",
    "classify",
    "column_mapping",
    "detect_format",
    "input_name",
    "inspect_input",
    "parse_columns",
    "quarantine_rows",
    "read_raw",
    "read_stream",
    "spark_path",
    "text_schema",
]
