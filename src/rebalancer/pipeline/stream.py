"""`rebalancer pipeline run --stream`: Structured Streaming with the seed's periodic rebalance.

Every micro-batch goes through the batch path (classify, count, dispatch) inside `foreachBatch`.
Outputs are keyed by batch id (`OUT/metrics/batch_id=N/`, `OUT/quarantine/batch_id=N/`) and
overwritten on a retry, so at-least-once `foreachBatch` still gives exactly one copy per batch.
The rebalancer's state (slot map, counters, the last batch applied) lives in
`CHECKPOINT/rebalancer/state.json` and is written only after a batch's outputs, so a batch
replayed after a crash rewrites its outputs but is counted once.

On Spark Connect, foreachBatch runs the same `BatchProcessor` in a Python worker of the server's
driver; this process learns what it applied from the state file (see `_ConnectProgress`).

The code lives in private modules (`_stream_state`, `_stream_batch`, `_stream_query`,
`_stream_run`); this module keeps the names importable where they always were.
"""

from rebalancer.pipeline._stream_batch import BatchProcessor
from rebalancer.pipeline._stream_query import (
    MISSING_ON_SERVER,
    NOT_ON_CONNECT_SERVER,
    _QueryWaiter,
    stopped_after_batches,
)
from rebalancer.pipeline._stream_run import drive_stream, run_stream, stream_reader, stream_summary
from rebalancer.pipeline._stream_state import (
    PROGRESS_KEPT,
    STATE_VERSION,
    BatchProgress,
    InjectedCrash,
    StopAfterBatches,
    StreamConfig,
    StreamData,
    StreamState,
    _empty_state,
    add_routing,
)

__all__ = [
    "MISSING_ON_SERVER",
    "NOT_ON_CONNECT_SERVER",
    "PROGRESS_KEPT",
    "STATE_VERSION",
    "BatchProcessor",
    "BatchProgress",
    "InjectedCrash",
    "StopAfterBatches",
    "StreamConfig",
    "StreamData",
    "StreamState",
    "_QueryWaiter",
    "_empty_state",
    "add_routing",
    "drive_stream",
    "run_stream",
    "stopped_after_batches",
    "stream_reader",
    "stream_summary",
]
