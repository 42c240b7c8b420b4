"""`balanced_apply` through a Spark Connect server, in a process of its own, for test_pipeline_connect.py.

    python connect_apply_run.py sc://HOST:PORT OUT_DIR

A Connect session cannot share the pytest process with the classic `spark` fixture: creating one
(`SparkSession.builder.remote(url).create()`) sets SPARK_CONNECT_MODE_ENABLED for the whole process,
and `pyspark.sql.functions` then build Connect columns, which the classic session's frames refuse
(`[NOT_EXPECTED_TYPE] Argument col should be Column or str, got Column`); without it, the Connect
frames refuse the classic columns. So the test runs this script against its server.

For each case it writes OUT_DIR/<case>.balanced.parquet (`result.frame`) and <case>.plain.parquet
(`groupBy(key).applyInPandas(func, schema)` on the same frame), and OUT_DIR/cases.json: the plan,
the rows each task of the grouped map produced output for, `stats_available` and what
`task_stats()` raised. The test does the comparing. Functions defined here live in `__main__`,
which cloudpickle sends by value: the server's Python workers never import this file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from rebalancer.pipeline import balanced_apply

SCHEMA = "key string, n long, total double"
PER_ENTITY_SCHEMA = "key string, entity string, n long, total double"
HOT_ROWS, NULL_ROWS = 900, 6


def rows() -> list[tuple[str | None, str, float]]:
    """A hot key with 90% of the rows (of 7 entities), ten small keys, and null keys, which form one
    group. Values are multiples of 0.25, so every sum is exact whatever order it runs in."""
    per_key = {"hot": HOT_ROWS, **{f"k{i}": 10 + i for i in range(10)}}
    data: list[tuple[str | None, str, float]] = [
        (key, f"e{i % 7}", (i % 13) * 0.25) for key, count in per_key.items() for i in range(count)
    ]
    data += [(None, f"e{i % 2}", 1.5) for i in range(NULL_ROWS)]
    return data


def count_and_sum(frame: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"key": [frame["key"].iloc[0]], "n": [len(frame)], "total": [float(frame["v"].sum())]})


def merge(partials: pd.DataFrame) -> pd.DataFrame:
    """Merges a split key's shard outputs: counts and sums are decomposable."""
    return partials.groupby("key", as_index=False, dropna=False)[["n", "total"]].sum()


def per_entity(frame: pd.DataFrame) -> pd.DataFrame:
    """Split-safe by entity: its own groups are finer than (key, entity)."""
    out = frame.groupby(["key", "entity"], as_index=False, dropna=False).agg(n=("v", "size"), total=("v", "sum"))
    return out[["key", "entity", "n", "total"]]


def rows_per_task(frame: DataFrame, partitions: int) -> list[int]:
    """Rows each task of a one-stage grouped map consumed: the `n` of its output rows, by the
    partition they were produced in (no exchange after the map, so the partition is its task)."""
    counted = frame.groupBy(F.spark_partition_id().alias("task")).agg(F.sum("n").alias("rows")).collect()
    rows = [0] * partitions
    for row in counted:
        rows[row["task"]] = int(row["rows"])
    return rows


def save(frame: DataFrame, path: Path) -> None:
    collected = frame.toPandas()
    collected.attrs = {}  # Connect's query metrics, which Parquet metadata cannot hold
    collected.to_parquet(path)


def run_case(
    out: Path, name: str, df: DataFrame, func: Any, schema: str, placed_rows: bool, **options: Any
) -> dict[str, Any]:
    result = balanced_apply(df, "key", func, schema, **options)
    save(result.frame, out / f"{name}.balanced.parquet")
    save(df.groupBy("key").applyInPandas(func, schema), out / f"{name}.plain.parquet")
    try:
        result.task_stats()
    except RuntimeError as exc:
        task_stats_error: str | None = str(exc)
    else:
        task_stats_error = None
    return {
        "partitions": result.plan.partitions,
        "planned_rows": result.plan.rows,
        "split": [list(key) for key in result.plan.split],
        "hot_slots": result.plan.slot_of("hot"),
        "task_rows": rows_per_task(result.frame, result.plan.partitions) if placed_rows else None,
        "stats_available": result.stats_available,
        "task_stats_error": task_stats_error,
    }


def main(url: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    spark = SparkSession.builder.remote(url).create()
    try:
        df = spark.createDataFrame(rows(), "key string, entity string, v double")
        cases = {
            # partitions=None: the server's spark.sql.shuffle.partitions.
            "whole": run_case(out, "whole", df, count_and_sum, SCHEMA, True),
            "split_safe": run_case(
                out, "split_safe", df, per_entity, PER_ENTITY_SCHEMA, True, partitions=4, split_by="entity",
                split_safe=True,
            ),
            "combine": run_case(
                out, "combine", df, count_and_sum, SCHEMA, False, partitions=4, split_by="entity", combine=merge
            ),
        }
    finally:
        spark.stop()
    (out / "cases.json").write_text(json.dumps(cases, indent=1))


if __name__ == "__main__":
    if len(sys.argv) != 3 or not sys.argv[1].startswith("sc://"):
        sys.exit("usage: python connect_apply_run.py sc://HOST:PORT OUT_DIR")
    main(sys.argv[1], Path(sys.argv[2]))
