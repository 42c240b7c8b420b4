"""Each row's slot key and item: the column Spark's hash partitioner sends exactly to the planned
slot, and the index of the row's key (or shard) in the plan, by a perfect hash or a broadcast join."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from rebalancer.pipeline.apply._items import ITEM_COLUMN, SLOT_COLUMN, ApplyItem, Key
from rebalancer.pipeline.apply._key_plan import ApplyPlan, key_table, same_key
from rebalancer.pipeline.plan.lookup import constant_array, lookup_by_bucket
from rebalancer.pipeline.plan.slots import SHARD_BUCKETS, WHOLE, hashed_slot_key, partition_keys

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# Plans of up to this many items (keys and shards) find a row's item in a perfect hash of constant
# arrays (a few hundred KB of plan at most); larger ones join a broadcast table, which scales.
LOOKUP_ITEMS = 10_000
_NULL_BITS = 30  # key columns whose nulls an unseen key's item records (see `_unplanned_item`)


def _lightest_shards(plan: ApplyPlan, index: list[ApplyItem]) -> dict[Key, ApplyItem]:
    """Each split key's lightest shard: where its `split_by` buckets the counting never saw go (a
    frame that changed since), so `combine` still merges all of the key's outputs."""
    lightest: dict[Key, ApplyItem] = {}
    for item in index:
        if item.shard != WHOLE:
            best = lightest.get(item.key)
            if best is None or (plan.item_rows[item], item.shard) < (plan.item_rows[best], best.shard):
                lightest[item.key] = item
    return lightest


def _shard_buckets(plan: ApplyPlan, item: ApplyItem, lightest: Mapping[Key, ApplyItem]) -> list[int]:
    """The `split_by` buckets a split key's shard runs: those planned to it, and every bucket the
    counting never saw if it is the key's lightest shard."""
    seen = plan.shard_of[item.key]
    buckets = [b for b, shard in seen.items() if shard == item.shard]
    if lightest[item.key] == item:
        buckets.extend(b for b in range(SHARD_BUCKETS) if b not in seen)
    return buckets


def _unplanned_item(df: DataFrame, key_columns: list[str]) -> Column:
    """The item of a key the plan has not seen (a non-deterministic frame): -1 - (which key columns
    are null). Pandas shows a null double as NaN, so a null key and a NaN key would look alike to
    the grouping in Python (`_convert.unseen_groups`) but for this."""
    from pyspark.sql import functions as F

    nulls = F.lit(0)
    for bit, name in enumerate(key_columns[:_NULL_BITS]):
        nulls = nulls + F.when(df[name].isNull(), F.lit(1 << bit)).otherwise(F.lit(0))
    return F.lit(-1) - nulls


def _by_lookup(df: DataFrame, key_columns: list[str], items: int) -> bool:
    """One key column of strings compared byte by byte (no collation), what `PerfectHash` matches,
    and few enough items that its arrays stay small constants in the plan (LOOKUP_ITEMS)."""
    from pyspark.sql.types import StringType

    if len(key_columns) != 1 or items > LOOKUP_ITEMS:
        return False
    return bool(df.schema[key_columns[0]].dataType == StringType())  # a collated string differs


def with_slot_columns(
    df: DataFrame, plan: ApplyPlan, index: list[ApplyItem], split_by: str | None, columns: list[str]
) -> DataFrame:
    """`df` plus the slot key (an int Spark hashes to the planned slot) and the item index;
    `columns` are the key's columns in `df` (the plan names an expression key by its label).

    A key of one plain string column is looked up per row in a perfect hash (`lookup.PerfectHash`:
    constant arrays, no join and no broadcast job); other keys, or more than LOOKUP_ITEMS items,
    join a broadcast table of the items.
    A whole key gives its item; a split key gives its shard by the row's `split_by` bucket.
    """
    if _by_lookup(df, columns, len(index)):
        return _by_perfect_hash(df, plan, index, split_by, columns[0])
    return _by_join(df, plan, index, split_by, columns)


def _by_perfect_hash(
    df: DataFrame, plan: ApplyPlan, index: list[ApplyItem], split_by: str | None, name: str
) -> DataFrame:
    """`with_slot_columns` for one string key column, by `lookup.lookup_by_bucket`: a whole key
    gives its item, a split key the item of the row's `split_by` bucket (all buckets are filled)."""
    from pyspark.sql import functions as F

    keys = partition_keys(plan.partitions)
    lightest = _lightest_shards(plan, index)
    whole: dict[str | None, int] = {}
    split: dict[str | None, list[int | None]] = {}
    for position, item in enumerate(index):
        if item.shard == WHOLE:
            whole[item.key[0]] = position
        else:
            buckets = split.setdefault(item.key[0], [None] * SHARD_BUCKETS)
            for bucket in _shard_buckets(plan, item, lightest):
                buckets[bucket] = position
    hashed, entry = "__rebalancer_h", "__rebalancer_e"
    own_bucket = F.pmod(F.hash(F.col(split_by)), F.lit(SHARD_BUCKETS)) if split_by is not None else F.lit(0)
    keyed, found = lookup_by_bucket(
        df.withColumn(hashed, F.hash(df[name])), name, hashed, entry, whole, split, own_bucket
    )
    item_slot_keys = [keys[plan.owner[item]] for item in index]
    keyed = keyed.withColumn(ITEM_COLUMN, F.coalesce(found, _unplanned_item(keyed, [name])).cast("int"))
    slot_key = F.when(
        F.col(ITEM_COLUMN) >= 0,
        F.element_at(constant_array(item_slot_keys, "int"), F.col(ITEM_COLUMN) + 1),
    ).otherwise(hashed_slot_key(F.col(hashed), keys))
    return keyed.withColumn(SLOT_COLUMN, slot_key.cast("int")).drop(hashed, entry)


def _by_join(
    df: DataFrame, plan: ApplyPlan, index: list[ApplyItem], split_by: str | None, columns: list[str]
) -> DataFrame:
    """`with_slot_columns` for any key: the item table is broadcast and joined on the key, a hashed
    lookup that moves no rows between tasks. A whole key has one row (bucket -1); a split key one
    per `split_by` bucket, of which the row's own bucket is kept."""
    from pyspark.sql import functions as F

    keys = partition_keys(plan.partitions)
    lightest = _lightest_shards(plan, index)
    rows: list[tuple[Key, tuple[int, ...]]] = []
    for position, item in enumerate(index):
        slot_key = keys[plan.owner[item]]
        if item.shard == WHOLE:
            rows.append((item.key, (-1, slot_key, position)))
        else:
            rows.extend((item.key, (b, slot_key, position)) for b in _shard_buckets(plan, item, lightest))
    bucket, slot, item_index = "__rebalancer_b", "__rebalancer_s", "__rebalancer_i"
    items, names = key_table(df, columns, rows, [bucket, slot, item_index])
    table = F.broadcast(items)
    condition = same_key(df, table, columns, names, [item.key for item in index])
    if split_by and plan.split:
        own_bucket = F.pmod(F.hash(df[split_by]), F.lit(SHARD_BUCKETS))
        condition = condition & ((table[bucket] == -1) | (table[bucket] == own_bucket))
    hashed = F.hash(*[df[name] for name in columns]) if columns else F.lit(0)  # no key: one group
    return df.join(table, condition, "left").select(
        *[df[name] for name in df.columns],
        F.coalesce(table[slot], hashed_slot_key(hashed, keys)).cast("int").alias(SLOT_COLUMN),
        F.coalesce(table[item_index], _unplanned_item(df, columns)).cast("int").alias(ITEM_COLUMN),
    )
