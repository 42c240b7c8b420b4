"""The foreachBatch processor: one micro-batch through the batch path, applied to the state once."""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from rebalancer.balance.metrics import max_over_median
from rebalancer.pipeline.core import InputCounts, PassTarget, run_pass
from rebalancer.pipeline.ingest.contract import SKEW_DIGITS
from rebalancer.pipeline.paths import OutputPath
from rebalancer.pipeline.plan.slots import (
    WHOLE,
    SlotPlan,
    hash_plan,
    items_from_json,
    items_to_json,
    make_plan,
    plan_items,
)
from rebalancer.pipeline.routing.handler_map import HandlerTotals, Routing
from rebalancer.pipeline.session.build import pipeline_conf
from rebalancer.pipeline.stream.state import (
    BatchProgress,
    InjectedCrash,
    StopAfterBatches,
    StreamConfig,
    StreamState,
    _keep_progress,
    _plan_from_state,
    _progress,
    _shard_map,
    add_routing,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from rebalancer.pipeline.routing.handler_map import Pipeline
    from rebalancer.pipeline.sinks import PostgresSink
    from rebalancer.pipeline.sinks.outputs import SinkSection

# The logger of the module these lines came from, so logging set up for it keeps working.
log = logging.getLogger("rebalancer.pipeline.stream")


class BatchProcessor:
    """The foreachBatch function and what it needs across batches."""

    # Called with each batch's progress once it is applied (set by run_stream).
    on_batch: Callable[[BatchProgress], None] | None = None

    def __init__(
        self,
        out: OutputPath,
        config: StreamConfig,
        state: StreamState,
        sink: PostgresSink | None = None,
        checkpoint: OutputPath | None = None,
        handlers: Pipeline | None = None,
        cost: str = "rows",
    ) -> None:
        self.handlers = handlers
        self.cost = cost
        self.out = out
        self.config = config
        self.state = state
        self.sink = sink
        self.checkpoint = checkpoint
        self.processed = 0
        self.stop_requested = False
        self.lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        """Spark Connect pickles the processor for its server-side worker: the lock is made again
        there, and `on_batch` stays in the client (which prints progress from the state file)."""
        fields = dict(self.__dict__)
        del fields["lock"]
        fields.pop("on_batch", None)
        return fields

    def __setstate__(self, fields: dict[str, Any]) -> None:
        self.__dict__.update(fields)
        self.lock = threading.Lock()

    def current_plan(
        self, counts_type: dict[str, int], counts_bucket: dict[tuple[str, int], int], batch_id: int
    ) -> SlotPlan:
        """The slot map for this batch: kept, or re-planned every `rebalance_every` batches."""
        data = self.state.data
        n = self.config.partitions
        if self.config.partitioning == "hash":
            return hash_plan({}, {}, n)
        due = data.batches % self.config.rebalance_every == 0
        previous = items_from_json(data.owner)
        if previous and not due:
            return _plan_from_state(data, n)
        window_types = dict(data.window_type_counts)
        window_buckets = {(str(t), int(b)): int(c) for t, b, c in data.window_bucket_counts}
        if not window_types:
            # No history yet: plan from what this batch holds.
            window_types, window_buckets = counts_type, counts_bucket
        items, sharded, shard_of = plan_items(window_types, window_buckets, n)
        max_moves = self.config.max_moves if previous else None
        plan = make_plan(items, sharded, n, previous=previous or None, max_moves=max_moves, shard_of=shard_of)
        # Types quiet in this window keep their slots (sticky) instead of falling back to hashing.
        planned_types = {item.type_name for item in plan.owner}
        for item, slot in previous.items():
            if item.type_name not in planned_types:
                plan.owner[item] = int(slot)
                if item.shard != WHOLE:
                    plan.sharded = sorted({*plan.sharded, item.type_name})
                    plan.shard_of[item.type_name] = _shard_map(data, item.type_name)
        data.owner = items_to_json(plan.owner)
        data.sharded = list(plan.sharded)
        data.shard_of = {t: {str(b): s for b, s in m.items()} for t, m in plan.shard_of.items()}
        data.plans += 1
        data.moves += sum(1 for _, old, _ in plan.moves if old >= 0)
        data.window_type_counts = {}
        data.window_bucket_counts = []
        data.last_plan = {"batch_id": batch_id, **plan.to_json()}
        log.info(
            "batch %d: re-planned %d items over %d tasks, %d moved, planned max/median %s",
            batch_id,
            len(plan.owner),
            n,
            sum(1 for _, old, _ in plan.moves if old >= 0),
            max_over_median(plan.load_after, SKEW_DIGITS),
        )
        return plan

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        with self.lock:
            if self.stop_requested or (
                self.config.max_batches is not None and self.processed >= self.config.max_batches
            ):
                self.stop_requested = True
                raise StopAfterBatches(f"stopping before batch {batch_id}")
            if batch_id <= self.state.data.last_batch_id:
                # Replayed after a crash between our state write and Spark's commit: already applied.
                log.info("batch %d already applied, skipping", batch_id)
                return
            snapshot = copy.deepcopy(self.state.data)
            started = time.perf_counter()
            try:
                with pipeline_conf(frame.sparkSession):
                    self._process(frame, batch_id)
            except BaseException:
                self.state.data = snapshot
                raise
            progress = _progress(snapshot, self.state.data, batch_id, time.perf_counter() - started)
            _keep_progress(self.state.data, progress)
            self.state.save()
            self.processed += 1
            log.info("%s", progress.line())
            if self.on_batch is not None:
                self.on_batch(progress)

    def _process(self, frame: DataFrame, batch_id: int) -> None:
        """Write the batch's outputs (the pass every run makes), then count it in the (unsaved) state."""

        def plan_for(routing: Routing) -> SlotPlan:
            builtin = routing.builtin_counts
            return self.current_plan(builtin.type_counts, builtin.bucket_counts, batch_id)

        def sink_write(frames: dict[str, DataFrame], keys: dict[str, tuple[str, ...]]) -> None:
            from rebalancer.pipeline.sinks import write_stream_outputs

            assert self.sink is not None
            data = self.state.data
            if data.sink is None:
                data.sink = cast("SinkSection", {})  # filled by the first batch's write
            # The batch's tables and its rebalancer_batches row commit together; a replay is skipped.
            write_stream_outputs(
                self.sink, frames, self.checkpoint or self.out / "_checkpoint", batch_id, data.sink, keys=keys
            )

        stores = self.checkpoint / "rebalancer" if self.checkpoint is not None else None
        done = run_pass(
            frame,
            PassTarget(self.out, batch_id, stores=stores),
            self.config.partitioning,
            self.config.partitions,
            plan_for,
            handlers=self.handlers,
            cost=self.cost,
            sink_write=sink_write if self.sink is not None else None,
        )
        if self.config.crash_after_batch == batch_id:
            raise InjectedCrash(f"injected crash after writing batch {batch_id}")
        self._apply(
            done.counts, done.task_rows, done.task_seconds, batch_id, done.routing, done.handler_sections
        )

    def _apply(
        self,
        counts: InputCounts,
        task_rows: list[int],
        task_seconds: list[float],
        batch_id: int,
        routing: Routing | None = None,
        sections: dict[str, HandlerTotals] | None = None,
    ) -> None:
        data = self.state.data
        if routing is not None:
            add_routing(data, routing, sections or {})
        # The slot plan's window counts only the types the built-in aggregation runs.
        window_counts = routing.builtin_counts if routing is not None else counts
        data.totals.add(counts)
        for type_name, count in counts.type_counts.items():
            data.type_totals[type_name] = data.type_totals.get(type_name, 0) + count
        for type_name, count in window_counts.type_counts.items():
            data.window_type_counts[type_name] = data.window_type_counts.get(type_name, 0) + count
        window = {(str(t), int(b)): int(c) for t, b, c in data.window_bucket_counts}
        for key, count in window_counts.bucket_counts.items():
            window[key] = window.get(key, 0) + count
        data.window_bucket_counts = [[t, b, c] for (t, b), c in sorted(window.items())]
        data.task_rows = [a + b for a, b in zip(data.task_rows, task_rows)]
        data.task_seconds = [round(a + b, 4) for a, b in zip(data.task_seconds, task_seconds)]
        data.batches += 1
        data.last_batch_id = batch_id
