"""The grouping keys as `df.groupBy(...)` takes them: names, resolved as Spark resolves them
(case-insensitively unless `spark.sql.caseSensitive`), 1-based ordinals, and Column expressions,
which are projected to hidden columns that func never sees (applyInPandas shows func the frame's
own columns, and the expressions' values in the key tuple only)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from rebalancer.pipeline.apply._items import RESERVED_PREFIX

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


class GroupKeys(NamedTuple):
    """The keys of one `balanced_apply`, resolved against its frame."""

    frame: DataFrame  # df, plus one hidden column per key that is not one of df's own columns
    columns: list[str]  # the grouping columns in `frame`: df's own, or hidden ones
    names: list[str]  # the keys as the plan and the store name them: a column's, an expression's label
    hidden: list[str]  # the columns of `frame` that df does not have: dropped before func sees rows


def case_sensitive(spark: Any) -> bool:
    """spark.sql.caseSensitive: false unless set, as in Spark."""
    return str(spark.conf.get("spark.sql.caseSensitive", "false")).strip().lower() == "true"


def column_named(columns: Sequence[str], name: str, field: str, exact: bool) -> str | None:
    """The one column of `columns` that Spark's resolver takes `name` for (exactly, or ignoring
    case), None if there is none; ValueError naming `field` when several match, as Spark refuses
    an ambiguous reference."""
    found = [column for column in columns if column == name] if exact else [
        column for column in columns if column.lower() == name.lower()
    ]
    if len(found) > 1:
        setting = "true" if exact else "false"
        raise ValueError(
            f"{field}: {name!r} is ambiguous: it could be any of the columns {', '.join(map(repr, found))} "
            f"(spark.sql.caseSensitive is {setting})"
        )
    return found[0] if found else None


def reserved_column(columns: Sequence[str], exact: bool) -> str | None:
    """A column of the frame whose name Spark would confuse with balanced_apply's own."""
    for name in sorted(columns):
        if (name if exact else name.lower()).startswith(RESERVED_PREFIX):
            return name
    return None


def _missing(name: str, columns: Sequence[str]) -> ValueError:
    return ValueError(f"key: no column {name!r} in the frame (columns: {', '.join(columns)})")


def _label(df: DataFrame, expression: Column, shown: str) -> str:
    """The name Spark gives `expression`'s column (`CAST((id % 4) AS INT)`, `window`), asking
    its analyzer once; ValueError naming the key when Spark cannot resolve it."""
    from pyspark.errors import PySparkException

    try:
        return str(df.select(expression).columns[0])
    except PySparkException as exc:  # AnalysisException, classic or Connect
        reason = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise ValueError(f"key: cannot group by {shown}: {reason[:300]}") from None


def _own_column(df_columns: list[str], one: Any, exact: bool) -> str | None:
    """The frame's column a key names (an ordinal, or a name Spark's resolver finds among the
    frame's columns); None for what Spark must resolve: an expression, a nested field `a.b`, a
    `` `quoted` `` name."""
    from pyspark.sql import Column

    if isinstance(one, bool) or not isinstance(one, str | int | Column):
        raise ValueError(f"key: {one!r} is not a column name, a Column or an ordinal")
    if isinstance(one, int):
        if not 1 <= one <= len(df_columns):
            raise ValueError(f"key: ordinal {one} is not in 1..{len(df_columns)} (the frame's columns, from 1)")
        return df_columns[one - 1]
    if isinstance(one, str):
        found = column_named(df_columns, one, "key", exact)
        if found is None and not any(mark in one for mark in ".`"):
            raise _missing(one, df_columns)
        return found
    return None


def resolve_keys(df: DataFrame, key: Any, exact: bool) -> GroupKeys:
    """`key` (a name, a Column, a 1-based ordinal, or a list of them, empty for one group of all
    rows) as `df.groupBy(key)` resolves it. A name of one of df's columns, or an ordinal, groups by
    that column; anything else Spark resolves (a nested field `a.b`, a `` `quoted` `` name, a
    Column expression) is projected to a hidden column `__rebalancer_key<i>`."""
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    if isinstance(key, str | Column) or (isinstance(key, int) and not isinstance(key, bool)):
        keys: list[Any] = [key]
    elif isinstance(key, Sequence) and not isinstance(key, bytes | bytearray):
        keys = list(key)
    else:
        raise ValueError(f"key must be a column name, a Column, an ordinal or a list of them, got {key!r}")
    df_columns = list(df.columns)
    columns: list[str] = []
    names: list[str] = []
    projected: dict[str, Column] = {}
    for position, one in enumerate(keys):
        column = _own_column(df_columns, one, exact)
        if column is not None:
            columns.append(column)
            names.append(column)
            continue
        if isinstance(one, str):  # Spark's to resolve; not found, it is no column at all
            try:
                label = _label(df, F.col(one), repr(one))
            except ValueError:
                raise _missing(one, df_columns) from None
            expression = F.col(one)
        else:
            label = _label(df, one, str(one))
            expression = one
        hidden = f"{RESERVED_PREFIX}key{position}"
        projected[hidden] = expression
        columns.append(hidden)
        names.append(label)
    frame = df.withColumns(projected) if projected else df
    return GroupKeys(frame=frame, columns=columns, names=names, hidden=list(projected))
