"""The per-type handler (L1 aggregation) and the per-task stats it reports back to the driver.

The handler runs inside a grouped-map pandas UDF, once per group of rows of one type. It is
vectorised: one sort, then every (entity, minute) group is a contiguous run of sorted values.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.accumulators import AccumulatorParam

METRIC_COLUMNS = ("type", "entity", "minute", "count", "sum", "min", "max", "mean", "p50", "p90", "p99")
# `minute` leaves the handler as epoch seconds; the driver turns it into a timestamp.
HANDLER_SCHEMA = (
    "type string, entity string, minute long, count long, sum double, min double, max double, "
    "mean double, p50 double, p90 double, p99 double"
)
QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


def _lerp(low: np.ndarray, high: np.ndarray, t: np.ndarray) -> np.ndarray:
    """numpy's own `_lerp` for method='linear', so results match `np.quantile` to the last bit."""
    diff = high - low
    out = low + diff * t
    upper = t >= 0.5
    out[upper] = (high - diff * (1 - t))[upper]
    return out


def factorize_exact(values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(codes, names) like `pd.factorize`, but exact for every string.

    pandas' object hash table treats strings that differ only after a NUL ("x" and "x\x00") as
    equal, which would merge two types. Its answer is checked (one vectorised comparison) and, when
    wrong, replaced by Arrow's dictionary encoding, which compares whole strings.
    """
    codes, uniques = pd.factorize(values, sort=False)
    names = np.asarray(uniques, dtype=object)
    original = values.to_numpy(dtype=object)
    if len(original) and not (names[codes] == original).all():
        encoded = pa.array(original, type=pa.string()).dictionary_encode()
        codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        names = np.asarray(encoded.dictionary.to_pylist(), dtype=object)
    return codes, names


def aggregate(frame: pd.DataFrame) -> pd.DataFrame:
    """Metrics per (type, entity, minute) over `frame` (columns type, entity, minute, value).

    Values are sorted within each group first, so the result does not depend on row order: hash
    and weighted dispatch give bit-identical sums.
    """
    if frame.empty:
        return pd.DataFrame({name: [] for name in METRIC_COLUMNS})
    type_codes, type_names = factorize_exact(frame["type"])
    entity_codes, entity_names = factorize_exact(frame["entity"])
    minutes = frame["minute"].to_numpy(dtype=np.int64)
    values = frame["value"].to_numpy(dtype=np.float64)
    order = np.lexsort((values, minutes, entity_codes, type_codes))
    t_sorted = type_codes[order]
    e_sorted = entity_codes[order]
    m_sorted = minutes[order]
    v_sorted = values[order]
    n = len(v_sorted)
    change = np.empty(n, dtype=bool)
    change[0] = True
    change[1:] = (
        (t_sorted[1:] != t_sorted[:-1]) | (e_sorted[1:] != e_sorted[:-1]) | (m_sorted[1:] != m_sorted[:-1])
    )
    starts = np.flatnonzero(change)
    counts = np.diff(np.append(starts, n))
    sums = np.add.reduceat(v_sorted, starts)
    result: dict[str, Any] = {
        "type": type_names[t_sorted[starts]],
        "entity": entity_names[e_sorted[starts]],
        "minute": m_sorted[starts],
        "count": counts.astype(np.int64),
        "sum": sums,
        "min": v_sorted[starts],
        "max": v_sorted[starts + counts - 1],
        "mean": sums / counts,
    }
    for name, q in QUANTILES:
        # numpy's virtual index for method='linear'.
        virtual = (counts - 1) * q
        below = np.floor(virtual)
        gamma = virtual - below
        low = below.astype(np.int64)
        at_end = virtual >= counts - 1
        low[at_end] = counts[at_end] - 1
        high = np.where(at_end, low, low + 1)
        result[name] = _lerp(v_sorted[starts + low], v_sorted[starts + high], gamma)
    return pd.DataFrame(result, copy=False)


class TaskStatsParam(AccumulatorParam):
    """Merges {partition_id: [rows, first_start, last_end, handler_seconds, groups]} from executors."""

    def zero(self, value: dict[int, list[float]]) -> dict[int, list[float]]:
        return {}

    def addInPlace(
        self, value1: dict[int, list[float]], value2: dict[int, list[float]]
    ) -> dict[int, list[float]]:
        for pid, (rows, start, end, busy, groups) in value2.items():
            if pid in value1:
                old = value1[pid]
                value1[pid] = [
                    old[0] + rows,
                    min(old[1], start),
                    max(old[2], end),
                    old[3] + busy,
                    old[4] + groups,
                ]
            else:
                value1[pid] = [rows, start, end, busy, groups]
        return value1


def make_handler(stats: Any) -> Any:
    """The grouped-map function; `stats` is a Spark accumulator of TaskStatsParam."""
    from pyspark import TaskContext

    def handle(frame: pd.DataFrame) -> pd.DataFrame:
        started = time.time()
        out = aggregate(frame)
        ended = time.time()
        context = TaskContext.get()
        pid = context.partitionId() if context is not None else -1
        stats.add({pid: [len(frame), started, ended, ended - started, 1]})
        return out

    return handle


def task_stats(raw: dict[int, list[float]], partitions: int) -> tuple[list[int], list[float]]:
    """Rows and seconds per task, 0 for a task that got no rows; seconds span first to last group."""
    rows = [0] * partitions
    seconds = [0.0] * partitions
    for pid, (count, start, end, *_rest) in raw.items():
        if 0 <= pid < partitions:
            rows[pid] = int(count)
            seconds[pid] = round(float(end - start), 4)
    return rows, seconds
