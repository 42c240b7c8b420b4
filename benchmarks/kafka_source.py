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

`--cluster real` runs it all on three real Apache Kafka brokers (`rebalancer.testing.KafkaCluster`,
`make kafka`) instead of the mock, with 2,000,000 events over 16 partitions by default, and times
their start (`cluster_start_s`).

`--against spark-kafka` then reads the same topic, the same offsets (`startingOffsets` and
`endingOffsets` as JSON, equal for both), with our source (planned tasks, as above) and with Spark's
own connector (`spark.read.format("kafka")`, the jars `make spark-kafka` caches; which version ran is
printed). Spark's connector gets its best options for the topic's shape: a few `minPartitions` and
`maxRecordsPerPartition` settings are each run once and the fastest is kept (printed). Both feed the
same query: the pipeline's parse (`to_telemetry`, `classify`) and the built-in aggregation per
(type, entity, minute) in Spark SQL, whose results must agree. Ours and Spark's best then run
`--rounds` times, alternately; each side's fastest run gives its events/s. The input task skew is the
largest input task's records over the median task's, counted by Spark (rows per
`spark_partition_id()` of the raw input) in a separate, untimed job.

    .venv/bin/python benchmarks/kafka_source.py --cluster real --against spark-kafka

Last line: RESULT events_per_s_kafka=… kafka_vs_files_ratio=… input_skew_per_partition=…
input_skew_planned=… exactly_once=1 [events_per_s_ours=… events_per_s_spark_kafka=…
vs_spark_kafka_ratio=… input_skew_ours=… input_skew_spark=…] [cluster_start_s=…]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
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
from rebalancer.pipeline.ingest.inspect import inspect_input
from rebalancer.pipeline.kafka._options import parse_options
from rebalancer.pipeline.kafka._topic import TopicView
from rebalancer.pipeline.kafka.datasource import KafkaBatchReader, register_kafka_source
from rebalancer.pipeline.kafka.telemetry import KafkaInput, encode_events, produce_events
from rebalancer.pipeline.session.build import build_session

MOCK_EVENTS = 600_000  # the hot partition's 240k events (about 20 bytes each with zstd) fit the mock's 5 MiB
REAL_EVENTS = 2_000_000
MOCK_PARTITIONS = 24
REAL_PARTITIONS = 16
REAL_BROKERS = 3
AGAINST = ("spark-kafka",)
SPARK_KAFKA_POM = Path(__file__).resolve().parents[1] / "jvm" / "spark-kafka" / "pom.xml"


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

    from rebalancer.pipeline.stream.driver import run_stream
    from rebalancer.pipeline.stream.state import StreamConfig

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


# -- ours against Spark's own Kafka connector (--against spark-kafka) ------------------------------
def spark_kafka_jars() -> tuple[str, list[Path]]:
    """(version, jars) of Spark's Kafka connector as `make spark-kafka` caches it (jvm/spark-kafka/pom.xml)."""
    found = re.search(r"<spark\.kafka\.version>([^<]+)</spark\.kafka\.version>", SPARK_KAFKA_POM.read_text())
    if found is None:
        raise ValueError(f"no <spark.kafka.version> in {SPARK_KAFKA_POM}")
    version = found[1]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rebalancer" / f"spark-kafka-{version}"
    jars = sorted((cache / "jars").glob("*.jar"))
    if not (cache / ".complete").is_file() or not any(j.name.startswith("spark-sql-kafka-0-10_2.13-") for j in jars):
        raise FileNotFoundError(f"Spark's Kafka connector {version} is not in {cache}: run `make spark-kafka`")
    return version, jars


def offsets_json(topic: str, offsets: dict[int, int]) -> str:
    """Spark-Kafka offsets JSON, which both sources take: {"topic": {"0": 42, ...}}."""
    return json.dumps({topic: {str(p): o for p, o in sorted(offsets.items())}})


def downstream(frame) -> tuple[int, int, int, float]:
    """The query both reads feed: the pipeline's parse, then the built-in aggregation per (type,
    entity, minute) in Spark SQL. Returns (groups, accepted rows, an order-free checksum of the
    groups' exact columns, the sum of values) for the two reads to agree on."""
    from pyspark.sql import functions as F

    from rebalancer.pipeline.ingest.classifier import accepted_rows, classify
    from rebalancer.pipeline.kafka.telemetry import to_telemetry

    metrics = (
        accepted_rows(classify(to_telemetry(frame)))
        .groupBy("type", "entity", "minute")
        .agg(
            F.count("*").alias("count"), F.sum("value").alias("sum"),
            F.min("value").alias("min"), F.max("value").alias("max"), F.avg("value").alias("mean"),
        )
    )  # fmt: skip
    exact = F.xxhash64("type", "entity", "minute", "count", "min", "max")
    row = metrics.agg(F.count("*"), F.sum("count"), F.bit_xor(exact), F.sum("sum"), F.sum("mean")).first()
    return int(row[0]), int(row[1] or 0), int(row[2] or 0), float(row[3] or 0.0)


def measured_task_rows(frame) -> list[int]:
    """Records each input task read, counted by Spark (empty tasks as 0), in an untimed job."""
    from pyspark.sql import functions as F

    tasks = frame.rdd.getNumPartitions()
    counts = dict(frame.groupBy(F.spark_partition_id()).count().collect())
    return [int(counts.get(task, 0)) for task in range(tasks)]


def spark_kafka_candidates(partitions: int, sizes: list[int]) -> list[dict[str, str]]:
    """Spark's connector's options tried for this topic's shape: one task per partition (its
    default), `minPartitions` at 2x and 4x the partitions (it splits ranges in proportion to their
    size), and `maxRecordsPerPartition` at the median partition's size (the hot one cut to match)."""
    return [
        {},
        {"minPartitions": str(2 * partitions)},
        {"minPartitions": str(4 * partitions)},
        {"maxRecordsPerPartition": str(max(1, math.ceil(statistics.median(sizes))))},
    ]


def against_spark_kafka(
    spark, bootstrap: str, topic: str, marks: dict[int, tuple[int, int]], events: int, accepted: int,
    planned_cap: str, rounds: int, version: str,
) -> dict[str, object]:  # fmt: skip
    """Our source (planned tasks) and Spark's connector (its best options) over the same offsets."""
    import pyspark
    from pyspark.sql import DataFrame

    starting = offsets_json(topic, {p: low for p, (low, _high) in marks.items()})
    ending = offsets_json(topic, {p: high for p, (_low, high) in marks.items()})

    def ours() -> DataFrame:
        options = {"bootstrap.servers": bootstrap, "topic": topic, "startingOffsets": starting,
                   "endingOffsets": ending, "maxRecordsPerTask": planned_cap}  # fmt: skip
        return spark.read.format("rebalancer-kafka").options(**options).load()

    def spark_kafka(options: dict[str, str]) -> DataFrame:
        base = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": starting,
                "endingOffsets": ending}  # fmt: skip
        return spark.read.format("kafka").options(**base, **options).load()

    expected: tuple[int, int, int, float] | None = None

    def timed(name: str, make: object) -> float:
        nonlocal expected
        started = time.perf_counter()
        result = downstream(make())  # type: ignore[operator]
        seconds = time.perf_counter() - started
        if result[1] != accepted:
            raise RuntimeError(f"{name}: {result[1]:,} accepted rows, the files run accepted {accepted:,}")
        if expected is None:
            expected = result
        elif result[:3] != expected[:3] or not math.isclose(result[3], expected[3], rel_tol=1e-9):
            raise RuntimeError(f"{name}: the aggregation differs: {result} vs {expected}")
        return seconds

    print(
        f"against Spark's connector: spark-sql-kafka-0-10_2.13 {version} on pyspark {pyspark.__version__}, "
        f"{len(marks)} partitions, {events:,} records",
        file=sys.stderr,
    )
    timed("ours (warm-up)", ours)
    sizes = [high - low for low, high in marks.values()]
    tried: list[tuple[float, dict[str, str]]] = []
    for options in spark_kafka_candidates(len(marks), sizes):
        seconds = timed(f"spark-kafka {options}", lambda o=options: spark_kafka(o))
        tried.append((seconds, options))
        print(f"  spark-kafka {options or '(defaults)'}: {seconds:.2f} s", file=sys.stderr)
    best_options = min(tried, key=lambda pair: pair[0])[1]
    ours_s: list[float] = []
    spark_s: list[float] = []
    for _ in range(rounds):
        ours_s.append(timed("ours", ours))
        spark_s.append(timed("spark-kafka", lambda: spark_kafka(best_options)))
    ours_tasks = measured_task_rows(ours())
    spark_tasks = measured_task_rows(spark_kafka(best_options))
    assert sum(ours_tasks) == sum(spark_tasks) == events, (sum(ours_tasks), sum(spark_tasks), events)
    return {
        "version": version,
        "best_options": best_options,
        "ours_s": ours_s,
        "spark_s": spark_s,
        "ours_tasks": ours_tasks,
        "spark_tasks": spark_tasks,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--events", type=int, default=None, help=f"default: {REAL_EVENTS:,}, or {MOCK_EVENTS:,} on the mock"
    )
    parser.add_argument(
        "--partitions", type=int, default=None,
        help=f"topic partitions (default {MOCK_PARTITIONS}; {REAL_PARTITIONS} with --cluster real)",
    )  # fmt: skip
    parser.add_argument("--planned-tasks", type=int, default=4, help="input tasks of the planned run")
    parser.add_argument("--hot-share", type=float, default=0.4, help="share of events in the hot partition")
    parser.add_argument("--bootstrap", default=None, help="a running cluster (default: a 3-broker mock)")
    parser.add_argument(
        "--cluster", choices=("mock", "real"), default="mock",
        help=f"mock: librdkafka's mock brokers; real: {REAL_BROKERS} Apache Kafka brokers (`make kafka`)",
    )  # fmt: skip
    parser.add_argument(
        "--against", choices=AGAINST, default=None,
        help="also read the topic with Spark's own Kafka connector (`make spark-kafka`) and compare",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=2, help="--against: timed runs of each source")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if args.bootstrap is not None and args.cluster == "real":
        parser.error("--bootstrap names a running cluster; --cluster real starts one: give one of them")
    real = args.bootstrap is not None or args.cluster == "real"
    if args.partitions is None:
        args.partitions = REAL_PARTITIONS if args.cluster == "real" else MOCK_PARTITIONS
    if args.partitions < 1:
        parser.error(f"--partitions must be >= 1, got {args.partitions}")
    if args.events is not None and args.events < 1:
        parser.error(f"--events must be >= 1, got {args.events}")
    if args.planned_tasks < 1:
        parser.error(f"--planned-tasks must be >= 1, got {args.planned_tasks}")
    if not 0.0 <= args.hot_share <= 1.0:
        parser.error(f"--hot-share must be in [0, 1], got {args.hot_share}")
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.against is not None and not real:
        # Spark's Java client needs requests librdkafka's mock does not answer (its AdminClient times out).
        parser.error(f"--against {args.against} needs real brokers: give --cluster real or --bootstrap")
    events = args.events or (REAL_EVENTS if real else MOCK_EVENTS)
    if events < args.partitions:
        parser.error(f"--events must be >= --partitions, got {events}")
    session_conf: dict[str, str] = {}
    connector_version = ""
    if args.against == "spark-kafka":
        try:
            connector_version, jars = spark_kafka_jars()
        except (OSError, ValueError) as exc:
            print(f"kafka_source: {exc}", file=sys.stderr)
            return 2
        session_conf["spark.jars"] = ",".join(str(jar) for jar in jars)

    from rebalancer.testing import KafkaCluster, MockKafkaCluster

    cluster: KafkaCluster | MockKafkaCluster | None = None
    cluster_start_s: float | None = None
    if args.cluster == "real":
        from rebalancer.testing.kafka_cluster import KafkaNotInstalledError

        t = time.perf_counter()
        try:
            cluster = KafkaCluster(brokers=REAL_BROKERS)
        except KafkaNotInstalledError as exc:
            print(f"kafka_source: {exc}", file=sys.stderr)
            return 2
        cluster_start_s = time.perf_counter() - t
        print(f"{REAL_BROKERS} Apache Kafka {cluster.version} brokers up in {cluster_start_s:.1f} s", file=sys.stderr)
    elif args.bootstrap is None:
        cluster = MockKafkaCluster(brokers=3)
    bootstrap = args.bootstrap or cluster.bootstrap_servers
    against: dict[str, object] | None = None
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

        spark = build_session(master=args.master, app_name="rebalancer-kafka-bench", conf=session_conf)
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
        if args.against == "spark-kafka":
            against = against_spark_kafka(
                spark, bootstrap, topic, marks, events, files_summary["accepted"], planned_cap, args.rounds,
                connector_version,
            )  # fmt: skip
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
    extra = ""
    if against is not None:
        ours_s, spark_s = min(against["ours_s"]), min(against["spark_s"])
        ours_tasks, spark_tasks = against["ours_tasks"], against["spark_tasks"]
        print(
            f"same offsets, same query (parse + aggregation), best of {args.rounds} alternating runs each:\n"
            f"{'source':<56}{'seconds':>10}{'events/s':>12}{'input tasks':>13}{'max/median':>12}  runs (s)",
            file=sys.stderr,
        )
        for name, seconds, tasks, runs in (
            ("ours (rebalancer-kafka, planned)", ours_s, ours_tasks, against["ours_s"]),
            (
                f"spark-kafka {against['version']} {against['best_options'] or '(defaults)'}",
                spark_s, spark_tasks, against["spark_s"],
            ),
        ):  # fmt: skip
            print(
                f"{name:<56}{seconds:>10.2f}{events / seconds:>12,.0f}{len(tasks):>13}{skew(tasks):>12.2f}  "
                + " ".join(f"{run:.1f}" for run in runs),
                file=sys.stderr,
            )
        extra = (
            f" events_per_s_ours={events / ours_s:.0f} events_per_s_spark_kafka={events / spark_s:.0f}"
            f" vs_spark_kafka_ratio={spark_s / ours_s:.3f} input_skew_ours={skew(ours_tasks):.3f}"
            f" input_skew_spark={skew(spark_tasks):.3f}"
        )
    if cluster_start_s is not None:
        extra += f" cluster_start_s={cluster_start_s:.1f}"
    print(
        f"RESULT events_per_s_kafka={events / best_kafka_s:.0f} kafka_vs_files_ratio={files_s / best_kafka_s:.3f} "
        f"input_skew_per_partition={skew(per_partition):.3f} input_skew_planned={skew(planned):.3f} "
        f"exactly_once={int(exactly_once)}{extra}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
