"""Arrow rows to the pandas frames applyInPandas would hand `func`, and its outputs back: pyspark's
own conversions, by the session's settings, with a batch's whole groups converted together where
that gives each group the dtypes and values its own conversion would."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql.types import StructType


class PandasTerms(NamedTuple):
    """The session settings by which applyInPandas turns a group's Arrow rows into pandas and its
    output back into Arrow (the confs pyspark's worker reads), read when `balanced_apply` is called."""

    timezone: str
    prefer_int_ext_dtype: bool  # spark.sql.execution.pythonUDF.pandas.preferIntExtensionDtype
    safecheck: bool  # spark.sql.execution.pandas.convertToArrowArraySafely
    large_var_types: bool  # spark.sql.execution.arrow.useLargeVarTypes
    int_to_decimal: bool  # spark.sql.execution.pythonUDF.pandas.intToDecimalCoercionEnabled
    batch_rows: int  # spark.sql.execution.arrow.maxRecordsPerBatch: rows per frame of the iterator form

    @classmethod
    def of(cls, spark: Any) -> PandasTerms:
        def flag(name: str, default: bool) -> bool:
            """The setting's value, Spark's default when unset (`conf.get(name, default)` would
            answer our default instead: convertToArrowArraySafely is true unless set)."""
            try:
                value = spark.conf.get(name)
            except Exception:  # a setting this Spark does not know: pyspark's worker default
                return default
            return default if value is None else str(value).lower() == "true"

        return cls(
            timezone=str(spark.conf.get("spark.sql.session.timeZone")),
            prefer_int_ext_dtype=flag("spark.sql.execution.pythonUDF.pandas.preferIntExtensionDtype", False),
            safecheck=flag("spark.sql.execution.pandas.convertToArrowArraySafely", False),
            large_var_types=flag("spark.sql.execution.arrow.useLargeVarTypes", False),
            int_to_decimal=flag("spark.sql.execution.pythonUDF.pandas.intToDecimalCoercionEnabled", False),
            batch_rows=int(spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch") or 10_000),
        )

    def to_pandas(self, data: pa.RecordBatch | pa.Table) -> pd.DataFrame:
        """`data` as applyInPandas hands a group to its func: pyspark's own conversion, column by
        column, so each column's dtype follows the nulls of these rows alone (an int column is
        float64 only when they hold a null). A frame indexed 0..n-1 that shares nothing."""
        import pandas as pd
        from pyspark.sql.conversion import ArrowBatchTransformer

        series = ArrowBatchTransformer.to_pandas(
            data, timezone=self.timezone, prefer_int_ext_dtype=self.prefer_int_ext_dtype
        )
        return pd.concat(series, axis=1)

    def to_arrow(self, frame: pd.DataFrame, schema: StructType) -> pa.RecordBatch:
        """An output (its columns already in the schema's order) as applyInPandas converts it."""
        from pyspark.sql.conversion import PandasToArrowConversion

        return PandasToArrowConversion.convert(
            frame,
            schema,
            timezone=self.timezone,
            safecheck=self.safecheck,
            arrow_cast=True,
            prefers_large_types=self.large_var_types,
            assign_cols_by_name=False,
            int_to_decimal_coercion_enabled=self.int_to_decimal,
        )


def _any_null(array: pa.Array) -> bool:
    """Whether `array` or anything nested in it holds a null: pyarrow turns a list of ints with a
    null anywhere in the column into float arrays for every row."""
    import pyarrow as pa

    if array.null_count:
        return True
    if isinstance(array, pa.StructArray):
        return any(_any_null(child) for child in array.flatten())
    values = getattr(array, "values", None)  # a list's or a map's: all of it, slice or not
    return isinstance(values, pa.Array) and _any_null(values)


def _keeps_dtype_with_nulls(kind: pa.DataType) -> bool:
    """Whether pandas gets the same dtype for a flat column of `kind` with nulls as without: floats
    (NaN), text, bytes, decimals and dates (None in objects), timestamps and durations (NaT) do;
    ints (float64 with a null) and booleans (objects) do not, nor any type not known to."""
    import pyarrow as pa

    types = pa.types
    return bool(
        types.is_floating(kind)
        or types.is_string(kind)
        or types.is_large_string(kind)
        or types.is_binary(kind)
        or types.is_large_binary(kind)
        or types.is_decimal(kind)
        or types.is_date(kind)
        or types.is_timestamp(kind)
        or types.is_duration(kind)
        or types.is_null(kind)
    )


class BatchFrames:
    """The whole groups of one Arrow batch as the frames applyInPandas would give them, with as
    few conversions as that allows. Converted alone, a group gets a column's dtype by the nulls
    it holds itself (ints: int32 without nulls, float64 with them; booleans: bool or objects), so:
    - a column whose dtype nulls don't change (floats, text, dates, ...; `_keeps_dtype_with_nulls`)
      or that has nulls in all of the groups or in none is converted once for the batch;
    - a column of ints or booleans with nulls in some groups only is converted twice for the
      batch: as it is (for the groups with nulls) and with its nulls filled (for those without,
      whose rows the filling does not touch);
    - a nested column with a null anywhere (a null in one row's list of ints makes every row's list
      float), or another type with nulls in some groups only, is converted per group.
    """

    def __init__(self, terms: PandasTerms, values: pa.RecordBatch, starts: list[int], stops: list[int]) -> None:
        import numpy as np
        import pyarrow as pa

        self.terms = terms
        self.offset = starts[0]
        self.group_of = {start: group for group, start in enumerate(starts)}
        span = values.slice(self.offset, stops[-1] - self.offset)
        group_starts = np.asarray(starts, dtype=np.int64) - self.offset
        own: list[int] = []  # converted per group
        twins: list[int] = []  # converted twice, as they are and with their nulls filled
        twin_nulls: list[np.ndarray] = []  # per twin: which groups hold a null in it
        filled = span
        for position, column in enumerate(span.columns):
            kind = column.type
            if pa.types.is_nested(kind):
                if _any_null(column):
                    own.append(position)
                continue
            if _keeps_dtype_with_nulls(kind) or column.null_count in (0, len(column)):
                continue
            nulls = np.logical_or.reduceat(column.is_null().to_numpy(zero_copy_only=False), group_starts)
            if nulls.all():
                continue
            if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
                twins.append(position)
                twin_nulls.append(nulls)
                fill = pa.scalar(False if pa.types.is_boolean(kind) else 0, kind)
                filled = filled.set_column(position, span.schema.field(position), column.fill_null(fill))
            else:
                own.append(position)
        shared = [position for position in range(span.num_columns) if position not in set(own)]
        self.own = own
        self.own_span = span.select(own) if own else None
        self.shared = terms.to_pandas(filled.select(shared)) if shared else None
        # Per twin: its position in `shared`, its conversion with nulls, and the groups that take it.
        self.twin_at = [shared.index(position) for position in twins]
        self.with_nulls = terms.to_pandas(span.select(twins)) if twins else None
        self.twin_nulls = np.stack(twin_nulls, axis=1) if twins else None

    def frame(self, start: int, stop: int) -> pd.DataFrame:
        """The rows start:stop of the batch (one whole group) as a frame of their own."""
        import numpy as np
        import pandas as pd

        group = self.group_of[start]
        start -= self.offset
        stop -= self.offset
        own = self.terms.to_pandas(self.own_span.slice(start, stop - start)) if self.own_span is not None else None
        if self.shared is None:
            assert own is not None
            return own
        data = self.shared.iloc[start:stop].copy()  # a fresh frame the func may change
        data.index = pd.RangeIndex(len(data))
        if self.twin_nulls is not None and self.with_nulls is not None:
            for twin in np.flatnonzero(self.twin_nulls[group]):
                data.isetitem(self.twin_at[twin], self.with_nulls.iloc[start:stop, twin].array.copy())
        if own is not None:
            for column, position in enumerate(self.own):
                data.insert(position, own.columns[column], own.iloc[:, column], allow_duplicates=True)
        return data


def unseen_groups(table: pa.Table, terms: PandasTerms, key_columns: list[str]) -> list[pa.Table]:
    """Rows of keys the plan never saw, one table per key, grouped as Spark groups them: nulls
    together, NaNs together (the item already tells null from NaN, see `_slot_columns.with_slot_columns`).
    Each key's rows are to be converted on their own, as applyInPandas converts a group."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    if not key_columns:  # no key: all rows are one group
        return [table]
    keys = terms.to_pandas(table.select(key_columns))
    try:
        codes = keys.groupby(key_columns, dropna=False, sort=False).ngroup().to_numpy()
    except TypeError:  # unhashable values (a struct key arrives as a dict): group by their text
        text = pd.Series([repr(tuple(row)) for row in keys.itertuples(index=False)])
        codes = pd.factorize(text)[0]
    order = np.argsort(codes, kind="stable")
    cuts = np.flatnonzero(np.diff(codes[order])) + 1
    return [table.take(pa.array(positions)) for positions in np.split(order, cuts)]
