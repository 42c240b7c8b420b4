"""Issue 34 section 4: batch runs of `kafka://…?group=NAME` resume from the group's committed offsets,
commit them only after the outputs, and a run stopped between the two is rewritten, not counted twice."""

from __future__ import annotations

import itertools

import pandas as pd
import pytest
from kafka_fixtures import all_at_once, assert_same_totals, cluster_id

from rebalancer.pipeline import batch
from rebalancer.pipeline.batch import run_batch
from rebalancer.pipeline.generate import GenerateConfig, make_frame
from rebalancer.pipeline.kafka._options import parse_options
from rebalancer.pipeline.kafka._topic import commit_group_offsets, group_offsets, plan_group_read
from rebalancer.pipeline.kafka.telemetry import encode_events, parse_kafka_url, produce_events
from rebalancer.pipeline.sinks import open_sink

_groups = itertools.count()


def produce_sample(bootstrap: str, topic: str, events: int, seed: int) -> None:
    frame = make_frame(GenerateConfig(events=events, types=12, entities=5, bad_rate=0.01, format="jsonl", seed=seed))
    keys, values = encode_events(frame)
    produce_events(bootstrap, topic, keys, values)


def db_totals(conn: object, schema: str) -> pd.DataFrame:
    """The sink's metrics folded over batches: count and sum add, min and max combine."""
    cursor = conn.execute(  # type: ignore[attr-defined]
        f"SELECT type, entity, minute, SUM(count) AS count, SUM(sum) AS sum, MIN(min) AS min, MAX(max) AS max "
        f"FROM {schema}.metrics GROUP BY type, entity, minute ORDER BY type, entity, minute"
    )
    frame = pd.DataFrame(cursor.fetchall(), columns=[c.name for c in cursor.description])
    frame["minute"] = pd.to_datetime(frame["minute"], utc=True).dt.tz_localize(None)
    return frame.astype({"count": "int64", "sum": "float64", "min": "float64", "max": "float64"})


@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.kafka
def test_second_run_reads_only_the_new_records_and_postgres_holds_all(
    spark, kafka_cluster, kafka_topic, postgres, pg_schema, pg_connect, tmp_path
):
    bootstrap, topic, group = kafka_cluster.bootstrap_servers, kafka_topic(3), f"etl-{next(_groups)}"
    url = f"kafka://{bootstrap}/{topic}?group={group}"
    sink = open_sink(postgres.url, pg_schema)
    from rebalancer.pipeline.sinks import prepare_sink

    prepare_sink(sink, spark, stream=True)  # what `pipeline run` does for a group input
    produce_sample(bootstrap, topic, 10_000, seed=1)
    first = run_batch(spark, parse_kafka_url(url), tmp_path / "out", partitions=2, report=False, sink=sink)
    assert first["ingested"] == 10_000 and first["kafka_group"]["batch_id"] == 0
    produce_sample(bootstrap, topic, 5_000, seed=2)
    second = run_batch(spark, parse_kafka_url(url), tmp_path / "out", partitions=2, report=False, sink=sink)
    assert second["ingested"] == 5_000
    assert second["kafka_group"]["start"] == first["kafka_group"]["end"]
    assert second["kafka_group"]["batch_id"] == 10_000

    options = parse_options({"bootstrap.servers": bootstrap, "topic": topic, "group": group})
    start, end = plan_group_read(options)
    assert start == end and sum(end.values()) == 15_000  # the group is at the end: nothing left to read
    expected = all_at_once(spark, f"kafka://{bootstrap}/{topic}", tmp_path / "whole")
    assert int(expected["count"].sum()) == first["accepted"] + second["accepted"]
    assert_same_totals(db_totals(pg_connect, pg_schema), expected)
    parquet = pd.read_parquet(tmp_path / "out" / "metrics")
    assert sorted(parquet["batch_id"].astype(int).unique()) == [0, 10_000]
    assert int(parquet["count"].sum()) == first["accepted"] + second["accepted"]


@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.kafka
def test_a_run_stopped_before_its_offset_commit_is_rewritten_not_counted_twice(
    spark, kafka_cluster, kafka_topic, postgres, pg_schema, pg_connect, tmp_path, monkeypatch
):
    bootstrap, topic, group = kafka_cluster.bootstrap_servers, kafka_topic(3), f"etl-{next(_groups)}"
    url = f"kafka://{bootstrap}/{topic}?group={group}"
    sink = open_sink(postgres.url, pg_schema)
    from rebalancer.pipeline.sinks import prepare_sink

    prepare_sink(sink, spark, stream=True)
    produce_sample(bootstrap, topic, 10_000, seed=3)

    def killed() -> None:
        raise KeyboardInterrupt("killed between the sink's commit and the offset commit")

    monkeypatch.setattr(batch, "before_offset_commit", killed)
    with pytest.raises(KeyboardInterrupt):
        run_batch(spark, parse_kafka_url(url), tmp_path / "out", partitions=2, report=False, sink=sink)
    monkeypatch.setattr(batch, "before_offset_commit", None)
    options = parse_options({"bootstrap.servers": bootstrap, "topic": topic, "group": group})
    assert sum(plan_group_read(options)[0].values()) == 0  # the group did not move
    assert int(db_totals(pg_connect, pg_schema)["count"].sum()) > 0  # but the sink had committed

    produce_sample(bootstrap, topic, 5_000, seed=4)  # records that came in meanwhile
    rerun = run_batch(spark, parse_kafka_url(url), tmp_path / "out", partitions=2, report=False, sink=sink)
    assert rerun["ingested"] == 15_000 and rerun["kafka_group"]["batch_id"] == 0  # the same batch, rewritten
    expected = all_at_once(spark, f"kafka://{bootstrap}/{topic}", tmp_path / "whole")
    assert int(expected["count"].sum()) == rerun["accepted"]
    assert_same_totals(db_totals(pg_connect, pg_schema), expected)
    parquet = pd.read_parquet(tmp_path / "out" / "metrics")
    assert int(parquet["count"].sum()) == rerun["accepted"]


def test_group_offsets_start_at_earliest_and_follow_commits(any_kafka_cluster, any_kafka_topic) -> None:
    """confluent-kafka commit and committed without joining the group, on the mock and a real cluster."""
    bootstrap, topic = any_kafka_cluster.bootstrap_servers, any_kafka_topic(2)
    options = parse_options(
        {"bootstrap.servers": bootstrap, "topic": topic, "group": f"etl-{next(_groups)}", "metadataTimeoutMs": "30000"}
    )
    marks = {0: (5, 9), 1: (0, 4)}  # (earliest, latest): a group with no commit starts at the earliest
    assert group_offsets(options, marks) == {0: 5, 1: 0}
    commit_group_offsets(options, {0: 7, 1: 3})  # a broker stores a commit without checking the log
    assert group_offsets(options, marks) == {0: 7, 1: 3}


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"group": " "}, False, "option group must name a consumer group"),
        ({"group": "g"}, True, "option group is for batch reads"),
        ({"group": "g", "startingOffsets": "earliest"}, False, "takes no startingOffsets or endingOffsets"),
        ({"group": "g", "endingOffsets": "latest"}, False, "takes no startingOffsets or endingOffsets"),
    ],
)
def test_group_option_is_checked(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_options({"bootstrap.servers": "b:9092", "topic": "t", **options}, streaming=streaming)


def test_without_group_nothing_changes() -> None:
    assert parse_options({"bootstrap.servers": "b:9092", "topic": "t"}).group is None
    assert parse_options({"bootstrap.servers": "b:9092", "topic": "t", "group": " etl "}).group == "etl"


@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.kafka
def test_cli_group_run_keys_the_sink_by_batch_and_resumes(
    spark, kafka_cluster, kafka_topic, postgres, pg_schema, pg_connect, tmp_path, capsys
):
    """`pipeline run --input kafka://…?group=NAME --sink …`: the sink's tables are keyed by batch_id."""
    import json

    from rebalancer.cli import main

    bootstrap, topic, group = kafka_cluster.bootstrap_servers, kafka_topic(2), f"etl-{next(_groups)}"
    produce_sample(bootstrap, topic, 2_000, seed=5)
    out = tmp_path / "out"
    argv = ["pipeline", "run", "--input", f"kafka://{bootstrap}/{topic}?group={group}", "--output", str(out),
            "--partitions", "2", "--no-report", "--sink", postgres.url, "--sink-schema", pg_schema,
            "--mode", "append"]  # each group run adds its batch_id=N/ to the same output
    assert main(argv) == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["kafka_group"] == {"group": group, "topic": topic, "batch_id": 0, "start": {"0": 0, "1": 0},
                                      "end": summary["kafka_group"]["end"], "cluster": cluster_id(bootstrap)}
    assert sum(summary["kafka_group"]["end"].values()) == 2_000
    key = pg_connect.execute(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
        "WHERE i.indrelid = %s::regclass AND i.indisprimary ORDER BY a.attname",
        (f"{pg_schema}.metrics",),
    ).fetchall()
    assert [r[0] for r in key] == ["batch_id", "entity", "minute", "type"]
    assert int(db_totals(pg_connect, pg_schema)["count"].sum()) == summary["accepted"]
    # Nothing new: an empty batch at the group's position (a later run with records rewrites it).
    assert main(argv) == 0, capsys.readouterr().err
    again = json.loads((out / "summary.json").read_text())
    assert again["ingested"] == 0 and again["kafka_group"]["batch_id"] == 2_000
    assert int(db_totals(pg_connect, pg_schema)["count"].sum()) == summary["accepted"]


def test_group_calls_retry_a_coordinator_that_is_not_ready() -> None:
    """A group's first use on a fresh cluster answers NOT_COORDINATOR until its coordinator is loaded."""
    from confluent_kafka import KafkaError, KafkaException

    from rebalancer.pipeline.kafka._topic import _retrying

    options = parse_options({"bootstrap.servers": "b:9092", "topic": "t", "group": "g", "metadataTimeoutMs": "30000"})
    answers = [KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, None]

    def call() -> str:
        code = answers.pop(0)
        if code is not None:
            raise KafkaException(KafkaError(code))
        return "done"

    assert _retrying(options, call) == "done" and not answers

    def refused() -> str:
        raise KafkaException(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))

    with pytest.raises(KafkaException):
        _retrying(options, refused)


@pytest.mark.spark
@pytest.mark.kafka
def test_an_output_whose_report_went_elsewhere_still_names_its_groups_batches(
    spark, kafka_cluster, kafka_topic, tmp_path, capsys
):
    """A group run whose report (summary.json) went to --report-dir: the output's own manifest names
    whose batches it holds, so another group's append is refused even without that report."""
    import json

    from rebalancer.cli import main
    from rebalancer.pipeline import RunRequest

    bootstrap, topic, group = kafka_cluster.bootstrap_servers, kafka_topic(2), f"etl-{next(_groups)}"
    produce_sample(bootstrap, topic, 500, seed=6)
    out, reports = tmp_path / "out", tmp_path / "reports"
    argv = ["pipeline", "run", "--input", f"kafka://{bootstrap}/{topic}?group={group}", "--output", str(out),
            "--report-dir", str(reports), "--partitions", "2", "--no-report", "--mode", "append"]
    assert main(argv) == 0, capsys.readouterr().err
    assert not (out / "summary.json").exists() and (reports / "summary.json").exists()
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["batches"] == f"group {group!r} on topic {topic!r}"
    other = f"kafka://{bootstrap}/{topic}?group={group}-other"
    with pytest.raises(ValueError) as caught:
        RunRequest(input=other, output=out, mode="append").check_output()
    assert str(caught.value) == (
        f"output {out} holds the batches of group {group!r} on topic {topic!r}; --mode append would number this "
        f"run's (group '{group}-other' on topic {topic!r}) over them: give another --output, or --mode overwrite"
    )
    RunRequest(input=f"kafka://{bootstrap}/{topic}?group={group}", output=out, mode="append").check_output()
    RunRequest(input=other, output=out, mode="overwrite").check_output()
