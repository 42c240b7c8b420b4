"""The pipeline's Kafka contract, on librdkafka's mock brokers and on real Apache Kafka brokers.

Each test runs on both (`any_kafka_cluster`); where they disagree the real cluster is right. The
batch read of the `rebalancer-kafka` source is `test_batch_read_equals_the_produced_messages` in
test_kafka_source.py, parametrized the same way.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from kafka_fixtures import produce
from pipeline_data import reference_metrics

from kafka_helpers import is_real
from rebalancer.cli import main
from rebalancer.pipeline.generate import GenerateConfig, make_frame
from rebalancer.pipeline.kafka.datasource import register_kafka_source
from rebalancer.testing import KafkaCluster, MockKafkaCluster

pytestmark = pytest.mark.spark
AnyCluster = MockKafkaCluster | KafkaCluster
MakeTopic = Callable[..., str]


@pytest.fixture(scope="module")
def kafka_spark(spark: Any) -> Any:
    register_kafka_source(spark)
    return spark


def _run_available_now(spark: Any, bootstrap: str, topic: str, out: Path, checkpoint: Path, **options: object) -> list[int]:
    """One availableNow run; each micro-batch to OUT/batch_id=N. Returns the batches' row counts."""

    def write(frame: Any, batch_id: int) -> None:
        frame.select("partition", "offset", "value").write.mode("overwrite").parquet(str(out / f"batch_id={batch_id}"))

    stream = spark.readStream.format("rebalancer-kafka").option("bootstrap.servers", bootstrap).option("topic", topic)
    for key, value in options.items():
        stream = stream.option(key, str(value))
    query = stream.load().writeStream.foreachBatch(write).option("checkpointLocation", str(checkpoint))
    running = query.trigger(availableNow=True).start()
    try:
        running.awaitTermination()
    finally:
        running.stop()
    return [p["numInputRows"] for p in running.recentProgress if p["numInputRows"]]


def _batches(out: Path) -> set[str]:
    return {p.name for p in out.iterdir() if p.name.startswith("batch_id=")}


def _rows(out: Path, batches: set[str]) -> list[tuple[int, int, bytes]]:
    frame = pd.concat([pd.read_parquet(out / b) for b in sorted(batches)], ignore_index=True)
    return [(int(p), int(o), bytes(v)) for p, o, v in frame[["partition", "offset", "value"]].itertuples(index=False)]


# -- the source, streaming: a restart from its checkpoint reads exactly the new records -------------
def test_a_stream_restarted_from_its_checkpoint_reads_exactly_the_records_produced_since(
    kafka_spark: Any, any_kafka_cluster: AnyCluster, any_kafka_topic: MakeTopic, tmp_path: Path
) -> None:
    topic = any_kafka_topic(3)
    bootstrap = any_kafka_cluster.bootstrap_servers
    first = [(None, b"a%d" % i, i % 3) for i in range(900)]
    second = [(None, b"b%d" % i, i % 3) for i in range(600)]
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    produce(bootstrap, topic, first)
    sizes = _run_available_now(kafka_spark, bootstrap, topic, out, checkpoint, maxOffsetsPerTrigger=600)
    assert sizes == [600, 300]  # maxOffsetsPerTrigger, split over the partitions exactly
    before = _batches(out)
    rows = _rows(out, before)
    assert Counter((p, o) for p, o, _ in rows) == Counter((p, o) for p in range(3) for o in range(300))
    assert sorted(v for _, _, v in rows) == sorted(v for _, v, _ in first)

    produce(bootstrap, topic, second)
    sizes = _run_available_now(kafka_spark, bootstrap, topic, out, checkpoint, maxOffsetsPerTrigger=600)
    assert sizes == [600]
    new = _rows(out, _batches(out) - before)
    # Exactly the new records: each once, none of the first run's, no gap.
    assert Counter((p, o) for p, o, _ in new) == Counter((p, o) for p in range(3) for o in range(300, 500))
    assert sorted(v for _, _, v in new) == sorted(v for _, v, _ in second)
    by_offset = {(p, o): v for p, o, v in rows + new}
    for partition in range(3):  # in produce order per partition
        sent = [v for _, v, q in first + second if q == partition]
        assert [by_offset[(partition, o)] for o in range(500)] == sent


def test_a_restarted_stream_reads_partitions_added_to_its_topic_from_their_start(
    kafka_spark: Any, any_kafka_cluster: AnyCluster, any_kafka_topic: MakeTopic, tmp_path: Path
) -> None:
    """Offsets in the checkpoint name two partitions; the topic now has four. The mock cannot add
    partitions (test_kafka_source.py fakes it by a partial start offset); real brokers can."""
    if not is_real(any_kafka_cluster):
        pytest.skip("librdkafka's mock has no CreatePartitions")
    from confluent_kafka.admin import AdminClient, NewPartitions

    topic = any_kafka_topic(2)
    bootstrap = any_kafka_cluster.bootstrap_servers
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    produce(bootstrap, topic, [(None, b"a%d" % i, i % 2) for i in range(200)])
    assert sum(_run_available_now(kafka_spark, bootstrap, topic, out, checkpoint)) == 200
    before = _batches(out)

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_partitions([NewPartitions(topic, 4)], operation_timeout=30, request_timeout=30)[topic].result(60)
    # Until every broker knows them: a client asking one that does not yet would see two partitions
    # (a producer fails the new ones' messages with _UNKNOWN_PARTITION). A new client with one
    # bootstrap server asks that server first.
    deadline = time.monotonic() + 60
    for server in bootstrap.split(","):
        while len(AdminClient({"bootstrap.servers": server, "log_level": 0}).list_topics(topic, timeout=30).topics[topic].partitions) < 4:
            assert time.monotonic() < deadline, f"broker {server} never showed the new partitions"
            time.sleep(0.1)
    second = [(None, b"b%d" % i, i % 4) for i in range(400)]
    produce(bootstrap, topic, second)
    assert sum(_run_available_now(kafka_spark, bootstrap, topic, out, checkpoint)) == 400
    new = _rows(out, _batches(out) - before)
    expected = [(0, o) for o in range(100, 200)] + [(1, o) for o in range(100, 200)]
    expected += [(p, o) for p in (2, 3) for o in range(100)]
    assert Counter((p, o) for p, o, _ in new) == Counter(expected)
    assert sorted(v for _, _, v in new) == sorted(v for _, v, _ in second)


# -- the source on a transactional topic: only committed records, and no wait for the markers -------
def test_a_batch_read_of_a_transactional_topic_returns_exactly_the_committed_records(
    kafka_spark: Any, any_kafka_cluster: AnyCluster, any_kafka_topic: MakeTopic
) -> None:
    if not is_real(any_kafka_cluster):
        pytest.skip("librdkafka's mock shows aborted records to read_committed readers (tests/produce/test_transactions.py)")
    from rebalancer.produce import BatchingProducer

    topic = any_kafka_topic(2, replication_factor=3, min_insync_replicas=2)
    bootstrap = any_kafka_cluster.bootstrap_servers

    async def write() -> None:
        producer = BatchingProducer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn"})
        await producer.start()
        for txn, outcome in enumerate(("commit", "abort", "commit", "abort")):
            await producer.begin_transaction()
            for i in range(100):
                await producer.send(topic, f"{outcome}-{txn}-{i}".encode(), partition=i % 2)
            await producer.flush()  # aborted records reach the log too: the reader must skip them
            if outcome == "commit":
                await producer.commit_transaction()
            else:
                await producer.abort_transaction()
        await producer.stop()

    asyncio.run(asyncio.wait_for(write(), timeout=120))
    frame = kafka_spark.read.format("rebalancer-kafka").option("bootstrap.servers", bootstrap).option("topic", topic)
    # 204 offsets a partition (records and markers) in tasks of at most 60: some ranges hold only
    # aborted records and markers, which a read_committed reader never sees; they must end anyway.
    frame = frame.option("pollTimeoutMs", "60000").option("maxRecordsPerTask", "60")
    rows = frame.load().select("partition", "offset", "value").collect()
    expected = [f"commit-{txn}-{i}".encode() for txn in (0, 2) for i in range(100)]
    assert sorted(r.value for r in rows) == sorted(expected)  # each committed record once, no aborted one
    for partition in range(2):
        got = sorted((r.offset, r.value) for r in rows if r.partition == partition)
        assert [v for _, v in got] == [v for v in expected if int(v.rsplit(b"-", 1)[1]) % 2 == partition]


def test_a_read_during_an_open_transaction_stops_at_the_last_stable_offset(
    kafka_spark: Any, any_kafka_cluster: AnyCluster, any_kafka_topic: MakeTopic
) -> None:
    """The planner's ends are read_committed ends: records of a transaction still open are neither
    returned nor waited for (a task waiting for them would fail after pollTimeoutMs)."""
    if not is_real(any_kafka_cluster):
        pytest.skip("librdkafka's mock has no last stable offset: an open transaction's records show at once")
    from rebalancer.produce import BatchingProducer

    topic = any_kafka_topic(2, replication_factor=3, min_insync_replicas=2)
    bootstrap = any_kafka_cluster.bootstrap_servers
    producer = BatchingProducer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn"})
    loop = asyncio.new_event_loop()

    async def transaction(prefix: str, commit: bool) -> None:
        await producer.begin_transaction()
        for i in range(100):
            await producer.send(topic, f"{prefix}-{i}".encode(), partition=i % 2)
        await producer.flush()
        if commit:
            await producer.commit_transaction()

    def read() -> list[bytes]:
        frame = kafka_spark.read.format("rebalancer-kafka").option("bootstrap.servers", bootstrap)
        frame = frame.option("topic", topic).option("pollTimeoutMs", "30000").load()
        return sorted(r.value for r in frame.select("value").collect())

    try:
        loop.run_until_complete(asyncio.wait_for(producer.start(), 60))
        loop.run_until_complete(asyncio.wait_for(transaction("done", commit=True), 60))
        loop.run_until_complete(asyncio.wait_for(transaction("open", commit=False), 60))
        assert read() == sorted(b"done-%d" % i for i in range(100))  # the open transaction is left out
        loop.run_until_complete(asyncio.wait_for(producer.commit_transaction(), 60))
        assert read() == sorted([b"done-%d" % i for i in range(100)] + [b"open-%d" % i for i in range(100)])
    finally:
        loop.run_until_complete(asyncio.wait_for(producer.stop(), 60))
        loop.close()


def test_a_topic_that_does_not_exist_fails_the_read_naming_it(any_kafka_cluster: AnyCluster) -> None:
    """Asked of the reader as Spark's planner asks it; the read must not create the topic either."""
    from confluent_kafka.admin import AdminClient

    from rebalancer.pipeline.kafka._options import parse_options
    from rebalancer.pipeline.kafka.datasource import KafkaBatchReader

    bootstrap = any_kafka_cluster.bootstrap_servers
    missing = f"missing-{id(any_kafka_cluster)}"
    reader = KafkaBatchReader(parse_options({"bootstrap.servers": bootstrap, "topic": missing, "pollTimeoutMs": "30000"}))
    with pytest.raises(ValueError, match=f"topic '{missing}' does not exist on {re.escape(bootstrap)}"):
        reader.partitions()
    assert missing not in AdminClient({"bootstrap.servers": bootstrap, "log_level": 3}).list_topics(timeout=30).topics


# -- end to end: pipeline produce -> pipeline run --input kafka:// --sink postgresql:// --------------
EVENTS: dict[str, Any] = dict(events=3000, types=8, skew=1.1, entities=6, bad_rate=0.0, seed=11)
METRIC_KEYS = ["type", "entity", "minute"]


@pytest.mark.postgres
def test_produce_then_run_into_postgres_holds_the_produced_events_aggregated(
    spark: Any,
    any_kafka_cluster: AnyCluster,
    any_kafka_topic: MakeTopic,
    postgres: Any,
    pg_schema: str,
    pg_connect: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = any_kafka_topic(3, replication_factor=3, min_insync_replicas=2)
    bootstrap = any_kafka_cluster.bootstrap_servers
    produce_argv = ["pipeline", "produce", "--bootstrap", bootstrap, "--topic", topic]
    for name, value in EVENTS.items():
        produce_argv += [f"--{name.replace('_', '-')}", str(value)]
    assert main(produce_argv) == 0, capsys.readouterr().err
    assert f"produced {EVENTS['events']:,} events" in capsys.readouterr().out

    out = tmp_path / "out"
    run_argv = ["pipeline", "run", "--input", f"kafka://{bootstrap}/{topic}", "--output", str(out),
                "--partitions", "2", "--no-report", "--sink", postgres.url, "--sink-schema", pg_schema]  # fmt: skip
    assert main(run_argv) == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["ingested"], summary["accepted"], summary["quarantined"]) == (EVENTS["events"], EVENTS["events"], 0)

    cursor = pg_connect.execute(f"SELECT * FROM {pg_schema}.metrics")
    got = pd.DataFrame(cursor.fetchall(), columns=[c.name for c in cursor.description])
    got["minute"] = pd.to_datetime(got["minute"], utc=True).dt.tz_localize(None)
    got = got.sort_values(METRIC_KEYS).reset_index(drop=True)
    good = make_frame(GenerateConfig(**EVENTS, format="jsonl"))  # what `pipeline produce` sent
    want = reference_metrics(good).sort_values(METRIC_KEYS).reset_index(drop=True)
    assert len(got) == len(want) and int(got["count"].sum()) == EVENTS["events"]
    for column in ("type", "entity", "minute"):
        assert got[column].tolist() == want[column].tolist(), column
    for column in ("count", "min", "max", "p50", "p90", "p99"):
        np.testing.assert_array_equal(got[column].to_numpy(float), want[column].to_numpy(float), err_msg=column)
    for column in ("sum", "mean"):  # summation order differs from pandas: equal up to rounding
        np.testing.assert_allclose(got[column].to_numpy(float), want[column].to_numpy(float), rtol=1e-12, err_msg=column)
