"""`rebalancer pipeline run` in batch mode: read, quarantine, plan, dispatch, persist, summarise."""

from __future__ import annotations

import json
import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rebalancer import __version__
from rebalancer.pipeline.dispatch import PARTITIONINGS, dispatch
from rebalancer.pipeline.framework import route_types, run_handlers
from rebalancer.pipeline.ingest import (
    REASONS,
    InputSpec,
    accepted_rows,
    cacheable_rows,
    check_output,
    classify,
    input_name,
    quarantine_rows,
    read_raw,
)
from rebalancer.pipeline.paths import OutputPath, output_path
from rebalancer.pipeline.session import default_parallelism, pipeline_conf, spark_error_reason
from rebalancer.pipeline.slots import (
    SHARD_BUCKETS,
    Item,
    SlotPlan,
    hash_plan,
    items_from_json,
    make_plan,
    plan_items,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from rebalancer.pipeline.framework import Pipeline
    from rebalancer.pipeline.kafka.telemetry import GroupRead
    from rebalancer.pipeline.sinks import PostgresSink

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


@dataclass
class InputCounts:
    """The cheap first pass: reconciliation counts and per-type (and per-shard) volumes."""

    ingested: int = 0
    accepted: int = 0
    quarantined: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
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
    counts.reasons = {reason: counts.reasons[reason] for reason in REASONS if reason in counts.reasons}
    return counts


def skew_ratio(values: list[int] | list[float]) -> float | None:
    """max/median over all tasks; None when the median task is empty."""
    if not values:
        return None
    median = statistics.median(values)
    return round(max(values) / median, 4) if median > 0 else None


def builtin_calls(partitioning: str, plan: SlotPlan) -> int:
    """Calls of the built-in handler: one per type with hash, one per non-empty slot when weighted."""
    if partitioning == "hash":
        return sum(1 for rows in plan.counts.values() if rows > 0)
    return sum(1 for load in plan.load_after if load > 0)


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
    log.warning("ignoring %s, which cannot be used: %s", path, problem)


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


def _spark_error(exc: Exception, spec: InputSpec) -> ValueError:
    return ValueError(f"cannot read input {input_name(spec)}: {spark_error_reason(exc)}")


# Called between the outputs' commit and the group's offset commit: tests make it raise, to show
# that a run stopped there is rewritten, not counted twice, by the next run. None outside tests.
before_offset_commit: Callable[[], None] | None = None


def _plan_group(spec: InputSpec) -> GroupRead | None:
    """A `kafka://…?group=NAME` input's range, from the group's committed offsets; None otherwise."""
    if spec.format != "kafka":
        return None
    from rebalancer.pipeline.kafka.telemetry import KafkaInput, plan_group_run

    assert isinstance(spec, KafkaInput)
    try:
        return plan_group_run(spec)
    except RuntimeError as exc:
        raise ValueError(f"cannot read input {input_name(spec)}: {exc}") from None


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


def write_json(path: OutputPath, payload: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)


def run_batch(
    spark: SparkSession,
    spec: InputSpec,
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
) -> dict[str, Any]:
    """The whole batch run; returns the summary it also writes to OUT/summary.json.

    `out` may be a Hadoop filesystem URI (hdfs://, s3a://, file://, ...): Spark writes the data
    there, and summary.json, plan.json and report.html go through the same filesystem, or to the
    local directory `report_dir` if given.

    `handlers` (a `framework.Pipeline`) routes each type to a user's handler, written to OUT/<handler>/
    and placed by `balanced_apply` weighted by `cost` ("rows" or "seconds"); without it every type
    goes through the built-in aggregation into OUT/metrics/.

    With `sink`, metrics and quarantine are also upserted into PostgreSQL (`rebalancer.pipeline.sinks`).

    `group_cost` (rows-equivalent of one handler call) makes the weighted plan balance estimated
    work instead of rows alone; see `slots.make_plan`. The session's time zone, Parquet timestamp
    settings and cache compression are pinned for the run (`session.RUN_CONF`) and restored afterwards.
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
        )


def _run_batch(
    spark: SparkSession,
    spec: InputSpec,
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
) -> dict[str, Any]:
    from py4j.protocol import Py4JJavaError
    from pyspark import StorageLevel
    from pyspark.errors import PySparkException

    if partitioning not in PARTITIONINGS:
        raise ValueError(f"partitioning must be one of {', '.join(PARTITIONINGS)}, got {partitioning!r}")
    partitions = partitions or default_parallelism(spark)
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    step = progress or (lambda _stage: None)
    started = time.perf_counter()
    stage_seconds: dict[str, float] = {}

    def mark(stage: str, since: float) -> float:
        now = time.perf_counter()
        stage_seconds[stage] = round(now - since, 3)
        return now

    group_read = _plan_group(spec)
    if group_read is not None:
        if handlers is not None and handlers.handlers:
            raise ValueError("a kafka:// input with group takes no --handlers yet (their outputs are not kept per run)")
        spec = group_read.spec  # type: ignore[assignment]  # a KafkaInput stands in for an InputSpec
    # With a group each run adds a batch, as a stream's micro-batch does: OUT/metrics/batch_id=N/.
    batch_dir = "" if group_read is None else f"/batch_id={group_read.batch_id}"
    step("read and count")
    t = time.perf_counter()
    classified = cacheable_rows(classify(read_raw(spark, spec))).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        try:
            counts = count_input(classified, partitions)
        except (PySparkException, Py4JJavaError) as exc:
            # The first action reads every file: a file Spark cannot read fails here, before any output.
            raise _spark_error(exc, spec) from exc
        t = mark("read_and_count", t)

        step("plan")
        reports = reports or out  # where summary.json, plan.json and report.html live
        previous_plan = load_previous_plan(reports, partitions)
        previous_summary = load_previous_summary(reports)
        routing = route_types(handlers, counts)
        plan = build_plan(routing.builtin_counts, partitioning, partitions, previous_plan, group_cost)
        projected_hash = hash_plan(
            routing.builtin_counts.type_counts, routing.builtin_counts.hash_slots, partitions
        )
        t = mark("plan", t)

        out.mkdir(parents=True, exist_ok=True)
        step("quarantine")
        quarantine_rows(classified).write.mode("overwrite").parquet(str(out / "quarantine") + batch_dir)
        t = mark("quarantine", t)

        step("dispatch and persist")
        job = dispatch(routing.builtin_rows(accepted_rows(classified)), partitioning, partitions, plan)
        # Kept for the sink, which would otherwise run the grouped map a second time.
        metrics = job.metrics.persist(StorageLevel.MEMORY_AND_DISK) if sink is not None else job.metrics
        (
            metrics.write.mode("overwrite")
            .option("partitionOverwriteMode", "dynamic")
            .partitionBy("date")
            .parquet(str(out / "metrics") + batch_dir)
        )
        task_rows, task_seconds = job.task_stats()
        t = mark("dispatch", t)
        # Per-handler plan stores live next to summary.json.
        kept: dict[str, DataFrame] | None = {} if sink is not None else None
        handler_sections = run_handlers(routing, classified, out, reports, partitions, cost, step, keep=kept)
        if routing.handlers:
            t = mark("handlers", t)
        sink_section = None
        if sink is not None:
            from rebalancer.pipeline.sinks import write_outputs

            step("database")
            try:
                sink_section = write_outputs(
                    sink,
                    {"metrics": metrics, "quarantine": quarantine_rows(classified), **(kept or {})},
                    keys=routing.pipeline.table_keys(spark),
                    batch_id=None if group_read is None else group_read.batch_id,
                )
            finally:
                metrics.unpersist()
                for frame in (kept or {}).values():
                    frame.unpersist()
            t = mark("sink", t)
        if group_read is not None:
            _commit_group(group_read)  # after every output: a run that fails before reads them again
    finally:
        classified.unpersist()

    summary: dict[str, Any] = {
        "version": __version__,
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "input": input_name(spec),
        "format": spec.format,
        "output": str(out),
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
        "stage_seconds": stage_seconds,
        "task_rows": task_rows,
        "task_seconds": task_seconds,
        "skew_ratio": skew_ratio(task_rows),
        "seconds_skew_ratio": skew_ratio(task_seconds),
        "planned_load": plan.load_after,
        "hash_load": projected_hash.load_after,
        "hash_skew_ratio": skew_ratio(projected_hash.load_after),
        "top_types": dict(sorted(counts.type_counts.items(), key=lambda kv: (-kv[1], kv[0]))[:15]),
        **routing.summary(task_rows, task_seconds, builtin_calls(partitioning, plan), handler_sections),
    }
    if sink_section is not None:
        summary["sink"] = sink_section
    if group_read is not None:
        summary["kafka_group"] = {
            "group": group_read.group,
            "batch_id": group_read.batch_id,
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

        # elapsed_s stays the time to the metrics written: one number in the report, the file and the terminal.
        write_report(reports / "report.html", summary, plan, previous_summary)
    write_json(reports / "summary.json", summary)
    return summary
