"""balanced_apply: cost by measured seconds, a sticky store, max_moves, split and combine, errors."""

from __future__ import annotations

import json
import re
import sys
import time

import pandas as pd
import pytest
from pyspark import cloudpickle
from pyspark.sql import functions as F

from rebalancer.pipeline import PlanStore, balanced_apply
from rebalancer.pipeline.apply import ApplyItem, ApplyPlan, BalancedApply, KeyCost, _call, plan_keys
from rebalancer.pipeline.apply._key_plan import count_buckets
from rebalancer.pipeline.plan.slots import SHARD_BUCKETS

pytestmark = pytest.mark.spark
# Spark's Python workers cannot import this test module: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SCHEMA = "key string, n long, total double"


def count_and_sum(frame: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"key": [frame["key"].iloc[0]], "n": [len(frame)], "total": [float(frame["v"].sum())]})


def _frame(spark, rows_per_key: dict[str, int]):
    data = [(key, f"e{i % 7}", float(i)) for key, rows in rows_per_key.items() for i in range(rows)]
    return spark.createDataFrame(data, "key string, entity string, v double")


def _plain(df) -> pd.DataFrame:
    out = df.groupBy("key").applyInPandas(count_and_sum, SCHEMA).toPandas()
    return out.sort_values("key", na_position="first").reset_index(drop=True)


def _sorted(frame) -> pd.DataFrame:
    return frame.toPandas().sort_values("key", na_position="first").reset_index(drop=True)


def busy(cpu_seconds: float) -> None:
    """Work on the CPU, not a sleep: own_clock subtracts the time a thread waited for a CPU, and a
    kernel's run-queue accounting of a sleep is its own (CI once measured a 1 s sleep as 14 ms)."""
    start = time.thread_time()
    while time.thread_time() - start < cpu_seconds:
        pass


def slow_or_fast(frame: pd.DataFrame) -> pd.DataFrame:
    # The deliberately slow key takes about 1 s of CPU, the others 50 ms: a fast key beside the slow
    # one is then a loss far above the planner's tolerance (0.1% of the bound), which a fast key's
    # bare milliseconds, measured on a loaded machine, need not be.
    busy(1.0 if frame["key"].iloc[0] == "slow" else 0.05)
    return count_and_sum(frame)


def test_cost_seconds_moves_a_slow_key_away_from_a_slot_of_fast_keys(spark, tmp_path):
    # Nine keys of equal rows: by rows, some slot must hold the slow key with others.
    df = _frame(spark, {name: 40 for name in ["slow", *[f"fast{i}" for i in range(8)]]}).cache()
    store = PlanStore(tmp_path / "store")
    by_rows = balanced_apply(df, "key", slow_or_fast, SCHEMA, partitions=4, cost="seconds", store=store)
    by_rows.frame.collect()
    first = by_rows.task_stats()  # records the measured seconds into the store
    slow_slot = by_rows.plan.owner[ApplyItem(("slow",))]
    assert sum(1 for slot in by_rows.plan.owner.values() if slot == slow_slot) >= 2
    assert first.rows == by_rows.plan.rows and sum(first.calls) == 9
    measured = store.key_costs(["key"])
    assert measured[("slow",)].seconds >= 0.9 and measured[("slow",)].calls == 1

    by_seconds = balanced_apply(df, "key", slow_or_fast, SCHEMA, partitions=4, cost="seconds", store=store)
    slot = by_seconds.plan.owner[ApplyItem(("slow",))]
    assert [item for item, s in by_seconds.plan.owner.items() if s == slot] == [ApplyItem(("slow",))]
    pd.testing.assert_frame_equal(_sorted(by_seconds.frame), _plain(df))
    stats = by_seconds.task_stats()
    assert stats.rows == by_seconds.plan.rows  # Spark ran exactly the planned placement
    assert stats.calls[slot] == 1 and sum(stats.calls) == 9


def test_a_stored_plan_is_sticky_and_max_moves_bounds_the_changes(spark, tmp_path):
    keys = {f"k{i}": 10 + i for i in range(12)}
    df = _frame(spark, keys).cache()
    store = PlanStore(tmp_path / "store")
    first = balanced_apply(df, "key", count_and_sum, SCHEMA, partitions=3, store=store)
    again = balanced_apply(df, "key", count_and_sum, SCHEMA, partitions=3, store=store)
    assert again.plan.owner == first.plan.owner and again.plan.moves == [] and again.plan.placements == []

    # A stored plan that put everything on slot 0: re-planning may move at most max_moves keys.
    crowded = ApplyPlan(
        partitions=3,
        key_columns=["key"],
        cost="rows",
        owner={ApplyItem((key,)): 0 for key in keys},
        weights={},
        item_rows={},
        load=[0.0] * 3,
        rows=[0] * 3,
    )
    store.save_plan(crowded)
    bounded = balanced_apply(df, "key", count_and_sum, SCHEMA, partitions=3, store=store, max_moves=2)
    assert len(bounded.plan.moves) == 2
    assert all(old == 0 for _, old, _ in bounded.plan.moves)
    store.save_plan(crowded)
    free = balanced_apply(df, "key", count_and_sum, SCHEMA, partitions=3, store=store)
    assert len(free.plan.moves) > 2
    assert max(free.plan.rows) < max(bounded.plan.rows)
    pd.testing.assert_frame_equal(_sorted(bounded.frame), _plain(df))


def test_a_hot_key_is_split_by_split_by_and_merged_by_combine(spark):
    df = _frame(spark, {"hot": 900, **{f"k{i}": 10 for i in range(10)}})

    def merge(partials: pd.DataFrame) -> pd.DataFrame:
        return partials.groupby("key", as_index=False)[["n", "total"]].sum()

    result = balanced_apply(df, "key", count_and_sum, SCHEMA, partitions=4, split_by="entity", combine=merge)
    assert result.plan.split == [("hot",)]
    assert len(result.plan.slot_of("hot")) > 1  # its shards run on several tasks
    pd.testing.assert_frame_equal(_sorted(result.frame), _plain(df))
    stats = result.task_stats()
    assert sum(stats.rows) == 1000 and sum(stats.calls) == 10 + len(result.plan.slot_of("hot"))

    unsplit = balanced_apply(df, "key", count_and_sum, SCHEMA, partitions=4)  # never split without split_by
    assert unsplit.plan.split == [] and len(unsplit.plan.slot_of("hot")) == 1


def test_a_split_keys_bucket_the_counting_missed_is_still_merged_by_combine(spark, monkeypatch):
    # As if the frame changed after the counting job: the hot key's largest bucket was not seen.
    df = _frame(spark, {"hot": 900, **{f"k{i}": 10 for i in range(10)}}).cache()
    counted = count_buckets
    missed: list[int] = []

    def count_all_but_one(*args):
        buckets = counted(*args)
        largest = max(buckets[("hot",)], key=lambda b: (buckets[("hot",)][b], b))
        missed.append(largest)
        return {key: {b: n for b, n in by.items() if key != ("hot",) or b != largest} for key, by in buckets.items()}

    monkeypatch.setattr(_call, "count_buckets", count_all_but_one)

    def merge(partials: pd.DataFrame) -> pd.DataFrame:
        return partials.groupby("key", as_index=False)[["n", "total"]].sum()

    result = balanced_apply(df, "key", count_and_sum, SCHEMA, partitions=4, split_by="entity", combine=merge)
    assert result.plan.split == [("hot",)] and len(missed) == 1
    assert missed[0] not in result.plan.shard_of[("hot",)]
    pd.testing.assert_frame_equal(_sorted(result.frame), _plain(df))  # one "hot" row: all 900 rows merged
    stats = result.task_stats()
    assert sum(stats.rows) == 1000 and sum(stats.calls) == 10 + len(result.plan.slot_of("hot"))


def test_a_key_heavy_by_measured_seconds_alone_is_counted_by_bucket_and_split(spark, tmp_path):
    # slow: 100 of 1,000 rows, but 9 of the last run's 10 s: by rows it stays whole.
    df = _frame(spark, {"slow": 100, **{f"k{i}": 100 for i in range(9)}})
    store = PlanStore(tmp_path / "plan.json")
    store.save_measurements(
        ["key"], {("slow",): KeyCost(100, 9.0, 1), **{(f"k{i}",): KeyCost(100, 1 / 9, 1) for i in range(9)}}
    )

    def merge(partials: pd.DataFrame) -> pd.DataFrame:
        return partials.groupby("key", as_index=False)[["n", "total"]].sum()

    by_rows = balanced_apply(df, "key", count_and_sum, SCHEMA, partitions=4, split_by="entity", combine=merge)
    assert by_rows.plan.split == []
    by_seconds = balanced_apply(
        df, "key", count_and_sum, SCHEMA, partitions=4, split_by="entity", combine=merge, cost="seconds",
        store=store,
    )
    assert by_seconds.plan.split == [("slow",)]
    assert len(by_seconds.plan.slot_of("slow")) > 1  # its shards run on several tasks
    assert sum(rows for item, rows in by_seconds.plan.item_rows.items() if item.key == ("slow",)) == 100
    pd.testing.assert_frame_equal(_sorted(by_seconds.frame), _plain(df))


def test_buckets_are_counted_for_the_heavy_keys_only_null_key_included(spark):
    data = [(key, f"e{i % 5}", 1.0) for key, rows in (("a", 30), (None, 20), ("b", 7)) for i in range(rows)]
    df = spark.createDataFrame(data, "key string, entity string, v double")
    expected: dict[tuple, dict[int, int]] = {}
    for row in df.groupBy("key", F.pmod(F.hash("entity"), F.lit(SHARD_BUCKETS))).count().collect():
        if row[0] != "b":
            expected.setdefault((row[0],), {})[int(row[1])] = int(row[2])
    assert count_buckets(df, ["key"], "entity", [("a",), (None,)]) == expected
    assert sum(expected[("a",)].values()) == 30 and sum(expected[(None,)].values()) == 20
    assert count_buckets(df, ["key"], "entity", [("a",)]) == {("a",): expected[("a",)]}


def test_a_two_argument_func_gets_the_key_and_null_keys_form_one_group(spark):
    df = spark.createDataFrame(
        [("a", 1.0), (None, 2.0), ("a", 3.0), (None, 4.0), ("b", 5.0)], "key string, v double"
    )

    def with_key(key: tuple, frame: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame({"key": [key[0]], "n": [len(frame)], "total": [float(frame["v"].sum())]})

    got = _sorted(balanced_apply(df, "key", with_key, SCHEMA, partitions=2).frame)
    assert got.to_dict("list") == {"key": [None, "a", "b"], "n": [2, 2, 1], "total": [6.0, 4.0, 5.0]}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"key": "nope"}, "key: no column 'nope'"),
        ({"split_by": "nope"}, "split_by: no column 'nope'"),
        ({"partitions": 0}, "partitions must be an int in 1..10000, got 0"),
        ({"partitions": 10**30}, f"partitions must be an int in 1..10000, got {10**30}"),  # a Py4J error
        ({"cost": "dollars"}, "cost must be one of rows, seconds, got 'dollars'"),
        ({"schema": "key string, n"}, "schema: cannot parse 'key string, n'"),
        ({"schema": "long"}, "schema: 'long' is one type, not columns (write it as 'name long')"),
        ({"max_moves": -1}, "max_moves must be an int in 0..1000000000, got -1"),
        ({"max_moves": 10**10}, "max_moves must be an int in 0..1000000000, got 10000000000"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(spark, kwargs, message):
    df = spark.createDataFrame([("a", "e", 1.0)], "key string, entity string, v double")
    arguments = {"key": "key", "func": count_and_sum, "schema": SCHEMA, **kwargs}
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        balanced_apply(df, **arguments)


def test_a_column_with_the_reserved_prefix_is_refused_by_name(spark):
    df = spark.createDataFrame([("a", 1.0, 0)], "key string, v double, __rebalancer_h int")
    message = "df: column '__rebalancer_h' is reserved by balanced_apply (prefix '__rebalancer_')"
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)") + "$"):
        balanced_apply(df, "key", count_and_sum, SCHEMA)


def test_an_exception_in_func_names_the_key_it_failed_on(spark):
    df = spark.createDataFrame([("good", 1.0), ("bad-key", 2.0)], "key string, v double")

    def fails(frame: pd.DataFrame) -> pd.DataFrame:
        if frame["key"].iloc[0] == "bad-key":
            raise ZeroDivisionError("no rate for this key")
        return count_and_sum(frame)

    result = balanced_apply(df, "key", fails, SCHEMA, partitions=2)
    # The user's own exception, with a note naming the key (issue 42 item 27: its traceback is kept).
    with pytest.raises(Exception, match=r"\nZeroDivisionError: no rate for this key\nbalanced_apply: func failed on key \('bad-key',\)"):
        result.frame.collect()


def test_seconds_plan_uses_the_last_runs_rate_for_a_key_never_seen():
    counts = {("a",): 100, ("b",): 100, ("new",): 300}
    measured = {("a",): KeyCost(100, 2.0, 1), ("b",): KeyCost(100, 0.5, 1)}
    plan = plan_keys(counts, {}, 2, ["key"], cost="seconds", measured=measured)
    # a: 2.0 s as measured; b: 0.5 s; new: 300 rows x (2.5 s / 200 rows) = 3.75 s.
    assert plan.weights == {ApplyItem(("a",)): 2.0, ApplyItem(("b",)): 0.5, ApplyItem(("new",)): 3.75}
    assert plan.owner[ApplyItem(("new",))] != plan.owner[ApplyItem(("a",))]
    assert sorted(plan.load) == [2.5, 3.75]


@pytest.mark.parametrize(("slow_seconds", "kept"), [(1.14, True), (1.16, False)])
def test_a_stored_plan_is_kept_while_its_max_over_min_seconds_is_below_1_15(slow_seconds, kept):
    # Four equal keys, two per slot; measured, the keys of slot 0 take `slow_seconds` each.
    counts = {(key,): 100 for key in "abcd"}
    previous = {ApplyItem(("a",)): 0, ApplyItem(("b",)): 0, ApplyItem(("c",)): 1, ApplyItem(("d",)): 1}
    measured = {
        ("a",): KeyCost(100, slow_seconds, 1),
        ("b",): KeyCost(100, slow_seconds, 1),
        ("c",): KeyCost(100, 1.0, 1),
        ("d",): KeyCost(100, 1.0, 1),
    }
    plan = plan_keys(counts, {}, 2, ["key"], cost="seconds", measured=measured, previous=previous)
    if kept:
        assert plan.owner == previous and plan.moves == [] and plan.skipped == "load ratio max/min 1.140 < skip_ratio 1.15"
    else:
        assert plan.skipped is None and len(plan.moves) == 2  # one swap: a slow key for a fast one
        assert plan.load == pytest.approx([1.0 + slow_seconds] * 2)


def test_by_seconds_a_key_is_split_at_least_as_finely_as_by_rows():
    # hot: 600 of 1,000 rows, but measured cheap (1 s of 10 s): by seconds alone it would stay whole.
    counts = {("hot",): 600, **{(f"k{i}",): 50 for i in range(8)}}
    buckets = {("hot",): {b: 100 for b in range(6)}}
    measured = {("hot",): KeyCost(600, 1.0, 6), **{(f"k{i}",): KeyCost(50, 1.125, 1) for i in range(8)}}
    by_rows = plan_keys(counts, buckets, 4, ["key"], cost="rows")
    by_seconds = plan_keys(counts, buckets, 4, ["key"], cost="seconds", measured=measured)
    # rows: a slot holds 250 rows, so hot goes into ceil(600 / 250) = 3 shards of 200 rows.
    assert by_rows.split == by_seconds.split == [("hot",)]
    hot_rows = sorted(rows for item, rows in by_seconds.item_rows.items() if item.key == ("hot",))
    assert hot_rows == [200, 200, 200]
    # Each shard is charged its share of the key's measured seconds.
    assert sorted(w for item, w in by_seconds.weights.items() if item.key == ("hot",)) == pytest.approx([1 / 3] * 3)
    assert sum(by_seconds.load) == pytest.approx(10.0)


def test_the_store_survives_keys_of_every_json_unfriendly_type(tmp_path):
    import datetime as dt
    import decimal

    store = PlanStore(tmp_path / "s")
    keys = [(None,), (1.5,), (float("nan"),), (dt.date(2026, 1, 2),), (decimal.Decimal("1.10"),), (b"\x00",)]
    store.save_measurements(["k"], {key: KeyCost(1, 0.1, 1) for key in keys})
    loaded = store.key_costs(["k"])
    assert len(loaded) == len(keys)
    assert (dt.date(2026, 1, 2),) in loaded and (decimal.Decimal("1.10"),) in loaded and (None,) in loaded
    assert json.loads((tmp_path / "s" / "plan.json").read_text())["version"] == 1
    assert store.key_costs(["other"]) == {}  # measurements of another key column are not used


class _Accumulated:
    """An accumulator's driver side as `BalancedApply` reads it: only `.value`."""

    def __init__(self, value):
        self.value = value


def test_with_two_tasks_the_wait_before_the_first_call_is_charged_by_rows_at_the_overall_rate():
    counts = {("a",): 30, ("b",): 10, ("c",): 50}
    plan = plan_keys(counts, {}, 2, ["key"])
    index = sorted(plan.owner, key=lambda item: (plan.owner[item], plan.weights[item]))
    shared, alone = plan.owner[ApplyItem(("a",))], plan.owner[ApplyItem(("c",))]
    assert plan.owner[ApplyItem(("b",))] == shared != alone  # a and b share a slot; c is alone
    result = BalancedApply(
        frame=None,
        plan=plan,
        _items=_Accumulated({n: [counts[item.key], 0.1, 1] for n, item in enumerate(index)}),
        _waits=_Accumulated({shared: [2.0], alone: [0.5]}),
        _index=index,
    )
    costs = result.key_costs()
    # Two tasks are too few to tell a per-task part: 2.5 s of waits over 90 rows, charged by rows.
    assert costs[("a",)] == KeyCost(30, pytest.approx(0.1 + 30 * 2.5 / 90), 1)
    assert costs[("b",)] == KeyCost(10, pytest.approx(0.1 + 10 * 2.5 / 90), 1)
    assert costs[("c",)] == KeyCost(50, pytest.approx(0.1 + 50 * 2.5 / 90), 1)


def test_the_per_task_part_of_the_wait_is_charged_to_no_key():
    # Four tasks, each waiting 0.5 s to start plus 1 ms per row: keys pay only the 1 ms per row.
    counts = {("a",): 100, ("b",): 300, ("c",): 600, ("d",): 1000}
    plan = plan_keys(counts, {}, 4, ["key"])
    assert len(set(plan.owner.values())) == 4  # one key per task
    index = sorted(plan.owner, key=lambda item: (plan.owner[item], plan.weights[item]))
    result = BalancedApply(
        frame=None,
        plan=plan,
        _items=_Accumulated({n: [counts[item.key], 0.2, 1] for n, item in enumerate(index)}),
        _waits=_Accumulated({plan.owner[item]: [0.5 + 0.001 * counts[item.key]] for item in index}),
        _index=index,
    )
    costs = result.key_costs()
    for key, rows in counts.items():
        assert costs[key] == KeyCost(rows, pytest.approx(0.2 + 0.001 * rows), 1)


@pytest.mark.parametrize(
    ("task_rows", "waits", "rate"),
    [
        ({0: 100, 1: 200, 2: 300}, {0: 1.1, 1: 1.2, 2: 1.3}, 0.001),  # fitted: 1 s per task + 1 ms per row
        ({0: 100, 1: 200, 2: 300}, {0: 0.3, 1: 0.2, 2: 0.1}, 0.6 / 600),  # falling: all per row
        ({0: 100, 1: 100, 2: 100}, {0: 0.1, 1: 0.2, 2: 0.3}, 0.6 / 300),  # rows alike: all per row
        ({0: 100, 1: 200, 2: 300}, {0: 0.0, 1: 0.3, 2: 0.6}, 0.9 / 600),  # would start below zero
        ({0: 100}, {0: 0.5, 1: 9.0}, 0.005),  # a task without rows is left out
        ({}, {}, 0.0),
    ],
)
def test_wait_per_row(task_rows, waits, rate):
    from rebalancer.pipeline.apply import wait_per_row

    assert wait_per_row(task_rows, waits) == pytest.approx(rate)


def test_every_task_reports_one_wait_before_its_first_call(spark):
    df = _frame(spark, {f"k{i}": 20 + i for i in range(9)})
    result = balanced_apply(df, "key", count_and_sum, SCHEMA, partitions=3)
    result.frame.write.format("noop").mode("overwrite").save()
    waits = result._waits.value
    assert sorted(waits) == [0, 1, 2] and all(seconds >= 0 for (seconds,) in waits.values())
    assert sum(cost.calls for cost in result.key_costs().values()) == 9
