"""The streaming driver: each micro-batch through the batch pass, with the seed's periodic rebalance.

The names below load on first use (`rebalancer._lazy`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rebalancer._lazy import lazy_exports

if TYPE_CHECKING:
    from rebalancer.pipeline.stream.driver import drive_stream, run_stream, stream_reader, stream_summary
    from rebalancer.pipeline.stream.processor import BatchProcessor
    from rebalancer.pipeline.stream.query import (
        MISSING_ON_SERVER,
        NOT_ON_CONNECT_SERVER,
        stopped_after_batches,
    )
    from rebalancer.pipeline.stream.state import (
        PROGRESS_KEPT,
        STATE_VERSION,
        BatchProgress,
        InjectedCrash,
        StopAfterBatches,
        StreamConfig,
        StreamData,
        StreamState,
        add_routing,
    )

_HOMES = {
    "BatchProcessor": "rebalancer.pipeline.stream.processor",
    "BatchProgress": "rebalancer.pipeline.stream.state",
    "InjectedCrash": "rebalancer.pipeline.stream.state",
    "MISSING_ON_SERVER": "rebalancer.pipeline.stream.query",
    "NOT_ON_CONNECT_SERVER": "rebalancer.pipeline.stream.query",
    "PROGRESS_KEPT": "rebalancer.pipeline.stream.state",
    "STATE_VERSION": "rebalancer.pipeline.stream.state",
    "StopAfterBatches": "rebalancer.pipeline.stream.state",
    "StreamConfig": "rebalancer.pipeline.stream.state",
    "StreamData": "rebalancer.pipeline.stream.state",
    "StreamState": "rebalancer.pipeline.stream.state",
    "add_routing": "rebalancer.pipeline.stream.state",
    "drive_stream": "rebalancer.pipeline.stream.driver",
    "run_stream": "rebalancer.pipeline.stream.driver",
    "stopped_after_batches": "rebalancer.pipeline.stream.query",
    "stream_reader": "rebalancer.pipeline.stream.driver",
    "stream_summary": "rebalancer.pipeline.stream.driver",
}
__all__ = ["MISSING_ON_SERVER", "NOT_ON_CONNECT_SERVER", "PROGRESS_KEPT", "STATE_VERSION", "BatchProcessor", "BatchProgress", "InjectedCrash", "StopAfterBatches", "StreamConfig", "StreamData", "StreamState", "add_routing", "drive_stream", "run_stream", "stopped_after_batches", "stream_reader", "stream_summary"]
__getattr__, __dir__ = lazy_exports("rebalancer.pipeline.stream", _HOMES)
