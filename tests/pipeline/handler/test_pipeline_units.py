"""The handler, the slot keys and the planner inputs, without running the pipeline."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from rebalancer.pipeline.generate import GenerateConfig, make_frame, type_weights, write_frame
from rebalancer.pipeline.handler.builtin import (
    HANDLER_ARROW_SCHEMA,
    STATS_COLUMNS,
    aggregate,
    aggregate_arrow,
    make_slot_handler,
)
from rebalancer.pipeline.plan.slots import Item, make_plan, murmur3_int, partition_keys, plan_items


def _frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "type": rng.choice(["a", "b"], n),
            "entity": rng.choice(["x", "y", "z"], n),
            "minute": rng.integers(0, 4, n) * 60,
            "value": rng.gamma(2.0, 3.0, n).round(2),
        }
    )


def test_aggregate_matches_numpy_quantiles_exactly():
    frame = _frame(5000, 1)
    out = aggregate(frame)
    assert len(out) == frame.groupby(["type", "entity", "minute"]).ngroups
    for row in out.itertuples(index=False):
        values = frame.loc[
            (frame["type"] == row.type) & (frame["entity"] == row.entity) & (frame["minute"] == row.minute), "value"
        ].to_numpy()
        assert row.count == len(values) and row.min == values.min() and row.max == values.max()
        assert (row.p50, row.p90, row.p99) == tuple(np.quantile(values, [0.5, 0.9, 0.99]))
        assert row.sum == pytest.approx(values.sum(), rel=1e-12)
        assert row.mean == pytest.approx(values.mean(), rel=1e-12)


def test_aggregate_does_not_depend_on_row_order():
    frame = _frame(3000, 2)
    shuffled = frame.sample(frac=1.0, random_state=5).reset_index(drop=True)
    key = ["type", "entity", "minute"]
    a = aggregate(frame).sort_values(key).reset_index(drop=True)
    b = aggregate(shuffled).sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b, check_exact=True)


def test_aggregate_single_row_and_empty():
    one = aggregate(pd.DataFrame({"type": ["t"], "entity": ["e"], "minute": [60], "value": [2.5]}))
    assert one.iloc[0][["count", "sum", "min", "max", "mean", "p50", "p90", "p99"]].tolist() == [1, *[2.5] * 7]
    assert aggregate(pd.DataFrame({"type": [], "entity": [], "minute": [], "value": []})).empty


def test_aggregate_keeps_names_that_differ_after_a_nul_apart():
    """pandas' hash table stops at NUL: "x" and "x\x00" were one group."""
    frame = pd.DataFrame(
        {
            "type": ["x", "x\x00", "x\x00", "x", "x\x00a", "x\x00b"],
            "entity": ["e", "e", "e\x00", "e", "e", "e"],
            "minute": [0] * 6,
            "value": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        }
    )
    out = aggregate(frame)
    got = {(row.type, row.entity): (row.count, row.sum) for row in out.itertuples(index=False)}
    assert got == {
        ("x", "e"): (2, 5.0),
        ("x\x00", "e"): (1, 2.0),
        ("x\x00", "e\x00"): (1, 3.0),
        ("x\x00a", "e"): (1, 5.0),
        ("x\x00b", "e"): (1, 6.0),
    }


def _batches(frame: pd.DataFrame, rows: int) -> list[pa.RecordBatch]:
    return pa.Table.from_pandas(frame, preserve_index=False).to_batches(max_chunksize=rows)


def test_aggregate_arrow_equals_aggregate_bit_for_bit_across_batches():
    rng = np.random.default_rng(7)
    frame = _frame(20_000, 3)
    names = np.array(["a", "b", "x", "x\x00", "x\x00a"], dtype=object)  # numpy's own strings drop a NUL
    frame["type"] = names[rng.integers(0, len(names), len(frame))]  # pandas merged names cut at a NUL
    table = pa.Table.from_batches(_batches(frame, 3_000))
    got = aggregate_arrow(table)
    assert got.schema == HANDLER_ARROW_SCHEMA
    key = ["type", "entity", "minute"]
    expected = aggregate(frame).sort_values(key, ignore_index=True)
    pd.testing.assert_frame_equal(got.to_pandas().sort_values(key, ignore_index=True), expected, check_exact=True)
    assert set(got.column("type").to_pylist()) == {"a", "b", "x", "x\x00", "x\x00a"}
    empty = aggregate_arrow(table.slice(0, 0))
    assert empty.num_rows == 0 and empty.schema == HANDLER_ARROW_SCHEMA


class _Stats:
    def __init__(self) -> None:
        self.added: list[dict] = []

    def add(self, value: dict) -> None:
        self.added.append(value)


def test_the_slot_handler_makes_one_call_per_task_and_none_for_an_empty_task():
    frame = _frame(5_000, 4)
    stats = _Stats()
    handle = make_slot_handler(stats)
    out = pa.Table.from_batches(list(handle(iter(_batches(frame, 700)))))
    assert out.num_rows == len(aggregate(frame)) and out.schema == HANDLER_ARROW_SCHEMA
    ((pid, (rows, started, ended, busy, calls)),) = stats.added[0].items()
    assert len(stats.added) == 1 and (pid, rows, calls) == (-1, 5_000, 1) and busy == ended - started >= 0
    assert list(handle(iter([]))) == [] and len(stats.added) == 1  # no rows: no call, nothing reported

    # Without an accumulator (Spark Connect) the call's stats ride on every output row.
    carried = pa.Table.from_batches(list(make_slot_handler(None)(iter(_batches(frame, 700)))))
    assert carried.column_names == [*HANDLER_ARROW_SCHEMA.names, *STATS_COLUMNS]
    assert carried.column("_stats_rows").unique().to_pylist() == [5_000]
    assert len(carried.column("_stats_call").unique()) == 1
    assert carried.column("_stats_only").unique().to_pylist() == [False]


def test_aggregate_is_unchanged_when_group_ids_are_renumbered_to_fit(monkeypatch):
    """Group ids that would outgrow int64 are renumbered densely first; a tiny limit forces that."""
    import rebalancer.pipeline.handler.builtin as handler

    frame = _frame(4000, 3)
    frame["minute"] = frame["minute"] * 10**9  # a wide minute span
    expected = aggregate(frame)
    monkeypatch.setattr(handler, "_KEY_LIMIT", 16)
    renumbered = aggregate(frame)
    pd.testing.assert_frame_equal(renumbered, expected)
    assert len(expected) == frame.groupby(["type", "entity", "minute"]).ngroups


def test_partition_keys_land_on_their_slot():
    for n in (1, 2, 4, 16, 64):
        keys = partition_keys(n)
        assert [murmur3_int(k) % n for k in keys] == list(range(n))
    with pytest.raises(ValueError, match="partitions must be >= 1, got 0"):
        partition_keys(0)


@pytest.mark.spark
def test_murmur3_port_matches_spark_hash(spark):
    from pyspark.sql import functions as F

    rows = spark.range(-500, 1500).select(F.col("id").cast("int").alias("k")).select("k", F.hash("k").alias("h"))
    for k, h in rows.collect():
        assert murmur3_int(k) == h, k


def test_heavy_types_are_split_into_entity_shards():
    type_counts = {"hot": 700, "warm": 200, "cold": 100}
    buckets = {("hot", b): 700 // 7 for b in range(7)} | {("warm", 0): 200, ("cold", 1): 100}
    items, sharded, shard_of = plan_items(type_counts, buckets, 4)  # bound 250: only "hot" is over it
    assert sharded == ["hot"]
    # 700 rows need ceil(700 / 250) = 3 shards: the 7 buckets are packed into 3, not 7 items.
    assert set(items) == {Item("warm"), Item("cold"), Item("hot", 0), Item("hot", 1), Item("hot", 2)}
    assert sorted(shard_of["hot"]) == list(range(7)) and set(shard_of["hot"].values()) == {0, 1, 2}
    assert sorted(items[Item("hot", s)] for s in range(3)) == [200, 200, 300]
    plan = make_plan(items, sharded, 4, shard_of=shard_of)
    assert sum(plan.load_after) == 1000
    assert max(plan.load_after) <= 300
    assert len(plan.type_slots()["hot"]) == 3
    assert sorted(b for s in range(3) for b in plan.shard_buckets("hot", s)) == list(range(7))
    # Sticky: planning again from its own owners moves nothing.
    again = make_plan(items, sharded, 4, previous=plan.owner, shard_of=shard_of)
    assert again.owner == plan.owner and [m for m in again.moves if m[1] >= 0] == []


def test_generator_is_zipf_skewed_and_validates():
    frame = make_frame(GenerateConfig(events=20000, types=50, skew=1.1, bad_rate=0.0, seed=1))
    shares = frame["type"].value_counts(normalize=True)
    assert shares.index[0] == "metric_0000"
    assert shares.iloc[0] == pytest.approx(type_weights(50, 1.1)[0], abs=0.02)
    with pytest.raises(ValueError, match="bad_rate must be in \\[0, 1\\], got 2"):
        GenerateConfig(bad_rate=2).validate()


def test_write_frame_takes_a_str_path_and_names_a_bad_format_or_file_count(tmp_path):
    frame = make_frame(GenerateConfig(events=30, seed=3))
    paths = write_frame(frame, str(tmp_path / "in"), "csv", 3)
    assert [p.name for p in paths] == ["part-00000.csv", "part-00001.csv", "part-00002.csv"]
    assert sum(len(pd.read_csv(p)) for p in paths) == 30
    assert not list((tmp_path / "in").glob(".*.tmp"))
    with pytest.raises(ValueError, match="fmt must be one of parquet, csv, jsonl, got 'xlsx'"):
        write_frame(frame, tmp_path / "x", "xlsx", 1)
    with pytest.raises(ValueError, match="files must be at least 1, got 0"):
        write_frame(frame, tmp_path / "x", "csv", 0)
