"""`rebalancer pipeline run --stream`: Structured Streaming with the seed's periodic rebalance.

Every micro-batch goes through the batch path (classify, count, dispatch) inside `foreachBatch`.
Outputs are keyed by batch id (`OUT/metrics/batch_id=N/`, `OUT/quarantine/batch_id=N/`) and
overwritten on a retry, so at-least-once `foreachBatch` still gives exactly one copy per batch.
The rebalancer's state (slot map, counters, the last batch applied) lives in
`CHECKPOINT/rebalancer/state.json` and is written only after a batch's outputs, so a batch
replayed after a crash rewrites its outputs but is counted once.

On Spark Connect, foreachBatch runs the same `BatchProcessor` in a Python worker of the server's
driver; this process learns what it applied from the state file (see `_ConnectProgress`).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import logging
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rebalancer.balance.metrics import max_over_median
from rebalancer.pipeline.contract import REASONS, SKEW_DIGITS
from rebalancer.pipeline.core import PassTarget, run_pass
from rebalancer.pipeline.dispatch import PARTITIONINGS
from rebalancer.pipeline.framework import Routing
from rebalancer.pipeline.ingest import InputSpec, check_output, input_name, read_stream
from rebalancer.pipeline.paths import OutputPath, output_path, write_json
from rebalancer.pipeline.session import is_connect, pipeline_conf
from rebalancer.pipeline.slots import (
    WHOLE,
    SlotPlan,
    hash_plan,
    items_from_json,
    items_to_json,
    make_plan,
    plan_items,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from rebalancer.pipeline.contract import Input
    from rebalancer.pipeline.framework import Pipeline
    from rebalancer.pipeline.sinks import PostgresSink

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamConfig:
    partitions: int
    partitioning: str = "weighted"
    rebalance_every: int = 5
    max_moves: int | None = None
    max_batches: int | None = None
    files_per_batch: int = 1
    available_now: bool = False
    checkpoint: str | Path | None = None  # a local path or a Hadoop filesystem URI
    trigger_seconds: float = 2.0
    # Fault injection for tests: raise after this batch's outputs are written, before its state is.
    crash_after_batch: int | None = None

    def validate(self) -> None:
        if self.partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {self.partitions}")
        if self.partitioning not in PARTITIONINGS:
            raise ValueError(
                f"partitioning must be one of {', '.join(PARTITIONINGS)}, got {self.partitioning!r}"
            )
        if self.rebalance_every < 1:
            raise ValueError(f"rebalance_every must be >= 1, got {self.rebalance_every}")
        if self.max_batches is not None and self.max_batches < 1:
            raise ValueError(f"max_batches must be >= 1, got {self.max_batches}")
        if self.files_per_batch < 1:
            raise ValueError(f"files_per_batch must be >= 1, got {self.files_per_batch}")
        if self.max_moves is not None and self.max_moves < 0:
            raise ValueError(f"max_moves must be >= 0, got {self.max_moves}")


@dataclass(frozen=True)
class BatchProgress:
    """One micro-batch as applied, for `run_stream`'s `on_batch` (the CLI prints it as one line)."""

    batch_id: int
    rows: int
    accepted: int
    quarantined: int
    seconds: float
    skew_ratio: float | None  # max/median rows over this batch's tasks
    replanned: bool
    moves: int

    def line(self) -> str:
        skew = "n/a" if self.skew_ratio is None else f"{self.skew_ratio:.2f}"
        plan = f", re-planned ({self.moves} moved)" if self.replanned else ""
        return (
            f"batch {self.batch_id}: {self.rows:,} rows ({self.quarantined:,} quarantined) in "
            f"{self.seconds:.1f} s, skew {skew}{plan}"
        )


class StopAfterBatches(Exception):
    """Raised inside foreachBatch to end the query before the batch commits: it reruns on restart."""


class InjectedCrash(RuntimeError):
    """The test hook's simulated crash."""


# 2: items are (type, shard) records and bucket counts (type, bucket, rows) lists, never "type#n" strings.
STATE_VERSION = 2
# The state keeps the progress of this many latest batches, for a client that prints them from there
# (Spark Connect, where foreachBatch runs on the server); older ones are dropped.
PROGRESS_KEPT = 100


def _empty_state(partitions: int) -> dict[str, Any]:
    return {
        "version": STATE_VERSION,
        "partitions": partitions,
        "last_batch_id": -1,
        "batches": 0,
        "plans": 0,
        "owner": [],
        "sharded": [],
        "shard_of": {},
        "window_type_counts": {},
        "window_bucket_counts": [],
        "totals": {"ingested": 0, "accepted": 0, "quarantined": 0, "reasons": {}},
        "type_totals": {},
        "task_rows": [0] * partitions,
        "task_seconds": [0.0] * partitions,
        "moves": 0,
        "last_plan": None,
    }


def _state_problem(data: Any, partitions: int) -> str | None:
    """What makes a parsed state unusable (a key missing, a value of the wrong JSON type); None if fine.

    The top-level keys are checked, and the totals' counters: what every batch and the summary read.
    """
    if not isinstance(data, dict):
        return f"expected a JSON object, got {type(data).__name__}"
    if data.get("version") != STATE_VERSION or data.get("partitions") != partitions:
        return None  # another version, other partitions: the caller's own errors say which
    for key, empty in _empty_state(partitions).items():
        if empty is None:
            continue
        value = data.get(key)
        kind = float if isinstance(empty, float) else type(empty)
        if value is None or isinstance(value, bool) or not isinstance(value, kind):
            return f"{key} must be a JSON {_JSON_TYPE[kind]}, got {_shown_json(value)}"
        if key in ("task_rows", "task_seconds") and len(value) != partitions:
            return f"{key} must hold one number per partition ({partitions}), got {len(value)}"
    totals = data["totals"]
    for counter in ("ingested", "accepted", "quarantined"):
        if isinstance(totals.get(counter), bool) or not isinstance(totals.get(counter), int):
            return f"totals.{counter} must be a JSON integer, got {_shown_json(totals.get(counter))}"
    return None


_JSON_TYPE: dict[type, str] = {int: "integer", float: "number", list: "array", dict: "object", str: "string"}


def _shown_json(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


class StreamState:
    """The rebalancer's state under the checkpoint directory, replaced atomically per batch.

    No file is a new checkpoint: an empty state. A file that cannot be read, or does not hold a
    state, is refused in one line naming it, never replaced by an empty state: it holds the last
    batch applied (what keeps a batch Spark replays from being counted twice) and the totals of
    every batch before, while Spark's own checkpoint next to it would go on from its offsets, so the
    run would go on with its counts silently restarted from zero.
    """

    def __init__(self, path: OutputPath, partitions: int) -> None:
        self.path = path
        self.partitions = partitions
        problem: str | None
        try:
            self.data = json.loads(path.read_text())
        except FileNotFoundError:
            self.data = _empty_state(partitions)
            problem = None
        except (OSError, ValueError) as exc:  # ValueError: not JSON, not UTF-8, or Hadoop's one-line error
            problem = f"{type(exc).__name__}: {exc}"
        else:
            problem = _state_problem(self.data, partitions)
        if problem is not None:
            raise ValueError(
                f"checkpoint state {path} cannot be used: {' '.join(problem.split())}; "
                "restore it, or start with a new --checkpoint"
            )
        if self.data.get("version") != STATE_VERSION:
            raise ValueError(
                f"checkpoint state {path} is from an older rebalancer (version {self.data.get('version', 1)}, "
                f"need {STATE_VERSION}); start with a new --checkpoint"
            )
        if self.data.get("partitions") != partitions:
            raise ValueError(
                f"partitions must match the checkpoint's {self.data.get('partitions')}, got {partitions}"
            )

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json(self.path, self.data)

    def __reduce__(self) -> tuple[type[StreamState], tuple[OutputPath, int]]:
        """Unpickled (in Spark Connect's foreachBatch worker) by reading the file again: a worker
        started afresh mid-query continues from what was saved, not from what the client once read."""
        return type(self), (self.path, self.partitions)


class BatchProcessor:
    """The foreachBatch function and what it needs across batches."""

    # Called with each batch's progress once it is applied (set by run_stream).
    on_batch: Callable[[BatchProgress], None] | None = None

    def __init__(
        self,
        out: OutputPath,
        config: StreamConfig,
        state: StreamState,
        sink: PostgresSink | None = None,
        checkpoint: OutputPath | None = None,
        handlers: Pipeline | None = None,
        cost: str = "rows",
    ) -> None:
        self.handlers = handlers
        self.cost = cost
        self.out = out
        self.config = config
        self.state = state
        self.sink = sink
        self.checkpoint = checkpoint
        self.processed = 0
        self.stop_requested = False
        self.lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        """Spark Connect pickles the processor for its server-side worker: the lock is made again
        there, and `on_batch` stays in the client (which prints progress from the state file)."""
        fields = dict(self.__dict__)
        del fields["lock"]
        fields.pop("on_batch", None)
        return fields

    def __setstate__(self, fields: dict[str, Any]) -> None:
        self.__dict__.update(fields)
        self.lock = threading.Lock()

    def current_plan(
        self, counts_type: dict[str, int], counts_bucket: dict[tuple[str, int], int], batch_id: int
    ) -> SlotPlan:
        """The slot map for this batch: kept, or re-planned every `rebalance_every` batches."""
        data = self.state.data
        n = self.config.partitions
        if self.config.partitioning == "hash":
            return hash_plan({}, {}, n)
        due = data["batches"] % self.config.rebalance_every == 0
        previous = items_from_json(data["owner"])
        if previous and not due:
            return _plan_from_state(data, n)
        window_types = dict(data["window_type_counts"])
        window_buckets = {(str(t), int(b)): int(c) for t, b, c in data["window_bucket_counts"]}
        if not window_types:
            # No history yet: plan from what this batch holds.
            window_types, window_buckets = counts_type, counts_bucket
        items, sharded, shard_of = plan_items(window_types, window_buckets, n)
        max_moves = self.config.max_moves if previous else None
        plan = make_plan(items, sharded, n, previous=previous or None, max_moves=max_moves, shard_of=shard_of)
        # Types quiet in this window keep their slots (sticky) instead of falling back to hashing.
        planned_types = {item.type_name for item in plan.owner}
        for item, slot in previous.items():
            if item.type_name not in planned_types:
                plan.owner[item] = int(slot)
                if item.shard != WHOLE:
                    plan.sharded = sorted({*plan.sharded, item.type_name})
                    plan.shard_of[item.type_name] = _shard_map(data, item.type_name)
        data["owner"] = items_to_json(plan.owner)
        data["sharded"] = list(plan.sharded)
        data["shard_of"] = {t: {str(b): s for b, s in m.items()} for t, m in plan.shard_of.items()}
        data["plans"] += 1
        data["moves"] += sum(1 for _, old, _ in plan.moves if old >= 0)
        data["window_type_counts"] = {}
        data["window_bucket_counts"] = []
        data["last_plan"] = {"batch_id": batch_id, **plan.to_json()}
        log.info(
            "batch %d: re-planned %d items over %d tasks, %d moved, planned max/median %s",
            batch_id,
            len(plan.owner),
            n,
            sum(1 for _, old, _ in plan.moves if old >= 0),
            max_over_median(plan.load_after, SKEW_DIGITS),
        )
        return plan

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        with self.lock:
            if self.stop_requested or (
                self.config.max_batches is not None and self.processed >= self.config.max_batches
            ):
                self.stop_requested = True
                raise StopAfterBatches(f"stopping before batch {batch_id}")
            if batch_id <= self.state.data["last_batch_id"]:
                # Replayed after a crash between our state write and Spark's commit: already applied.
                log.info("batch %d already applied, skipping", batch_id)
                return
            snapshot = copy.deepcopy(self.state.data)
            started = time.perf_counter()
            try:
                with pipeline_conf(frame.sparkSession):
                    self._process(frame, batch_id)
            except BaseException:
                self.state.data = snapshot
                raise
            progress = _progress(snapshot, self.state.data, batch_id, time.perf_counter() - started)
            _keep_progress(self.state.data, progress)
            self.state.save()
            self.processed += 1
            log.info("%s", progress.line())
            if self.on_batch is not None:
                self.on_batch(progress)

    def _process(self, frame: DataFrame, batch_id: int) -> None:
        """Write the batch's outputs (the pass every run makes), then count it in the (unsaved) state."""

        def plan_for(routing: Routing) -> SlotPlan:
            builtin = routing.builtin_counts
            return self.current_plan(builtin.type_counts, builtin.bucket_counts, batch_id)

        def sink_write(frames: dict[str, DataFrame], keys: Any) -> None:
            from rebalancer.pipeline.sinks import write_stream_outputs

            assert self.sink is not None
            # The batch's tables and its rebalancer_batches row commit together; a replay is skipped.
            write_stream_outputs(
                self.sink,
                frames,
                self.checkpoint or self.out / "_checkpoint",
                batch_id,
                self.state.data.setdefault("sink", {}),
                keys=keys,
            )

        stores = self.checkpoint / "rebalancer" if self.checkpoint is not None else None
        done = run_pass(
            frame,
            PassTarget(self.out, batch_id, stores=stores),
            self.config.partitioning,
            self.config.partitions,
            plan_for,
            handlers=self.handlers,
            cost=self.cost,
            sink_write=sink_write if self.sink is not None else None,
        )
        if self.config.crash_after_batch == batch_id:
            raise InjectedCrash(f"injected crash after writing batch {batch_id}")
        self._apply(done.counts, done.task_rows, done.task_seconds, batch_id, done.routing, done.handler_sections)

    def _apply(
        self,
        counts: Any,
        task_rows: list[int],
        task_seconds: list[float],
        batch_id: int,
        routing: Routing | None = None,
        sections: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        data = self.state.data
        if routing is not None:
            add_routing(data, routing, sections or {})
        # The slot plan's window counts only the types the built-in aggregation runs.
        window_counts = routing.builtin_counts if routing is not None else counts
        totals = data["totals"]
        totals["ingested"] += counts.ingested
        totals["accepted"] += counts.accepted
        totals["quarantined"] += counts.quarantined
        for reason, count in counts.reasons.items():
            totals["reasons"][reason] = totals["reasons"].get(reason, 0) + count
        for type_name, count in counts.type_counts.items():
            data["type_totals"][type_name] = data["type_totals"].get(type_name, 0) + count
        for type_name, count in window_counts.type_counts.items():
            data["window_type_counts"][type_name] = data["window_type_counts"].get(type_name, 0) + count
        window = {(str(t), int(b)): int(c) for t, b, c in data["window_bucket_counts"]}
        for key, count in window_counts.bucket_counts.items():
            window[key] = window.get(key, 0) + count
        data["window_bucket_counts"] = [[t, b, c] for (t, b), c in sorted(window.items())]
        data["task_rows"] = [a + b for a, b in zip(data["task_rows"], task_rows)]
        data["task_seconds"] = [round(a + b, 4) for a, b in zip(data["task_seconds"], task_seconds)]
        data["batches"] += 1
        data["last_batch_id"] = batch_id


def add_routing(data: dict[str, Any], routing: Routing, sections: dict[str, dict[str, Any]]) -> None:
    """Add one batch's handler totals (types seen, rows, calls) and unhandled rows to the state."""
    handlers = data.setdefault("handlers", {})
    parts = {name: (types, sections.get(name, {})) for name, types in routing.handlers.items()}
    builtin = routing.builtin_counts.type_counts
    if builtin:
        parts["metrics"] = (list(builtin), {})
    for name, (types, section) in parts.items():
        total = handlers.setdefault(name, {"types": 0, "rows": 0, "calls": 0, "seen_types": []})
        seen = sorted({*total["seen_types"], *types})
        total["seen_types"] = seen
        total["types"] = len(seen)
        total["rows"] += sum(int(routing.counts.type_counts[t]) for t in types)
        total["calls"] += int(section.get("calls") or 0)
    unhandled = data.setdefault("unhandled_types", {})
    for type_name, count in routing.unhandled.items():
        unhandled[type_name] = unhandled.get(type_name, 0) + count


def _shard_map(data: dict[str, Any], type_name: str) -> dict[int, int]:
    return {int(b): int(s) for b, s in data.get("shard_of", {}).get(type_name, {}).items()}


def _progress(before: dict[str, Any], after: dict[str, Any], batch_id: int, seconds: float) -> BatchProgress:
    """What one batch added to the state."""
    task_rows = [new - old for new, old in zip(after["task_rows"], before["task_rows"])]
    totals, previous = after["totals"], before["totals"]
    return BatchProgress(
        batch_id=batch_id,
        rows=totals["ingested"] - previous["ingested"],
        accepted=totals["accepted"] - previous["accepted"],
        quarantined=totals["quarantined"] - previous["quarantined"],
        seconds=round(seconds, 3),
        skew_ratio=max_over_median(task_rows, SKEW_DIGITS),
        replanned=after["plans"] > before["plans"],
        moves=after["moves"] - before["moves"],
    )


def _keep_progress(data: dict[str, Any], progress: BatchProgress) -> None:
    """The batch's progress line in the state, numbered by the batches applied so far."""
    kept = [*data.get("progress", []), {"batches": data["batches"], **dataclasses.asdict(progress)}]
    data["progress"] = kept[-PROGRESS_KEPT:]


def _plan_from_state(data: dict[str, Any], partitions: int) -> SlotPlan:
    zeros = [0] * partitions
    return SlotPlan(
        partitions,
        items_from_json(data["owner"]),
        {},
        list(zeros),
        list(zeros),
        sharded=list(data["sharded"]),
        skipped="kept",
        shard_of={t: _shard_map(data, t) for t in data.get("shard_of", {})},
    )


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
) -> dict[str, Any]:
    """Run until the input is drained (available_now), `max_batches` are done, or Ctrl-C.

    `on_batch` gets each micro-batch's BatchProgress once it is applied (on Spark's callback thread).
    Ctrl-C (SIGINT, when called from the main thread) stops the query cleanly: the batch in flight is
    rolled back, and the summary of the batches applied is returned with `"interrupted": true`.

    `out` and the checkpoint may be Hadoop filesystem URIs (see `run_batch`); summary.json and
    plan.json go to `report_dir` if given.

    With `sink`, each micro-batch is also written to PostgreSQL exactly once (`rebalancer.pipeline.sinks`).

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
    )


# foreachBatch on Spark Connect unpickles the processor in the server driver's Python, which
# `--ship` (an artifact: executors only) does not reach.
MISSING_ON_SERVER = "No module named 'rebalancer'"
NOT_ON_CONNECT_SERVER = (
    "the Spark Connect server's Python cannot import rebalancer: a stream's foreachBatch runs there, "
    "and --ship reaches only the executors; install rebalancer where the server runs"
)


def stopped_after_batches(error: BaseException) -> bool:
    """A query failure that is `StopAfterBatches` raised in Spark Connect's foreachBatch worker: the
    client sees only the worker's traceback text, where the class appears by its qualified name."""
    return f"{StopAfterBatches.__module__}.{StopAfterBatches.__qualname__}:" in str(error)


class _ConnectProgress:
    """Progress lines of a Spark Connect stream, in the client: foreachBatch runs in the server's
    worker, whose state file (saved before each batch commits) lists every applied batch's progress.
    Each query progress event (on the client's listener thread) prints the batches not printed yet;
    `flush` does the same once the query has ended, for events that never came."""

    def __init__(self, state: StreamState, on_batch: Callable[[BatchProgress], None] | None) -> None:
        self.path = state.path
        self.partitions = state.partitions
        self.on_batch = on_batch
        self.printed_batches = int(state.data["batches"])  # applied before this run
        self.lock = threading.Lock()
        self.listener = _progress_listener_class()(self)

    def on_progress_event(self) -> None:
        try:
            self.flush()
        except (OSError, ValueError):  # the run's end flushes again, and reports a bad state there
            log.debug("could not read the stream state for progress", exc_info=True)

    def flush(self) -> dict[str, Any]:
        """Calls `on_batch` for each batch applied since the last call; returns the state read."""
        with self.lock:
            data = StreamState(self.path, self.partitions).data
            for record in data.get("progress", []):
                record = dict(record)
                batches = int(record.pop("batches"))
                if batches <= self.printed_batches:
                    continue
                if batches > self.printed_batches + 1:
                    log.warning(
                        "%d micro-batches were applied without a progress line (the state keeps the last %d)",
                        batches - self.printed_batches - 1,
                        PROGRESS_KEPT,
                    )
                self.printed_batches = batches
                if self.on_batch is not None:
                    self.on_batch(BatchProgress(**record))
            return data


@functools.cache
def _progress_listener_class() -> type[Any]:
    """A StreamingQueryListener (pyspark is optional: imported on first use) calling `_ConnectProgress`."""
    from pyspark.sql.streaming import StreamingQueryListener

    class ProgressListener(StreamingQueryListener):
        def __init__(self, progress: _ConnectProgress) -> None:
            self.progress = progress

        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            self.progress.on_progress_event()

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return ProgressListener


class _QueryWaiter:
    """Waits for a query on a helper thread, so that Ctrl-C finds the main thread outside Py4J.

    A SIGINT during a Py4J call leaves that call's connection mid-answer, and pyspark's own SIGINT
    handler makes a Py4J call from inside the handler: either can end in a Py4J traceback. Here the
    main thread waits on a pipe, and Ctrl-C only raises KeyboardInterrupt out of that wait.

    The pipe is also the signal wakeup fd. The kernel may hand SIGINT to any thread (gRPC's native
    threads, on Spark Connect), and a lock wait in the main thread is only cut short by a signal
    that thread itself receives; Python's handler writes to the wakeup fd whichever thread took it.
    """

    def __init__(self, query: Any) -> None:
        self.query = query
        self.ended = threading.Event()
        self.failure: BaseException | None = None
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)
        self._watcher = threading.Thread(target=self._watch, name="stream-query-wait", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        try:
            self.query.awaitTermination()
        except BaseException as exc:  # handed to the main thread, which decides
            self.failure = exc
        finally:
            self.ended.set()  # before the byte: a reader woken by it must find `ended` set
            self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._write_fd, b"\0")
        except BlockingIOError:  # full: the reader has a wake-up pending already
            pass

    def wait(self) -> bool:
        """True if Ctrl-C came before the query ended."""
        if threading.current_thread() is not threading.main_thread():
            self.ended.wait()
            return False
        previous = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        try:
            with _sigint(signal.default_int_handler):
                while not self.ended.is_set():
                    select.select([self._read_fd], [], [])
                    self._drain()
        except KeyboardInterrupt:
            return True
        finally:
            signal.set_wakeup_fd(previous)
        return False

    def _drain(self) -> None:
        try:
            while os.read(self._read_fd, 64):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        """Closes the pipe once the watcher is done with it (else leaves it: two descriptors)."""
        if self.ended.is_set() and self._read_fd >= 0:
            self._watcher.join()  # past `ended` it only writes its byte, then returns
            os.close(self._read_fd)
            os.close(self._write_fd)
            self._read_fd = self._write_fd = -1


@contextmanager
def _sigint(handler: Any) -> Iterator[None]:
    """`handler` for SIGINT for the duration, where this thread may set it (the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def write_stream_summary(
    out: OutputPath,
    spec: InputSpec,
    config: StreamConfig,
    data: dict[str, Any],
    elapsed: float,
    reports: OutputPath | None = None,
    interrupted: bool = False,
    output_mode: str | None = None,
) -> dict[str, Any]:
    totals = data["totals"]
    summary = {
        "mode": "stream",
        "input": input_name(spec),
        "format": spec.format,
        "output": str(out),
        "output_mode": output_mode,
        "ingested": totals["ingested"],
        "accepted": totals["accepted"],
        "quarantined": totals["quarantined"],
        "quarantine_reasons": {r: totals["reasons"][r] for r in REASONS if r in totals["reasons"]},
        "types": len(data["type_totals"]),
        "partitions": config.partitions,
        "partitioning": config.partitioning,
        "batches": data["batches"],
        "last_batch_id": data["last_batch_id"],
        "plans": data["plans"],
        "moves": data["moves"],
        "elapsed_s": round(elapsed, 3),
        "task_rows": data["task_rows"],
        "task_seconds": data["task_seconds"],
        "skew_ratio": max_over_median(data["task_rows"], SKEW_DIGITS),
        "handled": data["totals"]["accepted"] - sum(data.get("unhandled_types", {}).values()),
        "unhandled": sum(data.get("unhandled_types", {}).values()),
        "unhandled_types": data.get("unhandled_types", {}),
        "handlers": data.get("handlers", {}),
    }
    if data.get("sink"):
        summary["sink"] = data["sink"]
    if interrupted:
        summary["interrupted"] = True  # stopped by Ctrl-C: the batches above are all that were applied
    reports = reports or out  # where summary.json and plan.json live
    reports.mkdir(parents=True, exist_ok=True)
    write_json(reports / "summary.json", summary)
    if data.get("last_plan"):
        write_json(reports / "plan.json", {"partitioning": config.partitioning, **data["last_plan"]})
    return summary
