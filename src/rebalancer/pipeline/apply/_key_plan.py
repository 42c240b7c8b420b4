"""Counting and planning: rows per key (and per `split_by` bucket of the heavy ones), each key's
weight by rows or by measured seconds, and the plan that places keys and shards on slots."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rebalancer.pipeline.apply._items import ITEM_COLUMN, LOGGER, ApplyItem, Key, encode_key, shard_json
from rebalancer.pipeline.plan.slots import SHARD_BUCKETS, pack_shards, place

log = logging.getLogger(LOGGER)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


@dataclass
class KeyCost:
    rows: int
    seconds: float
    calls: int


@dataclass
class ApplyPlan:
    """Which slot each key (or shard) runs on, the load that gives each slot, and what changed.

    `load` is in the plan's cost unit (rows, or estimated seconds); `rows` is rows per slot either
    way. `moves` are items taken from the slot the stored plan gave them; `placements` are new items.
    """

    partitions: int
    key_columns: list[str]
    cost: str
    owner: dict[ApplyItem, int]
    weights: dict[ApplyItem, float]
    item_rows: dict[ApplyItem, int]
    load: list[float]
    rows: list[int]
    moves: list[tuple[ApplyItem, int, int]] = field(default_factory=list)
    placements: list[tuple[ApplyItem, int]] = field(default_factory=list)
    split: list[Key] = field(default_factory=list)
    shard_of: dict[Key, dict[int, int]] = field(default_factory=dict)
    skipped: str | None = None

    def slot_of(self, *key: Any) -> list[int]:
        """The slots that run `key` (one unless it was split)."""
        return sorted({slot for item, slot in self.owner.items() if item.key == tuple(key)})

    def to_json(self) -> dict[str, Any]:
        return {
            "partitions": self.partitions,
            "key": self.key_columns,
            "cost": self.cost,
            "load": [round(value, 6) for value in self.load],
            "rows": self.rows,
            "split": [encode_key(key) for key in self.split],
            "moves": [
                {"key": encode_key(item.key), "shard": shard_json(item.shard), "from": old, "to": new}
                for item, old, new in self.moves
            ],
            "placements": len(self.placements),
            "skipped": self.skipped,
        }


# --- counting -----------------------------------------------------------------------------------


def _hashable(value: Any) -> Any:
    """A key value as a dict key: an array key's list (also inside a struct) as a tuple, which
    Spark takes back for the array when the key table is built (`key_table`)."""
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, tuple) and any(isinstance(v, list | tuple) for v in value):
        return tuple(_hashable(v) for v in value)
    return value


def count_keys(df: DataFrame, key_columns: list[str]) -> dict[Key, int]:
    """Rows per key: one pass over `df`, reading the key columns only. No key columns is one key,
    (), of all rows, and none on an empty frame (a global count answers 0 there)."""
    rows = df.groupBy(*key_columns).count().collect()
    return {tuple(_hashable(value) for value in row[:-1]): int(row[-1]) for row in rows if int(row[-1])}


def count_buckets(
    df: DataFrame, key_columns: list[str], split_by: str, keys: list[Key]
) -> dict[Key, dict[int, int]]:
    """Rows per `split_by` bucket of each of `keys` (those heavy enough to split): a second pass
    over `df`, run only when such keys exist: a plan of whole keys reads the key columns alone.
    """
    from pyspark.sql import functions as F

    if key_columns:
        table, names = key_table(df, key_columns, [(key, ()) for key in keys], [])
        heavy = df.join(F.broadcast(table), same_key(df, table, key_columns, names, keys), "left_semi")
    else:  # no key: every row is of the one key
        heavy = df
    bucket = F.pmod(F.hash(F.col(split_by)), F.lit(SHARD_BUCKETS)).alias(ITEM_COLUMN)
    buckets: dict[Key, dict[int, int]] = {}
    width = len(key_columns)
    for row in heavy.groupBy(*key_columns, bucket).count().collect():
        buckets.setdefault(tuple(_hashable(value) for value in row[:width]), {})[int(row[-2])] = int(row[-1])
    return buckets


def key_table(
    df: DataFrame, key_columns: list[str], rows: list[tuple[Key, tuple[int, ...]]], extra: list[str]
) -> tuple[DataFrame, list[str]]:
    """A small frame of keys (typed as `df`'s key columns) with int columns `extra`, to broadcast."""
    from pyspark.sql.types import IntegerType, StructField, StructType

    key_fields = df.select(*key_columns).schema.fields
    names = [f"__rebalancer_k{i}" for i in range(len(key_fields))]
    schema = StructType(
        [StructField(name, f.dataType, True) for name, f in zip(names, key_fields)]
        + [StructField(name, IntegerType(), False) for name in extra]
    )
    table = df.sparkSession.createDataFrame([(*key, *values) for key, values in rows], schema)
    return table, names


def same_key(
    df: DataFrame, table: DataFrame, key_columns: list[str], names: list[str], keys: Sequence[Key]
) -> Column:
    """The join condition on the key columns: plain equality unless a key in the table has a null
    (null-safe equality hashes an extra is-null flag per column); true when there are none."""
    from pyspark.sql import functions as F

    null_safe = any(value is None for key in keys for value in key)
    condition: Column = F.lit(True)
    for n, (name, table_name) in enumerate(zip(key_columns, names)):
        same = df[name].eqNullSafe(table[table_name]) if null_safe else df[name] == table[table_name]
        condition = same if n == 0 else condition & same
    return condition


# --- planning -----------------------------------------------------------------------------------


def _key_weights(counts: Mapping[Key, int], cost: str, measured: Mapping[Key, KeyCost]) -> dict[Key, float]:
    """rows: the key's rows. seconds: the seconds the key's calls took last run; a key never
    measured gets its rows times the last run's per-row rate (its seconds over its rows). A run
    that measured no time at all (every call below the clock's resolution) weighs by rows: all
    zeros would say nothing about which keys cost more."""
    measured_seconds = sum(c.seconds for c in measured.values())
    if cost == "rows" or not measured or not measured_seconds > 0:
        if cost != "rows" and measured:
            log.info("balanced_apply: the store's %d keys took 0 s in all; weighing by rows", len(measured))
        return {key: float(rows) for key, rows in counts.items()}
    total_rows = sum(c.rows for c in measured.values())
    rate = measured_seconds / total_rows if total_rows else 0.0
    weights = {}
    for key, rows in counts.items():
        seen = measured.get(key)
        weights[key] = seen.seconds if seen is not None else rows * rate
    return weights


def shard_counts(
    counts: Mapping[Key, int], partitions: int, cost: str, measured: Mapping[Key, KeyCost]
) -> tuple[dict[Key, float], dict[Key, int]]:
    """Each key's weight, and the shards it would be split into given bucket counts (1: whole).

    A key heavier than total/partitions gets ceil(weight / bound) shards. By seconds, a key is also
    split at least as finely as by rows: its seconds were measured on shards of at most a slot's
    rows, and a per-key cost grows faster than its rows (sorts, windows), so larger shards would
    cost more than their share of the measurement.
    """
    weights = _key_weights(counts, cost, measured)
    total = sum(weights.values())
    bound = total / partitions if partitions else total
    total_rows = sum(counts.values())
    row_bound = total_rows / partitions if partitions else total_rows
    by_seconds = cost != "rows" and bool(measured)
    shards: dict[Key, int] = {}
    for key, rows in counts.items():
        count = math.ceil(weights[key] / bound) if bound else 1
        if by_seconds and row_bound:
            count = max(count, math.ceil(rows / row_bound))
        shards[key] = count
    return weights, shards


def plan_keys(
    counts: Mapping[Key, int],
    bucket_counts: Mapping[Key, Mapping[int, int]],
    partitions: int,
    key_columns: list[str],
    cost: str = "rows",
    measured: Mapping[Key, KeyCost] | None = None,
    previous: Mapping[ApplyItem, int] | None = None,
    max_moves: int | None = None,
) -> ApplyPlan:
    """The plan for keys with `counts` rows; a key in `bucket_counts` may be split by those buckets.

    A key `shard_counts` gives more than one shard is split (if it has bucket counts), its buckets
    packed into the shards by rows.
    """
    weights, shards_of = shard_counts(counts, partitions, cost, measured or {})
    items: dict[ApplyItem, float] = {}
    item_rows: dict[ApplyItem, int] = {}
    split: list[Key] = []
    shard_of: dict[Key, dict[int, int]] = {}
    for key, rows in counts.items():
        weight = weights[key]
        buckets = bucket_counts.get(key)
        shards = shards_of[key]
        if partitions > 1 and buckets and shards > 1 and len(buckets) > 1:
            mapping, shard_rows = pack_shards(buckets, shards)
            split.append(key)
            shard_of[key] = mapping
            for shard, part in enumerate(shard_rows):
                if part > 0:
                    item = ApplyItem(key, shard)
                    items[item] = weight * part / rows
                    item_rows[item] = part
        else:
            items[ApplyItem(key)] = weight
            item_rows[ApplyItem(key)] = int(rows)
    placed = place(items, partitions, previous, max_moves)
    load = [0.0] * partitions
    slot_rows = [0] * partitions
    for item, slot in placed.owner.items():
        load[slot] += items[item]
        slot_rows[slot] += item_rows[item]
    return ApplyPlan(
        partitions=partitions,
        key_columns=key_columns,
        cost=cost,
        owner=placed.owner,
        weights=items,
        item_rows=item_rows,
        load=load,
        rows=slot_rows,
        moves=[(item, old, new) for item, old, new in placed.moves if old >= 0],
        placements=[(item, new) for item, old, new in placed.moves if old < 0],
        split=split,
        shard_of=shard_of,
        skipped=placed.skipped,
    )
