"""The pipeline with `--sink`: PostgreSQL holds what the Parquet outputs hold, once, in batch and stream runs."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from pipeline_data import EXPECTED_REASONS, good_frame, read_metrics

from rebalancer._secrets import masked_url
from rebalancer.pipeline.batch import run_batch
from rebalancer.pipeline.generate import write_frame
from rebalancer.pipeline.ingest.inspect import inspect_input
from rebalancer.pipeline.sinks import open_sink
from rebalancer.pipeline.stream.driver import run_stream
from rebalancer.pipeline.stream.state import StreamConfig

pytestmark = [pytest.mark.spark, pytest.mark.postgres]
QUARANTINE_COLUMNS = ["ts", "type", "entity", "value", "reason"]


def _query(conn, sql: str) -> pd.DataFrame:
    cursor = conn.execute(sql)
    return pd.DataFrame(cursor.fetchall(), columns=[c.name for c in cursor.description])


def _primary_key(conn, relation: str) -> list[str]:
    rows = conn.execute(
        "SELECT a.attname FROM pg_index i JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(n, o) ON true "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n "
        "WHERE i.indrelid = %s::regclass AND i.indisprimary ORDER BY k.o",
        (relation,),
    ).fetchall()
    return [r[0] for r in rows]


def _db_metrics(conn, schema: str, keys: list[str]) -> pd.DataFrame:
    frame = _query(conn, f"SELECT * FROM {schema}.metrics")
    frame["minute"] = pd.to_datetime(frame["minute"], utc=True).dt.tz_localize(None)
    return frame.sort_values(keys).reset_index(drop=True)


def _multiset(frame: pd.DataFrame) -> list[tuple]:
    return sorted(tuple("<null>" if pd.isna(v) else v for v in row) for row in frame[QUARANTINE_COLUMNS].itertuples(index=False))


def test_batch_run_puts_the_parquet_rows_in_postgres_and_a_rerun_changes_nothing(
    spark, dataset, postgres, pg_schema, pg_connect, tmp_path
):
    input_dir, _ = dataset
    spec = inspect_input(input_dir)
    out = tmp_path / "out"
    sink = open_sink(postgres.url, pg_schema)
    summary = run_batch(spark, spec, out, partitions=2, report=False, sink=sink)

    assert _primary_key(pg_connect, f"{pg_schema}.metrics") == ["type", "entity", "minute"]
    assert _primary_key(pg_connect, f"{pg_schema}.quarantine") == ["row_key"]
    parquet = read_metrics(out / "metrics")
    database = _db_metrics(pg_connect, pg_schema, ["type", "entity", "minute"])
    pd.testing.assert_frame_equal(database, parquet[database.columns].astype(database.dtypes.to_dict()), check_exact=True)

    quarantine = _query(pg_connect, f"SELECT * FROM {pg_schema}.quarantine")
    assert _multiset(quarantine) == _multiset(pd.read_parquet(out / "quarantine"))
    assert quarantine["reason"].value_counts().to_dict() == EXPECTED_REASONS
    assert quarantine["row_key"].is_unique and set(quarantine["occurrence"]) == {1}

    n_metrics, n_bad = len(parquet), sum(EXPECTED_REASONS.values())
    assert summary["sink"]["tables"] == {
        "metrics": {"rows": n_metrics, "changed": n_metrics, "direct": n_metrics, "refused": 0},
        "quarantine": {"rows": n_bad, "changed": n_bad, "direct": n_bad, "refused": 0},
    }
    assert summary["sink"]["url"] == masked_url(postgres.display_url) and summary["sink"]["seconds"] > 0
    assert postgres._password not in (out / "summary.json").read_text()

    again = run_batch(spark, spec, out, partitions=2, report=False, sink=sink)
    assert again["sink"]["tables"] == {
        "metrics": {"rows": n_metrics, "changed": 0, "direct": 0, "refused": 0},
        "quarantine": {"rows": n_bad, "changed": 0, "direct": 0, "refused": 0},
    }
    pd.testing.assert_frame_equal(_db_metrics(pg_connect, pg_schema, ["type", "entity", "minute"]), database)
    assert len(_query(pg_connect, f"SELECT row_key FROM {pg_schema}.quarantine")) == n_bad


def test_stream_crash_after_the_database_commit_and_restart_leave_no_duplicate_and_no_gap(
    spark, postgres, pg_schema, pg_connect, tmp_path
):
    from pyspark.errors import StreamingQueryException

    good = good_frame(events=1500, seed=11)
    input_dir = tmp_path / "input"
    write_frame(good, input_dir, "parquet", 3)
    spec = inspect_input(input_dir)
    out = tmp_path / "out"
    sink = open_sink(postgres.url, pg_schema)

    # Batch 1 commits in PostgreSQL, then the run dies before Spark (and our state) commit it.
    with pytest.raises(StreamingQueryException, match="injected crash"):
        run_stream(spark, spec, out, StreamConfig(partitions=2, crash_after_batch=1, available_now=True), sink=sink)
    assert sink.committed_batches(_query_id(out)) == [0, 1]
    assert json.loads((out / "_checkpoint" / "rebalancer" / "state.json").read_text())["last_batch_id"] == 0

    # Restarted: Spark replays batch 1, the sink skips it, batch 2 follows.
    final = run_stream(spark, spec, out, StreamConfig(partitions=2, available_now=True), sink=sink)
    assert final["batches"] == 3 and final["accepted"] == len(good)
    assert sink.committed_batches(_query_id(out)) == [0, 1, 2]  # no gap
    keys = ["batch_id", "type", "entity", "minute"]
    assert _primary_key(pg_connect, f"{pg_schema}.metrics") == ["type", "entity", "minute", "batch_id"]
    database = _db_metrics(pg_connect, pg_schema, keys)
    assert not database.duplicated(keys).any()
    assert int(database["count"].sum()) == len(good)  # each event counted once
    parquet = pd.read_parquet(out / "metrics")
    parquet["batch_id"] = parquet["batch_id"].astype("int64")
    parquet["date"] = parquet["date"].astype(str)
    parquet["minute"] = pd.to_datetime(parquet["minute"]).dt.tz_localize(None)
    parquet = parquet.sort_values(keys).reset_index(drop=True)[database.columns]
    pd.testing.assert_frame_equal(database, parquet.astype(database.dtypes.to_dict()), check_exact=True)
    assert final["sink"]["skipped_batches"] == 1 and final["sink"]["batches"] == 3
    assert final["sink"]["tables"]["metrics"]["rows"] == len(database)  # the replayed batch counted once
    assert final["sink"]["tables"]["quarantine"]["rows"] == 0


def _query_id(out) -> str:
    from rebalancer.pipeline.sinks.outputs import stream_query_id

    return stream_query_id(out / "_checkpoint")


def test_stream_with_a_remote_checkpoint_reads_its_query_id_through_hadoop(
    spark, postgres, pg_schema, pg_connect, tmp_path, monkeypatch
):
    """With `file:` counted as remote, the output and checkpoint are only reachable through Hadoop:
    the sink finds Spark's query id there (a local read of the URI would fail every batch)."""
    from rebalancer.pipeline import paths

    monkeypatch.setattr(paths, "LOCAL_SCHEMES", frozenset())
    good = good_frame(events=600, seed=4)
    input_dir = tmp_path / "input"
    write_frame(good, input_dir, "parquet", 2)
    out = tmp_path / "out"
    sink = open_sink(postgres.url, pg_schema)
    summary = run_stream(
        spark, inspect_input(input_dir), f"file://{out}", StreamConfig(partitions=2, available_now=True), sink=sink
    )
    assert summary["batches"] == 2 and summary["accepted"] == len(good)
    assert (out / "_checkpoint" / "rebalancer" / ".state.json.crc").exists()  # written through Hadoop
    assert sink.committed_batches(_query_id(out)) == [0, 1]
    rows, counted = pg_connect.execute(f"SELECT count(*), sum(count) FROM {pg_schema}.metrics").fetchone()
    assert int(counted) == len(good)  # every event once
    assert rows == summary["sink"]["tables"]["metrics"]["rows"] and summary["sink"]["batches"] == 2
