"""Running a stream: the query, its stop, and the summary it leaves."""

from __future__ import annotations

import copy
import logging
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rebalancer._secrets import shown_location
from rebalancer.balance.metrics import max_over_median
from rebalancer.pipeline._stream_batch import BatchProcessor
from rebalancer.pipeline._stream_query import (
    MISSING_ON_SERVER,
    NOT_ON_CONNECT_SERVER,
    _ConnectProgress,
    _QueryWaiter,
    _sigint,
    stopped_after_batches,
)
from rebalancer.pipeline._stream_state import BatchProgress, StreamConfig, StreamData, StreamState
from rebalancer.pipeline.contract import REASONS, SKEW_DIGITS
from rebalancer.pipeline.ingest import InputSpec, check_output, input_name, read_stream
from rebalancer.pipeline.paths import OutputPath, output_path, write_json
from rebalancer.pipeline.session import is_connect, pipeline_conf

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from rebalancer.pipeline.contract import Input
    from rebalancer.pipeline.framework import Pipeline
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


def stream_reader(spark: SparkSession, spec: InputSpec | Input, files_per_batch: int) -> DataFrame:
    return read_stream(spark, spec, files_per_batch)


def run_stream(
    spark: SparkSession,
    spec: InputSpec,
    out: str | Path,
    config: StreamConfig,
    sink: PostgresSink | None = None,
    report_dir: str | Path | None = None,
    handlers: Pipeline | None = None,
    cost: str = "rows",
    on_batch: Callable[[BatchProgress], None] | None = None,
    output_mode: str | None = None,
    output_name: str | None = None,
) -> dict[str, Any]:
    """Run until the input is drained (available_now), `max_batches` are done, or Ctrl-C.

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
    if spec.files and not spec.is_directory():  # a Kafka topic has no files
        raise ValueError(f"streaming needs an input directory, got a file: {input_name(spec)}")
    target = output_path(out, spark)
    checkpoint = output_path(config.checkpoint, spark) if config.checkpoint else target / "_checkpoint"
    check_output(out, spec, checkpoint, spark=spark)
    reports = output_path(report_dir) if report_dir is not None else None
    with pipeline_conf(spark):
        return _run_stream(
            spark,
            spec,
            target,
            config,
            checkpoint,
            sink,
            reports=reports,
            handlers=handlers,
            cost=cost,
            on_batch=on_batch,
            output_mode=output_mode,
            output_name=output_name,
        )


def _run_stream(
    spark: SparkSession,
    spec: InputSpec,
    out: OutputPath,
    config: StreamConfig,
    checkpoint: OutputPath,
    sink: PostgresSink | None = None,
    reports: OutputPath | None = None,
    handlers: Pipeline | None = None,
    cost: str = "rows",
    on_batch: Callable[[BatchProgress], None] | None = None,
    output_mode: str | None = None,
    output_name: str | None = None,
) -> dict[str, Any]:
    from pyspark.errors import StreamingQueryException

    state = StreamState(checkpoint / "rebalancer" / "state.json", config.partitions)
    processor = BatchProcessor(
        out, config, state, sink=sink, checkpoint=checkpoint, handlers=handlers, cost=cost
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
            with _sigint(signal.SIG_IGN):  # a second Ctrl-C must not cut a Py4J call in half
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
    return write_stream_summary(
        out,
        spec,
        config,
        data,
        time.perf_counter() - started,
        reports,
        interrupted=interrupted,
        output_mode=output_mode,
        output_name=output_name,
    )


def write_stream_summary(
    out: OutputPath,
    spec: InputSpec,
    config: StreamConfig,
    data: StreamData,
    elapsed: float,
    reports: OutputPath | None = None,
    interrupted: bool = False,
    output_mode: str | None = None,
    output_name: str | None = None,
) -> dict[str, Any]:
    totals = data.totals
    unhandled = data.unhandled_types or {}
    summary: dict[str, Any] = {
        "mode": "stream",
        "input": input_name(spec),
        "format": spec.format,
        "output": shown_location(str(output_name or out)),  # a URI's password as ***
        "output_mode": output_mode,
        "ingested": totals.ingested,
        "accepted": totals.accepted,
        "quarantined": totals.quarantined,
        "quarantine_reasons": {r: totals.reasons[r] for r in REASONS if r in totals.reasons},
        "types": len(data.type_totals),
        "partitions": config.partitions,
        "partitioning": config.partitioning,
        "batches": data.batches,
        "last_batch_id": data.last_batch_id,
        "plans": data.plans,
        "moves": data.moves,
        "elapsed_s": round(elapsed, 3),
        "task_rows": data.task_rows,
        "task_seconds": data.task_seconds,
        "skew_ratio": max_over_median(data.task_rows, SKEW_DIGITS),
        "handled": totals.accepted - sum(unhandled.values()),
        "unhandled": sum(unhandled.values()),
        "unhandled_types": unhandled,
        "handlers": data.handlers or {},
    }
    if data.sink:
        summary["sink"] = data.sink
    if interrupted:
        summary["interrupted"] = True  # stopped by Ctrl-C: the batches above are all that were applied
    reports = reports or out  # where summary.json and plan.json live
    reports.mkdir(parents=True, exist_ok=True)
    write_json(reports / "summary.json", summary)
    if data.last_plan:
        write_json(reports / "plan.json", {"partitioning": config.partitioning, **data.last_plan})
    return summary
