"""The grouped-map stage: every type's rows reach the handler on the task its slot names.

hash (what a Spark user writes): `groupBy("type").applyInPandas(handler)`, one call per type, types
placed by Spark's hash partitioner. weighted: `repartition(n, slot key).mapInArrow(...)`, one call
per planned slot (a task holds exactly one), each dispatching all the types of its slot at once (the
handler is vectorised over types), so a task's time follows its rows and not its count of small
types. A slot's group needs no sort, and its strings stay in Arrow (`handler.aggregate_arrow`).
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rebalancer.pipeline.handler.builtin import (
    HANDLER_SCHEMA,
    STATS_SCHEMA,
    TaskStatsParam,
    collect_task_stats,
    make_handler,
    make_slot_handler,
    split_task_stats,
    task_stats,
)
from rebalancer.pipeline.plan.slots import SlotPlan, with_slot_key
from rebalancer.pipeline.session.connect import is_connect

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

PARTITIONINGS = ("weighted", "hash")
SLOT_KEY = "_slot_key"


@dataclass
class Dispatch:
    """The metrics frame (lazy) and where its tasks report rows and seconds: an accumulator, or,
    on Spark Connect (no accumulators), `stats_rows` of the persisted grouped-map result `cached`."""

    metrics: DataFrame
    stats: Any
    partitions: int
    stats_rows: DataFrame | None = None
    cached: DataFrame | None = None

    def task_stats(self) -> tuple[list[int], list[float]]:
        """Rows and seconds per task; valid after an action has run `metrics` (and, without an
        accumulator, called once: it releases the persisted result)."""
        if self.stats is not None:
            return task_stats(self.stats.value, self.partitions)
        if self.stats_rows is None:
            raise RuntimeError("task stats already collected: the persisted result was released")
        try:
            raw = collect_task_stats(self.stats_rows)
        finally:
            if self.cached is not None:
                self.cached.unpersist()
            self.stats_rows = self.cached = None
        return task_stats(raw, self.partitions)


def dispatch(accepted: DataFrame, partitioning: str, partitions: int, plan: SlotPlan | None = None) -> Dispatch:
    """Metrics per (type, entity, minute) from accepted rows (type, entity, minute seconds, value).

    hash: `repartition(n, type)`, Spark's default placement, one group per type.
    weighted: `repartition(n, slot key)` with keys that land exactly on the planned slots; the
    grouping by slot key is clustered by that partitioning, so Spark adds no second exchange.
    """
    from pyspark.sql import functions as F

    if plan is not None:
        log.info(
            "plan: %s over %d tasks, %d items (%d types split), %d moved; rows per task max %d, median %g",
            partitioning,
            partitions,
            len(plan.owner),
            len(plan.sharded),
            sum(1 for _, old, _ in plan.moves if old >= 0),
            max(plan.load_after, default=0),
            statistics.median(plan.load_after or [0]),
        )
    spark = accepted.sparkSession
    stats = None if is_connect(spark) else spark.sparkContext.accumulator({}, TaskStatsParam())
    columns = ["type", "entity", "minute", "value"]
    schema = HANDLER_SCHEMA if stats is not None else f"{HANDLER_SCHEMA}, {STATS_SCHEMA}"
    if partitioning == "hash":
        grouped = accepted.select(*columns).repartition(partitions, "type").groupBy("type")
        mapped = grouped.applyInPandas(make_handler(stats), schema)
    else:
        if plan is None or plan.partitions != partitions:
            raise ValueError("weighted partitioning needs a plan for the same number of partitions")
        keyed = with_slot_key(accepted.select(*columns), plan, SLOT_KEY)
        # Each task holds one slot, so the task's rows are the slot's group: no grouping, no sort.
        slotted = keyed.repartition(partitions, SLOT_KEY).select(*columns)
        mapped = slotted.mapInArrow(make_slot_handler(stats), schema)
    cached = stats_rows = None
    if stats is None:
        from pyspark import StorageLevel

        # The metrics write fills the cache; the task stats are read back from it, not recomputed.
        cached = mapped.persist(StorageLevel.MEMORY_AND_DISK)
        result, stats_rows = split_task_stats(cached)
    else:
        result = mapped
    metrics = result.select(
        "type",
        "entity",
        F.timestamp_seconds("minute").alias("minute"),
        "count",
        "sum",
        "min",
        "max",
        "mean",
        "p50",
        "p90",
        "p99",
        F.date_format(F.timestamp_seconds("minute"), "yyyy-MM-dd").alias("date"),
    )
    return Dispatch(metrics=metrics, stats=stats, partitions=partitions, stats_rows=stats_rows, cached=cached)
