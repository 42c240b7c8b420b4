"""`--compare-hash`: this run's plan and Spark's hash placement, each timed on a further pass over
the same input, warm, into a scratch directory removed after."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rebalancer.pipeline.core import PassTarget, run_pass
from rebalancer.pipeline.outputs.fs import RunFS
from rebalancer.pipeline.outputs.manifest import COMPARE_SCRATCH
from rebalancer.pipeline.outputs.summary import WallComparison
from rebalancer.pipeline.plan.slots import SlotPlan, hash_plan
from rebalancer.pipeline.session.build import default_parallelism

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from rebalancer.pipeline.paths import OutputPath
    from rebalancer.pipeline.routing.handler_map import Routing

# The stages placement acts on. Read, count and quarantine do not depend on it, and the first pass's
# read also pays Spark's warm-up, which the hash pass (run second) would be spared.
COMPARED_STAGES = ("dispatch", "handlers")


def pass_wall(stage_seconds: dict[str, float]) -> float:
    """A pass's wall over the stages its placement decides."""
    return round(sum(stage_seconds.get(stage, 0.0) for stage in COMPARED_STAGES), 3)


def wall_comparison(hash_s: float, plan_s: float) -> WallComparison:
    """Both walls and what the plan saved (negative: lost), in seconds and percent of hash's."""
    saved = round(hash_s - plan_s, 3)
    return {
        "hash_s": hash_s,
        "plan_s": plan_s,
        "saved_s": saved,
        "saved_pct": round(100 * saved / hash_s, 1) if hash_s > 0 else None,
    }


def hash_wall(
    spark: SparkSession,
    planned_input: DataFrame,
    hashed_input: DataFrame,
    out: OutputPath,
    partitioning: str,
    plan: SlotPlan,
) -> WallComparison:
    """This run's plan and Spark's hash placement, each timed on a further pass over the same input
    (into a scratch directory, removed after): the walls of the stages placement decides.

    Both are timed after the run's own pass, which alone pays Spark's warm-up (the JVM's JIT, the
    first Python workers, the file listing): timing that pass against a warm hash pass measured the
    warm-up, not the placement (13.8 s against 6.9 s for the same work on 2 cores). The plan goes
    first, so whatever warm-up is left favours hash. `cores` and `hash_largest_share` say whether
    placement can shorten the wall at all (`wall_note`)."""
    scratch = out / COMPARE_SCRATCH
    partitions = plan.partitions
    fs = RunFS(str(scratch), spark)

    def hash_plan_for(routing: Routing) -> SlotPlan:
        counts = routing.builtin_counts
        return hash_plan(counts.type_counts, counts.hash_slots, partitions)

    try:
        planned = run_pass(planned_input, PassTarget(scratch), partitioning, partitions, lambda _r: plan)
        fs.remove(str(scratch))
        hashed = run_pass(hashed_input, PassTarget(scratch), "hash", partitions, hash_plan_for)
    finally:
        fs.remove(str(scratch))
    hash_load = hashed.plan.load_after
    walls = wall_comparison(pass_wall(hashed.stage_seconds), pass_wall(planned.stage_seconds))
    walls["stages"] = list(COMPARED_STAGES)
    walls["hash_stage_seconds"] = hashed.stage_seconds
    walls["plan_stage_seconds"] = planned.stage_seconds
    walls["cores"] = default_parallelism(spark)
    walls["hash_largest_share"] = round(max(hash_load) / sum(hash_load), 4) if sum(hash_load) else None
    return walls
