"""The grouped execution: one call of `func` per key (or shard), timed on the task clock and held
to applyInPandas' output checks, run over each task's item-sorted Arrow batches (`mapInArrow`),
and the second stage that merges a split key's shard outputs through `combine`."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from rebalancer.pipeline.apply._convert import BatchFrames, PandasTerms, unseen_groups
from rebalancer.pipeline.apply._items import COMBINE_COLUMN, ITEM_COLUMN, Key
from rebalancer.pipeline.clock import TaskClock, elapsed

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql.types import StructType


class OutputCheck(NamedTuple):
    """How a grouped map's output must look: applyInPandas' checks, done per call here because the
    outputs of many calls leave the worker together (`grouped_map`)."""

    names: list[str]
    by_name: bool  # spark.sql.legacy.execution.pandas.groupedMap.assignColumnsByName

    def conform(self, out: Any) -> pd.DataFrame:
        """`out` with the schema's columns in its order; Spark's own error when it doesn't match."""
        import pandas as pd
        from pyspark.errors import PySparkRuntimeError, PySparkTypeError

        if not isinstance(out, pd.DataFrame):
            raise PySparkTypeError(
                errorClass="UDF_RETURN_TYPE",
                messageParameters={"expected": "pandas.DataFrame", "actual": type(out).__name__},
            )
        if out.empty and len(out.columns) == 0:
            return out
        # As Spark: by name only when the output has string column names, else by position.
        if self.by_name and any(isinstance(name, str) for name in out.columns):
            missing = sorted(set(self.names) - set(out.columns))
            extra = sorted(set(out.columns) - set(self.names), key=str)
            if missing or extra:
                raise PySparkRuntimeError(
                    errorClass="RESULT_COLUMN_NAMES_MISMATCH",
                    messageParameters={
                        "missing": f" Missing: {', '.join(missing)}." if missing else "",
                        "extra": f" Unexpected: {', '.join(map(str, extra))}." if extra else "",
                    },
                )
            return out if list(out.columns) == self.names else out[self.names]
        if len(out.columns) != len(self.names):
            raise PySparkRuntimeError(
                errorClass="RESULT_COLUMN_SCHEMA_MISMATCH",
                messageParameters={"expected": str(len(self.names)), "actual": str(len(out.columns))},
            )
        return out.set_axis(self.names, axis=1)


def _takes_key(func: Callable[..., Any]) -> bool:
    """applyInPandas' convention: a two-argument func gets the group's key first."""
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) == 2


def make_call(
    func: Callable[..., Any],
    key_columns: list[str],
    check: OutputCheck,
    tasks: Any,
    items: Any,
    waits: Any,
    combine_group: Mapping[int, int] | None,
) -> Callable[[int, pd.DataFrame], tuple[Key, pd.DataFrame]]:
    """One group's call: `func` on a key's (or shard's) rows, timed, checked and reported; gives
    the key with the output, so that an output Arrow cannot take names its key (`grouped_map`).

    A call's seconds run from the end of the task's previous call, so the cost paid outside `func`
    for a group (Arrow to pandas, cutting the group out of its batches) is charged to the key that
    caused it. The wait before a task's first call goes to `waits`, to be shared by rows
    (`BalancedApply.key_costs`). All of it is measured on `own_clock` through the task's
    `TaskClock`, the task stats too, and every duration is `elapsed`: never below 0.0.
    """
    from pyspark import TaskContext
    from pyspark.errors import PySparkException

    takes_key = _takes_key(func)
    clock = TaskClock()  # unpickled afresh, and so restarted, by every task
    last_end: dict[int, float] = {}

    def call(item: int, data: pd.DataFrame) -> tuple[Key, pd.DataFrame]:
        own_start = clock.now()
        context = TaskContext.get()
        pid = context.partitionId() if context is not None else -1
        key = tuple(data[name].iloc[0] for name in key_columns)
        try:
            out = func(key, data) if takes_key else func(data)
        except Exception as exc:
            raise RuntimeError(
                f"balanced_apply: func failed on key {key!r}: {type(exc).__name__}: {exc}"
            ) from exc
        try:
            out = check.conform(out)
        except PySparkException as exc:  # Spark's own error, and the key whose output it was
            raise RuntimeError(f"balanced_apply: func's output for key {key!r} does not fit the schema: {exc}") from exc
        own_end = clock.now()
        since = last_end.get(pid, own_start)
        last_end[pid] = own_end
        begun = clock.begin(pid, own_start)
        task_start = own_start if begun is None else begun
        if begun is not None and waits is not None:
            waits.add({pid: [elapsed(begun, own_start)]})
        if tasks is not None:
            tasks.add({pid: [len(data), task_start, own_end, elapsed(own_start, own_end), 1]})
        if items is not None and item >= 0:
            items.add({item: [len(data), elapsed(since, own_end), 1]})
        if combine_group is not None:
            out = out.copy()
            group = combine_group.get(item)
            out[COMBINE_COLUMN] = group if group is not None else -1 - max(pid, 0)
        return key, out

    return call


OUTPUT_ROWS = 10_000  # rows the grouped map gathers from its calls before converting them to Arrow


def grouped_map(
    call: Callable[[int, pd.DataFrame], tuple[Key, pd.DataFrame]],
    key_columns: list[str],
    terms: PandasTerms,
    schema: StructType,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The task's function, for `mapInArrow`: its rows arrive sorted by item, in Arrow batches.
    Each item's rows are cut out and handed to `call` (an unseen key's, grouped by key first) as
    the frame applyInPandas would give them, and the outputs leave in batches of about
    OUTPUT_ROWS rows, converted as applyInPandas converts them.

    Why not Spark's `groupBy().applyInPandas()`: it converts every group to pandas and back on
    its own, a fixed cost per group that is a large part of a small key's cost. Here a batch's
    whole groups are converted together, in a way that gives each the dtypes and values its own
    conversion would (`BatchFrames`); a group cut by a batch's end is converted on its own. The
    rows, dtypes, calls and checks are those of applyInPandas.
    """

    def run_item(item: int, table: pa.Table) -> Iterator[tuple[Key, pd.DataFrame]]:
        """The calls of an item's rows, converted on their own (an unseen item's, per key)."""
        if item >= 0:
            yield call(item, terms.to_pandas(table))
        else:
            for group in unseen_groups(table, terms, key_columns):
                yield call(item, group)

    def grouped_map(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import numpy as np
        import pandas as pd
        import pyarrow as pa

        gathered: list[tuple[Key, pd.DataFrame]] = []
        gathered_rows = 0
        gathered_dtypes: list[Any] = []  # those of the outputs gathered

        def convert(key: Key, out: pd.DataFrame) -> pa.RecordBatch:
            try:
                return terms.to_arrow(out, schema)
            except Exception as exc:  # Spark's own error, and the key whose output it was
                raise RuntimeError(
                    f"balanced_apply: func's output for key {key!r} does not fit the schema: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc

        def flush() -> Iterator[pa.RecordBatch]:
            nonlocal gathered, gathered_rows
            outputs, gathered, gathered_rows = gathered, [], 0
            if len(outputs) == 1:
                yield convert(*outputs[0])
            elif outputs:
                try:
                    together = terms.to_arrow(pd.concat([out for _, out in outputs], ignore_index=True), schema)
                except Exception:  # find the output that fails on its own, to name its key
                    for key, out in outputs:
                        yield convert(key, out)
                else:
                    yield together

        def gather(outputs: Iterable[tuple[Key, pd.DataFrame]]) -> Iterator[pa.RecordBatch]:
            """Outputs go together while their dtypes agree, so each converts as it would alone."""
            nonlocal gathered_rows, gathered_dtypes
            for key, out in outputs:
                if not len(out):
                    continue
                dtypes = out.dtypes.tolist()
                if gathered and dtypes != gathered_dtypes:
                    yield from flush()
                gathered_dtypes = dtypes
                gathered.append((key, out))
                gathered_rows += len(out)
                if gathered_rows >= OUTPUT_ROWS:
                    yield from flush()

        pieces: list[pa.RecordBatch] = []  # the open item's rows so far (it may go on in the next batch)
        current = 0
        for batch in batches:
            if not batch.num_rows:
                continue
            item_at = batch.schema.get_field_index(ITEM_COLUMN)
            items = batch.column(item_at).to_numpy()  # once per batch, not per group
            values = batch.remove_column(item_at)
            cuts = (np.flatnonzero(items[1:] != items[:-1]) + 1).tolist()
            starts, stops = [0, *cuts], [*cuts, batch.num_rows]
            segments = list(zip(starts, stops))
            first = 0
            if pieces and int(items[0]) == current:  # the open item goes on here
                pieces.append(values.slice(0, stops[0]))
                first = 1
            if pieces and (first == 0 or len(segments) > 1):  # ... and ends here or ended before
                yield from gather(run_item(current, pa.Table.from_batches(pieces).combine_chunks()))
                pieces = []
            # Whole groups of this batch: all but the last, which may go on in the next one.
            complete = segments[first:-1]
            frames = None
            if any(int(items[start]) >= 0 for start, _ in complete):
                frames = BatchFrames(terms, values, [a for a, _ in complete], [b for _, b in complete])
            for start, stop in complete:
                item = int(items[start])
                if item >= 0 and frames is not None:
                    yield from gather([call(item, frames.frame(start, stop))])
                else:
                    yield from gather(run_item(item, pa.Table.from_batches([values.slice(start, stop - start)])))
            if first == 0 or len(segments) > 1:
                start, stop = segments[-1]
                current = int(items[start])
                pieces = [values.slice(start, stop - start)]
        if pieces:
            yield from gather(run_item(current, pa.Table.from_batches(pieces).combine_chunks()))
        yield from flush()

    return grouped_map


def make_merge(combine: Callable[..., Any], columns: list[str]) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """Second stage: a split key's partial outputs go through `combine`, everything else passes."""

    def merge(frame: pd.DataFrame) -> pd.DataFrame:
        partials = frame[columns]
        if len(frame) and int(frame[COMBINE_COLUMN].iloc[0]) >= 0:
            try:
                return combine(partials.reset_index(drop=True))
            except Exception as exc:
                raise RuntimeError(f"balanced_apply: combine failed: {type(exc).__name__}: {exc}") from exc
        return partials

    return merge
