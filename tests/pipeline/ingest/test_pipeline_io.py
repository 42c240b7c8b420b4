"""Issue 11 on Spark: columns by name, shards that never collide with types, timestamps readers agree on."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

import pandas as pd
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from pipeline_data import instant, reference_metrics

from rebalancer.pipeline.batch import run_batch
from rebalancer.pipeline.ingest.classifier import cacheable_rows, classify
from rebalancer.pipeline.ingest.contract import REQUIRED_COLUMNS
from rebalancer.pipeline.ingest.files import TS_MAX_MICROS, TS_MIN_MICROS, read_raw
from rebalancer.pipeline.ingest.inspect import inspect_input

pytestmark = pytest.mark.spark
BOM = b"\xef\xbb\xbf"
# Extra columns whose values would pass for contract values if read by position.
EXTRAS = {"before": "9.5", "between": "2026-02-02T00:00:00Z", "after": "metric_9999"}


def _file_rows(tag: int) -> list[dict[str, str]]:
    return [
        {"ts": f"2026-01-01T00:{tag % 60:02d}:{second:02d}Z", "type": f"type-{tag}", "entity": f"ent-{tag}",
         "value": f"{tag}.{second}"}
        for second in (1, 2)
    ]


def _layouts() -> list[list[str]]:
    """Every order of the four columns; in turn alone, and with extra columns before, between, after
    or all three (one Spark read per distinct header, so each order appears once)."""
    layouts = []
    for index, order in enumerate(itertools.permutations(REQUIRED_COLUMNS)):
        layout = list(order)
        if index % 5 in (1, 4):
            layout.insert(0, "before")
        if index % 5 in (2, 4):
            layout.insert(len(layout) // 2, "between")
        if index % 5 in (3, 4):
            layout.append("after")
        layouts.append(layout)
    return layouts


def _expected(count: int) -> list[tuple[str, ...]]:
    return sorted(tuple(row[c] for c in REQUIRED_COLUMNS) for tag in range(count) for row in _file_rows(tag))


def _collected(spark, path: Path, **columns: str) -> list[tuple[str, ...]]:
    spec = inspect_input(path, columns=columns) if columns else inspect_input(path)
    return sorted(tuple(row) for row in read_raw(spark, spec).collect())


def test_csv_columns_are_matched_by_header_name(spark, tmp_path):
    layouts = _layouts()
    for tag, layout in enumerate(layouts):
        rows = [{**EXTRAS, **row} for row in _file_rows(tag)]
        pd.DataFrame(rows)[layout].to_csv(tmp_path / f"f{tag:02d}.csv", index=False)
    assert len(layouts) == 24 and {len(layout) for layout in layouts} == {4, 5, 7}
    assert _collected(spark, tmp_path) == _expected(len(layouts))


def test_jsonl_columns_are_matched_by_key(spark, tmp_path):
    layouts = _layouts()
    for tag, layout in enumerate(layouts):
        rows = [{**EXTRAS, **row} for row in _file_rows(tag)]
        text = "".join(json.dumps({name: row[name] for name in layout}) + "\n" for row in rows)
        (tmp_path / f"f{tag:02d}.jsonl").write_text(text)
    assert _collected(spark, tmp_path) == _expected(len(layouts))


def test_columns_mapping_for_every_format(spark, tmp_path):
    mapping = {"ts": "event_time", "type": "metric", "entity": "host", "value": "v"}
    rows = [{**EXTRAS, **{mapping[k]: v for k, v in row.items()}} for row in _file_rows(0)]
    frame = pd.DataFrame(rows)[["host", "before", "v", "metric", "event_time", "after"]]
    frame.to_csv(tmp_path / "in.csv", index=False)
    frame.to_json(tmp_path / "in.jsonl", orient="records", lines=True)
    frame.to_parquet(tmp_path / "in.parquet", index=False)
    for name in ("in.csv", "in.jsonl", "in.parquet"):
        assert _collected(spark, tmp_path / name, **mapping) == _expected(1), name
    # A partial mapping: unmapped columns keep their own names.
    frame.rename(columns={"event_time": "ts"}).to_csv(tmp_path / "partial.csv", index=False)
    partial = {k: v for k, v in mapping.items() if k != "ts"}
    assert _collected(spark, tmp_path / "partial.csv", **partial) == _expected(1)


def test_utf8_bom_is_stripped(spark, tmp_path):
    rows = _file_rows(0)
    csv_text = pd.DataFrame(rows)[["value", "ts", "entity", "type"]].to_csv(index=False)
    (tmp_path / "excel.csv").write_bytes(BOM + csv_text.encode())
    jsonl_text = "".join(json.dumps(row) + "\n" for row in rows)
    (tmp_path / "bom.jsonl").write_bytes(BOM + jsonl_text.encode())
    assert _collected(spark, tmp_path / "excel.csv") == _expected(1)
    assert _collected(spark, tmp_path / "bom.jsonl") == _expected(1)


def test_file_names_that_look_like_globs_are_read_as_named(spark, tmp_path):
    """Spark expands globs in paths: `a[1].csv` was read as `a1.csv`, which was then read twice."""
    csv_dir, jsonl_dir = tmp_path / "csv[0]", tmp_path / "jsonl{0}"
    csv_dir.mkdir()
    jsonl_dir.mkdir()
    for tag, name in enumerate(["a[1]", "a1", "b{x}*?"]):
        pd.DataFrame(_file_rows(tag)).to_csv(csv_dir / f"{name}.csv", index=False)
        (jsonl_dir / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _file_rows(tag)))
    assert _collected(spark, csv_dir) == _expected(3)
    assert _collected(spark, jsonl_dir) == _expected(3)


def test_timestamp_range_check_on_numbers_and_timestamps(spark):
    """Epoch milliseconds beyond the range (even beyond a long) and timestamps outside it are quarantined."""
    from pyspark.sql import functions as F

    min_ms, max_ms = -(-TS_MIN_MICROS // 1000), TS_MAX_MICROS // 1000
    numbers = [min_ms, max_ms, min_ms - 1, max_ms + 1, 2**63 - 1, -(2**63), None]
    frame = spark.createDataFrame([(n, "t", "e", 1.0) for n in numbers], "ts long, type string, entity string, value double")
    reasons = [row.reason for row in classify(frame).select("reason").collect()]
    assert reasons == [None, None, "ts_out_of_range", "ts_out_of_range", "ts_out_of_range", "ts_out_of_range",
                       "ts_missing"]
    doubles = spark.createDataFrame([(float("nan"),), (1e300,), (float(max_ms),)], "ts double").select(
        "ts", F.lit("t").alias("type"), F.lit("e").alias("entity"), F.lit(1.0).alias("value")
    )
    assert [row.reason for row in classify(doubles).select("reason").collect()] == ["ts_unparseable", "ts_out_of_range", None]
    texts = ["1600-01-01T00:00:00Z", "2262-04-11T23:47:16.854775Z", "2262-04-11T23:47:16.854776Z", "0001-01-01"]
    stamps = spark.createDataFrame([(t,) for t in texts], "s string").select(
        F.col("s").cast("timestamp").alias("ts"), F.lit("t").alias("type"), F.lit("e").alias("entity"),
        F.lit(1.0).alias("value"),
    )
    assert [row.reason for row in classify(stamps).select("reason").collect()] == [
        "ts_out_of_range", None, "ts_out_of_range", "ts_out_of_range"
    ]


def test_range_bounds_are_what_pandas_represents():
    assert TS_MIN_MICROS == pd.Timestamp.min.ceil("min").value // 1000
    assert TS_MAX_MICROS == pd.Timestamp.max.value // 1000


# --- One run over collisions and edge timestamps, checked from several sides ------------------------------

HOT = "x"
LOOKALIKES = {"x#1": 3, "x#0": 2, "x/1": 2, "x\u0000": 2, "x#": 1}
GOOD_TS = [
    "1677-09-21T00:13:00Z",  # the lowest instant in range
    "2262-04-11T23:47:16.854775Z",  # the highest
    "9223372036854",  # the highest whole millisecond, as epoch ms
    "1900-01-01T00:00:59.999Z",
    "2026-01-01T05:00:30",  # no offset: UTC
    "2026-01-01T07:00:30+02:00",
]
OUT_OF_RANGE_TS = [
    "-999999999999999",
    "1677-09-21T00:12:59.999999Z",
    "2262-04-11T23:47:16.854776Z",
    "9223372036855",
    "99999999999999999999",
]


@pytest.fixture(scope="module")
def edge_run(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("edge")
    data = root / "input"
    data.mkdir()
    good = [
        {"ts": f"2026-01-01T00:0{i % 3}:00Z", "type": HOT, "entity": f"e{i % 10}", "value": float(i)} for i in range(400)
    ]
    good += [
        {"ts": "2026-01-01T00:01:00Z", "type": name, "entity": f"e{i}", "value": 10.0 + i}
        for name, count in LOOKALIKES.items()
        for i in range(count)
    ]
    good += [{"ts": ts, "type": "edge", "entity": f"t{i}", "value": 0.5 + i} for i, ts in enumerate(GOOD_TS)]
    bad = [{"ts": ts, "type": "edge", "entity": "bad", "value": 1.0} for ts in OUT_OF_RANGE_TS]
    # The header order, an extra column between, and a second file in another order behind a BOM.
    frame = pd.DataFrame(good + bad).assign(note="n")
    frame.iloc[:300][["ts", "entity", "note", "type", "value"]].to_csv(data / "a.csv", index=False)
    rest = frame.iloc[300:][["value", "type", "ts", "entity"]].to_csv(index=False)
    (data / "b.csv").write_bytes(BOM + rest.encode())
    out = root / "out"
    summary = run_batch(spark, inspect_input(data), out, "weighted", 2, report=False)
    return {"out": out, "summary": summary, "good": pd.DataFrame(good), "bad": len(bad)}


def test_lookalike_types_never_collide_with_shards(edge_run):
    summary, out = edge_run["summary"], edge_run["out"]
    good = edge_run["good"]
    plan = json.loads((out / "plan.json").read_text())
    assert summary["sharded_types"] == [HOT]
    assert set(plan["types"]) == set(good["type"])
    rows = {(item["type"], item["shard"]): item["rows"] for item in plan["items"]}
    for name, count in LOOKALIKES.items():
        assert rows[(name, None)] == count, name
    hot_shards = {shard: n for (name, shard), n in rows.items() if name == HOT}
    assert len(hot_shards) >= 2 and None not in hot_shards
    assert sum(hot_shards.values()) == 400
    assert sum(rows.values()) == summary["accepted"] == len(good)
    # The handler saw exactly the planned rows on every task, so the skew figures are the plan's.
    assert summary["task_rows"] == plan["load"]
    assert sum(plan["load"]) == len(good)
    metrics = pd.read_parquet(out / "metrics")
    per_type: Counter[str] = Counter()
    for type_name, count in zip(metrics["type"], metrics["count"]):  # not pandas' hashing: it stops at NUL
        per_type[type_name] += int(count)
    assert per_type == Counter(good["type"])


def test_out_of_range_timestamps_are_quarantined(edge_run):
    summary = edge_run["summary"]
    assert summary["quarantine_reasons"] == {"ts_out_of_range": edge_run["bad"]}
    assert summary["ingested"] == summary["accepted"] + summary["quarantined"]
    quarantine = pd.read_parquet(edge_run["out"] / "quarantine")
    assert sorted(quarantine["ts"]) == sorted(OUT_OF_RANGE_TS)


def test_metrics_minutes_agree_in_spark_pyarrow_and_pandas(spark, edge_run):
    from pyspark.sql import functions as F

    metrics_dir = edge_run["out"] / "metrics"
    for file in metrics_dir.rglob("*.parquet"):
        column = pq.ParquetFile(file).schema.column(2)
        assert column.name == "minute" and column.physical_type == "INT64", column
        logical = json.loads(column.logical_type.to_json())
        assert (logical["Type"], logical["isAdjustedToUTC"], logical["timeUnit"]) == ("Timestamp", True, "microseconds")
    key = ["type", "entity"]
    by_spark = {
        (r.type, r.entity): r.m
        for r in spark.read.parquet(str(metrics_dir)).select(*key, F.unix_micros("minute").alias("m")).collect()
    }
    table = ds.dataset(metrics_dir, format="parquet", partitioning="hive").to_table()
    by_arrow = {
        (t, e): m
        for t, e, m in zip(table["type"].to_pylist(), table["entity"].to_pylist(),
                           table["minute"].cast("int64").to_pylist())
    }
    frame = pd.read_parquet(metrics_dir)
    by_pandas = dict(zip(zip(frame["type"], frame["entity"]), frame["minute"].dt.tz_convert("UTC").astype("int64")))
    assert str(frame["minute"].dt.unit) == "us"
    edge = {("edge", f"t{i}"): instant(ts).value // 1000 // 60_000_000 * 60_000_000 for i, ts in enumerate(GOOD_TS)}
    for name, got in (("spark", by_spark), ("pyarrow", by_arrow), ("pandas", by_pandas)):
        assert {k: got[k] for k in edge} == edge, name
    assert by_spark == by_arrow == by_pandas
    dates = sorted(p.name for p in metrics_dir.iterdir() if p.is_dir())
    assert dates == ["date=1677-09-21", "date=1900-01-01", "date=2026-01-01", "date=2262-04-11"]


def test_edge_metrics_equal_an_independent_pandas_reference(edge_run):
    got = pd.read_parquet(edge_run["out"] / "metrics")
    got["minute"] = got["minute"].dt.tz_convert("UTC").astype("int64")
    want = reference_metrics(edge_run["good"])
    want["minute"] = want["minute"].astype("datetime64[us]").astype("int64")
    key = ["type", "entity", "minute"]
    got = got.sort_values(key).reset_index(drop=True)
    want = want.sort_values(key).reset_index(drop=True)
    for column in ("type", "entity", "minute", "count", "min", "max", "p50", "p90", "p99"):
        assert got[column].tolist() == want[column].tolist(), column


def test_timestamps_without_offset_are_utc_whatever_the_session_zone(spark, tmp_path):
    data = tmp_path / "in.csv"
    pd.DataFrame([{"ts": "2026-01-01T23:30:00", "type": "a", "entity": "e", "value": 1.0}]).to_csv(data, index=False)
    compressed = "spark.sql.inMemoryColumnarStorage.compressed"
    arrow_bytes = "spark.sql.execution.arrow.maxBytesPerBatch"
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    spark.conf.set(compressed, "true")
    spark.conf.set(arrow_bytes, "1m")
    during: list[tuple[str, str | None, str | None]] = []

    def progress(stage: str) -> None:
        during.append((stage, spark.conf.get(arrow_bytes), spark.conf.get("spark.sql.session.timeZone")))

    try:
        run_batch(spark, inspect_input(data), tmp_path / "out", "hash", 1, progress=progress, report=False)
        assert spark.conf.get("spark.sql.session.timeZone") == "America/New_York"  # restored
        assert spark.conf.get(compressed) == "true"  # the run's uncompressed cache setting is undone too
        assert spark.conf.get(arrow_bytes) == "1m"  # and so is its uncapped Arrow batch size
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        spark.conf.unset(compressed)
        spark.conf.unset(arrow_bytes)
    # While the run lasts, its settings hold: Arrow batches are bounded by rows alone.
    assert {stage for stage, _, _ in during} >= {"read and count", "dispatch and persist"}
    assert {(b, zone) for _, b, zone in during} == {(str(2**31 - 1), "UTC")}
    metrics = pd.read_parquet(tmp_path / "out" / "metrics")
    assert metrics["minute"].dt.tz_convert("UTC").tolist() == [pd.Timestamp("2026-01-01T23:30:00Z")]
    assert metrics["date"].astype(str).tolist() == ["2026-01-01"]


def test_stream_reads_csv_columns_by_name(spark, tmp_path):
    from rebalancer.pipeline.stream.driver import run_stream
    from rebalancer.pipeline.stream.state import StreamConfig

    data = tmp_path / "input"
    data.mkdir()
    rows = [{**row, "note": "9.5"} for tag in range(4) for row in _file_rows(tag)]
    for index in range(2):
        chunk = pd.DataFrame(rows[index * 4 : (index + 1) * 4])[["value", "note", "entity", "ts", "type"]]
        (data / f"part-{index}.csv").write_bytes((BOM if index == 0 else b"") + chunk.to_csv(index=False).encode())
    out = tmp_path / "out"
    summary = run_stream(spark, inspect_input(data), out, StreamConfig(partitions=2, available_now=True))
    assert summary["ingested"] == summary["accepted"] == len(rows)
    metrics = pd.read_parquet(out / "metrics")
    assert sorted(zip(metrics["type"], metrics["entity"], metrics["count"])) == [
        (f"type-{tag}", f"ent-{tag}", 2) for tag in range(4)
    ]


def test_the_cached_rows_keep_raw_text_for_quarantined_rows_only(spark):
    raw = spark.createDataFrame(
        [("2026-01-01T00:00:00Z", "a", "e", "1.5"), ("yesterday", "a", "e", "2"), ("2026-01-01T00:01:00Z", "b", "e", "x")],
        "ts string, type string, entity string, value string",
    )
    rows = cacheable_rows(classify(raw)).orderBy("type", "reason").collect()
    assert [(r["ts"], r["type"], r["value"], r["reason"], r["value_num"]) for r in rows] == [
        (None, "a", None, None, 1.5),  # good: it goes on as ts_parsed and value_num
        ("yesterday", "a", "2", "ts_unparseable", 2.0),
        ("2026-01-01T00:01:00Z", "b", "x", "value_not_numeric", None),
    ]
    assert rows[0]["ts_parsed"] is not None and rows[0]["entity"] == "e"
