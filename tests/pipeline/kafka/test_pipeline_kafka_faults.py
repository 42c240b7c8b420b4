"""Issue 34 section 3: a streaming `pipeline run` from a real-cluster topic into PostgreSQL while the
broker that leads the most of its partitions is SIGKILLed and restarted. Afterwards PostgreSQL holds
exactly the aggregation of every produced event: each counted once, none missing.

The run is the CLI in a subprocess, stopped as a person stops it (Ctrl-C, exit 130). Each step
waits for the stream's own progress lines (the rows it has applied), never for time: events in,
a batch applied, the kill, more events while the broker is down and applied, the restart, more
events, all applied, Ctrl-C.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from pipeline_data import reference_metrics

from rebalancer.pipeline.generate import GenerateConfig, make_frame
from rebalancer.pipeline.kafka import _topic
from rebalancer.pipeline.kafka._options import parse_options
from rebalancer.pipeline.kafka._topic import FAILOVER_ATTEMPTS, TopicView
from rebalancer.pipeline.kafka.telemetry import encode_events, produce_events
from rebalancer.testing import KafkaCluster
from rebalancer.testing.streams import stream_through_leader_crash

CLI = [sys.executable, "-m", "rebalancer.cli"]
PARTITIONS = 6
PART_EVENTS = 3_000  # each of the three parts: before the kill, while the broker is down, after the restart
KEYS = ["type", "entity", "minute"]
# A JVM's start and a first micro-batch on a loaded 2-core machine; each wait ends on an event.
FIRST_BATCH_DEADLINE_S = 600
BATCH_DEADLINE_S = 300
_topic_ids = itertools.count()


def part(seed: int) -> pd.DataFrame:
    config = GenerateConfig(
        events=PART_EVENTS, types=8, skew=1.1, entities=5, bad_rate=0.0, seed=seed, minutes=4, format="jsonl"
    )
    return make_frame(config)


def send(bootstrap: str, topic: str, frame: pd.DataFrame) -> None:
    """Every event acked (idempotent, acks=all: a retried request during the crash is stored once)."""
    keys, values = encode_events(frame)
    stats = produce_events(bootstrap, topic, keys, values, config={"enable.idempotence": True, "acks": "all"})
    assert (stats["acked"], stats["failed"]) == (len(frame), 0), stats


def db_totals(conn: Any, schema: str) -> pd.DataFrame:
    """The stream's per-batch metrics folded over batches: count and sum add, min and max combine."""
    cursor = conn.execute(
        f"SELECT type, entity, minute, SUM(count) AS count, SUM(sum) AS sum, MIN(min) AS min, MAX(max) AS max "
        f"FROM {schema}.metrics GROUP BY type, entity, minute ORDER BY type, entity, minute"
    )
    frame = pd.DataFrame(cursor.fetchall(), columns=[c.name for c in cursor.description])
    frame["minute"] = pd.to_datetime(frame["minute"], utc=True).dt.tz_localize(None)
    return frame


@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.kafka_real
@pytest.mark.timeout(1500)
def test_a_stream_into_postgres_through_a_broker_crash_and_restart_holds_every_event_once(
    kafka_real_cluster: KafkaCluster, postgres: Any, pg_schema: str, pg_connect: Any, tmp_path: Path
) -> None:
    cluster = kafka_real_cluster
    bootstrap = cluster.bootstrap_servers
    topic = f"faults-stream-{next(_topic_ids)}"
    cluster.create_topic(
        topic, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": 2}
    )
    parts = [part(seed) for seed in (31, 32, 33)]
    out = tmp_path / "out"
    command = [*CLI, "pipeline", "run", "--stream", "--input", f"kafka://{bootstrap}/{topic}", "--output", str(out),
               "--partitions", "2", "--sink", postgres.url, "--sink-schema", pg_schema]  # fmt: skip

    crashed = stream_through_leader_crash(
        cluster, topic, command, tmp_path, parts, lambda frame: send(bootstrap, topic, frame),
        FIRST_BATCH_DEADLINE_S, BATCH_DEADLINE_S,
    )  # fmt: skip
    printed = crashed.printed
    assert crashed.returncode == 130, crashed.stderr + printed
    assert "Traceback" not in crashed.stderr, crashed.stderr
    assert crashed.rows == 3 * PART_EVENTS  # no batch re-read what an earlier one applied
    assert crashed.batches == sorted(set(crashed.batches)), printed

    summary = json.loads((out / "summary.json").read_text())
    assert (summary["ingested"], summary["accepted"], summary["quarantined"]) == (
        3 * PART_EVENTS,
        3 * PART_EVENTS,
        0,
    )
    assert summary["batches"] == len(crashed.batches)

    # PostgreSQL holds the aggregation of every produced event, each once.
    got = db_totals(pg_connect, pg_schema)
    want = reference_metrics(pd.concat(parts, ignore_index=True)).sort_values(KEYS).reset_index(drop=True)
    assert int(got["count"].sum()) == 3 * PART_EVENTS
    assert len(got) == len(want)
    for column in KEYS:
        assert got[column].tolist() == want[column].tolist(), column
    for column in ("count", "min", "max"):
        np.testing.assert_array_equal(
            got[column].to_numpy(float), want[column].to_numpy(float), err_msg=column
        )
    np.testing.assert_allclose(
        got["sum"].to_numpy(float), want["sum"].to_numpy(float), rtol=1e-12, err_msg="sum"
    )
    assert pg_connect.execute(f"SELECT count(*) FROM {pg_schema}.quarantine").fetchone()[0] == 0
    batches = pg_connect.execute(f"SELECT count(DISTINCT batch_id) FROM {pg_schema}.metrics").fetchone()[0]
    assert batches == len(crashed.batches)


# -- the fix it needed: the planner's offsets query outlives a leader's crash -----------------------
class _Watermarks:
    """A consumer whose offsets query fails with `errors` (KafkaError codes), in turn, then answers."""

    def __init__(self, errors: list[int]) -> None:
        self.errors = errors
        self.calls = 0

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        from confluent_kafka import KafkaError, KafkaException

        self.calls += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return (0, 10 + tp.partition)

    def poll(self, timeout: float) -> None:
        return None


def _view(consumer: _Watermarks) -> TopicView:
    view = TopicView(
        parse_options({"bootstrap.servers": "b:9092", "topic": "t", "metadataTimeoutMs": "1000"})
    )
    view._consumer = consumer  # type: ignore[assignment]
    return view


def test_offsets_of_a_partition_whose_leader_crashed_are_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a real cluster answered while a stream ran (this file's stream test failed without it):
    the query sent to the crashed leader fails with _DESTROY_BROKER once the broker is fenced."""
    from confluent_kafka import KafkaError

    monkeypatch.setattr(_topic, "FAILOVER_BACKOFF_S", 0.0)
    consumer = _Watermarks([KafkaError._DESTROY_BROKER, KafkaError._TIMED_OUT])
    assert _view(consumer).watermarks([0, 1]) == {0: (0, 10), 1: (0, 11)}
    assert consumer.calls == 4  # partition 0 three times, partition 1 once


def test_offsets_fail_after_the_last_attempt_or_at_once_on_an_error_no_new_leader_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from confluent_kafka import KafkaError

    monkeypatch.setattr(_topic, "FAILOVER_BACKOFF_S", 0.0)
    consumer = _Watermarks([KafkaError._TRANSPORT] * FAILOVER_ATTEMPTS)
    with pytest.raises(
        RuntimeError, match="topic 't' partition 0: cannot read offsets: cannot reach Kafka at b:9092"
    ):
        _view(consumer).watermarks([0])
    assert consumer.calls == FAILOVER_ATTEMPTS

    consumer = _Watermarks([KafkaError.TOPIC_AUTHORIZATION_FAILED])
    with pytest.raises(RuntimeError, match="topic 't' partition 0: cannot read offsets"):
        _view(consumer).watermarks([0])
    assert consumer.calls == 1
