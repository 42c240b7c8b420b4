"""balanced_apply's contract (issue 35): `split_by` needs `combine` or `split_safe=True`, the default
`partitions` is `spark.sql.shuffle.partitions`, and the README's snippet gives applyInPandas' rows."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd
import pytest
from pyspark import cloudpickle

from rebalancer.pipeline import balanced_apply

pytestmark = pytest.mark.spark
# Spark's Python workers cannot import this test module: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

README = Path(__file__).resolve().parents[3] / "README.md"
SCHEMA = "key string, n long, total double"
SPLIT_UNSAFE = (
    "split_by='entity' without combine: a hot key is split into shards by 'entity' and func runs once per "
    "shard, so a func whose rows need the whole key (a count, a mean, one row per key) would return one "
    "partial row per shard instead of applyInPandas' rows. Pass combine=, a function that merges a split "
    "key's shard outputs into its rows, or split_safe=True if each of func's output rows depends only on "
    "rows of one 'entity' value (for example, one row per 'entity')."
)


def one_row_per_key(frame: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"key": [frame["key"].iloc[0]], "n": [len(frame)], "total": [float(frame["v"].sum())]})


def one_row_per_entity(frame: pd.DataFrame) -> pd.DataFrame:
    """Split-safe by entity: each row is one (key, entity)'s rows alone."""
    out = frame.groupby(["key", "entity"], as_index=False).agg(n=("v", "size"), total=("v", "sum"))
    return out[["key", "entity", "n", "total"]]


def _hot_frame(spark):
    """50 keys; "hot" holds 900 of 1,145 rows over 30 entities. Integral values: sums are exact."""
    rows = [("hot", f"e{i % 30}", float(i % 11)) for i in range(900)]
    rows += [(f"k{k:02d}", f"e{i % 3}", float(i)) for k in range(49) for i in range(5)]
    return spark.createDataFrame(rows, "key string, entity string, v double")


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(list(frame.columns), ignore_index=True)


def test_split_by_without_combine_is_refused_with_the_choice_explained(spark):
    df = _hot_frame(spark)
    with pytest.raises(ValueError) as raised:
        balanced_apply(df, "key", one_row_per_key, SCHEMA, partitions=8, split_by="entity")
    assert str(raised.value) == SPLIT_UNSAFE


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"combine": one_row_per_key, "split_safe": True},
            "split_safe: True says func's shard outputs are final rows, combine says they are partials to "
            "merge; pass one of them, not both",
        ),
        ({"split_safe": "yes"}, "split_safe must be True or False, got 'yes'"),
    ],
)
def test_split_safe_with_combine_or_not_a_bool_is_refused(spark, kwargs, message):
    df = _hot_frame(spark)
    with pytest.raises(ValueError) as raised:
        balanced_apply(df, "key", one_row_per_key, SCHEMA, partitions=8, split_by="entity", **kwargs)
    assert str(raised.value) == message


def test_split_safe_true_splits_the_hot_key_and_gives_apply_in_pandas_rows(spark):
    df = _hot_frame(spark)
    schema = "key string, entity string, n long, total double"
    result = balanced_apply(df, "key", one_row_per_entity, schema, partitions=8, split_by="entity", split_safe=True)
    assert result.plan.split == [("hot",)] and len(result.plan.slot_of("hot")) > 1
    expected = _sorted(df.groupBy("key").applyInPandas(one_row_per_entity, schema).toPandas())
    got = _sorted(result.frame.toPandas())
    assert len(got) == 30 + 49 * 3
    pd.testing.assert_frame_equal(got, expected)


def test_the_issues_case_one_row_per_key_with_combine_gives_fifty_rows(spark):
    """The issue's case: without combine it gave 52 rows (the hot key as 3 partial rows)."""
    df = _hot_frame(spark)

    def merge(parts: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame({"key": [parts["key"].iloc[0]], "n": [parts["n"].sum()], "total": [parts["total"].sum()]})

    result = balanced_apply(df, "key", one_row_per_key, SCHEMA, partitions=8, split_by="entity", combine=merge)
    assert result.plan.split == [("hot",)]
    got = _sorted(result.frame.toPandas())
    assert len(got) == 50 and got.loc[got["key"] == "hot", "n"].tolist() == [900]
    pd.testing.assert_frame_equal(got, _sorted(df.groupBy("key").applyInPandas(one_row_per_key, SCHEMA).toPandas()))


def test_the_default_partitions_are_spark_sql_shuffle_partitions(spark):
    df = _hot_frame(spark)
    saved = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    try:
        assert spark.sparkContext.defaultParallelism != 3  # local[2]: the old default was 2
        result = balanced_apply(df, "key", one_row_per_key, SCHEMA)
        assert result.plan.partitions == 3 and len(result.plan.rows) == 3
        assert result.frame.rdd.getNumPartitions() == 3
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", saved)


def _readme_snippet() -> str:
    text = README.read_text()
    after = text.index("**Your DataFrame, your function**")
    return re.search(r"```python\n(.*?)```", text[after:], re.S).group(1)  # type: ignore[union-attr]


def test_the_readme_snippet_runs_and_gives_apply_in_pandas_rows(spark, tmp_path):
    """The snippet makes its own session and frame (tests/test_docs_run.py runs it as a script); here
    it runs in this process on the shared session, and its rows are checked against applyInPandas'."""
    snippet = _readme_snippet()
    session_line = re.search(r"^spark = build_session\(.*$", snippet, re.M)
    assert session_line is not None
    snippet = snippet.replace(session_line.group(0), "")  # the shared session: getOrCreate would reconfigure it
    # Spark resolves relative paths against the JVM's directory, not this test's: point them here.
    for path in ('"plans/func"', '"out-func"'):
        assert path in snippet
        snippet = snippet.replace(path, repr(str(tmp_path / path.strip('"'))))
    namespace = {"spark": spark, "__name__": "readme_snippet"}
    exec(compile(snippet, "README.md", "exec"), namespace)
    result, df = namespace["result"], namespace["df"]
    assert result.plan.split == [("hot",)]  # half of the rows: split over the 4 tasks
    got = _sorted(pd.read_parquet(tmp_path / "out-func"))
    expected = _sorted(df.groupBy("key").applyInPandas(namespace["func"], SCHEMA).toPandas())
    assert len(got) == 21  # "hot" and k1, k3, ..., k39
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)  # Parquet reads n as int64 alike
    assert (tmp_path / "plans" / "func" / "plan.json").is_file()
