"""PostgresSink on its own: upserts, a failed task, stream batches exactly once, bad tables and bad URLs."""

from __future__ import annotations

import re

import pytest

from rebalancer.pipeline.sinks import Output, PostgresSink, SinkError
from rebalancer.pipeline.sinks._pg_types import pg_type
from rebalancer.pipeline.sinks.outputs import with_row_key

pytestmark = [pytest.mark.spark, pytest.mark.postgres]
ROWS = 1000


def _frame(spark, rows: int = ROWS, bump: int = 0, partitions: int = 2):
    """k1, k2 (the key), ts, v, note: `bump` changes v on the rows whose id is below it."""
    from pyspark.sql import functions as F

    ids = spark.range(rows)
    return ids.select(
        (F.col("id") % 7).cast("string").alias("k1"),
        F.col("id").alias("k2"),
        F.timestamp_seconds(F.col("id") * 60).alias("ts"),
        F.when(F.col("id") < bump, F.col("id") * 2.5 + 1).otherwise(F.col("id") * 2.5).alias("v"),
        F.when(F.col("id") % 3 == 0, None).when(F.col("id") % 3 == 1, F.lit("")).otherwise(F.lit('a "q", b')).alias("note"),
    ).repartition(partitions)


def _table(conn, schema: str, table: str) -> list[tuple]:
    return conn.execute(f'SELECT * FROM "{schema}"."{table}" ORDER BY k1, k2').fetchall()


def _primary_key(conn, schema: str, table: str) -> list[str]:
    rows = conn.execute(
        "SELECT a.attname FROM pg_index i JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(n, o) ON true "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n "
        "WHERE i.indrelid = %s::regclass AND i.indisprimary ORDER BY k.o",
        (f'"{schema}"."{table}"',),
    ).fetchall()
    return [r[0] for r in rows]


def test_created_table_has_the_spark_types_and_the_key_and_a_rerun_changes_nothing(spark, postgres, pg_schema, pg_connect):
    sink = PostgresSink(postgres.url, schema=pg_schema)
    first = sink.write(_frame(spark), table="t", key=["k1", "k2"])
    assert (first.rows, first.changed, first.tasks, first.direct) == (ROWS, ROWS, 2, ROWS)
    columns = pg_connect.execute(
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = 't' ORDER BY ordinal_position",
        (pg_schema,),
    ).fetchall()
    assert columns == [
        ("k1", "text", "NO"),
        ("k2", "bigint", "NO"),
        ("ts", "timestamp with time zone", "YES"),
        ("v", "double precision", "YES"),
        ("note", "text", "YES"),
    ]
    assert _primary_key(pg_connect, pg_schema, "t") == ["k1", "k2"]
    before = _table(pg_connect, pg_schema, "t")
    assert len(before) == ROWS
    # NULL, '' and text with quotes and commas come through COPY as they were.
    notes = {row[1]: row[4] for row in before}
    assert (notes[0], notes[1], notes[2]) == (None, "", 'a "q", b')
    assert before[0][3] == 0.0 and str(before[0][2]) == "1970-01-01 00:00:00+00:00"

    again = sink.write(_frame(spark), table="t", key=["k1", "k2"])
    # Every key exists: each task finds its first key in the table and upserts without a direct COPY.
    assert (again.rows, again.changed, again.direct, again.refused) == (ROWS, 0, 0, 0)
    assert _table(pg_connect, pg_schema, "t") == before

    bumped = sink.write(_frame(spark, bump=10), table="t", key=["k1", "k2"])
    assert (bumped.rows, bumped.changed) == (ROWS, 10)
    after = {(r[0], r[1]): r[3] for r in _table(pg_connect, pg_schema, "t")}
    assert len(after) == ROWS
    assert after[("3", 3)] == 3 * 2.5 + 1 and after[("3", 10)] == 10 * 2.5


def test_a_task_failing_after_copy_leaves_the_target_untouched(spark, postgres, pg_schema, pg_connect):
    PostgresSink(postgres.url, schema=pg_schema).write(_frame(spark), table="t", key=["k1", "k2"])
    before = _table(pg_connect, pg_schema, "t")
    failing = PostgresSink(postgres.url, schema=pg_schema, inject_failure_after_copy=True)
    with pytest.raises(SinkError) as error:
        failing.write(_frame(spark, bump=ROWS), table="t", key=["k1", "k2"])
    copied = int(re.search(r"injected failure after COPY of (\d+) rows", str(error.value)).group(1))
    assert copied > 0  # the staging table held rows when the task failed
    assert postgres._password not in str(error.value)
    assert _table(pg_connect, pg_schema, "t") == before


def _values(conn, schema: str, table: str) -> dict[tuple[str, int], float]:
    return {(r[0], r[1]): r[3] for r in _table(conn, schema, table)}


def _expected_values(bump: int, ids: range = range(ROWS)) -> dict[tuple[str, int], float]:
    return {(str(i % 7), i): i * 2.5 + (1 if i < bump else 0) for i in ids}


def test_a_task_failing_after_its_direct_copy_leaves_the_target_untouched(spark, postgres, pg_schema, pg_connect):
    failing = PostgresSink(postgres.url, schema=pg_schema, inject_failure_after_copy=True)
    with pytest.raises(SinkError) as error:
        failing.write(_frame(spark), table="t", key=["k1", "k2"])
    copied, direct = map(int, re.search(r"COPY of (\d+) rows \((\d+) straight into the target\)", str(error.value)).groups())
    assert copied == direct > 0  # the empty target took the task's rows directly, then the task failed
    assert _count(pg_connect, pg_schema, "t") == 0


def test_a_task_meeting_existing_keys_rolls_back_and_upserts_its_rows(spark, postgres, pg_schema, pg_connect):
    sink = PostgresSink(postgres.url, schema=pg_schema)
    existing = sink.write(_frame(spark).where("k2 % 3 = 1"), table="t", key=["k1", "k2"])
    assert (existing.rows, existing.changed, existing.direct, existing.refused) == (333, 333, 333, 0)
    # One task in key order: its first key (k2 = 0) is new, so it tries the direct COPY, which k2 = 1
    # makes PostgreSQL refuse; it rolls back and upserts. The 667 new rows are inserted, and of the
    # 333 old ones only 1, 4 and 7 (below `bump`) change.
    ordered = _frame(spark, bump=10).repartition(1).sortWithinPartitions("k2")
    full = sink.write(ordered, table="t", key=["k1", "k2"])
    assert (full.rows, full.changed, full.direct, full.refused, full.tasks) == (ROWS, 667 + 3, 0, 1, 1)
    assert _values(pg_connect, pg_schema, "t") == _expected_values(bump=10)
    assert _count(pg_connect, pg_schema, "t") == ROWS


def test_rows_past_the_replay_limit_are_upserted_in_the_direct_copys_transaction(
    spark, postgres, pg_schema, pg_connect, monkeypatch
):
    from rebalancer.pipeline.sinks import postgres as postgres_module

    monkeypatch.setattr(postgres_module, "ARROW_BATCH_ROWS", 100)  # batches of 100 rows
    # replay_bytes=1: a task keeps only its first batch; that goes in by COPY, the rest by the upsert.
    sink = PostgresSink(postgres.url, schema=pg_schema, replay_bytes=1)
    existing = sink.write(_frame(spark).where("k2 >= 500"), table="t", key=["k1", "k2"])
    assert (existing.rows, existing.changed, existing.direct) == (500, 500, 2 * 100)
    assert _values(pg_connect, pg_schema, "t") == _expected_values(bump=0, ids=range(500, ROWS))

    # One task, in key order: its first batch (k2 0..99) is new and goes in directly; the other 900
    # rows (400 new, 500 existing with new values) through the upsert, in the same transaction.
    ordered = _frame(spark, bump=ROWS).repartition(1).sortWithinPartitions("k2")
    failing = PostgresSink(postgres.url, schema=pg_schema, replay_bytes=1, inject_failure_after_copy=True)
    with pytest.raises(SinkError, match=r"COPY of 1000 rows \(100 straight into the target\)"):
        failing.write(ordered, table="t", key=["k1", "k2"])
    assert _values(pg_connect, pg_schema, "t") == _expected_values(bump=0, ids=range(500, ROWS))
    written = sink.write(ordered, table="t", key=["k1", "k2"])
    assert (written.rows, written.changed, written.direct, written.refused, written.tasks) == (ROWS, ROWS, 100, 0, 1)
    assert _values(pg_connect, pg_schema, "t") == _expected_values(bump=ROWS)
    with pytest.raises(ValueError, match="replay_bytes must be >= 1, got 0"):
        PostgresSink(postgres.url, replay_bytes=0)


def _count(conn, schema: str, table: str) -> int:
    return conn.execute(f'SELECT count(*) FROM "{schema}"."{table}"').fetchone()[0]


def _stage_tables(conn, schema: str) -> list[str]:
    rows = conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename LIKE '\\_rebalancer\\_stage%%'", (schema,)
    ).fetchall()
    return [r[0] for r in rows]


def test_a_stream_batch_commits_all_its_tables_once_and_a_replay_is_skipped(spark, postgres, pg_schema, pg_connect):
    outputs = [Output(_frame(spark), "a", ("k1", "k2")), Output(_frame(spark, rows=300), "b", ("k1", "k2"))]
    failing = PostgresSink(postgres.url, schema=pg_schema, inject_failure_after_copy=True)
    with pytest.raises(SinkError, match="injected failure after COPY"):
        failing.write_batch(outputs, query="q", batch_id=0)
    assert _count(pg_connect, pg_schema, "a") == _count(pg_connect, pg_schema, "b") == 0
    assert failing.committed_batches("q") == []

    sink = PostgresSink(postgres.url, schema=pg_schema)
    first = sink.write_batch(outputs, query="q", batch_id=0)
    assert [(w.table, w.rows, w.changed, w.skipped) for w in first] == [("a", ROWS, ROWS, False), ("b", 300, 300, False)]
    assert _stage_tables(pg_connect, pg_schema) == []  # the failed attempt's staging tables are gone too

    # A replay of batch 0 (a crash before Spark's commit) writes nothing, even with other rows.
    replay = sink.write_batch([Output(_frame(spark, bump=ROWS), "a", ("k1", "k2")), outputs[1]], query="q", batch_id=0)
    assert [(w.table, w.rows, w.skipped) for w in replay] == [("a", ROWS, True), ("b", 300, True)]
    assert {r[3] for r in _table(pg_connect, pg_schema, "a")} == {i * 2.5 for i in range(ROWS)}
    assert (_count(pg_connect, pg_schema, "a"), _count(pg_connect, pg_schema, "b")) == (ROWS, 300)

    # Batch 1 and another query's batch 0 are new.
    assert sink.write(_frame(spark, bump=5), "a", ["k1", "k2"], batch_id=1, query="q").changed == 5
    assert sink.write(_frame(spark), "a", ["k1", "k2"], batch_id=0, query="other").skipped is False
    assert sink.committed_batches("q") == [0, 1]
    recorded = pg_connect.execute(
        f'SELECT tables FROM "{pg_schema}".rebalancer_batches WHERE query = %s AND batch_id = 0', ("q",)
    ).fetchone()[0]
    assert recorded == {"a": {"rows": ROWS, "changed": ROWS}, "b": {"rows": 300, "changed": 300}}
    with pytest.raises(ValueError, match="query is required with batch_id"):
        sink.write(_frame(spark), "a", ["k1", "k2"], batch_id=2)


def test_an_existing_table_with_other_columns_or_key_is_refused(spark, postgres, pg_schema, pg_connect):
    pg_connect.execute(f'CREATE SCHEMA "{pg_schema}"')
    pg_connect.execute(f'CREATE TABLE "{pg_schema}".wrong_type (k1 text, k2 bigint, ts timestamptz, v text, note text, '
                       "PRIMARY KEY (k1, k2))")
    pg_connect.execute(f'CREATE TABLE "{pg_schema}".wrong_key (k1 text, k2 bigint, ts timestamptz, v float8, '
                       "note text, PRIMARY KEY (k2))")
    pg_connect.execute(f'CREATE TABLE "{pg_schema}".missing (k1 text, k2 bigint, PRIMARY KEY (k1, k2))')
    pg_connect.execute(f'CREATE TABLE "{pg_schema}".extra (k1 text, k2 bigint, ts timestamptz, v float8, note text, '
                       "added text, PRIMARY KEY (k1, k2))")
    sink = PostgresSink(postgres.url, schema=pg_schema)
    frame = _frame(spark, rows=10)
    cases = {
        "wrong_type": "column 'v' is text, expected double precision",
        "wrong_key": "primary key is (k2), expected (k1, k2)",
        "missing": "column 'ts' is missing",
    }
    for table, problem in cases.items():
        with pytest.raises(ValueError) as error:
            sink.write(frame, table, ["k1", "k2"])
        assert str(error.value) == f"sink table {pg_schema}.{table} exists with incompatible columns: {problem}"
    assert sink.write(frame, "extra", ["k1", "k2"]).rows == 10  # a nullable extra column is fine
    with pytest.raises(ValueError, match="key column 'nope' is not a column of the frame for 't'"):
        sink.write(frame, "t", ["k1", "nope"])


def test_connection_errors_and_repr_never_show_the_password(postgres):
    password = postgres._password
    wrong = postgres.url.replace(password, "Wr0ng-s3cret-pw")
    with pytest.raises(ValueError) as error:
        PostgresSink(wrong).check()
    assert "password authentication failed" in str(error.value)
    assert "Wr0ng-s3cret-pw" not in str(error.value)

    unreachable = f"postgresql://u:{password}@127.0.0.1:1/db"
    sink = PostgresSink(unreachable)
    assert password not in repr(sink) and repr(sink) == "PostgresSink('postgresql://***@127.0.0.1:1/db', schema='rebalancer')"
    with pytest.raises(ValueError) as error:
        sink.check()
    message = str(error.value)
    assert message.startswith("sink postgresql://***@127.0.0.1:1/db: cannot connect: ") and "\n" not in message
    assert password not in message

    with pytest.raises(ValueError) as error:
        PostgresSink(f"mysql://u:{password}@h/db")
    assert str(error.value) == "sink must be a postgresql://user:password@host:port/database URL, got 'mysql://…'"
    with pytest.raises(ValueError, match="sink schema must be 1 to 63 bytes"):
        PostgresSink(postgres.url, schema="")
    assert sink.redact(f"x password={password} y {unreachable}") == "x password=*** y postgresql://***@127.0.0.1:1/db"


def test_quarantine_row_key_keeps_duplicates_and_tells_null_from_empty(spark):
    rows = [("1", "t", "e", "abc", "value_not_numeric")] * 2 + [
        ("1", "t", "", None, "value_missing"),
        ("1", "t", None, "", "value_missing"),
    ]
    frame = spark.createDataFrame(rows, "ts string, type string, entity string, value string, reason string")
    keyed = sorted(with_row_key(frame).collect(), key=lambda r: (r["entity"] is None, r["occurrence"]))
    assert [r["occurrence"] for r in keyed] == [1, 1, 2, 1]
    assert len({r["row_key"] for r in keyed}) == 4 and all(len(r["row_key"]) == 64 for r in keyed)
    again = {r["row_key"] for r in with_row_key(frame.repartition(3)).collect()}
    assert again == {r["row_key"] for r in keyed}  # stable across runs and partitionings


def test_spark_types_map_to_postgres_types():
    from pyspark.sql import types as T

    assert pg_type("d", T.DecimalType(12, 3)) == "numeric(12,3)"
    assert pg_type("n", T.TimestampNTZType()) == "timestamp without time zone"
    assert pg_type("b", T.ByteType()) == "smallint"
    with pytest.raises(ValueError, match="column 'a' has type array<int>, which the PostgreSQL sink cannot store"):
        pg_type("a", T.ArrayType(T.IntegerType()))


def test_every_storable_spark_type_round_trips_through_binary_copy(spark, postgres, pg_schema, pg_connect):
    """COPY's binary format carries each value as Spark had it: no text round trip, no precision lost."""
    import datetime as dt
    from decimal import Decimal

    schema = (
        "k string, b byte, s short, i int, l long, f float, d double, ok boolean, dec decimal(12,3), "
        "day date, ts timestamp, ntz timestamp_ntz"
    )
    stamp = dt.datetime(2026, 11, 23, 12, 34, 56, 123456, tzinfo=dt.UTC)
    rows = [
        ("naïve \"quoted\", comma\nline", -128, -32768, -(2**31), -(2**63), 1.5, 0.1 + 0.2, True,
         Decimal("-123456789.125"), dt.date(1999, 12, 31), stamp, dt.datetime(2026, 1, 1, 0, 0, 0, 1)),
        ("", 127, 32767, 2**31 - 1, 2**63 - 1, float("inf"), float("nan"), False, Decimal("0.001"),
         dt.date(2026, 2, 28), dt.datetime(1970, 1, 1, tzinfo=dt.UTC), dt.datetime(1900, 1, 1)),
        ("nulls", None, None, None, None, None, None, None, None, None, None, None),
    ]
    frame = spark.createDataFrame(rows, schema)
    written = PostgresSink(postgres.url, schema=pg_schema).write(frame, table="types", key=["k"])
    assert (written.rows, written.changed) == (3, 3)
    got = {r[0]: r[1:] for r in pg_connect.execute(f'SELECT * FROM "{pg_schema}".types').fetchall()}
    assert set(got) == {rows[0][0], "", "nulls"}
    first = got[rows[0][0]]
    assert first[:7] == (-128, -32768, -(2**31), -(2**63), 1.5, 0.1 + 0.2, True)
    assert first[7:] == (Decimal("-123456789.125"), dt.date(1999, 12, 31), stamp, dt.datetime(2026, 1, 1, 0, 0, 0, 1))
    second = got[""]
    assert second[:4] == (127, 32767, 2**31 - 1, 2**63 - 1)
    assert second[4] == float("inf") and second[5] != second[5]  # NaN stays NaN
    assert second[6:] == (False, Decimal("0.001"), dt.date(2026, 2, 28),
                          dt.datetime(1970, 1, 1, tzinfo=dt.UTC), dt.datetime(1900, 1, 1))
    assert got["nulls"] == (None,) * 11


def test_the_summary_counts_direct_rows_and_refused_tasks_per_table_on_top_of_saved_totals():
    from rebalancer.pipeline.sinks._pg_types import TableWrite
    from rebalancer.pipeline.sinks.outputs import _add

    # A stream's totals as a state saved before `direct` and `refused` were counted.
    section = {"tables": {"metrics": {"rows": 10, "changed": 10}}, "seconds": 1.0}
    _add(section, [TableWrite("metrics", rows=7, changed=5, tasks=2, seconds=0.5, direct=3, refused=1),
                   TableWrite("quarantine", rows=2, changed=2, tasks=1, seconds=0.1, direct=2)], 0.75)
    assert section["tables"] == {
        "metrics": {"rows": 17, "changed": 15, "direct": 3, "refused": 1},
        "quarantine": {"rows": 2, "changed": 2, "direct": 2, "refused": 0},
    }
    assert section["seconds"] == 1.75
