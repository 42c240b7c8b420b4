"""The pipeline on Kafka: produce telemetry through BatchingProducer, run on kafka://, quarantine non-JSON."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from kafka_fixtures import produce

from rebalancer.cli import main
from rebalancer.pipeline.batch import run_batch
from rebalancer.pipeline.kafka.telemetry import parse_kafka_url

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def test_embedded_run_end_to_end_reconciles(spark, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["pipeline", "run", "--input", "kafka://embedded/telemetry?events=4000&partitions=4",
            "--output", str(out), "--partitions", "3", "--no-report"]
    assert main(argv) == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["input"] == "kafka://embedded/telemetry"
    assert summary["format"] == "kafka"
    assert summary["ingested"] == 4000
    assert summary["ingested"] == summary["accepted"] + summary["quarantined"]
    assert sum(summary["quarantine_reasons"].values()) == summary["quarantined"]
    metrics = pd.read_parquet(out / "metrics")
    assert int(metrics["count"].sum()) == summary["accepted"]
    quarantine = pd.read_parquet(out / "quarantine")
    assert len(quarantine) == summary["quarantined"]


def test_messages_that_are_not_json_objects_are_quarantined_with_their_text(spark, kafka_cluster, kafka_topic, tmp_path):
    topic = kafka_topic(2)
    good = [
        json.dumps({"ts": "2026-01-01T00:00:05Z", "type": "cpu", "entity": f"h{i}", "value": i}).encode()
        for i in range(10)
    ]
    bad = [b"not json at all", b'{"ts": "2026-01-01T00:00:05Z", "type": ', b"[1, 2]", b"42", None]
    messages = [(b"cpu", value, i % 2) for i, value in enumerate(good)] + [(b"k", value, 0) for value in bad]
    messages.append((b"cpu", json.dumps({"ts": None, "type": "cpu", "entity": "h", "value": 1}).encode(), 1))
    produce(kafka_cluster.bootstrap_servers, topic, messages)
    spec = parse_kafka_url(f"kafka://{kafka_cluster.bootstrap_servers}/{topic}")
    summary = run_batch(spark, spec, tmp_path / "out", partitions=2, report=False)
    assert (summary["ingested"], summary["accepted"], summary["quarantined"]) == (16, 10, 6)
    assert summary["quarantine_reasons"] == {"value_not_json": 5, "ts_missing": 1}
    quarantine = pd.read_parquet(tmp_path / "out" / "quarantine")
    not_json = quarantine[quarantine["reason"] == "value_not_json"]
    assert sorted(not_json["value"].dropna()) == sorted(v.decode() for v in bad if v is not None)
    assert not_json["ts"].isna().all() and not_json["type"].isna().all()


def test_kafka_urls_are_checked_before_spark(capsys, tmp_path):
    out = tmp_path / "out"
    assert main(["pipeline", "run", "--input", "kafka://host:9092", "--output", str(out)]) == 2
    assert "expected kafka://HOST:PORT/TOPIC" in capsys.readouterr().err
    assert main(["pipeline", "run", "--input", "kafka://h:1/t?maxRecordsPerTask=x", "--output", str(out)]) == 2
    assert "maxRecordsPerTask must be a positive integer, got 'x'" in capsys.readouterr().err
    assert main(["pipeline", "run", "--input", "kafka://h:1/t?events=5", "--output", str(out)]) == 2
    assert "events is for kafka://embedded/... only" in capsys.readouterr().err
    assert not out.exists()


def test_produce_sends_generated_telemetry_as_json_and_prints_the_producer_stats(kafka_cluster, kafka_topic, capsys):
    from confluent_kafka import Consumer, TopicPartition

    topic = kafka_topic(3)
    argv = ["pipeline", "produce", "--bootstrap", kafka_cluster.bootstrap_servers, "--topic", topic,
            "--events", "900", "--types", "5", "--bad-rate", "0"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "produced 900 events" in printed and "acked" in printed and "requests" in printed
    consumer = Consumer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "group.id": "check"})
    try:
        ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(3)]
        assert sum(ends) == 900
        consumer.assign([TopicPartition(topic, 0, 0)])
        message = consumer.consume(1, timeout=10)[0]
        record = json.loads(message.value())
        assert set(record) == {"ts", "type", "entity", "value"}
        assert message.key() == record["type"].encode()
    finally:
        consumer.close()


def test_produce_bad_arguments_exit_2(capsys):
    assert main(["pipeline", "produce", "--bootstrap", "h:1", "--topic", "t", "--rate", "-1"]) == 2
    assert "rate must be >= 0" in capsys.readouterr().err
    assert main(["pipeline", "produce", "--bootstrap", "h:1", "--topic", "t", "--events", "-3"]) == 2
    assert "events must be an int in 0..100000000, got -3" in capsys.readouterr().err


def test_streaming_from_kafka_crashes_restarts_and_counts_each_event_once(spark, kafka_cluster, kafka_topic, tmp_path):
    from pyspark.errors import StreamingQueryException

    from rebalancer.pipeline.generate import GenerateConfig, make_frame
    from rebalancer.pipeline.kafka.telemetry import encode_events, produce_events
    from rebalancer.pipeline.stream.driver import run_stream
    from rebalancer.pipeline.stream.state import StreamConfig

    topic = kafka_topic(3)
    frame = make_frame(GenerateConfig(events=1200, types=20, bad_rate=0.01, format="jsonl", seed=3))
    keys, values = encode_events(frame)
    produce_events(kafka_cluster.bootstrap_servers, topic, keys, values)
    spec = parse_kafka_url(f"kafka://{kafka_cluster.bootstrap_servers}/{topic}?maxOffsetsPerTrigger=400")
    out = tmp_path / "out"
    base = {"partitions": 2, "rebalance_every": 2, "available_now": True}
    with pytest.raises(StreamingQueryException, match="injected crash"):
        run_stream(spark, spec, out, StreamConfig(**base, crash_after_batch=1))
    final = run_stream(spark, spec, out, StreamConfig(**base))
    assert final["input"] == spec.url
    assert final["batches"] == 3 and final["last_batch_id"] == 2  # 1200 events, 400 a trigger
    assert final["ingested"] == 1200
    assert final["ingested"] == final["accepted"] + final["quarantined"]
    assert final["plans"] == 2  # planned at batch 0, re-planned at batch 2
    metrics = pd.read_parquet(out / "metrics")
    assert sorted(metrics["batch_id"].astype(int).unique().tolist()) == [0, 1, 2]
    assert not metrics.duplicated(["batch_id", "type", "entity", "minute"]).any()
    assert int(metrics["count"].sum()) == final["accepted"]
