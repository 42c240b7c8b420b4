"""The pipeline from Kafka (`rebalancer-kafka`) against the pipeline from Parquet, and planned input tasks.

Setup: a 3-broker mock cluster (or `--bootstrap` for a real one); telemetry produced through
BatchingProducer into 24 partitions, one of them holding 40% of the events as a hot producer key
would; the same events (same seed) written to Parquet.

Runs, in one SparkSession, each with the same dispatch settings:
- the pipeline from the Parquet files (the baseline);
- from Kafka with one input task per topic partition (`planTasks=false`, Spark's own Kafka source);
- from Kafka with planned tasks: `maxRecordsPerTask` = events / `--planned-tasks` (default 4, two
  per core of `local[2]`): near-equal tasks sized for the cores, where one task per partition gives
  24 uneven ones. Each Python input task costs Spark about half a second here (its Python worker and
  consumer), so fewer, even tasks also read faster.
Then the pipeline's stream over the topic crashes after writing its second micro-batch and is
restarted from its checkpoint: `exactly_once=1` if every event is ingested once and each accepted
one is counted once in the metrics.

librdkafka's mock keeps at most 5 MiB of record batches per partition and drops the oldest beyond
that, so on the mock the default is the largest run whose hot partition fits (zstd JSON is about
20 bytes/event stored); the script checks that nothing was dropped before it measures.

Last line: RESULT events_per_s_kafka=… kafka_vs_files_ratio=… input_skew_per_partition=…
input_skew_planned=… exactly_once=1
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np

from rebalancer.pipeline.batch import run_batch
from rebalancer.pipeline.generate import GenerateConfig, make_frame, write_frame
from rebalancer.pipeline.ingest import inspect_input
from rebalancer.pipeline.kafka.source import KafkaBatchReader, TopicView, parse_options, register_kafka_source
from rebalancer.pipeline.kafka.telemetry import KafkaInput, encode_events, produce_events
from rebalancer.pipeline.session import build_session

MOCK_EVENTS = 600_000  # the hot partition's 240k events (about 20 bytes each with zstd) fit the mock's 5 MiB


def skew(values: list[int]) -> float:
    median = statistics.median(values)
    return max(values) / median if median > 0 else float("inf")


def hot_partitions(events: int, partitions: int, hot_share: float, seed: int) -> np.ndarray:
    """Partition 0 gets `hot_share` of the events, the rest spread at random over the others."""
    rng = np.random.default_rng(seed)
    chosen = rng.integers(1, partitions, size=events)
    chosen[rng.random(events) < hot_share] = 0
    return chosen


def input_tasks(bootstrap: str, topic: str, **options: str) -> list[int]:
    """Rows per input task, from the reader's own plan (the offsets each task reads)."""
    reader = KafkaBatchReader(parse_options({"bootstrap.servers": bootstrap, "topic": topic, **options}))
    return [task.records for task in reader.partitions()]


def timed_run(spark, spec, out: Path, partitions: int | None) -> tuple[float, dict]:
    started = time.perf_counter()
    summary = run_batch(spark, spec, out, "weighted", partitions, report=False)
    return time.perf_counter() - started, summary


def killed_stream_is_exactly_once(spark, spec: KafkaInput, events: int, accepted: int, work: Path) -> bool:
    """The pipeline's stream over the topic crashes after writing batch 1 and is restarted from its
    checkpoint: every event must be ingested once and each accepted one counted once in the metrics."""
    from pyspark.errors import StreamingQueryException
    from pyspark.sql import functions as F

    from rebalancer.pipeline.stream import StreamConfig, run_stream

    out = work / "stream"
    spec = replace(spec, options={"maxOffsetsPerTrigger": str(max(1, events // 4))})
    base = {"partitions": spark.sparkContext.defaultParallelism, "available_now": True, "rebalance_every": 2}
    try:
        run_stream(spark, spec, out, StreamConfig(**base, crash_after_batch=1))
        print("stream: the injected crash did not happen", file=sys.stderr)
        return False
    except StreamingQueryException as exc:
        if "injected crash" not in str(exc):
            raise
    summary = run_stream(spark, spec, out, StreamConfig(**base))
    counted = spark.read.parquet(str(out / "metrics")).agg(F.sum("count")).first()[0]
    print(
        f"stream: {summary['batches']} micro-batches, ingested {summary['ingested']:,} of {events:,}, "
        f"accepted {summary['accepted']:,} (files: {accepted:,}), metrics count {counted:,}",
        file=sys.stderr,
    )
    return summary["ingested"] == events and summary["accepted"] == accepted == counted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=None, help=f"default: 2,000,000, or {MOCK_EVENTS:,} on the mock")
    parser.add_argument("--partitions", type=int, default=24, help="topic partitions")
    parser.add_argument("--planned-tasks", type=int, default=4, help="input tasks of the planned run")
    parser.add_argument("--hot-share", type=float, default=0.4, help="share of events in the hot partition")
    parser.add_argument("--bootstrap", default=None, help="a real cluster (default: a 3-broker mock)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    events = args.events or (2_000_000 if args.bootstrap else MOCK_EVENTS)
    if events < args.partitions:
        parser.error(f"--events must be >= --partitions, got {events}")

    from rebalancer.testing import MockKafkaCluster

    cluster = None if args.bootstrap else MockKafkaCluster(brokers=3)
    bootstrap = args.bootstrap or cluster.bootstrap_servers
    topic = f"telemetry-bench-{int(time.time())}"
    work = Path(tempfile.mkdtemp(prefix="rebalancer-kafka-bench-"))
    try:
        if cluster is not None:
            cluster.create_topic(topic, args.partitions)
        config = GenerateConfig(events=events, types=400, skew=1.1, seed=args.seed)
        t = time.perf_counter()
        write_frame(make_frame(config), work / "parquet", "parquet", files=8)
        keys, values = encode_events(make_frame(GenerateConfig(**{**config.__dict__, "format": "jsonl"})))
        partitions = hot_partitions(events, args.partitions, args.hot_share, args.seed)
        print(f"generated {events:,} events in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        t = time.perf_counter()
        stats = produce_events(bootstrap, topic, keys, values, partitions=partitions)
        produce_s = time.perf_counter() - t
        print(
            f"produced {stats['acked']:,} in {produce_s:.1f} s ({stats['acked'] / produce_s:,.0f}/s, "
            f"{stats['requests']} requests, {stats['msgs_per_request']:.0f} msgs/request)",
            file=sys.stderr,
        )
        del keys, values
        counts = Counter(partitions.tolist())
        view = TopicView(parse_options({"bootstrap.servers": bootstrap, "topic": topic}))
        marks = view.watermarks()
        view.close()
        pruned = {p: low for p, (low, _high) in marks.items() if low > 0}
        if pruned or any(marks[p][1] != counts.get(p, 0) for p in marks):
            print(
                f"the cluster does not hold every event (earliest offsets {pruned}): the mock keeps 5 MiB per "
                "partition; use fewer --events or a real cluster (--bootstrap)",
                file=sys.stderr,
            )
            return 1

        per_partition = input_tasks(bootstrap, topic, planTasks="false")
        planned_cap = str(math.ceil(events / args.planned_tasks))
        planned = input_tasks(bootstrap, topic, maxRecordsPerTask=planned_cap)
        assert sum(per_partition) == sum(planned) == events

        spark = build_session(master=args.master, app_name="rebalancer-kafka-bench")
        register_kafka_source(spark)
        files_spec = inspect_input(work / "parquet")

        def kafka_spec(**options: str) -> KafkaInput:
            return KafkaInput(url=f"kafka://{bootstrap}/{topic}", bootstrap_servers=bootstrap, topic=topic, options=options)

        # Warm-up (Python workers, JIT), not measured.
        timed_run(spark, files_spec, work / "warm-files", None)
        timed_run(spark, kafka_spec(planTasks="false"), work / "warm-kafka", None)
        files_s, files_summary = timed_run(spark, files_spec, work / "files", None)
        per_partition_s, per_partition_summary = timed_run(spark, kafka_spec(planTasks="false"), work / "kafka-pp", None)
        planned_s, planned_summary = timed_run(
            spark, kafka_spec(maxRecordsPerTask=planned_cap), work / "kafka-planned", None
        )
        for name, summary in (("kafka per-partition", per_partition_summary), ("kafka planned", planned_summary)):
            assert summary["ingested"] == files_summary["ingested"] == events, (name, summary["ingested"])
            assert summary["accepted"] == files_summary["accepted"], (name, summary["accepted"], files_summary["accepted"])
        exactly_once = killed_stream_is_exactly_once(
            spark, kafka_spec(), events, files_summary["accepted"], work
        )
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if cluster is not None:
            cluster.close()

    print(f"{'run':<22}{'seconds':>10}{'events/s':>12}{'input tasks':>13}{'max/median':>12}", file=sys.stderr)
    for name, seconds, tasks in (
        ("files (parquet)", files_s, None),
        ("kafka per partition", per_partition_s, per_partition),
        ("kafka planned", planned_s, planned),
    ):
        shape = f"{len(tasks):>13}{skew(tasks):>12.2f}" if tasks else f"{'':>13}{'':>12}"
        print(f"{name:<22}{seconds:>10.2f}{events / seconds:>12,.0f}{shape}", file=sys.stderr)
    best_kafka_s = planned_s
    print(
        f"RESULT events_per_s_kafka={events / best_kafka_s:.0f} kafka_vs_files_ratio={files_s / best_kafka_s:.3f} "
        f"input_skew_per_partition={skew(per_partition):.3f} input_skew_planned={skew(planned):.3f} "
        f"exactly_once={int(exactly_once)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
