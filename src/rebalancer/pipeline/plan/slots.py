"""Throughput-weighted slot plans for the grouped-map stage, and the keys that make Spark obey them.

Items are types, or for a type heavier than total/slots, its entity shards: an `Item` is the pair
(type, shard), with shard WHOLE for an unsplit type, so a shard never shares a namespace with type
names (a real type called `x#1` is not shard 1 of `x`). A shard holds entity buckets, bucket =
pmod(hash(entity), SHARD_BUCKETS). Groups (type, entity, minute) never span two shards, so a split
type still aggregates exactly.

Spark's hash partitioner sends a row to pmod(murmur3(key), n). For each slot we pick an int key that
lands exactly there; a `repartition(n, key)` then realises the plan with one shuffle and one task per
slot, and `groupBy(key)` reuses that partitioning instead of re-hashing.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from rebalancer.pipeline.plan.lookup import constant_array, lookup_by_bucket, murmur3_int

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

log = logging.getLogger(__name__)

SHARD_BUCKETS = 64
WHOLE = -1  # the shard of an item that is a whole type


def partition_keys(partitions: int) -> list[int]:
    """keys[slot] is the smallest non-negative int that Spark's hash partitioner sends to `slot`."""
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    keys: list[int | None] = [None] * partitions
    missing = partitions
    candidate = 0
    while missing:
        slot = murmur3_int(candidate) % partitions
        if keys[slot] is None:
            keys[slot] = candidate
            missing -= 1
        candidate += 1
    return [int(k) for k in keys if k is not None]


class Item(NamedTuple):
    """What the planner places: a whole type (shard WHOLE) or one entity shard of a split type."""

    type_name: str
    shard: int = WHOLE

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type_name, "shard": None if self.shard == WHOLE else self.shard}

    @classmethod
    def from_json(cls, payload: Mapping[str, Any]) -> Item:
        shard = payload.get("shard")
        return cls(str(payload["type"]), WHOLE if shard is None else int(shard))


def items_to_json(
    owner: Mapping[Item, int], counts: Mapping[Item, int] | None = None
) -> list[dict[str, Any]]:
    """[{type, shard, slot[, rows]}], sorted: JSON keys cannot be pairs."""
    rows = []
    for item, slot in sorted(owner.items()):
        row = {**item.to_json(), "slot": int(slot)}
        if counts is not None:
            row["rows"] = int(counts.get(item, 0))
        rows.append(row)
    return rows


def items_from_json(rows: Iterable[Mapping[str, Any]]) -> dict[Item, int]:
    return {Item.from_json(row): int(row["slot"]) for row in rows}


@dataclass
class SlotPlan:
    """Which slot each item goes to, and why."""

    partitions: int
    owner: dict[Item, int]
    counts: dict[Item, int]
    load_before: list[int]
    load_after: list[int]
    moves: list[tuple[Item, int, int]] = field(default_factory=list)
    sharded: list[str] = field(default_factory=list)
    skipped: str | None = None
    # type -> {entity bucket: shard}; a sharded type missing here has one shard per bucket.
    shard_of: dict[str, dict[int, int]] = field(default_factory=dict)

    def shard_buckets(self, type_name: str, shard: int) -> list[int]:
        mapping = self.shard_of.get(type_name)
        if mapping is None:
            return [shard]
        return sorted(bucket for bucket, s in mapping.items() if s == shard)

    def type_slots(self) -> dict[str, list[int]]:
        """type -> the slots holding it (one unless it was sharded)."""
        slots: dict[str, set[int]] = {}
        for item, slot in self.owner.items():
            slots.setdefault(item.type_name, set()).add(slot)
        return {name: sorted(values) for name, values in sorted(slots.items())}

    def to_json(self) -> dict[str, Any]:
        return {
            "partitions": self.partitions,
            "types": self.type_slots(),
            "items": items_to_json(self.owner, self.counts),
            "sharded": sorted(self.sharded),
            "shard_of": {
                t: {str(b): s for b, s in sorted(m.items())} for t, m in sorted(self.shard_of.items())
            },
            "load_before": self.load_before,
            "load": self.load_after,
            # A new item's first slot is a placement, not a move: `skipped` (the planner kept the
            # previous owners) never contradicts a list of placements.
            "placements": [{**item.to_json(), "to": new} for item, old, new in self.moves if old < 0],
            "moves": [
                {**item.to_json(), "from": old, "to": new} for item, old, new in self.moves if old >= 0
            ],
            "skipped": self.skipped,
        }


def plan_items(
    type_counts: Mapping[str, int], bucket_counts: Mapping[tuple[str, int], int], partitions: int
) -> tuple[dict[Item, int], list[str], dict[str, dict[int, int]]]:
    """Items and their counts: a type heavier than total/partitions is replaced by entity shards.

    A heavy type gets only as many shards as it needs, ceil(rows / (total / partitions)): each
    shard on its own slot costs one more handler call. Its entity buckets are packed into those
    shards with the same planner. Returns (items, sharded types, type -> {bucket: shard}).
    """

    total = sum(type_counts.values())
    bound = total / partitions if partitions else total
    items: dict[Item, int] = {}
    sharded: list[str] = []
    for type_name, count in type_counts.items():
        if partitions > 1 and count > bound:
            sharded.append(type_name)
        else:
            items[Item(type_name)] = int(count)
    shard_of: dict[str, dict[int, int]] = {}
    for type_name in sorted(sharded):
        buckets = {bucket: count for (name, bucket), count in bucket_counts.items() if name == type_name}
        mapping, loads = pack_shards(buckets, math.ceil(type_counts[type_name] / bound))
        shard_of[type_name] = mapping
        for shard, load in enumerate(loads):
            if load > 0:
                items[Item(type_name, shard)] = int(load)
    return items, sorted(sharded), shard_of


def pack_shards(bucket_rows: Mapping[int, int], shards: int) -> tuple[dict[int, int], list[int]]:
    """Pack hash buckets (bucket -> rows) into at most `shards` shards of near-equal rows.

    Returns ({bucket: shard}, rows per shard). Empty buckets are left out; never more shards
    than buckets, since each shard on its own slot costs one more handler call.
    """
    from rebalancer.balance import plan_rebalance

    buckets = sorted((bucket, int(rows)) for bucket, rows in bucket_rows.items() if rows > 0)
    if not buckets:
        return {}, []
    packed = plan_rebalance(
        [rows for _, rows in buckets], [-1] * len(buckets), min(len(buckets), max(shards, 1))
    )
    mapping = {bucket: int(shard) for (bucket, _), shard in zip(buckets, packed.owner)}
    return mapping, [int(load) for load in packed.load_after]


K = TypeVar("K", bound=Hashable)


@dataclass
class Placement(Generic[K]):
    """Where the planner put each item: `owner`, the moves against `previous`, and why it kept them."""

    owner: dict[K, int]
    current: dict[K, int]
    moves: list[tuple[K, int, int]]
    skipped: str | None


def place(
    weights: Mapping[K, float],
    partitions: int,
    previous: Mapping[K, int] | None = None,
    max_moves: int | None = None,
    extra: float = 0,
    order: Callable[[K], Any] = str,
) -> Placement[K]:
    """Place weighted items on `partitions` slots with rebalancer.balance, sticky to `previous`.

    The planner sees each item's weight plus `extra` (a fixed cost per item). Items are offered
    heaviest first, ties by `order(key)`, so the same input always gives the same plan. A previous owner
    outside 0..partitions-1 counts as none. Even a skipped plan places unowned (new) items.
    """
    from rebalancer.balance import plan_rebalance

    names = sorted(weights, key=lambda name: (-weights[name], order(name)))
    if not names:
        return Placement({}, {}, [], "no rows")
    throughput = [weights[name] + extra for name in names]
    if all(isinstance(value, int) for value in throughput):
        throughput = [int(value) for value in throughput]
    current = [int((previous or {}).get(name, -1)) for name in names]
    current = [slot if 0 <= slot < partitions else -1 for slot in current]
    plan = plan_rebalance(throughput, current, partitions, max_moves=max_moves)
    owner = [int(slot) for slot in plan.owner]
    unplaced = [names[i] for i, slot in enumerate(owner) if not 0 <= slot < partitions]
    if unplaced:
        raise RuntimeError(f"planner left {len(unplaced)} items unplaced, e.g. {unplaced[0]!r}")
    return Placement(
        owner=dict(zip(names, owner)),
        current=dict(zip(names, current)),
        moves=[(names[int(item)], int(old), int(new)) for item, old, new in plan.moves],
        skipped=plan.skipped,
    )


def make_plan(
    items: Mapping[Item, int],
    sharded: Sequence[str],
    partitions: int,
    previous: Mapping[Item, int] | None = None,
    max_moves: int | None = None,
    group_cost: int = 0,
    shard_of: Mapping[str, dict[int, int]] | None = None,
) -> SlotPlan:
    """Plan items onto `partitions` slots with rebalancer.balance, sticky to `previous` owners.

    The planner's throughput is an item's rows plus `group_cost`: the rows-equivalent of one more
    handler call (a grouped-map UDF pays a fixed cost per group). 0 balances rows alone. Loads in
    the result are in rows either way.
    """
    if group_cost < 0:
        raise ValueError(f"group_cost must be >= 0, got {group_cost}")
    placed = place(
        {item: int(rows) for item, rows in items.items()},
        partitions,
        previous,
        max_moves,
        group_cost,
        order=lambda item: item,
    )
    load_before = [0] * partitions
    load_after = [0] * partitions
    for item, new in placed.owner.items():
        old = placed.current[item]
        if old >= 0:
            load_before[old] += int(items[item])
        load_after[new] += int(items[item])
    return SlotPlan(
        partitions=partitions,
        owner=placed.owner,
        counts={item: int(items[item]) for item in placed.owner},
        load_before=load_before,
        load_after=load_after,
        moves=placed.moves,
        sharded=list(sharded),
        skipped=placed.skipped,
        shard_of=dict(shard_of or {}),
    )


def hash_plan(type_counts: Mapping[str, int], hash_slots: Mapping[str, int], partitions: int) -> SlotPlan:
    """Spark's own placement (pmod(hash(type), n)) in the same shape, for plan.json and the report."""
    load = [0] * partitions
    for type_name, count in type_counts.items():
        load[hash_slots[type_name]] += int(count)
    return SlotPlan(
        partitions=partitions,
        owner={Item(name): int(hash_slots[name]) for name in type_counts},
        counts={Item(name): int(c) for name, c in type_counts.items()},
        load_before=list(load),
        load_after=list(load),
    )


def hashed_slot_key(hashed: Column, keys: Sequence[int]) -> Column:
    """The slot key of the slot Spark's hash partitioner would choose for `hashed` (a `hash()`
    column): where rows the plan has not seen run."""
    from pyspark.sql import functions as F

    return F.element_at(constant_array(keys, "int"), (F.pmod(hashed, F.lit(len(keys))) + 1).cast("int"))


def with_slot_key(frame: DataFrame, plan: SlotPlan, name: str) -> DataFrame:
    """`frame` plus an int column `name`: the key Spark's hash partitioner sends to the row's slot.

    A perfect hash of the types (`lookup.lookup_by_bucket`: a per-row expression, no join, no
    shuffle) gives a whole type's slot key, or for a split type its entity bucket's.
    """
    from pyspark.sql import functions as F

    keys = partition_keys(plan.partitions)
    whole: dict[str | None, int] = {}
    split: dict[str | None, list[int | None]] = {t: [None] * SHARD_BUCKETS for t in plan.sharded}
    for item, slot in plan.owner.items():
        if item.type_name not in split:
            if item.shard == WHOLE:
                whole[item.type_name] = keys[slot]
        elif item.shard != WHOLE:
            for bucket in plan.shard_buckets(item.type_name, item.shard):
                split[item.type_name][bucket] = keys[slot]
    entry, type_hash = f"{name}__entry", f"{name}__type_hash"
    entity_bucket = F.pmod(F.hash("entity"), F.lit(SHARD_BUCKETS))
    keyed, found = lookup_by_bucket(
        frame.withColumn(type_hash, F.hash("type")), "type", type_hash, entry, whole, split, entity_bucket
    )
    # Types the plan has not seen (a stream's new types), and a split type's entity buckets the
    # counting never saw, fall back to Spark's hash of the type.
    fallback = hashed_slot_key(F.col(type_hash), keys)
    return keyed.withColumn(name, F.coalesce(found, fallback).cast("int")).drop(entry, type_hash)
