"""Issue 42, items 22 to 24: balanced_apply takes the keys `groupBy` takes, and gives func what
`groupBy(...).applyInPandas` gives it. Each case runs through both and compares the sorted rows.

- a name is resolved as Spark resolves it: ignoring case unless spark.sql.caseSensitive, and an
  ambiguous name is a ValueError naming the key (Spark: AMBIGUOUS_REFERENCE);
- no key is one group of all rows;
- a Column expression (a cast, a window), a nested field, an ordinal: func gets the frame's own
  columns and the expression's values in the key tuple, as applyInPandas shows them.
"""

from __future__ import annotations

import sys

import pandas as pd
import pytest
from pyspark import cloudpickle
from pyspark.sql import functions as F

from rebalancer.pipeline import PlanStore, balanced_apply
from rebalancer.pipeline.apply import _call

pytestmark = pytest.mark.spark
# Spark's Python workers cannot import this test module: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SHOWN = "key string, columns string, n long, total double"
CASE = "spark.sql.caseSensitive"


def shown(key: tuple, frame: pd.DataFrame) -> pd.DataFrame:
    """What func was shown: the key tuple (its values' types too), the columns, the rows."""
    return pd.DataFrame(
        {
            "key": [repr(key)],
            "columns": [",".join(frame.columns)],
            "n": [len(frame)],
            "total": [float(frame["v"].sum())],
        }
    )


def sorted_rows(df) -> list[tuple]:
    return sorted(tuple(row) for row in df.collect())


def both(df, key, func=shown, schema=SHOWN, **kwargs) -> tuple[list[tuple], list[tuple]]:
    """applyInPandas' rows and balanced_apply's, sorted."""
    keys = key if isinstance(key, list) else [key]
    spark_rows = sorted_rows(df.groupBy(*keys).applyInPandas(func, schema))
    ours = sorted_rows(balanced_apply(df, key, func, schema, partitions=2, **kwargs).frame)
    return spark_rows, ours


@pytest.fixture
def frame(spark):
    data = [(i % 5, f"e{i % 3}", float(i)) for i in range(20)]
    return spark.createDataFrame(data, "id long, Entity string, v double")


# --- item 22: names resolve as Spark resolves them ------------------------------------------


@pytest.mark.parametrize("name", ["ID", "Id", "id"])
def test_a_key_named_in_another_case_resolves_as_spark_resolves_it(frame, name):
    spark_rows, ours = both(frame, name)
    assert ours == spark_rows
    assert [row[0] for row in ours] == [f"(np.int64({i}),)" for i in range(5)]
    assert {row[1] for row in ours} == {"id,Entity,v"}  # the frame's own names, as applyInPandas


def test_split_by_resolves_as_spark_resolves_a_name(frame):
    def merge(parts: pd.DataFrame) -> pd.DataFrame:
        return parts.groupby(["key", "columns"], as_index=False)[["n", "total"]].sum()

    hot = frame.union(frame.sparkSession.createDataFrame([(9, f"e{i}", 1.0) for i in range(60)], frame.schema))
    spark_rows, ours = both(hot, "id", split_by="entity", combine=merge)
    assert ours == spark_rows


def test_with_case_sensitive_names_only_the_exact_name_resolves(spark, frame, conf):
    conf(CASE, "true")
    with pytest.raises(Exception, match=r"UNRESOLVED_COLUMN"):
        frame.groupBy("ID").applyInPandas(shown, SHOWN).collect()
    with pytest.raises(ValueError, match=r"^key: no column 'ID' in the frame \(columns: id, Entity, v\)$"):
        balanced_apply(frame, "ID", shown, SHOWN)
    with pytest.raises(ValueError, match=r"^split_by: no column 'entity' in the frame"):
        balanced_apply(frame, "id", shown, SHOWN, split_by="entity", split_safe=True)
    # Columns k and K are two columns here: each name is its own key.
    twins = spark.createDataFrame([(1, 2, 1.0), (1, 3, 2.0), (2, 2, 4.0)], "k long, K long, v double")
    for name in ("k", "K"):
        spark_rows, ours = both(twins, name)
        assert ours == spark_rows and len(ours) == 2


def test_an_ambiguous_name_is_a_value_error_naming_the_key(spark, conf):
    twins = spark.createDataFrame([(1, 2, 1.0)], "k long, K long, v double")
    with pytest.raises(Exception, match=r"AMBIGUOUS_REFERENCE"):
        twins.groupBy("k").applyInPandas(shown, SHOWN).collect()
    message = "key: 'k' is ambiguous: it could be any of the columns 'k', 'K' (spark.sql.caseSensitive is false)"
    with pytest.raises(ValueError) as ambiguous:
        balanced_apply(twins, "k", shown, SHOWN)
    assert str(ambiguous.value) == message
    conf(CASE, "true")  # two columns named alike: ambiguous however names are compared
    joined = twins.select("k", "v").crossJoin(twins.select("k"))
    with pytest.raises(ValueError, match=r"^key: 'k' is ambiguous: .*spark\.sql\.caseSensitive is true\)$"):
        balanced_apply(joined, "k", shown, SHOWN)


def test_a_column_named_like_balanced_applys_own_in_another_case_is_refused(spark):
    df = spark.createDataFrame([(1, 1.0, 0)], "id long, v double, __REBALANCER_item int")
    message = "df: column '__REBALANCER_item' is reserved by balanced_apply (prefix '__rebalancer_')"
    with pytest.raises(ValueError) as refused:
        balanced_apply(df, "id", shown, SHOWN)
    assert str(refused.value) == message


# --- item 23: no key is one group of all rows -----------------------------------------------


def test_no_key_is_one_group_of_all_rows(spark, frame):
    spark_rows, ours = both(frame, [])
    assert ours == spark_rows == [("()", "id,Entity,v", 20, 190.0)]
    empty = spark.createDataFrame([], frame.schema)
    assert both(empty, []) == ([], [])


def test_no_key_can_be_split_and_combined(frame):
    def merge(parts: pd.DataFrame) -> pd.DataFrame:
        return parts.groupby(["key", "columns"], as_index=False)[["n", "total"]].sum()

    result = balanced_apply(frame, [], shown, SHOWN, partitions=3, split_by="Entity", combine=merge)
    assert result.plan.split == [()] and len(result.plan.slot_of()) == 3  # e0, e1, e2 on three tasks
    assert sorted_rows(result.frame) == [("()", "id,Entity,v", 20, 190.0)]
    assert sum(result.task_stats().calls) == 3


# --- item 24: expressions, nested fields, ordinals -----------------------------------------


@pytest.mark.parametrize(
    "make_key",
    [
        lambda: (F.col("id") % 4).cast("int"),
        lambda: F.upper("Entity"),
        lambda: F.col("id").alias("renamed"),
        lambda: [F.col("id") % 2, "entity"],
        lambda: 2,  # the second column, from 1
        lambda: "`id`",
    ],
    ids=["cast", "upper", "alias", "mixed", "ordinal", "quoted"],
)
def test_an_expression_key_shows_func_its_values_and_the_frames_own_columns(frame, make_key):
    spark_rows, ours = both(frame, make_key())
    assert ours == spark_rows
    assert {row[1] for row in ours} == {"id,Entity,v"}


def test_a_window_key_reaches_func_as_applyinpandas_shows_it(spark):
    data = [(f"2026-01-01 00:0{m}:{s:02d}", float(m * 10 + s)) for m in range(3) for s in (5, 35)]
    df = spark.createDataFrame(data, "t string, v double").select(F.col("t").cast("timestamp").alias("ts"), "v")
    spark_rows, ours = both(df, F.window("ts", "1 minute"))
    assert ours == spark_rows and len(ours) == 3
    assert ours[0][0] == "({'start': Timestamp('2026-01-01 00:00:00'), 'end': Timestamp('2026-01-01 00:01:00')},)"
    assert {row[1] for row in ours} == {"ts,v"}


def test_nested_fields_and_arrays_as_keys(spark):
    data = [((1, "a"), [1, 2], 1.0), ((1, "b"), [1, 2], 2.0), ((2, "a"), [3], 4.0), ((1, "a"), [3], 8.0)]
    df = spark.createDataFrame(data, "st struct<x:int, y:string>, arr array<int>, v double")
    for key in ("st.x", "ST.X", "st", "arr", ["arr", "st.y"]):
        spark_rows, ours = both(df, key)
        assert ours == spark_rows, key


def test_an_expression_key_is_named_by_its_label_in_the_plan_and_the_store(frame, tmp_path):
    store = PlanStore(tmp_path / "store")
    key = (F.col("id") % 4).cast("int")
    first = balanced_apply(frame, key, shown, SHOWN, partitions=2, store=store)
    assert first.plan.key_columns == ["CAST((id % 4) AS INT)"]
    again = balanced_apply(frame, key, shown, SHOWN, partitions=2, store=store)
    assert again.plan.owner == first.plan.owner and again.plan.placements == []
    other = balanced_apply(frame, (F.col("id") % 3).cast("int"), shown, SHOWN, partitions=2, store=store)
    assert len(other.plan.placements) == 3  # another expression: its keys are new to the store


def test_a_key_spark_cannot_resolve_is_a_value_error_naming_it(frame, monkeypatch):
    monkeypatch.setattr(_call, "count_keys", None)  # refused before any job
    unresolved = r"\[UNRESOLVED_COLUMN\.WITH_SUGGESTION\] A column, variable, or function parameter with name `nope`"
    with pytest.raises(ValueError, match=r"^key: cannot group by Column<'\+\(nope, 1\)'>: " + unresolved):
        balanced_apply(frame, F.col("nope") + 1, shown, SHOWN)
    with pytest.raises(ValueError, match=r"^key: no column 'id\.x' in the frame \(columns: id, Entity, v\)$"):
        balanced_apply(frame, "id.x", shown, SHOWN)
    with pytest.raises(ValueError, match=r"^key: ordinal 4 is not in 1\.\.3 \(the frame's columns, from 1\)$"):
        balanced_apply(frame, 4, shown, SHOWN)
    with pytest.raises(ValueError, match=r"^key must be a column name, a Column, an ordinal or a list of them, got None"):
        balanced_apply(frame, None, shown, SHOWN)
