"""`rebalancer pipeline run` in batch mode: read, quarantine, plan, dispatch, persist, summarise."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rebalancer import __version__
from rebalancer.balance.metrics import max_over_median
from rebalancer.pipeline.compare_hash import hash_wall
from rebalancer.pipeline.core import InputCounts, PassTarget, Progress, builtin_calls, run_pass
from rebalancer.pipeline.ingest.contract import SKEW_DIGITS
from rebalancer.pipeline.ingest.files import read_raw
from rebalancer.pipeline.outputs.claim import one_group_run_per_output
from rebalancer.pipeline.outputs.manifest import GroupRange
from rebalancer.pipeline.outputs.summary import BatchFigures, GroupSection, RunSummary
from rebalancer.pipeline.outputs.summary_files import summarise_and_write
from rebalancer.pipeline.plan.slots import Item, SlotPlan, hash_plan, make_plan, plan_items
from rebalancer.pipeline.plan_from import ReusedPlan, previous_run
from rebalancer.pipeline.resolved import ResolvedRun, RunHooks, RunRequest, resolve_run
from rebalancer.pipeline.session.build import pipeline_conf, spark_error_reason

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from rebalancer.pipeline.ingest.contract import Input
    from rebalancer.pipeline.kafka.telemetry import GroupRead
    from rebalancer.pipeline.routing.handler_map import Pipeline, Routing
    from rebalancer.pipeline.sinks import PostgresSink
    from rebalancer.pipeline.sinks.outputs import SinkSection

__all__ = [
    "drive_batch",
    "run_batch",
]

log = logging.getLogger(__name__)

def build_plan(
    counts: InputCounts,
    partitioning: str,
    partitions: int,
    previous: dict[Item, int] | None,
    group_cost: int = 0,
) -> SlotPlan:
    if partitioning == "hash":
        return hash_plan(counts.type_counts, counts.hash_slots, partitions)
    items, sharded, shard_of = plan_items(counts.type_counts, counts.bucket_counts, partitions)
    return make_plan(items, sharded, partitions, previous=previous, group_cost=group_cost, shard_of=shard_of)


def _spark_error(exc: Exception, spec: Input) -> ValueError:
    return ValueError(f"cannot read input {spec.describe()}: {spark_error_reason(exc)}")


# Called between the outputs' commit and the group's offset commit: tests make it raise, to show
# that a run stopped there is rewritten, not counted twice, by the next run. None outside tests.
before_offset_commit: Callable[[], None] | None = None


def _plan_group(spec: Input) -> GroupRead | None:
    """A `kafka://…?group=NAME` input's range, from the group's committed offsets; None otherwise."""
    try:
        return spec.group_run()
    except RuntimeError as exc:
        raise ValueError(f"cannot read input {spec.describe()}: {exc}") from None


def _commit_group(group_read: GroupRead) -> None:
    if before_offset_commit is not None:
        before_offset_commit()
    try:
        group_read.commit()
    except RuntimeError as exc:
        raise ValueError(
            f"the outputs are written but the offsets are not: {exc}; the next run reads the same "
            f"records and rewrites batch {group_read.batch_id}"
        ) from None


# The claim is the output's (output_name, when `out` is a staging directory): planning to commit.
@one_group_run_per_output(lambda arguments: (arguments["spec"], arguments.get("output_name") or arguments["out"]))
def run_batch(
    spark: SparkSession,
    spec: Input,
    out: str | Path,
    partitioning: str = "weighted",
    partitions: int | None = None,
    progress: Progress | None = None,
    report: bool = True,
    group_cost: int = 0,
    sink: PostgresSink | None = None,
    report_dir: str | Path | None = None,
    handlers: Pipeline | None = None,
    cost: str = "rows",
    plan_from: str | Path | ReusedPlan | None = None,
    output_mode: str | None = None,
    compare_hash: bool = False,
    output_name: str | None = None,
    publish: Callable[[], None] | None = None,
    on_group: Callable[[GroupRange], None] | None = None,
) -> RunSummary:
    """The whole batch run; returns the summary it also writes to OUT/summary.json.

    The library's entry: a `RunRequest` of these settings, resolved (`resolve_run`) without an output
    mode (`outputs.mode` is only recorded in the summary; `rebalancer.pipeline.run` applies one), and
    run by `drive_batch`.

    `out` may be a Hadoop filesystem URI (hdfs://, s3a://, file://, ...): Spark writes the data
    there, and summary.json, plan.json and report.html go through the same filesystem, or to the
    local directory `report_dir` if given.

    `handlers` (a `routing.handler_map.Pipeline`) routes each type to a user's handler, written to OUT/<handler>/
    and placed by `balanced_apply` weighted by `cost` ("rows" or "seconds"); without it every type
    goes through the built-in aggregation into OUT/metrics/.

    With `sink`, metrics and quarantine are also upserted into PostgreSQL (`rebalancer.pipeline.sinks`).

    `plan_from` (a plan.json, a one-column PlanStore, or a directory holding either) is the plan the
    weighted placement starts from and keeps what it can of; without it the plan is made afresh (a
    plan.json left in the output is never read: it would silently change this run).

    `group_cost` (rows-equivalent of one handler call) makes the weighted plan balance estimated
    work instead of rows alone; see `slots.make_plan`. The session's time zone, Parquet timestamp
    settings and cache compression are pinned for the run (`session.RUN_CONF`) and restored afterwards.

    `compare_hash` then times the plan and Spark's hash placement on two more passes (into a scratch
    directory, removed after), both warm, and records both walls in the summary's `compare_hash`:
    measured, not projected.

    `output_name` is the output the summary names, when `out` is where the run is staged;
    `publish` (which swaps a staged run in) is called once every output is written, before a Kafka
    group's offsets are committed: a run stopped between the two reads the same records again.
    `on_group` is given a `?group=` run's range (and its cluster's id) once planned, before the
    read: the outputs refuse one that would number a batch over an earlier one, and record it.
    """
    request = RunRequest(
        input=spec,
        output=out,
        partitions=partitions,
        partitioning=partitioning,
        handlers=handlers,
        cost=cost,
        plan_from=None if isinstance(plan_from, ReusedPlan) else plan_from,
        # Hash placement ignores it; this entry always took it (a benchmark runs both with one value).
        group_cost=group_cost if partitioning == "weighted" else 0,
        report=report,
        report_dir=report_dir,
        sink=sink,
        compare_hash=compare_hash,
    )
    reused = plan_from if isinstance(plan_from, ReusedPlan) else None
    resolved = resolve_run(request, spark, modes=False, plan=reused, output_name=output_name)
    resolved = replace(resolved, mode=output_mode, group_cost=group_cost)
    return drive_batch(resolved, RunHooks(progress=progress, publish=publish, on_group=on_group), spark)


def drive_batch(run: ResolvedRun, hooks: RunHooks, spark: SparkSession) -> RunSummary:
    """The batch run of `run` (resolved: checked, its partitions decided): one pass, and its summary
    written beside the outputs (`summarise_and_write`), before a group's offsets are committed."""
    with pipeline_conf(spark):
        return _drive_batch(run, hooks, spark)


def _drive_batch(run: ResolvedRun, hooks: RunHooks, spark: SparkSession) -> RunSummary:
    partitioning, partitions, spec = run.partitioning, run.partitions, run.input
    step = hooks.progress or (lambda _stage: None)
    started = time.perf_counter()
    reused = run.plan

    group_read = _plan_group(spec)
    if group_read is not None:
        spec = group_read.spec
        if hooks.on_group is not None:
            hooks.on_group(GroupRange(group_read.cluster, group_read.start, group_read.end))
    previous = previous_run(run.reports)

    def plan_for(routing: Routing) -> SlotPlan:
        previous = reused.owner if reused is not None else None
        return build_plan(routing.builtin_counts, partitioning, partitions, previous, run.group_cost)

    def sink_write(frames: dict[str, DataFrame], keys: dict[str, tuple[str, ...]]) -> SinkSection | None:
        from rebalancer.pipeline.sinks import write_outputs

        assert run.sink is not None
        batch_id = None if group_read is None else group_read.batch_id
        return write_outputs(run.sink, frames, keys=keys, batch_id=batch_id)

    # With a group each run adds a batch, as a stream's micro-batch does: OUT/metrics/batch_id=N/.
    done = run_pass(
        read_raw(spark, spec),
        PassTarget(run.output, None if group_read is None else group_read.batch_id, stores=run.reports),
        partitioning,
        partitions,
        plan_for,
        handlers=run.handlers,
        cost=run.cost,
        sink_write=sink_write if run.sink is not None else None,
        step=step,
        read_error=lambda exc: _spark_error(exc, spec),
    )
    compared = None
    if run.compare_hash:
        step("same input under Spark's hash")
        compared = hash_wall(spark, read_raw(spark, spec), read_raw(spark, spec), run.output, partitioning, done.plan)
    counts, routing, plan = done.counts, done.routing, done.plan
    task_rows, task_seconds = done.task_rows, done.task_seconds
    projected_hash = hash_plan(routing.builtin_counts.type_counts, routing.builtin_counts.hash_slots, partitions)
    summary = RunSummary(
        input=spec.describe(),
        format=spec.format,
        output=run.output_name,
        output_mode=run.mode,
        counts=counts.ordered(),
        types=len(counts.type_counts),
        partitions=partitions,
        partitioning=partitioning,
        elapsed_s=round(time.perf_counter() - started, 3),
        task_rows=task_rows,
        task_seconds=task_seconds,
        skew_ratio=max_over_median(task_rows, SKEW_DIGITS),
        routing=routing.summary(task_rows, task_seconds, builtin_calls(partitioning, plan), done.handler_sections),
        sink=done.sink_section,
        batch=BatchFigures(
            version=__version__,
            finished_at=datetime.now(UTC).isoformat(timespec="seconds"),
            plan_reused=reused.outcome(plan) if reused is not None else None,
            group_cost=run.group_cost,
            sharded_types=plan.sharded,
            stage_seconds=done.stage_seconds,
            seconds_skew_ratio=max_over_median(task_seconds, SKEW_DIGITS),
            planned_load=plan.load_after,
            hash_load=projected_hash.load_after,
            hash_skew_ratio=max_over_median(projected_hash.load_after, SKEW_DIGITS),
            top_types=dict(sorted(counts.type_counts.items(), key=lambda kv: (-kv[1], kv[0]))[:15]),
            compare_hash=compared,
            kafka_group=_group_section(group_read) if group_read is not None else None,
        ),
    )
    summarise_and_write(run.reports, summary, plan.to_json(), plan if run.report else None, previous, step)
    if hooks.publish is not None:
        hooks.publish()
    if group_read is not None:
        _commit_group(group_read)  # after every output, published: a run that fails before reads them again
    return summary


def _group_section(group_read: GroupRead) -> GroupSection:
    return {
        "group": group_read.group,
        "topic": group_read.spec.topic,
        "batch_id": group_read.batch_id,
        "cluster": group_read.cluster,
        "start": {str(p): o for p, o in sorted(group_read.start.items())},
        "end": {str(p): o for p, o in sorted(group_read.end.items())},
    }
