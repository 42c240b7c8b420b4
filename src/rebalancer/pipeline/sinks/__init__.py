"""Database sinks for the pipeline's outputs: PostgreSQL by COPY and upsert (see docs/pipeline.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rebalancer._lazy import lazy_exports

if TYPE_CHECKING:
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

_HOMES = {
    "DEFAULT_SCHEMA": "rebalancer.pipeline.sinks._pg_types",
    "METRICS_KEY": "rebalancer.pipeline.sinks.outputs",
    "Output": "rebalancer.pipeline.sinks._pg_types",
    "PostgresSink": "rebalancer.pipeline.sinks.postgres",
    "QUARANTINE_KEY": "rebalancer.pipeline.sinks.outputs",
    "SinkError": "rebalancer.pipeline.sinks._pg_types",
    "TableWrite": "rebalancer.pipeline.sinks._pg_types",
    "open_sink": "rebalancer.pipeline.sinks.outputs",
    "prepare_sink": "rebalancer.pipeline.sinks.outputs",
    "write_outputs": "rebalancer.pipeline.sinks.outputs",
    "write_stream_outputs": "rebalancer.pipeline.sinks.outputs",
}
__all__ = ["DEFAULT_SCHEMA", "METRICS_KEY", "QUARANTINE_KEY", "Output", "PostgresSink", "SinkError", "TableWrite", "open_sink", "prepare_sink", "write_outputs", "write_stream_outputs"]
__getattr__, __dir__ = lazy_exports("rebalancer.pipeline.sinks", _HOMES)
