"""Running a stream: the query, its stop, and the summary it leaves."""

from __future__ import annotations

import copy
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from rebalancer.balance.metrics import max_over_median
from rebalancer.pipeline.ingest.contract import SKEW_DIGITS
from rebalancer.pipeline.ingest.files import input_name, read_stream
from rebalancer.pipeline.outputs.summary import RunSummary, StreamFigures, routing_from_json
from rebalancer.pipeline.outputs.summary_files import summarise_and_write
from rebalancer.pipeline.resolved import ResolvedRun, RunHooks, RunRequest, StreamSettings, resolve_run
from rebalancer.pipeline.session.build import pipeline_conf
from rebalancer.pipeline.session.connect import is_connect
from rebalancer.pipeline.session.quiet import sigint
from rebalancer.pipeline.stream.processor import BatchProcessor
from rebalancer.pipeline.stream.query import (
    MISSING_ON_SERVER,
    NOT_ON_CONNECT_SERVER,
    _ConnectProgress,
    _QueryWaiter,
    stopped_after_batches,
)
from rebalancer.pipeline.stream.state import BatchProgress, StreamConfig, StreamData, StreamState

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from rebalancer.pipeline.ingest.contract import Input
    from rebalancer.pipeline.routing.handler_map import Pipeline
    from rebalancer.pipeline.sinks import PostgresSink

# The logger of the module these lines came from, so logging set up for it keeps working.
log = logging.getLogger("rebalancer.pipeline.stream")


class _QuietStop:
    """Stopping via StopAfterBatches is expected: keep py4j and Spark from logging it as a failure.

    Real failures still surface: they end the query with an exception that `run_stream` re-raises.
    """

    PY4J_LOGGER = "py4j.clientserver"
    JVM_LOGGER = "org.apache.spark.sql.execution.streaming"

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.py4j_level = logging.getLogger(self.PY4J_LOGGER).level

    def _set_jvm(self, level: str) -> None:
        try:
            jvm = self.spark.sparkContext._jvm
            assert jvm is not None
            levels = jvm.org.apache.logging.log4j.Level
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
                self.JVM_LOGGER, getattr(levels, level)
            )
        except Exception:  # logging only; never fail a run over it
            log.debug("could not change the JVM log level", exc_info=True)

    def __enter__(self) -> _QuietStop:
        logging.getLogger(self.PY4J_LOGGER).setLevel(logging.CRITICAL)
        self._set_jvm("OFF")
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger(self.PY4J_LOGGER).setLevel(self.py4j_level)
        self._set_jvm("ERROR")


def stream_reader(spark: SparkSession, spec: Input, files_per_batch: int) -> DataFrame:
    return read_stream(spark, spec, files_per_batch)


def run_stream(
    spark: SparkSession,
    spec: Input,
    out: str | Path,
    config: StreamConfig,
    sink: PostgresSink | None = None,
    report_dir: str | Path | None = None,
    handlers: Pipeline | None = None,
    cost: str = "rows",
    on_batch: Callable[[BatchProgress], None] | None = None,
    output_mode: str | None = None,
    output_name: str | None = None,
) -> RunSummary:
    """Run until the input is drained (available_now), `max_batches` are done, or Ctrl-C.

    The library's entry: `config` checked (`StreamConfig.validate`), then a `RunRequest` of these
    settings, resolved (`resolve_run`) without an output mode (`outputs.mode` is only recorded), and
    run by `drive_stream`.

    `on_batch` gets each micro-batch's BatchProgress once it is applied (on Spark's callback thread).
    Ctrl-C (SIGINT, when called from the main thread) stops the query cleanly: the batch in flight is
    rolled back, and the summary of the batches applied is returned with `"interrupted": true`.

    `out` and the checkpoint may be Hadoop filesystem URIs (see `run_batch`); summary.json and
    plan.json go to `report_dir` if given.

    With `sink`, each micro-batch is also written to PostgreSQL exactly once (`rebalancer.pipeline.sinks`).
    `output_name` is the output the summary names, when `out` is where the run is staged.

    On Spark Connect the batches are applied by the server's foreachBatch worker, which must import
    rebalancer; `on_batch` is then called on the client's listener thread, from the state file.
    """
    config.validate()
    request = RunRequest(
        input=spec,
        output=out,
        partitions=config.partitions,
        partitioning=config.partitioning,
        handlers=handlers,
        cost=cost,
        stream=True,
        checkpoint=config.checkpoint,
        report_dir=report_dir,
        sink=sink,
    )
    settings = StreamSettings(
        rebalance_every=config.rebalance_every,
        max_moves=config.max_moves,
        max_batches=config.max_batches,
        files_per_batch=config.files_per_batch,
        available_now=config.available_now,
        trigger_seconds=config.trigger_seconds,
        crash_after_batch=config.crash_after_batch,
    )
    resolved = resolve_run(request, spark, modes=False, stream=settings, output_name=output_name)
    return drive_stream(replace(resolved, mode=output_mode), RunHooks(on_batch=on_batch), spark)


def drive_stream(run: ResolvedRun, hooks: RunHooks, spark: SparkSession) -> RunSummary:
    """The stream of `run` (resolved: checked, its partitions decided), until it stops; its summary
    written beside the outputs (`summarise_and_write`)."""
    with pipeline_conf(spark):
        return _drive_stream(run, hooks, spark)


def stream_config(run: ResolvedRun) -> StreamConfig:
    """What the foreachBatch processor takes (and Spark Connect pickles) of a resolved stream."""
    settings = run.stream or StreamSettings()
    return StreamConfig(
        partitions=run.partitions,
        partitioning=run.partitioning,
        rebalance_every=settings.rebalance_every,
        max_moves=settings.max_moves,
        max_batches=settings.max_batches,
        files_per_batch=settings.files_per_batch,
        available_now=settings.available_now,
        checkpoint=str(run.checkpoint) if run.checkpoint is not None else None,
        trigger_seconds=settings.trigger_seconds,
        crash_after_batch=settings.crash_after_batch,
    )


def _drive_stream(run: ResolvedRun, hooks: RunHooks, spark: SparkSession) -> RunSummary:
    from pyspark.errors import StreamingQueryException

    config, spec, on_batch = stream_config(run), run.input, hooks.on_batch
    checkpoint = run.checkpoint if run.checkpoint is not None else run.output / "_checkpoint"
    state = StreamState(checkpoint / "rebalancer" / "state.json", config.partitions)
    processor = BatchProcessor(
        run.output, config, state, sink=run.sink, checkpoint=checkpoint, handlers=run.handlers, cost=run.cost
    )
    # On Spark Connect the processor runs in a server-side worker: progress comes from its state file.
    connect = _ConnectProgress(state, on_batch) if is_connect(spark) else None
    processor.on_batch = on_batch if connect is None else None
    started = time.perf_counter()
    writer = (
        stream_reader(spark, spec, config.files_per_batch)
        .writeStream.foreachBatch(processor)
        .option("checkpointLocation", str(checkpoint / "query"))
    )
    writer = (
        writer.trigger(availableNow=True)
        if config.available_now
        else writer.trigger(processingTime=f"{config.trigger_seconds} seconds")
    )
    quiet = _QuietStop(spark) if config.max_batches is not None else None
    if quiet:
        quiet.__enter__()
    if connect is not None:
        spark.streams.addListener(connect.listener)
    try:
        query = writer.start()
    except BaseException as exc:
        if connect is not None:
            spark.streams.removeListener(connect.listener)
            if MISSING_ON_SERVER in str(exc):  # the worker failed to unpickle the processor
                raise ValueError(f"stream: {NOT_ON_CONNECT_SERVER}") from None
        raise
    waiter = _QueryWaiter(query)
    interrupted = False
    try:
        interrupted = waiter.wait()
        if interrupted:
            log.info("interrupted: stopping the query")
            if quiet is None:  # the batch in flight fails as it is cancelled: expected now
                quiet = _QuietStop(spark).__enter__()
            with sigint(signal.SIG_IGN):  # a second Ctrl-C must not cut a Py4J call in half
                query.stop()
                waiter.ended.wait()
        elif waiter.failure is not None:
            raise waiter.failure
    except StreamingQueryException as exc:
        # On Connect the processor's stop_requested lives in the server's worker: its error text tells.
        if not (processor.stop_requested or (connect is not None and stopped_after_batches(exc))):
            raise
    finally:
        try:
            if query.isActive:
                query.stop()
        finally:
            if quiet:
                quiet.__exit__(None, None, None)
            if connect is not None:
                spark.streams.removeListener(connect.listener)  # its thread would keep the process alive
            waiter.close()
    if connect is not None:
        data = connect.flush()  # the lines of batches whose events had not arrived, then the state
    else:
        with processor.lock:  # the callback thread is done with the state once the query has stopped
            data = copy.deepcopy(state.data)
    summary = stream_summary(run, data, time.perf_counter() - started, interrupted)
    plan_json = dict(data.last_plan) if data.last_plan else None
    return summarise_and_write(run.reports, summary, plan_json)


def stream_summary(run: ResolvedRun, data: StreamData, elapsed: float, interrupted: bool = False) -> RunSummary:
    """The stream's summary, from its state: the totals of every batch applied (this run's and, when
    it resumed a checkpoint, the earlier runs')."""
    totals = data.totals
    unhandled = data.unhandled_types or {}
    handlers = data.handlers or {}
    return RunSummary(
        input=input_name(run.input),
        format=run.input.format,
        output=run.output_name,
        output_mode=run.mode,
        counts=totals.ordered(),
        types=len(data.type_totals),
        partitions=run.partitions,
        partitioning=run.partitioning,
        elapsed_s=round(elapsed, 3),
        task_rows=data.task_rows,
        task_seconds=data.task_seconds,
        skew_ratio=max_over_median(data.task_rows, SKEW_DIGITS),
        routing=routing_from_json(
            {
                "handled": totals.accepted - sum(unhandled.values()),
                "unhandled": sum(unhandled.values()),
                "unhandled_types": unhandled,
                "handlers": handlers,
            }
        ),
        sink=data.sink or None,
        stream=StreamFigures(data.batches, data.last_batch_id, data.plans, data.moves, interrupted),
    )
