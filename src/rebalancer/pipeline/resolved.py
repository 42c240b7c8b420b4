"""A run, resolved once: `RunRequest` (what was asked, checked when made) becomes `ResolvedRun` (the
input inspected, the partitions decided, the outputs checked, the plan loaded), which both drivers
take: `batch.drive_batch` and `stream.driver.drive_stream`. `runner.run` and the library entry points
`run_batch`/`run_stream` all come through `resolve_run`, so every default and check is made here,
once, and the drivers only run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlsplit

from rebalancer._secrets import masked_repr, shown_location
from rebalancer.pipeline.outputs.mode import RunDirs, check_run_outputs, external_checkpoint
from rebalancer.pipeline.paths import OutputPath, is_remote, output_path
from rebalancer.pipeline.plan_from import ReusedPlan, load_plan
from rebalancer.pipeline.run_fields import check_settings, numeric_fields, plain_number

__all__ = ["ResolvedRun", "RunHooks", "RunRequest", "StreamSettings", "field_defaults", "resolve_input", "resolve_run"]

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from rebalancer.pipeline.ingest.contract import Input
    from rebalancer.pipeline.outputs.manifest import GroupRange
    from rebalancer.pipeline.outputs.mode import DirState
    from rebalancer.pipeline.outputs.swap import Outputs
    from rebalancer.pipeline.routing.handler_map import Pipeline
    from rebalancer.pipeline.sinks import PostgresSink
    from rebalancer.pipeline.stream.state import BatchProgress

log = logging.getLogger("rebalancer.pipeline.runner")


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
            # A local plan is loaded now, before Spark starts, and kept for the run (`resolve_run`).
            object.__setattr__(self, "_plan", load_plan(self.plan_from, self.partitions))

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
        """A stream's checkpoint: --checkpoint, or OUTPUT/_checkpoint; None for a batch run."""
        return self.dirs().checkpoint_location

    def dirs(self) -> RunDirs:
        """Where this run writes, as the output checks see it."""
        return RunDirs(
            input=self.input,
            output=self.output,
            report_dir=self.report_dir,
            checkpoint=self.checkpoint,
            mode=self.mode,
            stream=self.stream,
            keyed_by_batch=self.keyed_by_batch,
            handlers=frozenset(h.name for h in self.handlers.handlers) if self.handlers is not None else frozenset(),
            report=self.report,
            compare_hash=self.compare_hash,
        )

    def check_output(self, spark: SparkSession | None = None) -> None:
        """The output mode's refusals, before any work, for every directory the run writes in (the
        output, report_dir, a stream's checkpoint): a local one's before Spark starts, a remote one's
        (hdfs://, s3a://, …) once `spark` can look through its Hadoop FileSystem. Nothing is changed,
        except that what a killed run left there is put right first (`check_run_outputs`)."""
        check_run_outputs(self, spark)

    def loaded_plan(self, partitions: int) -> ReusedPlan | None:
        """The --plan-from plan this request already loaded (a local one, with `partitions` given)."""
        plan: ReusedPlan | None = getattr(self, "_plan", None)
        return plan if plan is not None and partitions == self.partitions else None


@cache
def field_defaults() -> dict[str, object]:
    """RunRequest's defaults by field (`input` has none: MISSING); the command's flags default to
    them, and a setting at its default is never refused as one its run would ignore."""
    return {f.name: f.default for f in fields(RunRequest)}


def resolve_input(request: RunRequest, spark: SparkSession | None = None) -> Input:
    """The request's input, inspected (files) or parsed (a kafka:// URL)."""
    from rebalancer.pipeline.ingest.inspect import inspect_input

    source = request.input
    if not isinstance(source, str | Path):
        return source
    if isinstance(source, str) and source.lower().startswith("kafka://"):
        from rebalancer.pipeline.kafka.telemetry import parse_kafka_url

        return parse_kafka_url(source, request.columns).with_timeout(request.kafka_timeout)
    return inspect_input(source, request.format, request.columns, spark=spark)


@dataclass(frozen=True)
class StreamSettings:
    """A stream's own settings: the request's, and two only `StreamConfig` sets (its trigger, and a
    test's injected crash). Checked where they are made (`RunRequest`, `StreamConfig.validate`)."""

    rebalance_every: int = 5
    max_moves: int | None = None
    max_batches: int | None = None
    files_per_batch: int = 1
    available_now: bool = False
    trigger_seconds: float = 2.0
    crash_after_batch: int | None = None  # fault injection: raise after this batch's outputs


@dataclass(frozen=True)
class RunHooks:
    """What a caller hears of a run, and the swap's calls into it; not request data."""

    progress: Callable[[str], None] | None = None  # each stage's name (a batch run)
    on_batch: Callable[[BatchProgress], None] | None = None  # each micro-batch applied (a stream)
    publish: Callable[[], None] | None = None  # swaps a staged run in, once every output is written
    on_group: Callable[[GroupRange], None] | None = None  # a `?group=` run's range, once planned


@dataclass(frozen=True)
class ResolvedRun:
    """A request made ready to run: every default decided and every check made (`resolve_run`).

    `output`, `reports` and `checkpoint` are where this run writes (under `run`, the staging
    directories `at` moves them to); `output_name` is the output the summary names. `mode` is only
    recorded (None: `run_batch`/`run_stream` called directly, with no output mode applied)."""

    input: Input
    output: OutputPath
    output_name: str
    reports: OutputPath  # summary.json, plan.json, report.html: the report dir, or the output
    partitions: int
    partitioning: str
    handlers: Pipeline | None = None
    cost: str = "rows"
    mode: str | None = None
    plan: ReusedPlan | None = None  # --plan-from's
    group_cost: int = 0
    report: bool = True
    compare_hash: bool = False
    sink: PostgresSink | None = field(default=None, repr=False)
    checkpoint: OutputPath | None = None  # a stream's
    stream: StreamSettings | None = None
    states: tuple[DirState, ...] = ()  # what the output checks found, for the swap (`run`)
    request: RunRequest | None = field(default=None, repr=False)

    def at(self, outputs: Outputs, spark: SparkSession) -> ResolvedRun:
        """This run written where `outputs` says (a staging directory beside each, or in place)."""
        request = self.request
        assert request is not None
        output = output_path(outputs.at(request.output), spark)
        checkpoint = None
        if self.stream is not None:
            external = external_checkpoint(request.dirs())
            checkpoint = output_path(outputs.at(external), spark) if external is not None else output / "_checkpoint"
        reports = output_path(outputs.at(request.report_dir)) if request.report_dir is not None else output
        return replace(self, output=output, reports=reports, checkpoint=checkpoint)


def resolve_run(
    request: RunRequest,
    spark: SparkSession,
    modes: bool = True,
    stream: StreamSettings | None = None,
    plan: ReusedPlan | None = None,
    output_name: str | None = None,
) -> ResolvedRun:
    """`request`, resolved: its input inspected, `partitions` decided (the session's default
    parallelism when None), every location the run writes checked against the input, --plan-from's
    plan loaded, and, with `modes`, the output mode's refusals made and the sink's tables prepared
    (`run`; `run_batch` and `run_stream` apply no mode). `stream` adds a `StreamConfig`'s own settings;
    `plan` is a plan already loaded; `output_name` the output the summary names, if not the output."""
    from rebalancer.pipeline.ingest.files import input_name
    from rebalancer.pipeline.outputs.check import check_output_location
    from rebalancer.pipeline.session.build import default_parallelism

    spec = resolve_input(request, spark)
    if request.stream and spec.files and not spec.is_directory():  # type: ignore[attr-defined]  # a topic has no files
        raise ValueError(f"streaming needs an input directory, got a file: {input_name(spec)}")
    check_output_location(request.output, spec, request.checkpoint_location, spark, request.report_dir)
    partitions = request.partitions if request.partitions is not None else default_parallelism(spark)
    if plan is None and request.plan_from is not None and not request.stream:
        plan = request.loaded_plan(partitions) or load_plan(request.plan_from, partitions, spark)
    states: list[DirState | None] = check_run_outputs(request, spark) if modes else []
    if modes and request.sink is not None:
        from rebalancer.pipeline.sinks import prepare_sink

        # A table with other columns fails here, before any work; a group run keys its tables by batch.
        prepare_sink(request.sink, spark, stream=request.keyed_by_batch, handlers=request.handlers)
    output = output_path(request.output, spark)
    settings = None
    if request.stream:
        settings = stream or StreamSettings(
            rebalance_every=request.rebalance_every,
            max_moves=request.max_moves,
            max_batches=request.max_batches,
            files_per_batch=request.files_per_batch,
            available_now=request.available_now,
        )
    checkpoint = None
    if request.stream:
        checkpoint = output_path(request.checkpoint, spark) if request.checkpoint else output / "_checkpoint"
    return ResolvedRun(
        input=spec,
        output=output,
        output_name=shown_location(output_name or str(output)),  # a URI's password as ***
        reports=output_path(request.report_dir) if request.report_dir is not None else output,
        partitions=partitions,
        partitioning=request.partitioning,
        handlers=request.handlers,
        cost=request.cost,
        mode=request.mode if modes else None,
        plan=plan,
        group_cost=request.group_cost,
        report=request.report,
        compare_hash=request.compare_hash,
        sink=request.sink,
        checkpoint=checkpoint,
        stream=settings,
        states=tuple(state for state in states if state is not None),
        request=request,
    )
