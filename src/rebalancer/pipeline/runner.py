"""`run(RunRequest(...))`: what `rebalancer pipeline run` does, from Python.

The request is validated once, where it is made; the output mode (Spark's SaveMode words: error,
overwrite, append) is checked before any work, so two runs' outputs never end up mixed in one
directory, and an error or overwrite run is swapped in only once complete. `cmd_run` builds a
`RunRequest` from its flags and calls `run`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rebalancer.pipeline._checks import check_partitions
from rebalancer.pipeline.contract import FORMATS
from rebalancer.pipeline.dispatch import PARTITIONINGS
from rebalancer.pipeline.output_mode import OUTPUT_MODES, check_run_outputs, external_checkpoint
from rebalancer.pipeline.paths import is_remote, join
from rebalancer.pipeline.run_summary import RunSummary  # re-exported: its public home is here

__all__ = ["RunRequest", "RunSummary", "resolve_input", "run"]

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from rebalancer.pipeline._output_swap import Outputs
    from rebalancer.pipeline.batch import ReusedPlan
    from rebalancer.pipeline.contract import Input
    from rebalancer.pipeline.framework import Pipeline
    from rebalancer.pipeline.sinks import PostgresSink
    from rebalancer.pipeline.stream import BatchProgress

log = logging.getLogger(__name__)

COSTS = ("rows", "seconds")


def _at_least(name: str, value: int | float | None, low: int | float, exclusive: bool = False) -> None:
    if value is None:
        return
    bad = isinstance(value, bool) or not isinstance(value, int | float) or (value <= low if exclusive else value < low)
    if bad:
        raise ValueError(f"{name} must be {'>' if exclusive else '>='} {low}, got {value!r}")


def _one_of(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


@dataclass(frozen=True)
class RunRequest:
    """One pipeline run, as `rebalancer pipeline run` takes it: checked here, once, when made.

    `input` is a path, a Hadoop filesystem URI, a `kafka://HOST:PORT/TOPIC[?…]` URL, or an input
    already inspected (`ingest.inspect_input`, `kafka.telemetry.parse_kafka_url`). `mode` is what
    happens to an `output` that already holds a run: "error" refuses it, "overwrite" replaces it
    once this run is complete (report, plan and checkpoint included; only what the previous run's
    _manifest.json lists), "append" adds this run to it (a stream resuming from its checkpoint, a
    Kafka `?group=` run). `plan_from` (a plan.json, a one-column PlanStore, or a
    directory holding either) is the only way a previous plan reaches this run; a local one is
    checked here when `partitions` is given, so a bad file fails before Spark starts.
    """

    input: str | Path | Input
    output: str | Path = "out"
    partitions: int | None = None  # None: the session's default parallelism
    partitioning: str = "weighted"
    handlers: Pipeline | None = None
    cost: str = "rows"
    mode: str = "error"
    plan_from: str | Path | None = None
    format: str | None = None
    columns: Mapping[str, str] | None = None
    stream: bool = False
    rebalance_every: int = 5
    max_moves: int | None = None
    max_batches: int | None = None
    files_per_batch: int = 1
    available_now: bool = False
    checkpoint: str | Path | None = None  # a stream's; default OUTPUT/_checkpoint
    group_cost: int = 0
    report: bool = True
    report_dir: str | Path | None = None
    sink: PostgresSink | None = field(default=None, repr=False)
    kafka_timeout: float | None = None
    compare_hash: bool = False  # also time Spark's hash placement on the same input

    def __post_init__(self) -> None:
        if self.partitions is not None:
            check_partitions(self.partitions)
        _one_of("partitioning", self.partitioning, PARTITIONINGS)
        _one_of("cost", self.cost, COSTS)
        _one_of("mode", self.mode, OUTPUT_MODES)
        if self.format is not None:
            _one_of("format", self.format, FORMATS)
            if self.is_kafka:
                raise ValueError(f"format: a kafka:// input holds JSON values, --format {self.format} is for files")
        _at_least("rebalance-every", self.rebalance_every, 1)
        _at_least("max-moves", self.max_moves, 0)
        _at_least("max-batches", self.max_batches, 1)
        _at_least("files-per-batch", self.files_per_batch, 1)
        _at_least("group-cost", self.group_cost, 0)
        _at_least("kafka-timeout", self.kafka_timeout, 0, exclusive=True)
        if self.kafka_timeout is not None and not self.is_kafka:
            raise ValueError("kafka-timeout: is for a kafka:// input")
        if self.plan_from is not None and self.stream:
            raise ValueError(
                f"plan-from: a stream re-plans from its checkpoint, got --plan-from {self.plan_from} with --stream"
            )
        if self.plan_from is not None and self.partitions is not None and not is_remote(self.plan_from):
            from rebalancer.pipeline.batch import load_plan

            # A local plan is checked now, before Spark starts: the run loads it again, through Spark.
            load_plan(self.plan_from, self.partitions)
        if self.compare_hash:
            self._check_compare_hash()
        if not self.stream:
            for name, value in (("checkpoint", self.checkpoint), ("max-batches", self.max_batches)):
                if value is not None:
                    raise ValueError(f"{name}: is for a stream (--stream), got {value}")

    def _check_compare_hash(self) -> None:
        """The hash pass reads the input a second time: only a batch over files, built-in types alone."""
        if self.partitioning == "hash":
            raise ValueError("compare-hash: compares the weighted plan with Spark's hash; this run is --partitioning hash")
        for refused, why in (
            (self.stream, "a stream (--stream)"),
            (self.is_kafka, "a kafka:// input (it would be read twice)"),
            (self.handlers is not None, "--handlers"),
        ):
            if refused:
                raise ValueError(f"compare-hash: not with {why}")

    @property
    def is_kafka(self) -> bool:
        text = self.input if isinstance(self.input, str) else None
        return getattr(self.input, "format", None) == "kafka" or bool(text and text.lower().startswith("kafka://"))

    @property
    def keyed_by_batch(self) -> bool:
        """Outputs under batch_id=N/ (a stream, a Kafka `?group=` run), not under date=…/ alone."""
        if self.stream:
            return True
        if isinstance(self.input, str):
            from urllib.parse import parse_qsl, urlsplit

            return self.is_kafka and any(k.lower() == "group" for k, _ in parse_qsl(urlsplit(self.input).query))
        return any(k.lower() == "group" for k in getattr(self.input, "options", None) or {})

    @property
    def checkpoint_location(self) -> str | Path | None:
        if not self.stream:
            return None
        return self.checkpoint or join(self.output, "_checkpoint")

    def check_output(self, spark: SparkSession | None = None) -> None:
        """The output mode's refusals, before any work, for every directory the run writes in (the
        output, report_dir, a stream's checkpoint): a local one's before Spark starts, a remote one's
        (hdfs://, s3a://, …) once `spark` can look through its Hadoop FileSystem. Nothing is changed."""
        check_run_outputs(self, spark)


def resolve_input(request: RunRequest, spark: SparkSession | None = None) -> Input:
    """The request's input, inspected (files) or parsed (a kafka:// URL)."""
    from rebalancer.pipeline.ingest import inspect_input

    source = request.input
    if not isinstance(source, str | Path):
        return source
    if isinstance(source, str) and source.lower().startswith("kafka://"):
        from rebalancer.pipeline.kafka.telemetry import parse_kafka_url

        return parse_kafka_url(source, request.columns).with_timeout(request.kafka_timeout)
    return inspect_input(source, request.format, request.columns, spark=spark)


def run(
    request: RunRequest,
    spark: SparkSession | None = None,
    progress: Callable[[str], None] | None = None,
    on_batch: Callable[[BatchProgress], None] | None = None,
) -> RunSummary:
    """Run the pipeline as `rebalancer pipeline run` does, and return its summary.

    `spark` defaults to the active session. `progress` is called with each stage's name (a batch
    run), `on_batch` with each micro-batch applied (a stream). Raises ValueError, naming the field,
    for a request the output refuses (see `RunRequest.mode`) or an input that cannot be read.

    Every check comes before anything is written or replaced: the input against the output and the
    checkpoint, the plan asked for, the output mode, the sink's tables. In error and overwrite modes
    the run is then written beside the previous one and swapped in once complete (`_output_swap`):
    an interrupted run leaves the previous one as it was.
    """
    from rebalancer.pipeline._output_swap import run_outputs
    from rebalancer.pipeline.ingest import check_output

    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is None:
            raise ValueError("spark: no active SparkSession; pass spark= (see rebalancer.pipeline.session.build_session)")
    spec = resolve_input(request, spark)
    check_output(request.output, spec, request.checkpoint_location, spark)
    reused = None
    if request.plan_from is not None and not request.stream:
        from rebalancer.pipeline.batch import load_plan
        from rebalancer.pipeline.session import default_parallelism

        reused = load_plan(request.plan_from, request.partitions or default_parallelism(spark), spark)
    states = check_run_outputs(request, spark)
    if request.sink is not None:
        from rebalancer.pipeline.sinks import prepare_sink

        # A table with other columns fails here, before any work; a group run keys its tables by batch.
        prepare_sink(request.sink, spark, stream=request.keyed_by_batch, handlers=request.handlers)
    with run_outputs([state for state in states if state is not None], request.mode, spark) as outputs:
        summary = _run_into(request, spec, spark, outputs, reused, progress, on_batch)
    return RunSummary.from_json(summary)


def _run_into(
    request: RunRequest,
    spec: Input,
    spark: SparkSession,
    outputs: Outputs,
    reused: ReusedPlan | None,
    progress: Callable[[str], None] | None,
    on_batch: Callable[[BatchProgress], None] | None,
) -> dict[str, Any]:
    """The engine of the run, writing where `outputs` says (a staging directory, or the output)."""
    output = outputs.at(request.output)
    report_dir = outputs.at(request.report_dir) if request.report_dir is not None else None
    checkpoint = external_checkpoint(request)
    shown = str(request.output)
    if request.stream:
        from rebalancer.pipeline.stream import StreamConfig, run_stream

        partitions = request.partitions
        if partitions is None:
            from rebalancer.pipeline.session import default_parallelism

            partitions = default_parallelism(spark)
        config = StreamConfig(
            partitions=partitions,
            partitioning=request.partitioning,
            rebalance_every=request.rebalance_every,
            max_moves=request.max_moves,
            max_batches=request.max_batches,
            files_per_batch=request.files_per_batch,
            available_now=request.available_now,
            checkpoint=outputs.at(checkpoint) if checkpoint is not None else None,
        )
        return run_stream(
            spark,
            spec,  # type: ignore[arg-type]  # an Input: the stream reads it through the protocol
            output,
            config,
            sink=request.sink,
            handlers=request.handlers,
            cost=request.cost,
            report_dir=report_dir,
            on_batch=on_batch,
            output_mode=request.mode,
            output_name=shown,
        )
    from rebalancer.pipeline.batch import run_batch

    return run_batch(
        spark,
        spec,
        output,
        partitioning=request.partitioning,
        partitions=request.partitions,
        progress=progress,
        report=request.report,
        group_cost=request.group_cost,
        sink=request.sink,
        handlers=request.handlers,
        cost=request.cost,
        report_dir=report_dir,
        plan_from=reused,
        output_mode=request.mode,
        compare_hash=request.compare_hash,
        output_name=shown,
        publish=outputs.publish,
    )
