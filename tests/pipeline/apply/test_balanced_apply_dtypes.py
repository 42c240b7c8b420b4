"""What `func` gets from `balanced_apply` is what `groupBy(key).applyInPandas` hands it, per group.

applyInPandas converts each group's Arrow rows to pandas on their own, so a group's dtypes depend on
its own nulls only (an int column is int32 without nulls, float64 with them) and a key is exact. A
grouped map that converted a whole Arrow batch at once would give every group of the batch the
dtypes of the batch's nulls, and turn a 64-bit key into a float when another group's key is null.

The property tests draw frames of many groups whose key columns span the grouping types Spark
accepts (with nulls, NaNs and 64-bit values), whose value columns have nulls in some groups only,
cut into small Arrow batches so groups of both kinds share a batch, and compare, group by group,
the key tuple `func` receives, every column's dtype and values, and the output rows. Each example
covers many groups in few Spark jobs.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import logging
import random
import re
import sys
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from pyspark import cloudpickle

from rebalancer.pipeline.apply import STORE_VERSION, PlanStore, balanced_apply

pytestmark = pytest.mark.spark
# Spark's Python workers cannot import this test module: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

BATCH_ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch"
UTC = dt.UTC

# Grouping key columns, one per type applyInPandas groups by, and how to draw a value of each.
KEY_TYPES: dict[str, str] = {
    "k_byte": "tinyint",
    "k_short": "smallint",
    "k_int": "int",
    "k_long": "bigint",
    "k_float": "float",
    "k_double": "double",
    "k_decimal": "decimal(20,3)",
    "k_string": "string",
    "k_binary": "binary",
    "k_bool": "boolean",
    "k_date": "date",
    "k_ts": "timestamp",
    "k_ntz": "timestamp_ntz",
}
# Value columns: their nulls are drawn per group, so a batch holds groups with and without them.
VALUE_TYPES: dict[str, str] = {
    "v_byte": "tinyint",
    "v_int": "int",
    "v_long": "bigint",
    "v_bool": "boolean",
    "v_double": "double",
    "v_string": "string",
    "v_decimal": "decimal(10,2)",
    "v_date": "date",
    "v_ts": "timestamp",
    # Nested: a null element in one row turns every row's array of ints into floats when converted together.
    "v_array": "array<int>",
    "v_struct": "struct<a:bigint,b:string>",
}
COLUMNS = {**KEY_TYPES, **VALUE_TYPES}
INPUT_SCHEMA = ", ".join(f"{name} {kind}" for name, kind in COLUMNS.items())
BIG = 2**62  # a float64 holds none of BIG + 1, BIG + 2, ...: a key turned float is seen at once


def draw_value(rng: random.Random, name: str) -> Any:
    """A value of column `name`'s type (never null; nulls are placed by the caller)."""
    kind = COLUMNS[name]
    if kind == "tinyint":
        return rng.randint(-128, 127)
    if kind == "smallint":
        return rng.choice([-(2**15), 2**15 - 1, rng.randint(-300, 300)])
    if kind == "int":
        return rng.choice([-(2**31), 2**31 - 1, rng.randint(-5, 5)])
    if kind == "bigint":
        return rng.choice([BIG + rng.randint(0, 9), -(2**63), 2**63 - 1, 2**53 + 1, rng.randint(-5, 5)])
    if kind == "float":
        return rng.choice([float("nan"), 1.5, -2.25, 3.0e38, float("inf")])
    if kind == "double":
        return rng.choice([float("nan"), 0.1, -1e300, 2.0**60 + 1.0, float(rng.randint(-5, 5))])
    if kind.startswith("decimal"):
        scale = 3 if kind == "decimal(20,3)" else 2
        return decimal.Decimal(rng.randint(-(10**9), 10**9)).scaleb(-scale)
    if kind == "string":
        return rng.choice(["", "a", "ß", "日本", f"s{rng.randint(0, 9)}"])
    if kind == "binary":
        return bytes(rng.choice([b"", b"\x00", b"\xff\x01", bytes([rng.randint(0, 255)])]))
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "date":
        return dt.date(1, 1, 1) + dt.timedelta(days=rng.choice([0, 738000, 3652058, rng.randint(0, 3652058)]))
    if kind == "timestamp":
        return dt.datetime(2026, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=rng.randint(-(10**15), 10**15))
    if kind == "array<int>":
        return [None if rng.random() < 0.1 else rng.randint(-5, 5) for _ in range(rng.randint(0, 3))]
    if kind == "struct<a:bigint,b:string>":
        return (None if rng.random() < 0.1 else BIG + rng.randint(0, 9), rng.choice([None, "x", "y"]))
    if kind == "timestamp_ntz":
        return dt.datetime(2026, 1, 1) + dt.timedelta(microseconds=rng.randint(-(10**15), 10**15))
    raise AssertionError(kind)


@dataclass
class Frame:
    key: list[str]
    rows: list[tuple[Any, ...]]
    batch_rows: int
    partitions: int


@st.composite
def frames(draw: st.DrawFn, key: list[str] | None = None) -> Frame:
    """Many groups (some keys null, some NaN), of 1 to 6 rows, whose value columns have nulls in
    some groups and none in others; small Arrow batches mix groups of every kind."""
    if key is None:
        key = draw(st.lists(st.sampled_from(sorted(KEY_TYPES)), min_size=1, max_size=4, unique=True))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    groups = draw(st.integers(20, 60))
    null_key = draw(st.floats(0.05, 0.4))
    rows: list[tuple[Any, ...]] = []
    names = list(COLUMNS)
    for _ in range(groups):
        group_key = {name: None if rng.random() < null_key else draw_value(rng, name) for name in key}
        with_nulls = {name for name in names if name not in key and rng.random() < 0.4}
        for _ in range(rng.randint(1, 6)):
            row = []
            for name in names:
                if name in group_key:
                    row.append(group_key[name])
                elif name in with_nulls and rng.random() < 0.5:
                    row.append(None)
                else:
                    row.append(draw_value(rng, name))
            rows.append(tuple(row))
    rng.shuffle(rows)
    return Frame(
        key=key,
        rows=rows,
        batch_rows=draw(st.sampled_from([3, 7, 10_000])),
        partitions=draw(st.integers(1, 2)),
    )


DESCRIBED = "received string, scalars string, index string, dtypes string, values string, n long"


def describer(key: list[str]) -> Any:
    """A two-argument func giving one row per group: the key columns of its first row (typed as
    the input's: they go back through Spark), the key tuple as received and the types of its
    values, the index, each column's dtype and its values (as sorted reprs: the order of a group's
    rows is Spark's, not part of the contract), and the group's rows."""

    def describe(received: tuple[Any, ...], frame: pd.DataFrame) -> pd.DataFrame:
        dtypes = {name: str(frame[name].dtype) for name in frame.columns}
        values = {name: sorted(repr(value) for value in frame[name].tolist()) for name in frame.columns}
        return frame[key].head(1).assign(
            received=repr(received),
            scalars=repr([type(value).__name__ for value in received]),
            index=repr(frame.index),
            dtypes=json.dumps(dtypes, sort_keys=True),
            values=json.dumps(values, sort_keys=True),
            n=len(frame),
        )

    return describe


def rows_of(result: Any) -> list[str]:
    """A frame's rows as sorted reprs: exact, and NaN equals NaN."""
    return sorted(repr(tuple(row)) for row in result.collect())


def check_same_as_apply_in_pandas(spark: Any, case: Frame) -> None:
    df = spark.createDataFrame(case.rows, INPUT_SCHEMA)
    describe = describer(case.key)
    schema = ", ".join([*(f"{name} {KEY_TYPES[name]}" for name in case.key), DESCRIBED])
    saved = spark.conf.get(BATCH_ROWS)
    spark.conf.set(BATCH_ROWS, str(case.batch_rows))
    try:
        expected = rows_of(df.groupBy(*case.key).applyInPandas(describe, schema))
        got = rows_of(balanced_apply(df, case.key, describe, schema, partitions=case.partitions).frame)
    finally:
        spark.conf.set(BATCH_ROWS, saved)
    assert len(got) == len(expected)
    for ours, theirs in zip(got, expected):  # one group at a time: a failure shows the group
        assert ours == theirs


SETTINGS = settings(
    max_examples=3,
    deadline=None,
    database=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_the_issues_64_bit_keys_stay_exact_beside_a_null_key(spark) -> None:
    df = spark.createDataFrame([(BIG, 1.0), (BIG + 1, 2.0), (None, 3.0)], "k long, v double")

    def first(frame: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame({"k": [frame["k"].iloc[0]], "n": [len(frame)]})

    expected = df.groupBy("k").applyInPandas(first, "k long, n long").collect()
    got = balanced_apply(df, "k", first, "k long, n long", partitions=1).frame.collect()
    assert sorted(got, key=repr) == sorted(expected, key=repr)
    assert sorted(row.k for row in got if row.k is not None) == [BIG, BIG + 1]


def test_the_issues_int_column_is_int32_without_nulls_and_float64_with_them(spark) -> None:
    df = spark.createDataFrame([("a", 1), ("b", None)], "k string, v int")

    def dtype(frame: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame({"k": [frame.k.iloc[0]], "dtype": [str(frame.v.dtype)]})

    got = balanced_apply(df, "k", dtype, "k string, dtype string", partitions=1).frame.collect()
    assert sorted(tuple(row) for row in got) == [("a", "int32"), ("b", "float64")]
    assert sorted(got) == sorted(df.groupBy("k").applyInPandas(dtype, "k string, dtype string").collect())


# One test per key shape, so each stays short; each example holds 20 to 60 groups.
@SETTINGS
@example(case=Frame(key=["k_long"], rows=[(None,) * len(COLUMNS)], batch_rows=3, partitions=1))
@given(case=frames(key=["k_long"]))
def test_one_long_key_column_equals_apply_in_pandas(spark, case: Frame) -> None:
    check_same_as_apply_in_pandas(spark, case)


@SETTINGS
@given(case=frames(key=["k_string"]))
def test_one_string_key_column_equals_apply_in_pandas(spark, case: Frame) -> None:
    """The perfect-hash path (one string column) rather than the join."""
    check_same_as_apply_in_pandas(spark, case)


@SETTINGS
@given(case=frames(key=sorted(KEY_TYPES)))
def test_a_key_of_every_grouping_type_equals_apply_in_pandas(spark, case: Frame) -> None:
    check_same_as_apply_in_pandas(spark, case)


@SETTINGS
@given(case=frames())
def test_random_key_columns_equal_apply_in_pandas(spark, case: Frame) -> None:
    check_same_as_apply_in_pandas(spark, case)


# --- item 15: an output value of the wrong type names the key -----------------------------------


def text_count(frame: pd.DataFrame) -> pd.DataFrame:
    key = frame["k"].iloc[0]
    return pd.DataFrame({"k": [key], "n": ["text" if key == "b" else len(frame)]})


def fractional_count(frame: pd.DataFrame) -> pd.DataFrame:
    """1.5 for a long: Spark's safe conversion (convertToArrowArraySafely, true by default) refuses it."""
    key = frame["k"].iloc[0]
    return pd.DataFrame({"k": [key], "n": [1.5 if key == "b" else float(len(frame))]})


@pytest.mark.parametrize("func", [text_count, fractional_count])
def test_an_output_value_spark_cannot_convert_names_the_key_and_the_column(spark, func) -> None:
    df = spark.createDataFrame([(k, 1.0) for k in "abcdefgh"], "k string, v double")
    with pytest.raises(Exception) as spark_error:
        df.groupBy("k").applyInPandas(func, "k string, n long").collect()
    spark_line = re.search(r"Failed to convert the value of the column 'n'[^\n]*", str(spark_error.value))
    assert spark_line, str(spark_error.value)[-2000:]
    with pytest.raises(Exception) as ours:
        balanced_apply(df, "k", func, "k string, n long", partitions=2).frame.collect()
    message = str(ours.value)
    assert re.search(r"func's output for key \('b',\) does not fit the schema: .*column 'n'", message), message[-2000:]
    assert spark_line.group(0) in message


# --- item 12: a damaged plan.json is ignored with one warning -----------------------------------


def store_json(items: Any, measured: Any = ()) -> dict[str, Any]:
    return {
        "version": STORE_VERSION,
        "key": ["k"],
        "partitions": 2,
        "cost": "rows",
        "items": items,
        "measured": list(measured),
    }


GOOD_ITEM = {"key": ["a"], "shard": None, "slot": 0}
DAMAGED = {
    "an item without shard": store_json([GOOD_ITEM, {"key": ["b"], "slot": 1}]),
    "items not a list": store_json({"a": 0}),
    "an unknown value tag": store_json([GOOD_ITEM, {"key": [{"unknown-tag": "x"}], "shard": None, "slot": 1}]),
    "a measured row without seconds": store_json(
        [GOOD_ITEM], [{"key": ["a"], "rows": 1, "calls": 1}]
    ),
    "a key of the wrong width": store_json([{"key": ["a", "b"], "shard": None, "slot": 0}]),
    "a slot beyond partitions": store_json([{"key": ["a"], "shard": None, "slot": 7}]),
    "not an object": [1, 2, 3],
}


def count_rows(frame: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"k": [frame["k"].iloc[0]], "n": [len(frame)]})


def store_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "rebalancer.pipeline.apply"]


@pytest.mark.parametrize("damage", sorted(DAMAGED))
@pytest.mark.parametrize("cost", ["rows", "seconds"])
def test_a_damaged_store_is_ignored_with_one_warning_naming_the_file(spark, tmp_path, caplog, damage, cost) -> None:
    target = tmp_path / "store" / PlanStore.FILE
    target.parent.mkdir()
    target.write_text(json.dumps(DAMAGED[damage]))
    df = spark.createDataFrame([("a", 1.0), ("b", 2.0), ("c", 3.0)], "k string, v double")

    with caplog.at_level(logging.WARNING, logger="rebalancer.pipeline.apply"):
        result = balanced_apply(df, "k", count_rows, "k string, n long", partitions=2, cost=cost, store=tmp_path / "store")
    warnings = store_warnings(caplog)
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert str(target) in warnings[0].getMessage()
    # A fresh plan: every key placed anew, none moved from the damaged plan, and the store rewritten.
    assert result.plan.moves == [] and len(result.plan.placements) == 3
    assert sorted(result.frame.collect()) == sorted(
        df.groupBy("k").applyInPandas(count_rows, "k string, n long").collect()
    )
    saved = json.loads(target.read_text())
    assert sorted(row["key"] for row in saved["items"]) == [["a"], ["b"], ["c"]]
    assert PlanStore(tmp_path / "store").previous_owner(["k"], 2) == result.plan.owner


@pytest.mark.parametrize("damage", sorted(DAMAGED))
def test_a_damaged_store_reads_as_empty_and_warns_once_per_change(tmp_path, caplog, damage) -> None:
    """Without Spark: each reader gives nothing, and one file gives one warning however often read."""
    store = PlanStore(tmp_path)
    (tmp_path / PlanStore.FILE).write_text(json.dumps(DAMAGED[damage]))
    with caplog.at_level(logging.WARNING, logger="rebalancer.pipeline.apply"):
        assert store.load() is None
        assert store.previous_owner(["k"], 2) == {}
        assert store.key_costs(["k"]) == {}
    warnings = store_warnings(caplog)
    assert len(warnings) == 1 and str(tmp_path / PlanStore.FILE) in warnings[0].getMessage()


def test_an_unparseable_store_warns_once_naming_the_file(tmp_path, caplog) -> None:
    store = PlanStore(tmp_path)
    (tmp_path / PlanStore.FILE).write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="rebalancer.pipeline.apply"):
        assert store.previous_owner(["k"], 2) == {}
        assert store.key_costs(["k"]) == {}
    warnings = store_warnings(caplog)
    assert len(warnings) == 1 and str(tmp_path / PlanStore.FILE) in warnings[0].getMessage()


def test_a_store_of_another_version_is_ignored_quietly(tmp_path, caplog) -> None:
    """Documented: a store written by another version is not an error and not a warning."""
    (tmp_path / PlanStore.FILE).write_text(json.dumps({**store_json([GOOD_ITEM]), "version": STORE_VERSION + 1}))
    with caplog.at_level(logging.WARNING, logger="rebalancer.pipeline.apply"):
        assert PlanStore(tmp_path).previous_owner(["k"], 2) == {}
    assert store_warnings(caplog) == []
