"""The per-type handler (L1 aggregation) and the per-task stats it reports back to the driver.

The handler runs inside a grouped-map pandas UDF once per type (hash dispatch: `aggregate`), or
inside `mapInArrow` once per slot, on Arrow (weighted dispatch: `aggregate_arrow`). Both are
vectorised over types: one sort, then every (type, entity, minute) group is a contiguous run of
sorted values.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.accumulators import AccumulatorParam

from rebalancer.pipeline.clock import SteadyClock, elapsed

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

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
    groups = _metrics(
        type_codes, entity_codes, frame["minute"].to_numpy(dtype=np.int64), frame["value"].to_numpy(dtype=np.float64)
    )
    groups["type"] = type_names[groups["type"]]
    groups["entity"] = entity_names[groups["entity"]]
    return pd.DataFrame(groups, copy=False)


HANDLER_ARROW_SCHEMA = pa.schema(
    [("type", pa.string()), ("entity", pa.string()), ("minute", pa.int64()), ("count", pa.int64())]
    + [(name, pa.float64()) for name in METRIC_COLUMNS[4:]]
)


def _encode(column: pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """(codes, names) of a string column, by Arrow's dictionary encoding: whole strings compared,
    and no Python string made for any row."""
    encoded = column.dictionary_encode()
    if not encoded.num_chunks:
        return np.empty(0, dtype=np.int64), pa.array([], pa.string())
    codes = np.concatenate([chunk.indices.to_numpy(zero_copy_only=False) for chunk in encoded.chunks])
    return codes.astype(np.int64, copy=False), encoded.chunks[-1].dictionary  # the chunks share it


def aggregate_arrow(table: pa.Table) -> pa.Table:
    """`aggregate` on an Arrow table (from a task's batches): the same metrics, bit for bit.

    The type and entity strings stay in Arrow from input to output. Converting them to pandas
    makes a Python object per row and value, the largest cost of a big group outside the metrics.
    """
    type_codes, type_names = _encode(table.column("type"))
    entity_codes, entity_names = _encode(table.column("entity"))
    groups = _metrics(
        type_codes,
        entity_codes,
        table.column("minute").to_numpy().astype(np.int64, copy=False),
        table.column("value").to_numpy().astype(np.float64, copy=False),
    )
    columns = {
        **groups,
        "type": type_names.take(pa.array(groups["type"])),
        "entity": entity_names.take(pa.array(groups["entity"])),
    }
    return pa.table([columns[name] for name in METRIC_COLUMNS], schema=HANDLER_ARROW_SCHEMA)


_KEY_LIMIT = 1 << 62  # products of spans stay below this: int64 arithmetic never overflows


def _dense(ids: np.ndarray) -> tuple[np.ndarray, int]:
    """`ids` renumbered 0..k-1 in the same order, and k."""
    uniques, inverse = np.unique(ids, return_inverse=True)
    return inverse.astype(np.int64, copy=False).reshape(-1), len(uniques)


def _sorted_groups(
    type_codes: np.ndarray, entity_codes: np.ndarray, minutes: np.ndarray, values: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(group id, value, row) of every row, sorted by (type, entity, minute) and then value.

    A row's group id numbers its (type, entity, minute) in that order, and its value's rank among
    all the values is placed below it, so one sort of those ints orders the groups and each group's
    values at once. `np.lexsort` over the four columns took twice as long (2.5M rows: 1.05 s).
    """
    n = len(values)
    minute_codes, minute_span = _dense(minutes)
    ids, span = type_codes.astype(np.int64, copy=False), int(type_codes.max()) + 1
    for codes, size in ((entity_codes, int(entity_codes.max()) + 1), (minute_codes, minute_span)):
        if span * size >= _KEY_LIMIT:
            ids, span = _dense(ids)
        ids, span = ids * size + codes, span * size
    if span * n >= _KEY_LIMIT:
        ids, span = _dense(ids)
    by_value = np.argsort(values)
    rank = np.empty(n, dtype=np.int64)
    rank[by_value] = np.arange(n, dtype=np.int64)
    keys = np.sort(ids * n + rank)
    groups = keys // n
    rows = by_value[keys - groups * n]
    return groups, values[rows], rows


def _metrics(
    type_codes: np.ndarray, entity_codes: np.ndarray, minutes: np.ndarray, values: np.ndarray
) -> dict[str, np.ndarray]:
    """The metrics of each (type, entity, minute) run after one sort; "type" and "entity" as codes."""
    if not len(values):
        return {name: np.empty(0, dtype=np.float64 if index > 3 else np.int64) for index, name in enumerate(METRIC_COLUMNS)}
    groups, v_sorted, rows = _sorted_groups(type_codes, entity_codes, minutes, values)
    n = len(v_sorted)
    change = np.empty(n, dtype=bool)
    change[0] = True
    change[1:] = groups[1:] != groups[:-1]
    starts = np.flatnonzero(change)
    counts = np.diff(np.append(starts, n))
    sums = np.add.reduceat(v_sorted, starts)
    first = rows[starts]
    result: dict[str, np.ndarray] = {
        "type": type_codes[first],
        "entity": entity_codes[first],
        "minute": minutes[first],
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
    return result


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


def make_handler(stats: Any | None) -> Any:
    """The grouped-map function; `stats` is a Spark accumulator of TaskStatsParam, or None where
    there are none (Spark Connect): see `report_task_stats`."""
    return report_task_stats(aggregate, stats)


# Where there are no accumulators (Spark Connect), each row a grouped-map call returns also carries
# that call's task, rows and times (constants per call: cheap in Arrow), and a call that returns no
# rows returns one placeholder row instead; `split_task_stats` parts them again on the driver.
STATS_COLUMNS = ("_stats_task", "_stats_call", "_stats_rows", "_stats_start", "_stats_end", "_stats_only")
STATS_SCHEMA = (
    "_stats_task int, _stats_call long, _stats_rows long, _stats_start double, _stats_end double, "
    "_stats_only boolean"
)


def report_task_stats(fn: Callable[[pd.DataFrame], pd.DataFrame], stats: Any | None) -> Any:
    """`fn`, a grouped-map pandas function, reporting each call's rows and seconds per task.

    To `stats`, an accumulator of TaskStatsParam; or, with None, in STATS_COLUMNS of its output:
    the applyInPandas schema then ends with STATS_SCHEMA, and `split_task_stats` splits the result.
    """

    clock = SteadyClock()

    def handle(frame: pd.DataFrame) -> pd.DataFrame:
        return _timed_call(fn, frame, len(frame), stats, with_stats_columns, clock)

    return handle


StatsColumns = Callable[[Any, int, int, float, float], Any]  # (out, pid, rows, started, ended) -> out


def _timed_call(
    fn: Callable[[Any], Any],
    data: Any,
    rows: int,
    stats: Any | None,
    with_columns: StatsColumns,
    clock: SteadyClock,
) -> Any:
    """`fn(data)`, reported to `stats`, or with `with_columns` (its stats columns) when None.

    Timed on `clock` (`own_clock`, never going back), as `balanced_apply`'s calls are, so the two
    report comparable seconds."""
    from pyspark import TaskContext

    started = clock()
    out = fn(data)
    ended = clock()
    context = TaskContext.get()
    pid = context.partitionId() if context is not None else -1
    if stats is None:
        return with_columns(out, pid, rows, started, ended)
    stats.add({pid: [rows, started, ended, elapsed(started, ended), 1]})
    return out


def _stats_values(pid: int, rows: int, started: float, ended: float, placeholder: bool) -> tuple[Any, ...]:
    """One call's STATS_COLUMNS values; the random call id tells apart calls of equal numbers."""
    return (np.int32(pid), np.int64(secrets.randbits(63)), np.int64(rows), started, ended, placeholder)


def with_stats_columns(out: pd.DataFrame, pid: int, rows: int, started: float, ended: float) -> pd.DataFrame:
    """`out` with one call's stats on every row; an empty `out` becomes one placeholder row of nulls."""
    placeholder = out.empty
    if placeholder:
        out = pd.DataFrame({name: pd.Series([None], dtype=object) for name in out.columns})
    return out.assign(**dict(zip(STATS_COLUMNS, _stats_values(pid, rows, started, ended, placeholder))))


STATS_ARROW_TYPES = (pa.int32(), pa.int64(), pa.int64(), pa.float64(), pa.float64(), pa.bool_())


def with_arrow_stats_columns(out: pa.Table, pid: int, rows: int, started: float, ended: float) -> pa.Table:
    """`with_stats_columns` for a non-empty Arrow table (an Arrow call never returns none)."""
    values = _stats_values(pid, rows, started, ended, False)
    for name, value, kind in zip(STATS_COLUMNS, values, STATS_ARROW_TYPES):
        out = out.append_column(name, pa.array(np.full(out.num_rows, value), kind))
    return out


ARROW_OUTPUT_ROWS = 10_000  # rows per output batch, Spark's own default for Arrow batches


def make_slot_handler(stats: Any | None) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The weighted dispatch's function, for `mapInArrow`: a task holds one slot, and all its rows
    make one `aggregate_arrow` call, as `groupBy(slot).applyInPandas` would make one `aggregate`
    call, without sorting the task's rows by slot or turning its strings into Python objects.

    Reports each call as `report_task_stats` does: to `stats`, or in STATS_COLUMNS when None.
    """

    clock = SteadyClock()

    def handle(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        received = [batch for batch in batches if batch.num_rows]
        if not received:  # an empty task: no call, as a grouped map makes none
            return
        table = pa.Table.from_batches(received)
        out = _timed_call(aggregate_arrow, table, table.num_rows, stats, with_arrow_stats_columns, clock)
        yield from out.to_batches(max_chunksize=ARROW_OUTPUT_ROWS)

    return handle


def split_task_stats(result: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(the rows `fn` returned, one stats row per call) from a result carrying STATS_COLUMNS.

    Both read `result`: persist it first, or the grouped map runs once for each.
    """
    from pyspark.sql import functions as F

    data = result.filter(~F.col("_stats_only")).drop(*STATS_COLUMNS)
    calls = result.select(*STATS_COLUMNS[:-1]).distinct()
    return data, calls


def collect_task_stats(calls: DataFrame) -> dict[int, list[float]]:
    """The per-call stats rows of `split_task_stats`, merged per task as the accumulator would."""
    merged: dict[int, list[float]] = {}
    param = TaskStatsParam()
    for pid, _call, rows, started, ended in calls.collect():
        numbers = [int(rows), float(started), float(ended), elapsed(started, ended), 1]
        param.addInPlace(merged, {int(pid): numbers})
    return merged


def task_stats(raw: dict[int, list[float]], partitions: int) -> tuple[list[int], list[float]]:
    """Rows and seconds per task, 0 for a task that got no rows; seconds span first to last group,
    0.0 where the clock read the end before the start (`clock.elapsed`): loads >= 0 for the skew."""
    rows = [0] * partitions
    seconds = [0.0] * partitions
    for pid, (count, start, end, *_rest) in raw.items():
        if 0 <= pid < partitions:
            rows[pid] = int(count)
            seconds[pid] = round(elapsed(float(start), float(end)), 4)
    return rows, seconds
