"""`rebalancer pipeline run` in batch mode: read, quarantine, plan, dispatch, persist, summarise."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rebalancer import __version__
from rebalancer._secrets import masks_errors, shown_location
from rebalancer.balance.metrics import max_over_median
from rebalancer.pipeline._compare_hash import COMPARED_STAGES, hash_wall, pass_wall, wall_comparison
from rebalancer.pipeline._output_manifest import GroupRange
from rebalancer.pipeline.contract import SKEW_DIGITS
from rebalancer.pipeline.core import (  # re-exported: callers import them from here
    InputCounts,
    PassTarget,
    Progress,
    builtin_calls,
    count_input,
    run_pass,
)
from rebalancer.pipeline.dispatch import PARTITIONINGS
from rebalancer.pipeline.ingest import InputSpec, check_output, read_raw
from rebalancer.pipeline.kafka.claim import one_group_run_per_output
from rebalancer.pipeline.paths import OutputPath, output_path, write_json
from rebalancer.pipeline.session import default_parallelism, pipeline_conf, spark_error_reason
from rebalancer.pipeline.slots import Item, SlotPlan, hash_plan, items_from_json, make_plan, plan_items

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from rebalancer.pipeline.contract import Input
    from rebalancer.pipeline.framework import Pipeline, Routing
    from rebalancer.pipeline.kafka.telemetry import GroupRead
    from rebalancer.pipeline.sinks import PostgresSink

__all__ = [
    "COMPARED_STAGES",
    "InputCounts",
    "builtin_calls",
    "count_input",
    "load_plan",
    "load_previous_plan",
    "load_previous_summary",
    "pass_wall",
    "run_batch",
    "wall_comparison",
    "write_json",
]

log = logging.getLogger(__name__)

_ABSENT = object()  # no file at all: a first run, not a damaged one


def _read_previous(path: OutputPath) -> tuple[Any, str | None]:
    """(the JSON in `path`, None); (_ABSENT, None) when there is no file; (None, the problem) when
    it cannot be read or parsed."""
    try:
        return json.loads(path.read_text()), None
    except FileNotFoundError:
        return _ABSENT, None
    except (OSError, ValueError) as exc:  # ValueError: not JSON, not UTF-8, or Hadoop's one-line error
        return None, f"{type(exc).__name__}: {exc}"


def _ignored(path: OutputPath, problem: str) -> None:
    """One warning naming the file: a previous run's plan or summary is a hint, the run goes on without."""
    log.warning("ignoring %s, which cannot be used: %s", shown_location(str(path)), problem)


def load_previous_plan(out: OutputPath, partitions: int) -> dict[Item, int] | None:
    """The previous run's item -> slot map, if it was made for the same number of slots.

    A plan.json from before items were (type, shard) pairs is not trusted: its names were ambiguous.
    One for another number of slots is not ours to use; a damaged one gets one warning (the plan is
    then made afresh, as `apply.PlanStore` does for its own).
    """
    path = out / "plan.json"
    saved, problem = _read_previous(path)
    if saved is _ABSENT:
        return None
    if problem is None and not isinstance(saved, dict):
        problem = f"expected a JSON object, got {type(saved).__name__}"
    if problem is not None:
        _ignored(path, problem)
        return None
    if saved.get("partitions") != partitions:
        return None
    items = saved.get("items")
    if not isinstance(items, list) or not all(isinstance(row, dict) for row in items):
        _ignored(path, "its items are not a list of objects")
        return None
    try:
        return items_from_json(items)
    except (KeyError, TypeError, ValueError) as exc:
        _ignored(path, f"an item is not {{type, shard, slot}}: {type(exc).__name__}: {exc}")
        return None


@dataclass(frozen=True)
class ReusedPlan:
    """A plan asked for with `plan_from`: where it came from and its item -> slot map."""

    source: str
    owner: dict[Item, int]

    def outcome(self, plan: SlotPlan) -> dict[str, Any]:
        """summary.json's `plan_reused`: the items this run kept on their slot, and those it moved."""
        kept = sum(1 for item, slot in plan.owner.items() if self.owner.get(item) == slot)
        moved = sum(1 for item, slot in plan.owner.items() if item in self.owner and self.owner[item] != slot)
        return {"from": self.source, "kept": kept, "moved": moved}


@masks_errors  # its messages name the plan's location: a URI's password shows as ***
def load_plan(source: str | Path, partitions: int, spark: SparkSession | None = None) -> ReusedPlan:
    """The plan of `source` (a plan.json, a `balanced_apply` PlanStore's file, or a directory holding
    either), asked for explicitly: anything that keeps it from being used is a ValueError naming the
    file, never a silent fresh plan. A remote URI is read through `spark`'s Hadoop FileSystem."""
    from rebalancer.pipeline.apply._store import is_store_file

    path = output_path(source, spark)
    if path.is_dir():
        path = path / "plan.json"
    saved, problem = _read_previous(path)
    if saved is _ABSENT:
        raise ValueError(f"plan-from: no such file: {path}")
    if problem is None and not isinstance(saved, dict):
        problem = f"expected a JSON object, got {type(saved).__name__}"
    if problem is not None:
        raise ValueError(f"plan-from: {path} cannot be used: {' '.join(problem.split())}")
    if is_store_file(saved):
        return ReusedPlan(str(source), _store_items(path, saved, partitions))
    if saved.get("partitions") != partitions:
        raise ValueError(
            f"plan-from: {path} was made for {saved.get('partitions')} partitions, this run has {partitions}"
        )
    items = saved.get("items")
    try:
        if not isinstance(items, list) or not all(isinstance(row, dict) for row in items):
            raise TypeError("its items are not a list of objects")
        return ReusedPlan(str(source), items_from_json(items))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"plan-from: {path} cannot be used: {type(exc).__name__}: {exc}") from None


def _store_items(path: OutputPath, saved: dict[str, Any], partitions: int) -> dict[Item, int]:
    """A `balanced_apply` plan store keyed by one column, as the pipeline's items: its keys are the
    types. A text key is the type; an int key the text Spark's cast gives it; a null key is no type
    (such rows are quarantined), so it is left out."""
    from rebalancer.pipeline.apply._store import stored_plan

    try:
        columns, made_for, owner = stored_plan(saved)
    except ValueError as exc:
        raise ValueError(f"plan-from: {path} cannot be used: {' '.join(str(exc).split())}") from None
    if len(columns) != 1:
        raise ValueError(
            f"plan-from: {path} is a plan store keyed by {len(columns)} columns ({', '.join(columns)}); "
            "only a store keyed by one column (the type) maps onto the pipeline's types"
        )
    if made_for is None:
        raise ValueError(f"plan-from: {path} is a plan store holding measurements but no plan")
    if made_for != partitions:
        raise ValueError(f"plan-from: {path} was made for {made_for} partitions, this run has {partitions}")
    items: dict[Item, int] = {}
    for item, slot in owner.items():
        (value,) = item.key
        if value is None:
            continue
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise ValueError(
                f"plan-from: {path} cannot be used: its key {columns[0]} holds {value!r}, not a type name"
            )
        items[Item(str(value), item.shard)] = slot
    return items


def load_previous_summary(out: OutputPath) -> dict[str, Any] | None:
    """The previous run's summary, for the report's comparison; a damaged one gets one warning."""
    path = out / "summary.json"
    saved, problem = _read_previous(path)
    if saved is _ABSENT:
        return None
    if problem is None:
        seconds = saved.get("task_seconds", []) if isinstance(saved, dict) else None
        if not isinstance(saved, dict):
            problem = f"expected a JSON object, got {type(saved).__name__}"
        elif not isinstance(seconds, list) or not all(
            isinstance(value, int | float) and not isinstance(value, bool) for value in seconds
        ):
            problem = "its task_seconds are not a list of numbers"
    if problem is not None:
        _ignored(path, problem)
        return None
    return saved


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


def _spark_error(exc: Exception, spec: InputSpec | Input) -> ValueError:
    return ValueError(f"cannot read input {spec.describe()}: {spark_error_reason(exc)}")


# Called between the outputs' commit and the group's offset commit: tests make it raise, to show
# that a run stopped there is rewritten, not counted twice, by the next run. None outside tests.
before_offset_commit: Callable[[], None] | None = None


def _plan_group(spec: InputSpec | Input) -> GroupRead | None:
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
    spec: InputSpec | Input,
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
) -> dict[str, Any]:
    """The whole batch run; returns the summary it also writes to OUT/summary.json.

    The engine under `rebalancer.pipeline.run`, which also applies the output mode (error,
    overwrite, append) before calling it; `output_mode` is only recorded in the summary here.

    `out` may be a Hadoop filesystem URI (hdfs://, s3a://, file://, ...): Spark writes the data
    there, and summary.json, plan.json and report.html go through the same filesystem, or to the
    local directory `report_dir` if given.

    `handlers` (a `framework.Pipeline`) routes each type to a user's handler, written to OUT/<handler>/
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
    check_output(out, spec, spark=spark)
    with pipeline_conf(spark):
        return _run_batch(
            spark,
            spec,
            output_path(out, spark),
            partitioning,
            partitions,
            progress,
            report,
            group_cost,
            sink,
            reports=output_path(report_dir) if report_dir is not None else None,
            handlers=handlers,
            cost=cost,
            plan_from=plan_from,
            output_mode=output_mode,
            compare_hash=compare_hash,
            output_name=output_name,
            publish=publish,
            on_group=on_group,
        )


def _run_batch(
    spark: SparkSession,
    spec: InputSpec | Input,
    out: OutputPath,
    partitioning: str,
    partitions: int | None,
    progress: Progress | None,
    report: bool,
    group_cost: int,
    sink: PostgresSink | None = None,
    reports: OutputPath | None = None,
    handlers: Pipeline | None = None,
    cost: str = "rows",
    plan_from: str | Path | ReusedPlan | None = None,
    output_mode: str | None = None,
    compare_hash: bool = False,
    output_name: str | None = None,
    publish: Callable[[], None] | None = None,
    on_group: Callable[[GroupRange], None] | None = None,
) -> dict[str, Any]:
    if partitioning not in PARTITIONINGS:
        raise ValueError(f"partitioning must be one of {', '.join(PARTITIONINGS)}, got {partitioning!r}")
    partitions = partitions or default_parallelism(spark)
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    step = progress or (lambda _stage: None)
    started = time.perf_counter()
    reused = plan_from if isinstance(plan_from, ReusedPlan) or plan_from is None else load_plan(plan_from, partitions, spark)

    group_read = _plan_group(spec)
    if group_read is not None:
        if handlers is not None and handlers.handlers:
            raise ValueError("a kafka:// input with group takes no --handlers yet (their outputs are not kept per run)")
        spec = group_read.spec
        if on_group is not None:
            on_group(GroupRange(group_read.cluster, group_read.start, group_read.end))
    reports = reports or out  # where summary.json, plan.json and report.html live
    previous_summary = load_previous_summary(reports)

    def plan_for(routing: Routing) -> SlotPlan:
        previous = reused.owner if reused is not None else None
        return build_plan(routing.builtin_counts, partitioning, partitions, previous, group_cost)

    def sink_write(frames: dict[str, Any], keys: Any) -> dict[str, Any] | None:
        from rebalancer.pipeline.sinks import write_outputs

        assert sink is not None
        batch_id = None if group_read is None else group_read.batch_id
        return write_outputs(sink, frames, keys=keys, batch_id=batch_id)

    # With a group each run adds a batch, as a stream's micro-batch does: OUT/metrics/batch_id=N/.
    done = run_pass(
        read_raw(spark, spec),
        PassTarget(out, None if group_read is None else group_read.batch_id, stores=reports),  # per-handler plan stores
        partitioning,
        partitions,
        plan_for,
        handlers=handlers,
        cost=cost,
        sink_write=sink_write if sink is not None else None,
        step=step,
        read_error=lambda exc: _spark_error(exc, spec),
    )
    compared = None
    if compare_hash:
        step("same input under Spark's hash")
        compared = hash_wall(spark, read_raw(spark, spec), read_raw(spark, spec), out, partitioning, done.plan)
    counts, routing, plan = done.counts, done.routing, done.plan
    task_rows, task_seconds = done.task_rows, done.task_seconds
    projected_hash = hash_plan(routing.builtin_counts.type_counts, routing.builtin_counts.hash_slots, partitions)

    summary: dict[str, Any] = {
        "version": __version__,
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "input": spec.describe(),
        "format": spec.format,
        "output": shown_location(str(output_name or out)),  # a URI's password as ***
        "output_mode": output_mode,
        "plan_reused": reused.outcome(plan) if reused is not None else None,
        "ingested": counts.ingested,
        "accepted": counts.accepted,
        "quarantined": counts.quarantined,
        "quarantine_reasons": counts.reasons,
        "types": len(counts.type_counts),
        "partitions": partitions,
        "partitioning": partitioning,
        "group_cost": group_cost,
        "sharded_types": plan.sharded,
        "elapsed_s": round(time.perf_counter() - started, 3),
        "stage_seconds": done.stage_seconds,
        "task_rows": task_rows,
        "task_seconds": task_seconds,
        "skew_ratio": max_over_median(task_rows, SKEW_DIGITS),
        "seconds_skew_ratio": max_over_median(task_seconds, SKEW_DIGITS),
        "planned_load": plan.load_after,
        "hash_load": projected_hash.load_after,
        "hash_skew_ratio": max_over_median(projected_hash.load_after, SKEW_DIGITS),
        "top_types": dict(sorted(counts.type_counts.items(), key=lambda kv: (-kv[1], kv[0]))[:15]),
        **routing.summary(task_rows, task_seconds, builtin_calls(partitioning, plan), done.handler_sections),
    }
    if done.sink_section is not None:
        summary["sink"] = done.sink_section
    if compared is not None:
        summary["compare_hash"] = compared
    if group_read is not None:
        summary["kafka_group"] = {
            "group": group_read.group,
            "topic": group_read.spec.topic,
            "batch_id": group_read.batch_id,
            "cluster": group_read.cluster,
            "start": {str(p): o for p, o in sorted(group_read.start.items())},
            "end": {str(p): o for p, o in sorted(group_read.end.items())},
        }
    if counts.ingested != counts.accepted + counts.quarantined:
        raise RuntimeError("reconciliation failed: ingested != accepted + quarantined")
    if counts.accepted != summary["handled"] + summary["unhandled"]:
        raise RuntimeError("reconciliation failed: accepted != handled + unhandled")
    reports.mkdir(parents=True, exist_ok=True)
    write_json(reports / "plan.json", {"partitioning": partitioning, **plan.to_json()})
    if report:
        step("report")
        from rebalancer.pipeline.report import write_report
        from rebalancer.pipeline.run_summary import RunSummary

        # elapsed_s stays the time to the metrics written: one number in the report, the file and the terminal.
        write_report(reports / "report.html", RunSummary.from_json(summary), plan, previous_summary)
    write_json(reports / "summary.json", summary)
    if publish is not None:
        publish()
    if group_read is not None:
        _commit_group(group_read)  # after every output, published: a run that fails before reads them again
    return summary
