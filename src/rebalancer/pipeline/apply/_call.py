"""`balanced_apply`: its arguments checked, the counting job and the plan, and the lazy frame that
realises the plan with one exchange and runs `func` per key in `mapInArrow`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rebalancer.pipeline.apply._convert import PandasTerms
from rebalancer.pipeline.apply._func import check_one_argument, code_name, func_form
from rebalancer.pipeline.apply._grouped import OutputCheck, grouped_map, make_call, make_merge
from rebalancer.pipeline.apply._items import (
    COMBINE_COLUMN,
    COSTS,
    ITEM_COLUMN,
    LOGGER,
    RESERVED_PREFIX,
    SLOT_COLUMN,
    Key,
)
from rebalancer.pipeline.apply._key_plan import count_buckets, count_keys, plan_keys, shard_counts
from rebalancer.pipeline.apply._keys import case_sensitive, column_named, reserved_column, resolve_keys
from rebalancer.pipeline.apply._result import BalancedApply, SumParam, flush_pending, hold_pending
from rebalancer.pipeline.apply._slot_columns import with_slot_columns
from rebalancer.pipeline.apply._store import PlanStore, refuse_store_in_input
from rebalancer.pipeline.checks import COUNT_MAX, check_int, check_partitions
from rebalancer.pipeline.handler.builtin import TaskStatsParam
from rebalancer.pipeline.plan.slots import WHOLE
from rebalancer.pipeline.session.build import shuffle_partitions
from rebalancer.pipeline.session.connect import is_connect
from rebalancer.pipeline.session.workers import check_worker_python

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger(LOGGER)


def _check_arguments(
    df: DataFrame,
    exact: bool,
    partitions: int | None,
    split_by: str | None,
    combine: Any,
    split_safe: Any,
    cost: str,
    max_moves: int | None,
) -> str | None:
    """The arguments other than key and func checked, before any job; `split_by` resolved as
    Spark resolves a name (see `_keys.column_named`)."""
    columns = list(df.columns)
    split_column = None
    if split_by is not None:
        if not isinstance(split_by, str):
            raise ValueError(f"split_by must be a column name, got {split_by!r}")
        split_column = column_named(columns, split_by, "split_by", exact)
        if split_column is None:
            raise ValueError(f"split_by: no column {split_by!r} in the frame (columns: {', '.join(columns)})")
    if partitions is not None:
        check_partitions(partitions)
    if cost not in COSTS:
        raise ValueError(f"cost must be one of {', '.join(COSTS)}, got {cost!r}")
    if combine is not None:
        check_one_argument(combine, "combine", "the partial rows of a split key")
    if not isinstance(split_safe, bool):
        raise ValueError(f"split_safe must be True or False, got {split_safe!r}")
    if split_safe and combine is not None:
        raise ValueError(
            "split_safe: True says func's shard outputs are final rows, combine says they are partials "
            "to merge; pass one of them, not both"
        )
    if split_by is not None and combine is None and not split_safe:
        raise ValueError(split_unsafe_message(split_by))
    if max_moves is not None:
        check_int(max_moves, "max_moves", 0, COUNT_MAX)  # the pipeline's own rule for it
    reserved = reserved_column(columns, exact)
    if reserved is not None:
        raise ValueError(f"df: column {reserved!r} is reserved by balanced_apply (prefix {RESERVED_PREFIX!r})")
    return split_column


def parse_schema(schema: Any) -> StructType:
    """A DDL string or StructType as a StructType; ValueError naming the schema when it doesn't parse,
    or when it is one type and not columns (applyInPandas refuses those too).

    `DataType.fromDDL` asks the session's parser once (about 2 ms); an empty DataFrame of the schema,
    which gives the same type, took 30 to 40 ms of every call.
    """
    from pyspark.sql.types import DataType, StructType

    if isinstance(schema, StructType):
        return schema
    if not isinstance(schema, str) or not schema.strip():
        raise ValueError(f"schema must be a DDL string or a StructType, got {schema!r}")
    try:
        parsed = DataType.fromDDL(schema)
    except Exception as exc:  # ParseException, PySparkException: a one-line reason is enough
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"schema: cannot parse {schema!r}: {first[:200]}") from None
    if not isinstance(parsed, StructType):
        raise ValueError(f"schema: {schema!r} is one type, not columns (write it as 'name {schema.strip()}')")
    return parsed




def split_unsafe_message(split_by: str) -> str:
    """Why `split_by` without `combine` is refused, and the two ways on."""
    return (
        f"split_by={split_by!r} without combine: a hot key is split into shards by {split_by!r} and func "
        "runs once per shard, so a func whose rows need the whole key (a count, a mean, one row per key) "
        "would return one partial row per shard instead of applyInPandas' rows. Pass combine=, a function "
        "that merges a split key's shard outputs into its rows, or split_safe=True if each of func's "
        f"output rows depends only on rows of one {split_by!r} value (for example, one row per {split_by!r})."
    )


def balanced_apply(
    df: DataFrame,
    key: str | int | Column | Sequence[str | int | Column],
    func: Callable[..., Any],
    schema: Any,
    partitions: int | None = None,
    split_by: str | None = None,
    combine: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
    cost: str = "rows",
    store: PlanStore | str | Path | None = None,
    max_moves: int | None = None,
    split_safe: bool = False,
) -> BalancedApply:
    """`df.groupBy(key).applyInPandas(func, schema)`, with keys placed on tasks by measured cost.

    Spark places a grouped map's keys by hash, so a heavy key, or a task that drew many small ones,
    becomes a straggler. Here the keys are counted first (one Spark job now, two when `split_by`
    finds hot keys: cache `df` if it is costly), placed on `partitions` tasks by weight, and one
    exchange sends each key's rows to its task. `result.frame` stays lazy, like applyInPandas.

    key: what `groupBy` takes: a column name (resolved as Spark resolves it: ignoring case unless
        `spark.sql.caseSensitive`; an ambiguous name is a ValueError), a 1-based ordinal, a Column
        expression (`(col("id") % 4).cast("int")`, `window("ts", "1 minute")`), or a list of them;
        an empty list is one group of all rows. An expression is grouped by as a hidden column:
        func sees its value in the key tuple only, as with applyInPandas.
    func: gets one key's rows as a pandas DataFrame with `df`'s columns, indexed 0..n-1, with the
        dtypes applyInPandas would give; a two-argument func gets the key tuple first. It returns
        a DataFrame matching `schema` (a DDL string or StructType), by name or by position as
        applyInPandas matches. Type hints `Iterator[pd.DataFrame] -> Iterator[pd.DataFrame]`
        make it applyInPandas' iterator form: it gets the rows in frames of at most
        `spark.sql.execution.arrow.maxRecordsPerBatch` rows and yields frames. A func taking
        another number of arguments is refused at the call, as applyInPandas refuses it. Null keys
        form one group. An exception in func is raised as it is (its traceback shows your file
        and line), with a note naming the key; an output that does not fit the schema is raised
        with the key it came from and pyarrow's reason. Spark's worker logs (and prints) from func
        under func's name, as with applyInPandas.
    partitions: the tasks; default `spark.sql.shuffle.partitions`, as `groupBy` uses.
    split_by: a column (named as key's names are resolved) by which a key heavier than
        total/partitions may be split into shards (`pmod(hash(split_by), 64)` buckets packed into
        shards); func then runs once per shard. Never split without it. A shard holds all rows of
        each `split_by` value it has.
    combine: `combine(partials) -> rows`: merges a split key's shard outputs (func's rows of its
        shards, concatenated) into that key's rows; any decomposable aggregation (counts, sums,
        min/max, sketches). Unsplit keys' outputs pass through untouched. A combine that cannot
        take one argument is refused at the call.
    split_safe: True says func's output rows each depend only on rows of one `split_by` value
        (one row per `split_by` value, or finer groups), so shard outputs are the final rows.
        `split_by` needs `combine` or `split_safe=True` (not both): otherwise a hot key would
        silently come back as one partial result per shard, and ValueError says so.
    cost: "rows" weighs a key by its rows; "seconds" by the seconds its calls took in the run the
        store last recorded (a key not measured: its rows at that run's per-row rate). Seconds are
        on `rebalancer.pipeline.clock.own_clock` (monotonic less time spent waiting for a CPU).
    store: a `PlanStore` or directory holding the last plan and the measured seconds. A stored
        plan for the same keys (named by column, or by an expression's label) and partitions is
        kept while its max/min task load under the new weights stays below 1.15 (otherwise the
        fewest keys move that balance it). The plan is written now; the measurements when
        `task_stats()` is called, or when the next balanced_apply with this store starts. A
        damaged store is ignored with one warning. A store in (or under) the directory the frame
        reads is refused: its plan.json would be read as data.
    max_moves: with a stored plan, at most this many keys change task.

    Returns a `BalancedApply`: `.frame` (the rows applyInPandas would give, in another order),
    `.plan` (`ApplyPlan`: slot per key or shard, rows and load per slot, split keys, moves) and
    `.task_stats()` (rows, seconds, calls per task after an action; it also records the seconds
    into the store; not available on Spark Connect, which has no accumulators).

    Bad arguments raise ValueError naming them. On a local master, a worker Python that cannot
    import numpy, pandas, pyarrow or rebalancer raises RuntimeError naming it before any job.
    Spark pickles func by reference when it lives in an importable module: ship that module to
    the executors, or `pyspark.cloudpickle.register_pickle_by_value(module)`.
    """
    spark = df.sparkSession
    form = func_form(func)
    exact = case_sensitive(spark)
    split_column = _check_arguments(df, exact, partitions, split_by, combine, split_safe, cost, max_moves)
    # numpy's ints are counts too (checked above): plain ints from here, for Spark and the planner.
    partitions = None if partitions is None else check_partitions(partitions)
    max_moves = None if max_moves is None else int(max_moves)
    out_schema = parse_schema(schema)
    keys = resolve_keys(df, key, exact)
    if split_column is not None and split_column in keys.columns:
        raise ValueError(f"split_by: {split_by!r} is a key column; splitting by it changes nothing")
    key_columns = keys.names
    slots = partitions if partitions is not None else shuffle_partitions(spark)
    check_worker_python(spark)
    plan_store = store if isinstance(store, PlanStore) or store is None else PlanStore(store)
    if plan_store is not None:
        refuse_store_in_input(plan_store, df)
        flush_pending(plan_store)
    measured = plan_store.key_costs(key_columns) if plan_store is not None and cost == "seconds" else {}
    previous = plan_store.previous_owner(key_columns, slots) if plan_store is not None else {}
    counts = count_keys(keys.frame, keys.columns)
    buckets: dict[Key, dict[int, int]] = {}
    if split_column is not None and slots > 1:
        heavy = [k for k, n in shard_counts(counts, slots, cost, measured)[1].items() if n > 1]
        if heavy:
            buckets = count_buckets(keys.frame, keys.columns, split_column, heavy)
    plan = plan_keys(counts, buckets, slots, key_columns, cost, measured, previous, max_moves)
    log.info(
        "balanced_apply: %d keys on %d slots by %s, %d split, %d moved, %d placed%s",
        len(counts),
        slots,
        cost,
        len(plan.split),
        len(plan.moves),
        len(plan.placements),
        f" (kept: {plan.skipped})" if plan.skipped else "",
    )
    # Lightest first within a task: a call is charged from the previous call's end, so the heavy
    # keys carry their own Arrow conversion, and only the lightest call of a task goes uncharged.
    index = sorted(plan.owner, key=lambda item: (plan.owner[item], plan.weights[item]))
    connect = is_connect(spark)
    if connect and cost == "seconds":
        log.warning("balanced_apply: cost='seconds' on Spark Connect has no seconds to learn from "
                    "(no accumulators); keys are weighted by the store's last measurements, or by rows")
    tasks = None if connect else spark.sparkContext.accumulator({}, TaskStatsParam())
    items = None if connect else spark.sparkContext.accumulator({}, SumParam())
    waits = None if connect else spark.sparkContext.accumulator({}, SumParam())
    combining = combine is not None and bool(plan.split)
    combine_group: dict[int, int] | None = None
    stage_schema = out_schema
    if combining:
        from pyspark.sql.types import LongType, StructField, StructType

        split_index = {split_key: n for n, split_key in enumerate(plan.split)}
        combine_group = {
            position: split_index[item.key] for position, item in enumerate(index) if item.shard != WHOLE
        }
        stage_schema = StructType([*out_schema.fields, StructField(COMBINE_COLUMN, LongType(), False)])
    keyed = with_slot_columns(keys.frame, plan, index, split_column, keys.columns)
    by_name = str(
        spark.conf.get("spark.sql.legacy.execution.pandas.groupedMap.assignColumnsByName", "true")
    ).lower() == "true"
    terms = PandasTerms.of(spark)
    check = OutputCheck(out_schema.fieldNames(), by_name)
    call = make_call(func, form, keys.columns, keys.hidden, check, terms, tasks, items, waits, combine_group)
    # One exchange realises the plan; each task sorts its rows by item (an int: the keys were
    # compared once, on the map side) and `grouped_map` cuts the items out in Python.
    frame = (
        keyed.repartition(slots, SLOT_COLUMN)
        .sortWithinPartitions(ITEM_COLUMN)
        .drop(SLOT_COLUMN)
        .mapInArrow(
            grouped_map(call, keys.columns, terms, stage_schema, form.iterator, code_name(func)), stage_schema
        )
    )
    if combining and combine is not None:
        merge = make_merge(combine, out_schema.fieldNames(), plan.split, code_name(combine))
        frame = frame.groupBy(COMBINE_COLUMN).applyInPandas(merge, out_schema)
    result = BalancedApply(
        frame=frame, plan=plan, _tasks=tasks, _items=items, _waits=waits, _index=index, _store=plan_store
    )
    if plan_store is not None:
        plan_store.save_plan(plan)
        hold_pending(plan_store, result)
    return result
