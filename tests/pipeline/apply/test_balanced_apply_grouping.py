"""balanced_apply's grouped map cuts each key's rows out of sorted Arrow batches in Python.

What applyInPandas guarantees must hold all the same: one call per key with all its rows (also when
a key spans batches, or a batch holds many keys), a fresh frame indexed 0..n-1 that the func may
change, outputs assigned by name or by position, Spark's own errors for outputs that don't fit the
schema, and keys the plan never saw still grouped as Spark groups them.
"""

from __future__ import annotations

import re
import sys
import warnings

import numpy as np
import pandas as pd
import pytest
from pyspark import cloudpickle

import rebalancer.pipeline.apply._key_plan as _plan
import rebalancer.pipeline.apply._slot_columns as _lookup
from rebalancer.pipeline import apply as apply_module
from rebalancer.pipeline import balanced_apply
from rebalancer.pipeline.apply import _call, _grouped

pytestmark = pytest.mark.spark
# Spark's Python workers cannot import this test module: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SCHEMA = "key string, n long, total double, fresh boolean"
BATCH_ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch"
BY_NAME = "spark.sql.legacy.execution.pandas.groupedMap.assignColumnsByName"


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Count and sum, and whether the frame is a fresh 0..n-1 frame the func may write into."""
    fresh = isinstance(frame.index, pd.RangeIndex) and list(frame.index) == list(range(len(frame)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # SettingWithCopyWarning: the frame would be a view of another
        frame["scratch"] = 1
    return pd.DataFrame(
        {"key": [frame["key"].iloc[0]], "n": [len(frame)], "total": [float(frame["v"].sum())], "fresh": [fresh]}
    )


def ordered(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    return frame.sort_values(by, na_position="first", kind="stable").reset_index(drop=True)


def test_keys_spanning_batches_and_batches_of_many_keys_give_one_call_per_key(spark, conf):
    conf(BATCH_ROWS, "7")  # 7-row batches: a 40-row key spans six, the 1-row keys share one
    rows_per_key = {"big": 40, "mid": 9, "one": 1, "two": 2, None: 5, **{f"k{i}": 1 + i % 3 for i in range(12)}}
    data = [(key, float(i)) for key, rows in rows_per_key.items() for i in range(rows)]
    df = spark.createDataFrame(data, "key string, v double")
    expected = ordered(df.groupBy("key").applyInPandas(summary, SCHEMA).toPandas(), ["key"])

    result = balanced_apply(df, "key", summary, SCHEMA, partitions=2)
    got = ordered(result.frame.toPandas(), ["key"])
    pd.testing.assert_frame_equal(got, expected)
    assert got["fresh"].all() and len(got) == len(rows_per_key)
    stats = result.task_stats()
    assert sum(stats.calls) == len(rows_per_key) and stats.rows == result.plan.rows


def two_keys(frame: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {"k": [frame["k"].iloc[0]], "x": [frame["x"].iloc[0]], "n": [len(frame)], "total": [frame["v"].sum()]}
    )


@pytest.mark.parametrize("partitions", [1, 3])
def test_keys_the_plan_never_saw_are_grouped_as_spark_groups_them(spark, conf, monkeypatch, partitions):
    """A frame whose keys change between the counting job and the action (here: counts that miss
    most keys). A null and a NaN double are two groups in Spark, though pandas shows both as NaN;
    on one partition they meet in one task."""
    conf(BATCH_ROWS, "5")
    nan = float("nan")
    keys = [("a", 1.0), ("a", nan), ("a", None), (None, nan), (None, None), ("b", 2.0), (None, 2.0), ("c", nan)]
    data = [(k, x, float(i * 10 + j)) for i, (k, x) in enumerate(keys) for j in range(1 + i)]
    df = spark.createDataFrame(data, "k string, x double, v double")
    schema = "k string, x double, n long, total double"
    expected = ordered(df.groupBy("k", "x").applyInPandas(two_keys, schema).toPandas(), ["n", "total"])
    assert len(expected) == len(keys)

    counted = _plan.count_keys
    seen = {("a", 1.0), ("b", 2.0)}

    def count_only_some(*args, **kwargs):
        return {key: rows for key, rows in counted(*args, **kwargs).items() if key in seen}

    monkeypatch.setattr(_call, "count_keys", count_only_some)
    result = balanced_apply(df, ["k", "x"], two_keys, schema, partitions=partitions)
    assert {item.key for item in result.plan.owner} == seen
    got = ordered(result.frame.toPandas(), ["n", "total"])
    pd.testing.assert_frame_equal(got, expected)
    stats = result.task_stats()
    assert sum(stats.calls) == len(keys) and sum(stats.rows) == len(data)


def one_key_where(frame: pd.DataFrame) -> pd.DataFrame:
    from pyspark import TaskContext

    return pd.DataFrame(
        {
            "k": [frame["k"].iloc[0]],
            "n": [len(frame)],
            "total": [frame["v"].sum()],
            "pid": [TaskContext.get().partitionId()],
        }
    )


@pytest.mark.parametrize("partitions", [1, 3])
def test_unplanned_keys_of_one_string_column_run_where_sparks_hash_puts_them(
    spark, conf, monkeypatch, partitions
):
    """The perfect-hash path: keys the counting missed (the null key and the empty string among
    them) still make one call each, with all their rows, on the task Spark's hash of the key picks."""
    from rebalancer.pipeline.plan.lookup import SEED, murmur3_text

    conf(BATCH_ROWS, "4")
    keys = ["a", "b", None, "c", "", "d"]
    data = [(k, float(i * 10 + j)) for i, k in enumerate(keys) for j in range(1 + i)]
    df = spark.createDataFrame(data, "k string, v double")
    schema = "k string, n long, total double, pid int"
    expected = ordered(df.groupBy("k").applyInPandas(one_key_where, schema).toPandas(), ["n"])

    counted = _plan.count_keys
    seen = {("a",), ("c",)}
    monkeypatch.setattr(
        _call,
        "count_keys",
        lambda *args: {key: rows for key, rows in counted(*args).items() if key in seen},
    )
    result = balanced_apply(df, "k", one_key_where, schema, partitions=partitions)
    assert set(result.plan.owner) == {apply_module.ApplyItem(key) for key in seen}
    got = ordered(result.frame.toPandas(), ["n"])
    pd.testing.assert_frame_equal(got.drop(columns="pid"), expected.drop(columns="pid"))
    for key, pid in zip(got["k"], got["pid"]):
        if (key,) in seen:
            assert [pid] == result.plan.slot_of(key)
        else:  # Spark's hash() of a null is its seed
            assert pid == (SEED if key is None else murmur3_text(key)) % partitions, key
    stats = result.task_stats()
    assert sum(stats.calls) == len(keys) and sum(stats.rows) == len(data)


def test_a_collated_string_key_groups_as_its_collation_does(spark):
    """Equal under UTF8_LCASE, "A" and "a" are one group in Spark: the item join (not the
    byte-wise perfect hash) keeps them one call."""
    data = [("A", 1.0), ("a", 2.0), ("b", 4.0), ("B", 8.0), ("c", 16.0)]
    df = spark.createDataFrame(data, "k string collate UTF8_LCASE, v double")
    schema = "n long, total double"

    def sums(frame: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame({"n": [len(frame)], "total": [frame["v"].sum()]})

    expected = ordered(df.groupBy("k").applyInPandas(sums, schema).toPandas(), ["total"])
    assert expected["n"].tolist() == [2, 2, 1]  # totals 3, 12 and 16
    result = balanced_apply(df, "k", sums, schema, partitions=2)
    pd.testing.assert_frame_equal(ordered(result.frame.toPandas(), ["total"]), expected)
    assert sum(result.task_stats().calls) == 3


@pytest.mark.parametrize(("limit", "joined"), [(10, False), (3, True)])
def test_a_string_key_uses_the_perfect_hash_up_to_lookup_items(spark, monkeypatch, limit, joined):
    """Five keys: a perfect hash finds their items while LOOKUP_ITEMS allows, a broadcast join
    beyond it; the rows and calls are the same either way."""
    monkeypatch.setattr(_lookup, "LOOKUP_ITEMS", limit)
    data = [(k, float(i)) for i, k in enumerate(["a", "b", "c", "d", None] * 3)]
    df = spark.createDataFrame(data, "k string, v double")
    schema = "k string, n long, total double, pid int"
    result = balanced_apply(df, "k", one_key_where, schema, partitions=2)
    got = ordered(result.frame.toPandas(), ["k"])
    assert got["n"].tolist() == [3] * 5 and got["total"].tolist() == [27.0, 15.0, 18.0, 21.0, 24.0]  # null first
    for key, pid in zip(got["k"], got["pid"]):
        assert [pid] == result.plan.slot_of(key)
    physical = result.frame._jdf.queryExecution().executedPlan().toString()
    assert ("BroadcastHashJoin" in physical) is joined, physical


@pytest.mark.parametrize("key", ["k", ["k", "x"]])
def test_an_empty_frame_gives_no_rows_and_no_calls(spark, key):
    """Both item lookups (a perfect hash of no keys, a join with an empty table) on no rows."""
    df = spark.createDataFrame([], "k string, x double, v double")
    result = balanced_apply(df, key, two_keys, "k string, x double, n long, total double", partitions=3)
    assert result.plan.owner == {} and result.frame.collect() == []
    assert result.task_stats().calls == [0, 0, 0]


def _error_line(excinfo: pytest.ExceptionInfo[BaseException], error_class: str) -> str:
    found = re.search(rf"\[{error_class}\][^\n]*", str(excinfo.value))
    assert found, str(excinfo.value)[-2000:]
    return found.group(0)


def misnamed(frame: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"kind": [frame["key"].iloc[0]], "n": [len(frame)], "extra": [1.0]})


def too_narrow(frame: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame([[frame["key"].iloc[0], len(frame)]])  # by position: 2 columns for 3


def not_a_frame(frame: pd.DataFrame) -> list[int]:
    return [len(frame)]


@pytest.mark.parametrize(
    ("func", "error_class"),
    [
        (misnamed, "RESULT_COLUMN_NAMES_MISMATCH"),
        (too_narrow, "RESULT_COLUMN_SCHEMA_MISMATCH"),
        (not_a_frame, "UDF_RETURN_TYPE"),
    ],
)
def test_an_output_that_does_not_fit_the_schema_fails_with_sparks_own_error(spark, func, error_class):
    df = spark.createDataFrame([("a", 1.0), ("b", 2.0)], "key string, v double")
    schema = "key string, n long, total double"
    with pytest.raises(Exception) as spark_error:
        df.groupBy("key").applyInPandas(func, schema).collect()
    with pytest.raises(Exception) as ours:
        balanced_apply(df, "key", func, schema, partitions=2).frame.collect()
    assert _error_line(ours, error_class) == _error_line(spark_error, error_class)
    assert re.search(r"func's output for key \('[ab]',\) does not fit the schema", str(ours.value))


def reordered(frame: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"total": [frame["v"].sum()], "n": [len(frame)], "key": [frame["key"].iloc[0]]})


def positional(frame: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame([[frame["key"].iloc[0], len(frame), frame["v"].sum()]])  # columns 0, 1, 2


def renamed(frame: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"name": [frame["key"].iloc[0]], "count": [len(frame)], "sum": [frame["v"].sum()]})


def uneven(frame: pd.DataFrame) -> pd.DataFrame:
    """Outputs whose dtypes differ from call to call, empty ones, and one of no columns at all."""
    key = frame["key"].iloc[0]
    if key == "none":
        return pd.DataFrame()
    if key == "empty":
        return pd.DataFrame({"key": pd.Series([], dtype=object), "n": [], "total": []})
    # n is a long in some outputs and a bool in others; total a double or a long, with a null.
    n = len(frame) if key < "h" else len(frame) > 2
    total = frame["v"].sum() if key < "g" else int(frame["v"].sum())
    return pd.DataFrame({"key": [key] * 2, "n": [n, n], "total": [total, None]})


@pytest.mark.parametrize(
    ("func", "by_name"),
    [(reordered, "true"), (positional, "true"), (renamed, "false"), (uneven, "true")],
)
def test_outputs_are_assigned_to_the_schema_as_apply_in_pandas_assigns_them(spark, conf, func, by_name):
    conf(BY_NAME, by_name)
    conf(BATCH_ROWS, "4")
    keys = ["none", "empty", *(f"{c}{i}" for c in "aghz" for i in range(3))]
    df = spark.createDataFrame(
        [(key, float(i)) for n, key in enumerate(keys) for i in range(1 + n % 5)], "key string, v double"
    )
    schema = "key string, n long, total double"
    expected = ordered(df.groupBy("key").applyInPandas(func, schema).toPandas(), ["key", "total"])
    got = ordered(balanced_apply(df, "key", func, schema, partitions=2).frame.toPandas(), ["key", "total"])
    pd.testing.assert_frame_equal(got, expected)
    assert len(got) == (2 * (len(keys) - 2) if func is uneven else len(keys))


def test_output_check_unit():
    """The checks in the driver, without Spark: names, order, positions."""
    check = _grouped.OutputCheck(["key", "n"], by_name=True)
    out = pd.DataFrame({"n": [1], "key": ["a"]})
    assert list(check.conform(out).columns) == ["key", "n"]
    assert list(check.conform(pd.DataFrame([["a", 1]])).columns) == ["key", "n"]
    empty = pd.DataFrame()
    assert check.conform(empty) is empty
    with pytest.raises(Exception, match=r"Missing: key\. Unexpected: kind\."):
        check.conform(pd.DataFrame({"kind": ["a"], "n": [1]}))
    by_position = _grouped.OutputCheck(["key", "n"], by_name=False)
    assert list(by_position.conform(pd.DataFrame({"a": ["x"], "b": [np.int64(2)]})).columns) == ["key", "n"]


def stamped(frame: pd.DataFrame) -> pd.DataFrame:
    """Naive timestamps (the session's local time) from some calls, Paris time from others."""
    key = frame["key"].iloc[0]
    stamp = pd.Timestamp("2026-01-01 12:00") + pd.Timedelta(minutes=len(frame))
    return pd.DataFrame({"key": [key], "at": [stamp if key < "h" else stamp.tz_localize("Europe/Paris")]})


def test_outputs_of_different_dtypes_are_converted_apart(spark, conf):
    """Gathered together, the two kinds of timestamp would make one column of objects, and the
    naive ones would no longer be read in the session's time zone."""
    conf("spark.sql.session.timeZone", "America/New_York")
    conf(BATCH_ROWS, "4")
    keys = [f"{c}{i}" for c in "ahz" for i in range(4)]
    df = spark.createDataFrame([(key, 1.0) for n, key in enumerate(keys) for _ in range(1 + n % 3)], "key string, v double")
    schema = "key string, at timestamp"
    expected = ordered(df.groupBy("key").applyInPandas(stamped, schema).toPandas(), ["key"])
    got = ordered(balanced_apply(df, "key", stamped, schema, partitions=1).frame.toPandas(), ["key"])
    pd.testing.assert_frame_equal(got, expected)
