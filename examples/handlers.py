"""Handlers for `rebalancer pipeline run --handlers examples/handlers.py`.

Each handler gets a pandas DataFrame of one type's rows (columns ts, type, entity, value, minute),
or, with `split_by`, of one shard of a hot type, and returns rows of its schema. Its output goes to
OUT/<handler name>/, partitioned by date. On the generated sample (`make run`), the ten hottest
types hold most of the rows; `split_by="entity"` lets the planner spread each of them over tasks.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rebalancer.pipeline import Pipeline

pipeline = Pipeline()


@pipeline.handler(
    "metric_000?",  # the ten hottest types of the sample: an fnmatch glob
    schema="type string, entity string, minute timestamp, n long, p50 double, p99 double",
    split_by="entity",  # split-safe: every output row is one (entity, minute), and a shard holds whole entities
)
def latency(frame: pd.DataFrame) -> pd.DataFrame:
    """p50 and p99 per entity and minute."""
    grouped = frame.groupby(["type", "entity", "minute"], sort=False)["value"]
    out = grouped.quantile([0.5, 0.99]).unstack()
    out.columns = ["p50", "p99"]
    out["n"] = grouped.size()
    return out.reset_index()[["type", "entity", "minute", "n", "p50", "p99"]]


def sum_outliers(partials: pd.DataFrame) -> pd.DataFrame:
    """Merges a split type's per-shard counts: a sum is decomposable."""
    return partials.groupby(["type", "minute"], as_index=False)[["outliers", "rows"]].sum()


@pipeline.handler(
    "metric_01*",
    schema="type string, minute timestamp, outliers long, rows long",
    split_by="entity",
    combine=sum_outliers,  # per-(type, minute) counts are not split-safe by entity: merge the shards' partials
)
def outliers(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows per minute more than three standard deviations from the type's mean (in this frame)."""
    values = frame["value"].to_numpy()
    far = np.abs(values - values.mean()) > 3 * (values.std() or 1.0)
    counted = pd.DataFrame({"type": frame["type"], "minute": frame["minute"], "outliers": far.astype(np.int64)})
    out = counted.groupby(["type", "minute"], as_index=False).agg(outliers=("outliers", "sum"), rows=("outliers", "size"))
    return out[["type", "minute", "outliers", "rows"]]


pipeline.default("metrics")  # every other type: the built-in aggregation into OUT/metrics/
