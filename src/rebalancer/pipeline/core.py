"""The one pass over a set of rows, shared by the batch run and every micro-batch of a stream.

Read, count, plan, quarantine, dispatch, handlers, outputs: written once, so the batch and the
stream driver cannot drift apart. A driver adds only what is its own: the batch driver its report
and the Kafka group commit, the stream driver triggers, the checkpoint and re-planning (`plan_for`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rebalancer.pipeline.handler.dispatch import dispatch
from rebalancer.pipeline.ingest.classifier import accepted_rows, cacheable_rows, classify, quarantine_rows
from rebalancer.pipeline.ingest.contract import RowCounts
from rebalancer.pipeline.plan.slots import SHARD_BUCKETS, SlotPlan
from rebalancer.pipeline.routing.handler_map import HandlerTotals, Routing, route_types, run_handlers

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from rebalancer.pipeline.paths import OutputPath
    from rebalancer.pipeline.routing.handler_map import Pipeline
    from rebalancer.pipeline.sinks.outputs import SinkSection

Progress = Callable[[str], None]
# The sink's part of a pass: given the frames to write and the tables' keys, its summary section.
SinkWrite = Callable[[dict[str, "DataFrame"], dict[str, tuple[str, ...]]], "SinkSection | None"]


@dataclass
class InputCounts(RowCounts):
    """The cheap first pass: reconciliation counts and per-type (and per-shard) volumes."""

    type_counts: dict[str, int] = field(default_factory=dict)
    bucket_counts: dict[tuple[str, int], int] = field(default_factory=dict)
    hash_slots: dict[str, int] = field(default_factory=dict)


def count_input(classified: DataFrame, partitions: int) -> InputCounts:
    """One small aggregation over the classified rows gives every count the run needs."""
    from pyspark.sql import functions as F

    good = F.col("reason").isNull()
    type_text = F.col("type").cast("string")
    rows = (
        classified.groupBy(
            F.col("reason"),
            F.when(good, type_text).alias("t"),
            F.when(good, F.pmod(F.hash(F.col("entity").cast("string")), F.lit(SHARD_BUCKETS))).alias("b"),
            F.when(good, F.pmod(F.hash(type_text), F.lit(partitions))).alias("h"),
        )
        .count()
        .collect()
    )
    counts = InputCounts()
    for reason, type_name, bucket, hash_slot, count in rows:
        counts.ingested += count
        if reason is not None:
            counts.quarantined += count
            counts.reasons[reason] = counts.reasons.get(reason, 0) + count
            continue
        counts.accepted += count
        counts.type_counts[type_name] = counts.type_counts.get(type_name, 0) + count
        counts.bucket_counts[(type_name, int(bucket))] = count
        counts.hash_slots[type_name] = int(hash_slot)
    return counts


def builtin_calls(partitioning: str, plan: SlotPlan) -> int:
    """Calls of the built-in handler: one per type with hash, one per non-empty slot when weighted."""
    if partitioning == "hash":
        return sum(1 for rows in plan.counts.values() if rows > 0)
    return sum(1 for load in plan.load_after if load > 0)


@dataclass
class PassResult:
    """What one pass wrote and measured, for the driver's summary (or the stream's state)."""

    counts: InputCounts
    routing: Routing
    plan: SlotPlan
    task_rows: list[int]
    task_seconds: list[float]
    handler_sections: dict[str, HandlerTotals]
    sink_section: SinkSection | None
    stage_seconds: dict[str, float]


@dataclass(frozen=True)
class PassTarget:
    """Where one pass writes: OUT/metrics/, OUT/quarantine/, OUT/<handler>/, each under
    `batch_id=N/` when the pass is one batch of many (a stream's, or a Kafka group run's)."""

    out: OutputPath
    batch_id: int | None = None
    stores: OutputPath | None = None  # the handlers' plan stores (STORES/_plans/<handler>/)

    def data_dir(self, name: str) -> str:
        base = str(self.out / name)
        return base if self.batch_id is None else f"{base}/batch_id={self.batch_id}"


def run_pass(
    raw: DataFrame,
    target: PassTarget,
    partitioning: str,
    partitions: int,
    plan_for: Callable[[Routing], SlotPlan],
    handlers: Pipeline | None = None,
    cost: str = "rows",
    sink_write: SinkWrite | None = None,
    step: Progress | None = None,
    read_error: Callable[[Exception], Exception] | None = None,
) -> PassResult:
    """Classify and count `raw`, plan its built-in types with `plan_for`, write the quarantine, the
    metrics and each handler's output, then hand the written frames to `sink_write` (a database).

    `read_error` turns the first action's Spark failure (a file Spark cannot read) into the
    driver's one-line error, before any output is written.
    """
    from py4j.protocol import Py4JJavaError
    from pyspark import StorageLevel
    from pyspark.errors import PySparkException

    step = step or (lambda _stage: None)
    stage_seconds: dict[str, float] = {}
    mark_from = [time.perf_counter()]

    def mark(stage: str) -> None:
        now = time.perf_counter()
        stage_seconds[stage] = round(now - mark_from[0], 3)
        mark_from[0] = now

    step("read and count")
    classified = cacheable_rows(classify(raw)).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        try:
            counts = count_input(classified, partitions)
        except (PySparkException, Py4JJavaError) as exc:
            if read_error is None:
                raise
            raise read_error(exc) from exc
        mark("read_and_count")

        step("plan")
        routing = route_types(handlers, counts)
        plan = plan_for(routing)
        mark("plan")

        target.out.mkdir(parents=True, exist_ok=True)
        step("quarantine")
        quarantine_rows(classified).write.mode("overwrite").parquet(target.data_dir("quarantine"))
        mark("quarantine")

        step("dispatch and persist")
        job = dispatch(routing.builtin_rows(accepted_rows(classified)), partitioning, partitions, plan)
        # Kept for the sink, which would otherwise run the grouped map a second time.
        metrics = job.metrics.persist(StorageLevel.MEMORY_AND_DISK) if sink_write is not None else job.metrics
        writer = metrics.write.mode("overwrite")
        if target.batch_id is None:
            writer = writer.option("partitionOverwriteMode", "dynamic")
        writer.partitionBy("date").parquet(target.data_dir("metrics"))
        task_rows, task_seconds = job.task_stats()
        mark("dispatch")

        kept: dict[str, DataFrame] | None = {} if sink_write is not None else None
        sections = run_handlers(
            routing,
            classified,
            target.out,
            target.stores,
            partitions,
            cost,
            step,
            batch_id=target.batch_id,
            keep=kept,
        )
        if routing.handlers:
            mark("handlers")
        sink_section = None
        if sink_write is not None:
            step("database")
            try:
                frames = {"metrics": metrics, "quarantine": quarantine_rows(classified), **(kept or {})}
                sink_section = sink_write(frames, routing.pipeline.table_keys(raw.sparkSession))
            finally:
                metrics.unpersist()
                for frame in (kept or {}).values():
                    frame.unpersist()
            mark("sink")
    finally:
        classified.unpersist()
    return PassResult(counts, routing, plan, task_rows, task_seconds, sections, sink_section, stage_seconds)
