"""`rebalancer pipeline run --stream`: Structured Streaming with the seed's periodic rebalance.

Every micro-batch goes through the batch path (classify, count, dispatch) inside `foreachBatch`.
Outputs are keyed by batch id (`OUT/metrics/batch_id=N/`, `OUT/quarantine/batch_id=N/`) and
overwritten on a retry, so at-least-once `foreachBatch` still gives exactly one copy per batch.
The rebalancer's state (slot map, counters, the last batch applied) lives in
`CHECKPOINT/rebalancer/state.json` and is written only after a batch's outputs, so a batch
replayed after a crash rewrites its outputs but is counted once.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rebalancer.pipeline.batch import count_input, skew_ratio, write_json
from rebalancer.pipeline.dispatch import PARTITIONINGS, dispatch
from rebalancer.pipeline.ingest import (
    REASONS,
    InputSpec,
    accepted_rows,
    check_output,
    classify,
    quarantine_rows,
    read_stream,
)
from rebalancer.pipeline.session import pipeline_conf
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
    checkpoint: Path | None = None
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


class StopAfterBatches(Exception):
    """Raised inside foreachBatch to end the query before the batch commits: it reruns on restart."""


class InjectedCrash(RuntimeError):
    """The test hook's simulated crash."""


# 2: items are (type, shard) records and bucket counts (type, bucket, rows) lists, never "type#n" strings.
STATE_VERSION = 2


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


class StreamState:
    """The rebalancer's state under the checkpoint directory, replaced atomically per batch."""

    def __init__(self, path: Path, partitions: int) -> None:
        self.path = path
        try:
            self.data = json.loads(path.read_text())
        except (OSError, ValueError):
            self.data = _empty_state(partitions)
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


class BatchProcessor:
    """The foreachBatch function and what it needs across batches."""

    def __init__(
        self,
        out: Path,
        config: StreamConfig,
        state: StreamState,
        sink: PostgresSink | None = None,
        checkpoint: Path | None = None,
    ) -> None:
        self.out = out
        self.config = config
        self.state = state
        self.sink = sink
        self.checkpoint = checkpoint
        self.processed = 0
        self.stop_requested = False
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
            try:
                with pipeline_conf(frame.sparkSession):
                    self._process(frame, batch_id)
            except BaseException:
                self.state.data = snapshot
                raise
            self.state.save()
            self.processed += 1

    def _process(self, frame: DataFrame, batch_id: int) -> None:
        """Write the batch's outputs, then count it in the (unsaved) state."""
        from pyspark import StorageLevel

        classified = classify(frame).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            counts = count_input(classified, self.config.partitions)
            plan = self.current_plan(counts.type_counts, counts.bucket_counts, batch_id)
            (
                quarantine_rows(classified)
                .write.mode("overwrite")
                .parquet(str(self.out / "quarantine" / f"batch_id={batch_id}"))
            )
            job = dispatch(accepted_rows(classified), self.config.partitioning, self.config.partitions, plan)
            # Kept for the sink, which would otherwise run the grouped map a second time.
            metrics = (
                job.metrics.persist(StorageLevel.MEMORY_AND_DISK) if self.sink is not None else job.metrics
            )
            (
                metrics.write.mode("overwrite")
                .partitionBy("date")
                .parquet(str(self.out / "metrics" / f"batch_id={batch_id}"))
            )
            task_rows, task_seconds = job.task_stats()
            if self.sink is not None:
                from rebalancer.pipeline.sinks import write_stream_outputs

                # The batch's tables and its rebalancer_batches row commit together; a replay is skipped.
                try:
                    outputs = {"metrics": metrics, "quarantine": quarantine_rows(classified)}
                    checkpoint = self.checkpoint or self.out / "_checkpoint"
                    write_stream_outputs(
                        self.sink, outputs, checkpoint, batch_id, self.state.data.setdefault("sink", {})
                    )
                finally:
                    metrics.unpersist()
            if self.config.crash_after_batch == batch_id:
                raise InjectedCrash(f"injected crash after writing batch {batch_id}")
        finally:
            classified.unpersist()
        self._apply(counts, task_rows, task_seconds, batch_id)

    def _apply(self, counts: Any, task_rows: list[int], task_seconds: list[float], batch_id: int) -> None:
        data = self.state.data
        totals = data["totals"]
        totals["ingested"] += counts.ingested
        totals["accepted"] += counts.accepted
        totals["quarantined"] += counts.quarantined
        for reason, count in counts.reasons.items():
            totals["reasons"][reason] = totals["reasons"].get(reason, 0) + count
        for type_name, count in counts.type_counts.items():
            data["window_type_counts"][type_name] = data["window_type_counts"].get(type_name, 0) + count
            data["type_totals"][type_name] = data["type_totals"].get(type_name, 0) + count
        window = {(str(t), int(b)): int(c) for t, b, c in data["window_bucket_counts"]}
        for key, count in counts.bucket_counts.items():
            window[key] = window.get(key, 0) + count
        data["window_bucket_counts"] = [[t, b, c] for (t, b), c in sorted(window.items())]
        data["task_rows"] = [a + b for a, b in zip(data["task_rows"], task_rows)]
        data["task_seconds"] = [round(a + b, 4) for a, b in zip(data["task_seconds"], task_seconds)]
        data["batches"] += 1
        data["last_batch_id"] = batch_id


def _shard_map(data: dict[str, Any], type_name: str) -> dict[int, int]:
    return {int(b): int(s) for b, s in data.get("shard_of", {}).get(type_name, {}).items()}


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


def stream_reader(spark: SparkSession, spec: InputSpec, files_per_batch: int) -> DataFrame:
    return read_stream(spark, spec, files_per_batch)


def run_stream(
    spark: SparkSession,
    spec: InputSpec,
    out: str | Path,
    config: StreamConfig,
    sink: PostgresSink | None = None,
) -> dict[str, Any]:
    """Run until the input is drained (available_now), `max_batches` are done, or Ctrl-C.

    With `sink`, each micro-batch is also written to PostgreSQL exactly once (`rebalancer.pipeline.sinks`).
    """

    config.validate()
    if spec.files and not spec.path.is_dir():  # a Kafka topic has no files
        raise ValueError(f"streaming needs an input directory, got a file: {spec.path}")
    out = Path(out)
    checkpoint = Path(config.checkpoint) if config.checkpoint else out / "_checkpoint"
    check_output(out, spec, checkpoint)
    with pipeline_conf(spark):
        return _run_stream(spark, spec, out, config, checkpoint, sink)


def _run_stream(
    spark: SparkSession,
    spec: InputSpec,
    out: Path,
    config: StreamConfig,
    checkpoint: Path,
    sink: PostgresSink | None = None,
) -> dict[str, Any]:
    from pyspark.errors import StreamingQueryException

    state = StreamState(checkpoint / "rebalancer" / "state.json", config.partitions)
    processor = BatchProcessor(out, config, state, sink=sink, checkpoint=checkpoint)
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
    query = writer.start()
    try:
        while query.isActive:
            if query.awaitTermination(1):
                break
        query.awaitTermination()
    except StreamingQueryException:
        if not processor.stop_requested:
            raise
    except KeyboardInterrupt:
        query.stop()
    finally:
        if query.isActive:
            query.stop()
        if quiet:
            quiet.__exit__(None, None, None)
    return write_stream_summary(out, spec, config, state.data, time.perf_counter() - started)


def write_stream_summary(
    out: Path, spec: InputSpec, config: StreamConfig, data: dict[str, Any], elapsed: float
) -> dict[str, Any]:
    totals = data["totals"]
    summary = {
        "mode": "stream",
        "input": str(spec.path),
        "format": spec.format,
        "output": str(out),
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
        "skew_ratio": skew_ratio(data["task_rows"]),
    }
    if data.get("sink"):
        summary["sink"] = data["sink"]
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "summary.json", summary)
    if data.get("last_plan"):
        write_json(out / "plan.json", {"partitioning": config.partitioning, **data["last_plan"]})
    return summary
