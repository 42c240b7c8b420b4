"""`--compare-hash`: this run's plan and Spark's hash placement, each timed on further passes over
the same input, warm, interleaved (plan, hash, plan, hash, ...), into a scratch directory removed after.

One sample per side flipped the verdict between two identical runs on a shared machine (16.8 s saved,
then 5.8 s lost). So each side runs ROUNDS times, and each plan pass is compared with the hash pass
run right after it, which met the same spell of the machine: "saved" or "lost" is said only when every
such pair agrees and their median difference exceeds the pairs' spread, otherwise "within noise".
(Comparing each side's spread instead flipped too: the first passes are the slowest on both sides, so
the warm-up alone spread each side wider than the placement's difference.)
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
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


# Passes per placement. Three each is the fewest whose median ignores one disturbed pass.
ROUNDS = 3


def _runs(walls: Sequence[float] | float) -> list[float]:
    return [float(walls)] if isinstance(walls, int | float) else [float(w) for w in walls]


def wall_comparison(hash_runs: Sequence[float] | float, plan_runs: Sequence[float] | float) -> WallComparison:
    """Both placements' median walls, what the plan saved (negative: lost) in seconds and percent of
    hash's, and the verdict. Runs pair by index (a plan pass and the hash pass right after it); the
    saving is the median of the pairs' differences (hash - plan), `noise_s` half their spread (max -
    min). "saved" or "lost" only when every pair differs the same way and the saving exceeds
    `noise_s`; else "within noise". A single pair has no spread: its difference decides."""
    hashed, planned = _runs(hash_runs), _runs(plan_runs)
    if len(hashed) != len(planned) or not hashed:
        raise ValueError(f"hash_runs and plan_runs must pair up, got {len(hashed)} and {len(planned)} runs")
    differences = [h - p for h, p in zip(hashed, planned, strict=True)]
    hash_s, plan_s = round(statistics.median(hashed), 3), round(statistics.median(planned), 3)
    saved = round(statistics.median(differences), 3)
    noise = (max(differences) - min(differences)) / 2
    if all(d > 0 for d in differences) and saved > noise:
        verdict = "saved"
    elif all(d < 0 for d in differences) and -saved > noise:
        verdict = "lost"
    else:
        verdict = "within noise"
    return {
        "hash_s": hash_s,
        "plan_s": plan_s,
        "saved_s": saved,
        "saved_pct": round(100 * saved / hash_s, 1) if hash_s > 0 else None,
        "verdict": verdict,
        "noise_s": round(noise, 3),
        "hash_runs": [round(w, 3) for w in hashed],
        "plan_runs": [round(w, 3) for w in planned],
    }


def hash_wall(
    spark: SparkSession,
    planned_input: DataFrame,
    hashed_input: DataFrame,
    out: OutputPath,
    partitioning: str,
    plan: SlotPlan,
) -> WallComparison:
    """This run's plan and Spark's hash placement, each timed on ROUNDS further passes over the same
    input, interleaved (into a scratch directory, removed after): the walls of the stages placement
    decides, their medians and the verdict (`wall_comparison`).

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

    planned_walls: list[float] = []
    hashed_walls: list[float] = []
    started = time.perf_counter()
    try:
        for _ in range(ROUNDS):  # interleaved: a slow spell of the machine hits both sides alike
            fs.remove(str(scratch))
            planned = run_pass(planned_input, PassTarget(scratch), partitioning, partitions, lambda _r: plan)
            planned_walls.append(pass_wall(planned.stage_seconds))
            fs.remove(str(scratch))
            hashed = run_pass(hashed_input, PassTarget(scratch), "hash", partitions, hash_plan_for)
            hashed_walls.append(pass_wall(hashed.stage_seconds))
    finally:
        fs.remove(str(scratch))
    hash_load = hashed.plan.load_after
    walls = wall_comparison(hashed_walls, planned_walls)
    walls["passes_s"] = round(time.perf_counter() - started, 3)
    walls["stages"] = list(COMPARED_STAGES)
    walls["hash_stage_seconds"] = hashed.stage_seconds
    walls["plan_stage_seconds"] = planned.stage_seconds
    walls["cores"] = default_parallelism(spark)
    walls["hash_largest_share"] = round(max(hash_load) / sum(hash_load), 4) if sum(hash_load) else None
    return walls
