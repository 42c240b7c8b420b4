"""Properties of `balanced_apply`: the rows of `groupBy(key).applyInPandas`, on the planned tasks.

Random frames (null keys and null `split_by` values included, sometimes one key with 90% of the
rows), one or two key columns, 1 to 5 partitions, and three ways to call it: whole keys, hot keys
split by `entity` with a split-safe func, and split with a sum-like func whose partials `combine`
merges. Values are whole numbers, so sums are exact whatever order the rows arrive in, and the
outputs are compared exactly. Each example runs a few small Spark jobs, so the examples are few.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from pyspark import cloudpickle

from rebalancer.pipeline.apply import balanced_apply
from rebalancer.pipeline.plan.slots import WHOLE

pytestmark = pytest.mark.spark
# Spark's Python workers cannot import this test module: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

INPUT_SCHEMA = "key string, k2 int, entity string, value double"
WHOLE_SCHEMA = "key string, k2 int, n long, total double, low double, high double"
ENTITY_SCHEMA = "key string, k2 int, entity string, n long, total double"
SUMS_SCHEMA = "key string, k2 int, n long, total double, low double, high double"
KEYS = ["a", "b", "c", "d", None]
BATCH_ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch"
ENTITIES = [f"e{i}" for i in range(12)] + [None]


def key_values(frame: pd.DataFrame) -> dict[str, object]:
    """The key columns of a group (one value each), as the group's output carries them."""
    return {"key": frame["key"].iloc[0], "k2": frame["k2"].iloc[0]}


def per_key(frame: pd.DataFrame) -> pd.DataFrame:
    """A whole-key func: count, sum, min and max of the key's values."""
    values = frame["value"]
    return pd.DataFrame(
        [
            {
                **key_values(frame),
                "n": len(frame),
                "total": values.sum(),
                "low": values.min(),
                "high": values.max(),
            }
        ]
    )


def per_entity(frame: pd.DataFrame) -> pd.DataFrame:
    """Split-safe by entity: each output row depends on one entity's rows only."""
    grouped = frame.groupby("entity", dropna=False, sort=True)["value"]
    sizes, totals = grouped.size(), grouped.sum()
    # A group of null entities alone gives a float NaN index: keep the column strings and None.
    entities = pd.Series([None if pd.isna(e) else e for e in sizes.index], dtype=object)
    key = key_values(frame)
    return pd.DataFrame(
        {
            "key": [key["key"]] * len(sizes),
            "k2": [key["k2"]] * len(sizes),
            "entity": entities,
            "n": sizes.to_numpy(),
            "total": totals.to_numpy(),
        }
    )


def merge_sums(partials: pd.DataFrame) -> pd.DataFrame:
    """`combine` for `per_key`: the partials of one split key merge into its whole-key row."""
    return pd.DataFrame(
        [
            {
                **key_values(partials),
                "n": partials["n"].sum(),
                "total": partials["total"].sum(),
                "low": partials["low"].min(),
                "high": partials["high"].max(),
            }
        ]
    )


MODES = {
    # mode: (func, schema, split_by, combine); per_entity is split-safe by entity
    "whole": (per_key, WHOLE_SCHEMA, None, None),
    "split": (per_entity, ENTITY_SCHEMA, "entity", None),
    "combine": (per_key, SUMS_SCHEMA, "entity", merge_sums),
}


@dataclass
class Case:
    rows: list[tuple[str | None, int | None, str | None, float]]
    key: list[str]
    partitions: int


@st.composite
def cases(draw: st.DrawFn) -> Case:
    two_columns = draw(st.booleans())
    row = st.tuples(
        st.sampled_from(KEYS),
        st.sampled_from([1, 2, None]) if two_columns else st.just(0),
        st.sampled_from(ENTITIES),
        st.integers(-1000, 1000).map(float),
    )
    rows = draw(st.lists(row, min_size=1, max_size=60))
    if draw(st.booleans()):
        # One key (null, sometimes) takes 90% of the rows, spread over many entities.
        hot = draw(st.sampled_from(KEYS))
        hot_k2 = rows[0][1]
        count = 9 * len(rows)
        rows += [(hot, hot_k2, ENTITIES[i % len(ENTITIES)], float(i % 7)) for i in range(count)]
    return Case(
        rows=draw(st.permutations(rows)),
        key=["key", "k2"] if two_columns else ["key"],
        partitions=draw(st.integers(1, 5)),
    )


def sorted_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in one order (nulls last), so two results compare exactly."""
    return frame.sort_values(list(frame.columns), na_position="last", ignore_index=True)


# The null key holds 90 of 100 rows, over every entity (the null one too).
NINETY = [(None, 0, ENTITIES[i % 13], float(i % 5)) for i in range(90)] + [
    (k, 0, "e1", float(i)) for i, k in enumerate(["a", "b", "c", "d"] * 2 + ["a", "b"])
]


def test_a_key_with_90_percent_of_rows_is_split_only_with_split_by(spark) -> None:
    """The hot (null) key lands on several slots with `split_by`, on one without; rows stay exact."""
    df = spark.createDataFrame(NINETY, INPUT_SCHEMA)
    expected = sorted_frame(df.groupBy("key").applyInPandas(per_key, WHOLE_SCHEMA).toPandas())

    split = balanced_apply(
        df, "key", per_key, SUMS_SCHEMA, partitions=4, split_by="entity", combine=merge_sums
    )
    assert split.plan.split == [(None,)]
    assert len(split.plan.slot_of(None)) > 1
    assert {item.shard for item in split.plan.owner if item.key == (None,)} != {WHOLE}
    pd.testing.assert_frame_equal(sorted_frame(split.frame.toPandas()), expected)
    assert split.task_stats().rows == split.plan.rows

    whole = balanced_apply(df, "key", per_key, WHOLE_SCHEMA, partitions=4)
    assert whole.plan.split == []
    assert len(whole.plan.slot_of(None)) == 1
    pd.testing.assert_frame_equal(sorted_frame(whole.frame.toPandas()), expected)
    stats = whole.task_stats()
    assert stats.rows == whole.plan.rows
    assert max(stats.rows) == 90  # the hot key's task holds it alone; nothing else fits beside it


def exchanges(frame) -> list[str]:
    """The shuffle exchanges of the executed (AQE final) plan; broadcasts move no rows and don't count."""
    physical = frame._jdf.queryExecution().executedPlan().toString()
    final = physical.split("Final Plan", 1)[-1].split("Initial Plan", 1)[0]
    return [line for line in final.splitlines() if re.search(r"\bExchange\b", line)]


def test_one_exchange_and_every_key_on_its_planned_slot(spark) -> None:
    """From the physical plan and each call's partition id: Spark runs the plan, not its own hash."""
    from pyspark import TaskContext

    partitions = 3
    rows = [(k, 0, f"e{i % 5}", float(i)) for i, k in enumerate(["a"] * 30 + ["b", "c", "d", None] * 4)]
    df = spark.createDataFrame(rows, INPUT_SCHEMA)

    def where(frame: pd.DataFrame) -> pd.DataFrame:
        pid = TaskContext.get().partitionId()
        return pd.DataFrame(
            {"key": [frame["key"].iloc[0]], "entity": [frame["entity"].iloc[0]], "pid": [pid]}
        )

    for split_by in (None, "entity"):
        result = balanced_apply(
            df,
            "key",
            where,
            "key string, entity string, pid int",
            partitions=partitions,
            split_by=split_by,
            split_safe=True,  # one row per call by design: what this test counts
        )
        out = result.frame.collect()
        found = exchanges(result.frame)
        assert len(found) == 1, found
        # One string key column: a perfect hash finds each row's item, with no join or broadcast.
        physical = result.frame._jdf.queryExecution().executedPlan().toString()
        assert "Join" not in physical and "Broadcast" not in physical, physical
        assert re.search(rf"hashpartitioning\(__rebalancer_slot#\d+, {partitions}\)", found[0]), found
        # Every call ran in the partition its slot names.
        for key, _entity, pid in out:
            assert pid in result.plan.slot_of(key), (key, pid, result.plan.owner)
        assert len(out) == len(result.plan.owner)
        assert result.task_stats().rows == result.plan.rows
        if split_by is not None:
            assert result.plan.split == [("a",)]


# One test per mode, so each stays within the per-test timeout on a loaded machine.
@pytest.mark.parametrize("mode", sorted(MODES))
@settings(
    max_examples=2,
    deadline=None,
    database=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@example(case=Case(rows=NINETY, key=["key"], partitions=3))
# Found by this test: a group whose only entity is null (the func's output must stay strings).
@example(case=Case(rows=[("d", 2, None, 368.0), ("b", None, "e8", 1000.0)], key=["key", "k2"], partitions=2))
@given(case=cases())
def test_balanced_apply_equals_apply_in_pandas(spark, mode: str, case: Case) -> None:
    func, schema, split_by, combine = MODES[mode]
    df = spark.createDataFrame(case.rows, INPUT_SCHEMA)
    expected = df.groupBy(*case.key).applyInPandas(func, schema).toPandas()

    result = balanced_apply(
        df,
        case.key if len(case.key) > 1 else case.key[0],
        func,
        schema,
        partitions=case.partitions,
        split_by=split_by,
        combine=combine,
        split_safe=split_by is not None and combine is None,
    )
    # 3-row Arrow batches: keys span batches and batches hold several keys, whatever the case.
    batch_rows = spark.conf.get(BATCH_ROWS)
    spark.conf.set(BATCH_ROWS, "3")
    try:
        got = result.frame.toPandas()
    finally:
        spark.conf.set(BATCH_ROWS, batch_rows)

    pd.testing.assert_frame_equal(sorted_frame(got), sorted_frame(expected), check_dtype=True)
    if split_by is None:
        assert result.plan.split == []
    # Every key (or shard) is one call, on the slot the plan gave it, with the planned rows.
    stats = result.task_stats()
    assert stats.rows == result.plan.rows
    assert sum(stats.rows) == len(case.rows)
    assert sum(stats.calls) == len(result.plan.owner)
    calls_per_slot = [0] * case.partitions
    for slot in result.plan.owner.values():
        calls_per_slot[slot] += 1
    assert stats.calls == calls_per_slot
