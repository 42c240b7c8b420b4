"""Database sinks for the pipeline's outputs: PostgreSQL by COPY and upsert (see docs/pipeline.md)."""

from rebalancer.pipeline.sinks._pg_types import DEFAULT_SCHEMA, Output, SinkError, TableWrite
from rebalancer.pipeline.sinks.outputs import (
    METRICS_KEY,
    QUARANTINE_KEY,
    open_sink,
    prepare_sink,
    write_outputs,
    write_stream_outputs,
)
from rebalancer.pipeline.sinks.postgres import PostgresSink

__all__ = [
    "DEFAULT_SCHEMA",
    "METRICS_KEY",
    "QUARANTINE_KEY",
    "Output",
    "PostgresSink",
    "SinkError",
    "TableWrite",
    "open_sink",
    "prepare_sink",
    "write_outputs",
    "write_stream_outputs",
]
