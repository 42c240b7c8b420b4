"""The grouped execution: one call of `func` per key (or shard), timed on the task clock and held
to applyInPandas' output checks, run over each task's item-sorted Arrow batches (`mapInArrow`),
and the second stage that merges a split key's shard outputs through `combine`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from rebalancer.pipeline.apply._convert import BatchFrames, PandasTerms, unseen_groups
from rebalancer.pipeline.apply._func import FuncForm, noted, reasons, renamed
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


def _chunks(table: pa.Table, rows: int, terms: PandasTerms) -> Iterator[pd.DataFrame]:
    """A key's rows as applyInPandas' iterator form gets them: batches of at most `rows` rows
    (none: one), each converted on its own."""
    step = rows if rows > 0 else max(table.num_rows, 1)
    for start in range(0, table.num_rows, step):
        yield terms.to_pandas(table.slice(start, step))


def make_call(
    func: Callable[..., Any],
    form: FuncForm,
    key_columns: list[str],
    hidden: list[str],
    check: OutputCheck,
    terms: PandasTerms,
    tasks: Any,
    items: Any,
    waits: Any,
    combine_group: Mapping[int, int] | None,
) -> Callable[[int, Any], list[tuple[Key, pd.DataFrame]]]:
    """One group's call: `func` on a key's (or shard's) rows, timed, checked and reported; gives
    the key with each output, so that an output Arrow cannot take names its key (`grouped_map`).
    The rows come as a frame, or, for func's iterator form, as an Arrow table cut into batches.
    The key is read from `key_columns`; the `hidden` ones (projected expressions) are dropped
    before func sees the rows, as applyInPandas shows func the frame's own columns only.

    An exception in func is re-raised as it is, with a note naming the key: Spark's error shows
    its traceback (the user's file, line and function) but not a `__cause__`.

    A call's seconds run from the end of the task's previous call, so the cost paid outside `func`
    for a group (Arrow to pandas, cutting the group out of its batches) is charged to the key that
    caused it. The wait before a task's first call goes to `waits`, to be shared by rows
    (`BalancedApply.key_costs`). All of it is measured on `own_clock` through the task's
    `TaskClock`, the task stats too, and every duration is `elapsed`: never below 0.0.
    """
    import itertools

    from pyspark import TaskContext
    from pyspark.errors import PySparkException
    from pyspark.util import fail_on_stopiteration

    run = fail_on_stopiteration(func)  # as applyInPandas: a StopIteration would end a loop silently
    clock = TaskClock()  # unpickled afresh, and so restarted, by every task
    last_end: dict[int, float] = {}

    def conform(key: Key, out: Any) -> pd.DataFrame:
        try:
            return check.conform(out)
        except PySparkException as exc:  # Spark's own error, and the key whose output it was
            raise RuntimeError(
                f"balanced_apply: func's output for key {key!r} does not fit the schema: {exc}"
            ) from exc

    def outputs(group: Any) -> tuple[Key, int, list[pd.DataFrame]]:
        """The key, the rows and func's checked outputs for one group."""
        if form.iterator:
            frames = _chunks(group, terms.batch_rows, terms)
            first = next(frames)
            key = tuple(first[name].iloc[0] for name in key_columns)
            batches = itertools.chain([first], frames)
            given = (frame.drop(columns=hidden) for frame in batches) if hidden else batches
            try:
                produced = iter(run(key, given) if form.takes_key else run(given))
            except Exception as exc:
                noted(exc, f"balanced_apply: func failed on key {key!r}")
                raise
            checked = []
            while True:
                try:
                    out = next(produced)
                except StopIteration:
                    break
                except Exception as exc:
                    noted(exc, f"balanced_apply: func failed on key {key!r}")
                    raise
                checked.append(conform(key, out))
            return key, group.num_rows, checked
        key = tuple(group[name].iloc[0] for name in key_columns)
        data = group.drop(columns=hidden) if hidden else group
        try:
            out = run(key, data) if form.takes_key else run(data)
        except Exception as exc:
            noted(exc, f"balanced_apply: func failed on key {key!r}")
            raise
        return key, len(group), [conform(key, out)]

    def call(item: int, group: Any) -> list[tuple[Key, pd.DataFrame]]:
        own_start = clock.now()
        context = TaskContext.get()
        pid = context.partitionId() if context is not None else -1
        key, rows, outs = outputs(group)
        own_end = clock.now()
        since = last_end.get(pid, own_start)
        last_end[pid] = own_end
        begun = clock.begin(pid, own_start)
        task_start = own_start if begun is None else begun
        if begun is not None and waits is not None:
            waits.add({pid: [elapsed(begun, own_start)]})
        if tasks is not None:
            tasks.add({pid: [rows, task_start, own_end, elapsed(own_start, own_end), 1]})
        if items is not None and item >= 0:
            items.add({item: [rows, elapsed(since, own_end), 1]})
        if combine_group is not None:
            group_of = combine_group.get(item)
            marked = {COMBINE_COLUMN: group_of if group_of is not None else -1 - max(pid, 0)}
            outs = [out.assign(**marked) for out in outs]
        return [(key, out) for out in outs]

    return call


OUTPUT_ROWS = 10_000  # rows the grouped map gathers from its calls before converting them to Arrow


def grouped_map(
    call: Callable[[int, Any], list[tuple[Key, pd.DataFrame]]],
    key_columns: list[str],
    terms: PandasTerms,
    schema: StructType,
    tables: bool,
    name: str,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The task's function, for `mapInArrow`: its rows arrive sorted by item, in Arrow batches.
    Each item's rows are cut out and handed to `call` (an unseen key's, grouped by key first) as
    the frame applyInPandas would give them (`tables`: as an Arrow table, for func's iterator
    form, which converts them batch by batch), and the outputs leave in batches of about
    OUTPUT_ROWS rows, converted as applyInPandas converts them. The function's code is named
    `balanced_apply[NAME]` (`task_name`), NAME being func's: Spark's worker logs under the name of
    the function it calls, which is this one, and a traceback shows this frame as ours, not as func.

    Why not Spark's `groupBy().applyInPandas()`: it converts every group to pandas and back on
    its own, a fixed cost per group that is a large part of a small key's cost. Here a batch's
    whole groups are converted together, in a way that gives each the dtypes and values its own
    conversion would (`BatchFrames`); a group cut by a batch's end is converted on its own. The
    rows, dtypes, calls and checks are those of applyInPandas.
    """

    def run_item(item: int, table: pa.Table) -> Iterator[tuple[Key, pd.DataFrame]]:
        """The calls of an item's rows, converted on their own (an unseen item's, per key)."""
        groups = [table] if item >= 0 else unseen_groups(table, terms, key_columns)
        for group in groups:
            yield from call(item, group if tables else terms.to_pandas(group))

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
            except Exception as exc:  # Spark's own error, pyarrow's under it, and the key
                raise RuntimeError(
                    f"balanced_apply: func's output for key {key!r} does not fit the schema: {reasons(exc)}"
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
            if not tables and any(int(items[start]) >= 0 for start, _ in complete):
                frames = BatchFrames(terms, values, [a for a, _ in complete], [b for _, b in complete])
            for start, stop in complete:
                item = int(items[start])
                if item >= 0 and frames is not None:
                    yield from gather(call(item, frames.frame(start, stop)))
                else:
                    yield from gather(run_item(item, pa.Table.from_batches([values.slice(start, stop - start)])))
            if first == 0 or len(segments) > 1:
                start, stop = segments[-1]
                current = int(items[start])
                pieces = [values.slice(start, stop - start)]
        if pieces:
            yield from gather(run_item(current, pa.Table.from_batches(pieces).combine_chunks()))
        yield from flush()

    return renamed(grouped_map, task_name("balanced_apply", name))


def task_name(stage: str, name: str) -> str:
    """The code name of a task function of ours that runs the user's function `name`: `stage[name]`.

    Spark's worker names a log record's context (`python_worker_logs()`'s func_name) after the
    outermost frame it calls, which is ours, so the user's function is named there (as applyInPandas
    names it); and a traceback shows the same frame, which must not pass for the user's code."""
    return f"{stage}[{name}]"


def make_merge(
    combine: Callable[..., Any], columns: list[str], split: list[Key], name: str
) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """Second stage: a split key's partial outputs go through `combine`, everything else passes.
    An exception in combine is re-raised as it is, with a note naming the split key; the function
    Spark calls is named `balanced_apply.combine[NAME]`, NAME being combine's, as `grouped_map`'s
    names func."""

    def merge(frame: pd.DataFrame) -> pd.DataFrame:
        partials = frame[columns]
        group = int(frame[COMBINE_COLUMN].iloc[0]) if len(frame) else -1
        if group >= 0:
            try:
                return combine(partials.reset_index(drop=True))
            except Exception as exc:
                noted(exc, f"balanced_apply: combine failed on split key {split[group]!r}")
                raise
        return partials

    return renamed(merge, task_name("balanced_apply.combine", name))
