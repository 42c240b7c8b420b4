"""`run(RunRequest(...))`: what `rebalancer pipeline run` does, from Python.

The request is validated once, where it is made; the output mode (Spark's SaveMode words: error,
overwrite, append) is checked before any work, so two runs' outputs never end up mixed in one
directory, and an error or overwrite run is swapped in only once complete. `cmd_run` builds a
`RunRequest` from its flags and calls `run`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from rebalancer._secrets import masked_repr
from rebalancer.pipeline.kafka.claim import one_group_run_per_output
from rebalancer.pipeline.output_mode import check_run_outputs, external_checkpoint
from rebalancer.pipeline.paths import is_remote, join
from rebalancer.pipeline.run_fields import check_settings, numeric_fields, plain_number
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

    Every field is checked by `run_fields.SETTINGS`, the table `rebalancer pipeline run`'s flags are
    made from: a bad value is a ValueError naming the flag, in the command's words. A setting its run
    would ignore is refused when it differs from its default here: `max_moves`, `max_batches`,
    `files_per_batch`, `available_now`, `checkpoint` and `rebalance_every` without `stream`;
    `plan_from`, `group_cost`, `max_moves` and `rebalance_every` with `partitioning="hash"`;
    `plan_from` and `group_cost` with `stream`; `format` and `files_per_batch` with a kafka://
    input; `cost` without `handlers`; `kafka_timeout` without a kafka:// input. `handlers` with a
    kafka:// `?group=` batch run is refused too (not supported yet). A kafka:// input
    without the 'kafka' extra is a MissingExtraError (an ImportError) naming it.
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

    def __repr__(self) -> str:
        """Each location (input, output, checkpoint, ...) with a URI's password and a kafka:// URL's
        secret options as ***; an inspected input masks its own."""
        return masked_repr(self)

    def __post_init__(self) -> None:
        # Every field by the one table the command's flags are made from (run_fields), so a value
        # is refused alike from Python and on the command line; then what this run would ignore.
        for name in numeric_fields():  # np.int64(5) is 5: held, shown and passed on as a plain int
            object.__setattr__(self, name, plain_number(getattr(self, name)))
        check_settings(self, field_defaults())
        if self.compare_hash:
            self._check_compare_hash()
        if self.handlers is not None and self.handlers.handlers and not self.stream and self.keyed_by_batch:
            # run_batch refuses it too, but only once the run has begun (and cleared an overwritten output).
            raise ValueError(
                "handlers: a kafka:// input with ?group= takes no --handlers yet (their outputs are not kept per run)"
            )
        self._require_extras()
        if self.is_kafka:
            from rebalancer.pipeline.kafka.telemetry import KafkaInput

            # The reader's own rules for this mode (parse_options), as the command applies them: a
            # `?group=` is for a batch, endingOffsets for a batch, maxOffsetsPerTrigger for a stream.
            spec = resolve_input(self)
            if isinstance(spec, KafkaInput):
                spec.reader_options(self.stream)
        if self.plan_from is not None and self.partitions is not None and not is_remote(self.plan_from):
            from rebalancer.pipeline.batch import load_plan

            # A local plan is checked now, before Spark starts: the run loads it again, through Spark.
            load_plan(self.plan_from, self.partitions)

    def _require_extras(self) -> None:
        """A kafka:// input's clients, before Spark starts: MissingExtraError naming the extra.
        kafka://embedded/ also starts a mock cluster (confluent_kafka) and produces (aiokafka)."""
        if not self.is_kafka:
            return
        from rebalancer._extras import require_extra
        from rebalancer.pipeline.kafka.telemetry import EMBEDDED

        if isinstance(self.input, str):
            embedded = urlsplit(self.input).netloc == EMBEDDED
        else:
            embedded = bool(getattr(self.input, "embedded", False))
        if embedded:
            require_extra(f"kafka://{EMBEDDED}/ (a Kafka cluster in this process)", "kafka")
        else:
            require_extra("a kafka:// input", "kafka", ("confluent_kafka",))

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
        (hdfs://, s3a://, …) once `spark` can look through its Hadoop FileSystem. Nothing is changed,
        except that what a killed run left there is put right first (`check_run_outputs`)."""
        check_run_outputs(self, spark)


@cache
def field_defaults() -> dict[str, object]:
    """RunRequest's defaults by field (`input` has none: MISSING); the command's flags default to
    them, and a setting at its default is never refused as one its run would ignore."""
    return {f.name: f.default for f in fields(RunRequest)}


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


@one_group_run_per_output(lambda arguments: (arguments["request"].input, arguments["request"].output))
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
    check_output(request.output, spec, request.checkpoint_location, spark, request.report_dir)
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
        on_group=outputs.take_group,
    )
