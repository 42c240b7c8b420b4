"""`balanced_apply`: `df.groupBy(key).applyInPandas(func, schema)` with keys placed by measured cost.

Spark places a grouped map's keys by hash, so one heavy key (or a task that drew many small ones)
becomes a straggler, and AQE splits skewed joins, never groups. Here the keys are counted first,
weighted by rows or by the seconds their calls took last time (`PlanStore`), and placed on slots
by `rebalancer.balance`; each row gets an int slot key that Spark's hash partitioner sends exactly
to its slot (`slots.partition_keys`), so one `repartition(n, slot key)` realises the plan and the
grouping reuses that partitioning. With `split_by`, a key heavier than total/partitions is split
into shards by a hash of that column; `combine` merges a split key's shard outputs.
"""

from __future__ import annotations

import datetime as dt
import decimal
import inspect
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pyspark.accumulators import AccumulatorParam

from rebalancer.pipeline.handler import TaskStatsParam, task_stats
from rebalancer.pipeline.lookup import constant_array, lookup_by_bucket
from rebalancer.pipeline.session import default_parallelism, is_connect
from rebalancer.pipeline.slots import (
    SHARD_BUCKETS,
    WHOLE,
    hashed_slot_key,
    pack_shards,
    partition_keys,
    place,
)

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

COSTS = ("rows", "seconds")
# Columns added for the grouped map; a user's frame may not use names with this prefix.
RESERVED_PREFIX = "__rebalancer_"
SLOT_COLUMN = "__rebalancer_slot"
ITEM_COLUMN = "__rebalancer_item"
COMBINE_COLUMN = "__rebalancer_combine"
# Plans of up to this many items (keys and shards) find a row's item in a perfect hash of constant
# arrays (a few hundred KB of plan at most); larger ones join a broadcast table, which scales.
LOOKUP_ITEMS = 10_000
_NULL_BITS = 30  # key columns whose nulls an unseen key's item records (see `_with_slot_columns`)
STORE_VERSION = 1

Key = tuple[Any, ...]


class ApplyItem(NamedTuple):
    """What the planner places: a whole key (shard WHOLE) or one `split_by` shard of a heavy key."""

    key: Key
    shard: int = WHOLE


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
                {"key": encode_key(item.key), "shard": _shard_json(item.shard), "from": old, "to": new}
                for item, old, new in self.moves
            ],
            "placements": len(self.placements),
            "skipped": self.skipped,
        }


@dataclass(frozen=True)
class TaskStats:
    """Per task (= slot): rows, seconds from its start to its last call's end, calls. A task starts
    when its Python worker receives the function, so its seconds include reading and sorting its rows.

    Seconds are `own_clock` seconds: wall time less the time the task's Python worker waited for a
    CPU, so on an oversubscribed machine they show the task's work rather than its neighbours'.
    """

    rows: list[int]
    seconds: list[float]
    calls: list[int]


# --- keys in JSON -------------------------------------------------------------------------------


def _shard_json(shard: int) -> int | None:
    return None if shard == WHOLE else shard


def _encode_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, dt.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"date": value.isoformat()}
    if isinstance(value, decimal.Decimal):
        return {"decimal": str(value)}
    if isinstance(value, bytes | bytearray):
        return {"bytes": bytes(value).hex()}
    raise TypeError(f"a key of type {type(value).__name__} cannot be stored")


_DECODERS: dict[str, Callable[[str], Any]] = {
    "float": float,
    "datetime": dt.datetime.fromisoformat,
    "date": dt.date.fromisoformat,
    "decimal": decimal.Decimal,
    "bytes": bytes.fromhex,
}


def _decode_value(value: Any) -> Any:
    """A key value as `_encode_value` stored it; ValueError for anything it never writes."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if not isinstance(value, dict) or len(value) != 1:
        raise ValueError(f"not a stored key value: {value!r}")
    ((tag, text),) = value.items()
    decoder = _DECODERS.get(tag)
    if decoder is None:
        raise ValueError(f"unknown value tag {tag!r} in {value!r}")
    if not isinstance(text, str):
        raise ValueError(f"a {tag} value is stored as text, got {value!r}")
    try:
        return decoder(text)
    except (ValueError, decimal.InvalidOperation) as exc:
        raise ValueError(f"cannot read {value!r}: {exc}") from None


def encode_key(key: Key) -> list[Any]:
    return [_encode_value(value) for value in key]


def decode_key(values: Sequence[Any]) -> Key:
    return tuple(_decode_value(value) for value in values)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _stored_key_problem(where: str, values: Any, width: int) -> str | None:
    if not isinstance(values, list) or len(values) != width:
        return f"{where}: key must be a list of {width} values, got {values!r}"
    try:
        decode_key(values)
    except ValueError as exc:
        return f"{where}: {exc}"
    return None


def _store_problem(data: Any) -> str | None:
    """Why a store of this version cannot be used (None when it can): everything `previous_owner`,
    `key_costs` and `save_plan` read is checked here, once per change of the file, so a damaged
    file is ignored as a whole rather than failing in one of them."""
    if not isinstance(data, dict):
        return f"expected a JSON object, got {type(data).__name__}"
    columns = data.get("key")
    if not isinstance(columns, list) or not columns or not all(isinstance(name, str) for name in columns):
        return f"key must be a list of column names, got {columns!r}"
    partitions = data.get("partitions")
    if partitions is not None and (not _count(partitions) or partitions < 1):
        return f"partitions must be an int >= 1, got {partitions!r}"
    items, measured = data.get("items", []), data.get("measured", [])
    for name, rows in (("items", items), ("measured", measured)):
        if not isinstance(rows, list):
            return f"{name} must be a list, got {type(rows).__name__}"
        for n, row in enumerate(rows):
            if not isinstance(row, dict):
                return f"{name}[{n}] must be an object, got {row!r}"
    for n, row in enumerate(items):
        missing = sorted({"key", "shard", "slot"} - set(row))
        if missing:
            return f"items[{n}] has no {', '.join(missing)}: {row!r}"
        problem = _stored_key_problem(f"items[{n}]", row["key"], len(columns))
        if problem:
            return problem
        if row["shard"] is not None and not _count(row["shard"]):
            return f"items[{n}]: shard must be null or an int >= 0, got {row['shard']!r}"
        slot = row["slot"]
        if not _count(slot) or (partitions is not None and slot >= partitions):
            return f"items[{n}]: slot must be an int in [0, {partitions}), got {slot!r}"
    for n, row in enumerate(measured):
        missing = sorted({"key", "rows", "seconds", "calls"} - set(row))
        if missing:
            return f"measured[{n}] has no {', '.join(missing)}: {row!r}"
        problem = _stored_key_problem(f"measured[{n}]", row["key"], len(columns))
        if problem:
            return problem
        seconds = row["seconds"]
        if not (_count(row["rows"]) and _count(row["calls"])) or not (
            isinstance(seconds, int | float) and not isinstance(seconds, bool) and 0 <= seconds < math.inf
        ):
            return f"measured[{n}]: rows and calls must be ints >= 0 and seconds a number >= 0: {row!r}"
    return None


# --- the store ----------------------------------------------------------------------------------


@dataclass
class KeyCost:
    rows: int
    seconds: float
    calls: int


class PlanStore:
    """A directory holding the last plan (for stickiness) and the seconds each key took (for cost).

    `balanced_apply(store=…)` reads it to plan and writes the new plan into it at once; the
    measurements of a run are added after its action, when `task_stats()` is called or when the
    next `balanced_apply` with a store at the same path starts, whichever comes first.
    """

    FILE = "plan.json"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        # The last state read or written, and the file's stat then: one parse per change of the
        # file, where one balanced_apply reads the state three times and a run's keys are thousands.
        # None for a state that was ignored: a damaged file gets one warning, not one per read.
        self._cached: tuple[tuple[int, int, int], dict[str, Any] | None] | None = None

    def __repr__(self) -> str:
        return f"PlanStore({str(self.path)!r})"

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            stat = (self.path / self.FILE).stat()
        except OSError:
            return None
        return (stat.st_ino, stat.st_mtime_ns, stat.st_size)

    def load(self) -> dict[str, Any] | None:
        """The stored state, or None when there is none, it was written by another version, or it
        cannot be read or used (one warning naming the file; the next plan is made afresh).

        The state is shared with the cache: callers build new dicts rather than change it."""
        stamp = self._stamp()
        if stamp is not None and self._cached is not None and self._cached[0] == stamp:
            return self._cached[1]
        file = self.path / self.FILE
        try:
            data = json.loads(file.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            problem: str | None = f"{type(exc).__name__}: {exc}"
        else:
            if isinstance(data, dict) and data.get("version") != STORE_VERSION:
                return None  # another version's store: not damaged, just not ours to read
            problem = _store_problem(data)
        if problem is not None:
            log.warning("ignoring the plan store %s, which cannot be used: %s", file, problem)
            data = None
        if stamp is not None:
            self._cached = (stamp, data)
        return data

    def previous_owner(self, key_columns: list[str], partitions: int) -> dict[ApplyItem, int]:
        data = self.load()
        if not data or data.get("key") != key_columns or data.get("partitions") != partitions:
            return {}
        return {
            ApplyItem(decode_key(row["key"]), WHOLE if row["shard"] is None else int(row["shard"])): int(
                row["slot"]
            )
            for row in data.get("items", [])
        }

    def key_costs(self, key_columns: list[str]) -> dict[Key, KeyCost]:
        """Rows, seconds and calls per key measured by the last run that recorded any."""
        data = self.load()
        if not data or data.get("key") != key_columns:
            return {}
        return {
            decode_key(row["key"]): KeyCost(int(row["rows"]), float(row["seconds"]), int(row["calls"]))
            for row in data.get("measured", [])
        }

    def save_plan(self, plan: ApplyPlan) -> None:
        data = dict(self.load() or {})
        if data.get("key") != plan.key_columns:
            data = {}
        storable = [item for item in plan.owner if _storable(item.key)]
        data.update(
            {
                "version": STORE_VERSION,
                "key": plan.key_columns,
                "partitions": plan.partitions,
                "cost": plan.cost,
                "items": [
                    {"key": encode_key(item.key), "shard": _shard_json(item.shard), "slot": plan.owner[item]}
                    for item in storable
                ],
            }
        )
        data.setdefault("measured", [])
        self._write(data)

    def save_measurements(self, key_columns: list[str], costs: Mapping[Key, KeyCost]) -> None:
        data = dict(self.load() or {"version": STORE_VERSION, "key": key_columns, "items": []})
        data["measured"] = [
            {
                "key": encode_key(key),
                "rows": cost.rows,
                "seconds": round(cost.seconds, 6),
                "calls": cost.calls,
            }
            for key, cost in costs.items()
            if _storable(key)
        ]
        self._write(data)

    def _write(self, data: dict[str, Any]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        target = self.path / self.FILE
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(json.dumps(data, separators=(",", ":")) + "\n")  # compact: C's fast encoder
        tmp.replace(target)
        stamp = self._stamp()
        self._cached = None if stamp is None else (stamp, data)


def _storable(key: Key) -> bool:
    try:
        encode_key(key)
    except TypeError:
        return False
    return True


# Results whose measurements are not in their store yet, by store path; see PlanStore.
_pending: dict[Path, BalancedApply] = {}
_pending_lock = threading.Lock()


def _flush_pending(store: PlanStore) -> None:
    with _pending_lock:
        result = _pending.pop(store.path.resolve(), None)
    if result is not None:
        result.record()


# --- accumulators -------------------------------------------------------------------------------


class SumParam(AccumulatorParam):
    """Merges {item index: [rows, seconds, calls]} by adding."""

    def zero(self, value: dict[int, list[float]]) -> dict[int, list[float]]:
        return {}

    def addInPlace(
        self, value1: dict[int, list[float]], value2: dict[int, list[float]]
    ) -> dict[int, list[float]]:
        for index, numbers in value2.items():
            old = value1.get(index)
            value1[index] = list(numbers) if old is None else [a + b for a, b in zip(old, numbers)]
        return value1


_SCHEDSTAT = "/proc/thread-self/schedstat"
_schedstat = threading.local()  # per thread: its open schedstat file and the last value read


def queued_seconds() -> float:
    """Seconds this thread has been runnable but waiting for a CPU (Linux's schedstat); 0.0 elsewhere.

    The file stays open per thread (and process: a forked worker opens its own) and is re-read in
    place, a tenth of the cost of opening it per call. A read that fails gives the last value read,
    never 0.0 after a good one: a clock that lost a thread's whole queued time would jump.
    """
    state = _schedstat.__dict__
    try:
        handle = state.get("handle")
        if handle is None or state.get("opened") != (os.getpid(), _SCHEDSTAT):
            if handle is not None:
                handle.close()
            handle = open(_SCHEDSTAT, "rb", buffering=0)
            state["handle"], state["opened"] = handle, (os.getpid(), _SCHEDSTAT)
        value = int(os.pread(handle.fileno(), 256, 0).split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return float(state.get("last", 0.0))
    state["last"] = value
    return value


def own_clock() -> float:
    """Monotonic seconds less the time spent waiting for a CPU: how long work would take on a core
    of its own. On a shared or oversubscribed executor, wall time also measures the neighbours'
    load, which changes between runs; a plan weighted by it would chase that noise. Monotonic, so
    a step of the system clock cannot shorten or stretch a call."""
    return time.monotonic() - queued_seconds()


class TaskClock:
    """When this task's Python side began (`own_clock`): set when the grouped-map function is unpickled.

    Spark sends a task's function before its rows, so the time from here to the first call is the
    task's shuffle read and sort, which no call is charged with (see `_make_call`).
    """

    def __init__(self) -> None:
        self.started = own_clock()
        self._begun: set[int] = set()

    def __reduce__(self) -> tuple[Callable[[], TaskClock], tuple[()]]:
        return TaskClock, ()

    def begin(self, task: int, call_start: float) -> float | None:
        """The task's start if this call (starting at `call_start`) is the task's first, else None:
        a task's time runs from its start (reading and sorting its rows), not from its first call."""
        if task in self._begun:
            return None
        self._begun.add(task)
        return min(call_start, self.started)


# --- the result ---------------------------------------------------------------------------------


@dataclass
class BalancedApply:
    """What `balanced_apply` returns: the lazy frame, the plan it follows, and its task stats."""

    frame: DataFrame
    plan: ApplyPlan
    _tasks: Any = field(repr=False, default=None)
    _items: Any = field(repr=False, default=None)
    _waits: Any = field(repr=False, default=None)
    _index: list[ApplyItem] = field(repr=False, default_factory=list)
    _store: PlanStore | None = field(repr=False, default=None)

    @property
    def stats_available(self) -> bool:
        """False on Spark Connect, which has no accumulators."""
        return self._tasks is not None

    def task_stats(self) -> TaskStats:
        """Rows, seconds and calls per task, after an action ran `frame` (zeros before).

        Also records the measurements into the store, so the next `cost="seconds"` plan uses them.
        """
        if self._tasks is None:
            raise RuntimeError("task stats are unavailable on Spark Connect (no accumulators)")
        rows, seconds = task_stats(self._tasks.value, self.plan.partitions)
        calls = [0] * self.plan.partitions
        for pid, numbers in self._tasks.value.items():
            if 0 <= pid < self.plan.partitions:
                calls[pid] = int(numbers[4])
        self.record()
        return TaskStats(rows=rows, seconds=seconds, calls=calls)

    def key_costs(self) -> dict[Key, KeyCost]:
        """Rows, seconds and calls per key measured by the action (empty before it ran).

        A task's wait before its first call is part per task (starting it: the same on every
        slot, whatever it holds) and part per row (reading and sorting its rows). The per-row rate
        is fitted across the tasks (`wait_per_row`), and each key is charged its rows at that rate.
        """
        measured = dict(self._items.value) if self._items is not None else {}
        task_rows: dict[int, float] = {}
        for index, (rows, _seconds, _calls) in measured.items():
            slot = self.plan.owner[self._index[index]]
            task_rows[slot] = task_rows.get(slot, 0) + rows
        waits = {slot: value[0] for slot, value in (self._waits.value if self._waits is not None else {}).items()}
        rate = wait_per_row(task_rows, waits)
        totals: dict[Key, list[float]] = {}
        for index, (rows, seconds, calls) in measured.items():
            share = rate * rows
            total = totals.setdefault(self._index[index].key, [0, 0.0, 0])
            total[0] += rows
            total[1] += seconds + share
            total[2] += calls
        costs = {
            key: KeyCost(int(rows), float(seconds), int(calls))
            for key, (rows, seconds, calls) in totals.items()
        }
        return costs

    def record(self) -> None:
        """Write this run's per-key seconds into the store (nothing if the action has not run)."""
        if self._store is None:
            return
        with _pending_lock:
            if _pending.get(self._store.path.resolve()) is self:
                del _pending[self._store.path.resolve()]
        costs = self.key_costs()
        if costs:
            self._store.save_measurements(self.plan.key_columns, costs)


def wait_per_row(task_rows: Mapping[int, float], waits: Mapping[int, float]) -> float:
    """Seconds of a task's wait before its first call per row it holds: the slope of a least-squares
    line through (rows, wait) over the tasks, whose intercept is the per-task part.

    With fewer than three tasks, or rows too alike to fit a slope, or a slope below zero, the wait is
    taken as all per row: the tasks' waits over their rows.
    """
    points = [(float(task_rows[slot]), float(wait)) for slot, wait in waits.items() if task_rows.get(slot)]
    if not points:
        return 0.0
    total_rows = sum(rows for rows, _ in points)
    through_origin = sum(wait for _, wait in points) / total_rows
    if len(points) < 3:
        return through_origin
    mean_rows = total_rows / len(points)
    mean_wait = sum(wait for _, wait in points) / len(points)
    spread = sum((rows - mean_rows) ** 2 for rows, _ in points)
    if spread <= 1e-9 * mean_rows * mean_rows * len(points):
        return through_origin
    slope = sum((rows - mean_rows) * (wait - mean_wait) for rows, wait in points) / spread
    if slope < 0:
        return through_origin
    if mean_wait - slope * mean_rows < 0:  # no per-task part: the line must not start below zero
        return through_origin
    return slope


# --- planning -----------------------------------------------------------------------------------


def _key_weights(counts: Mapping[Key, int], cost: str, measured: Mapping[Key, KeyCost]) -> dict[Key, float]:
    """rows: the key's rows. seconds: the seconds the key's calls took last run; a key never
    measured gets its rows times the last run's per-row rate (its seconds over its rows)."""
    if cost == "rows" or not measured:
        return {key: float(rows) for key, rows in counts.items()}
    total_rows = sum(c.rows for c in measured.values())
    rate = sum(c.seconds for c in measured.values()) / total_rows if total_rows else 0.0
    weights = {}
    for key, rows in counts.items():
        seen = measured.get(key)
        weights[key] = seen.seconds if seen is not None else rows * rate
    return weights


def _shard_counts(
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

    A key `_shard_counts` gives more than one shard is split (if it has bucket counts), its buckets
    packed into the shards by rows.
    """
    weights, shard_counts = _shard_counts(counts, partitions, cost, measured or {})
    items: dict[ApplyItem, float] = {}
    item_rows: dict[ApplyItem, int] = {}
    split: list[Key] = []
    shard_of: dict[Key, dict[int, int]] = {}
    for key, rows in counts.items():
        weight = weights[key]
        buckets = bucket_counts.get(key)
        shards = shard_counts[key]
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


# --- the call -----------------------------------------------------------------------------------


def _check_arguments(
    df: DataFrame,
    key_columns: list[str],
    func: Any,
    partitions: int | None,
    split_by: str | None,
    combine: Any,
    cost: str,
    max_moves: int | None,
) -> None:
    columns = set(df.columns)
    for name in key_columns:
        if name not in columns:
            raise ValueError(f"key: no column {name!r} in the frame (columns: {', '.join(df.columns)})")
    if not key_columns:
        raise ValueError("key: at least one column is needed, got none")
    if split_by is not None and split_by not in columns:
        raise ValueError(f"split_by: no column {split_by!r} in the frame (columns: {', '.join(df.columns)})")
    if split_by is not None and split_by in key_columns:
        raise ValueError(f"split_by: {split_by!r} is a key column; splitting by it changes nothing")
    if partitions is not None and (
        isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1
    ):
        raise ValueError(f"partitions must be an int >= 1, got {partitions!r}")
    if cost not in COSTS:
        raise ValueError(f"cost must be one of {', '.join(COSTS)}, got {cost!r}")
    if not callable(func):
        raise ValueError(f"func must be callable, got {func!r}")
    if combine is not None and not callable(combine):
        raise ValueError(f"combine must be callable, got {combine!r}")
    if max_moves is not None and (
        isinstance(max_moves, bool) or not isinstance(max_moves, int) or max_moves < 0
    ):
        raise ValueError(f"max_moves must be an int >= 0, got {max_moves!r}")
    reserved = sorted(name for name in columns if name.startswith(RESERVED_PREFIX))
    if reserved:
        raise ValueError(f"df: column {reserved[0]!r} is reserved by balanced_apply (prefix {RESERVED_PREFIX!r})")


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


def _takes_key(func: Callable[..., Any]) -> bool:
    """applyInPandas' convention: a two-argument func gets the group's key first."""
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) == 2


def _count_keys(df: DataFrame, key_columns: list[str]) -> dict[Key, int]:
    """Rows per key: one pass over `df`, reading the key columns only."""
    return {tuple(row[:-1]): int(row[-1]) for row in df.groupBy(*key_columns).count().collect()}


def _count_buckets(
    df: DataFrame, key_columns: list[str], split_by: str, keys: list[Key]
) -> dict[Key, dict[int, int]]:
    """Rows per `split_by` bucket of each of `keys` (those heavy enough to split): a second pass
    over `df`, run only when such keys exist: a plan of whole keys reads the key columns alone.
    """
    from pyspark.sql import functions as F

    table, names = _key_table(df, key_columns, [(key, ()) for key in keys], [])
    heavy = df.join(F.broadcast(table), _same_key(df, table, key_columns, names, keys), "left_semi")
    bucket = F.pmod(F.hash(F.col(split_by)), F.lit(SHARD_BUCKETS)).alias(ITEM_COLUMN)
    buckets: dict[Key, dict[int, int]] = {}
    width = len(key_columns)
    for row in heavy.groupBy(*key_columns, bucket).count().collect():
        buckets.setdefault(tuple(row[:width]), {})[int(row[-2])] = int(row[-1])
    return buckets


def _key_table(
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


def _same_key(
    df: DataFrame, table: DataFrame, key_columns: list[str], names: list[str], keys: Sequence[Key]
) -> Column:
    """The join condition on the key columns: plain equality unless a key in the table has a null
    (null-safe equality hashes an extra is-null flag per column)."""
    null_safe = any(value is None for key in keys for value in key)
    condition: Column | None = None
    for name, table_name in zip(key_columns, names):
        same = df[name].eqNullSafe(table[table_name]) if null_safe else df[name] == table[table_name]
        condition = same if condition is None else condition & same
    assert condition is not None
    return condition


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
    the grouping in Python (`_unseen_groups`) but for this."""
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


def _with_slot_columns(
    df: DataFrame, plan: ApplyPlan, index: list[ApplyItem], split_by: str | None
) -> DataFrame:
    """`df` plus the slot key (an int Spark hashes to the planned slot) and the item index.

    A key of one plain string column is looked up per row in a perfect hash (`lookup.PerfectHash`:
    constant arrays, no join and no broadcast job); other keys, or more than LOOKUP_ITEMS items,
    join a broadcast table of the items.
    A whole key gives its item; a split key gives its shard by the row's `split_by` bucket.
    """
    if _by_lookup(df, plan.key_columns, len(index)):
        return _with_slot_columns_by_lookup(df, plan, index, split_by)
    return _with_slot_columns_by_join(df, plan, index, split_by)


def _with_slot_columns_by_lookup(
    df: DataFrame, plan: ApplyPlan, index: list[ApplyItem], split_by: str | None
) -> DataFrame:
    """`_with_slot_columns` for one string key column, by `lookup.lookup_by_bucket`: a whole key
    gives its item, a split key the item of the row's `split_by` bucket (all buckets are filled)."""
    from pyspark.sql import functions as F

    (name,) = plan.key_columns
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


def _with_slot_columns_by_join(
    df: DataFrame, plan: ApplyPlan, index: list[ApplyItem], split_by: str | None
) -> DataFrame:
    """`_with_slot_columns` for any key: the item table is broadcast and joined on the key, a hashed
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
    items, names = _key_table(df, plan.key_columns, rows, [bucket, slot, item_index])
    table = F.broadcast(items)
    condition = _same_key(df, table, plan.key_columns, names, [item.key for item in index])
    if split_by and plan.split:
        own_bucket = F.pmod(F.hash(df[split_by]), F.lit(SHARD_BUCKETS))
        condition = condition & ((table[bucket] == -1) | (table[bucket] == own_bucket))
    hashed = F.hash(*[df[name] for name in plan.key_columns])
    return df.join(table, condition, "left").select(
        *[df[name] for name in df.columns],
        F.coalesce(table[slot], hashed_slot_key(hashed, keys)).cast("int").alias(SLOT_COLUMN),
        F.coalesce(table[item_index], _unplanned_item(df, plan.key_columns)).cast("int").alias(ITEM_COLUMN),
    )


class OutputCheck(NamedTuple):
    """How a grouped map's output must look: applyInPandas' checks, done per call here because the
    outputs of many calls leave the worker together (`_grouped_map`)."""

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


def _make_call(
    func: Callable[..., Any],
    key_columns: list[str],
    check: OutputCheck,
    tasks: Any,
    items: Any,
    waits: Any,
    combine_group: Mapping[int, int] | None,
) -> Callable[[int, pd.DataFrame], tuple[Key, pd.DataFrame]]:
    """One group's call: `func` on a key's (or shard's) rows, timed, checked and reported; gives
    the key with the output, so that an output Arrow cannot take names its key (`_grouped_map`).

    A call's seconds run from the end of the task's previous call, so the cost paid outside `func`
    for a group (Arrow to pandas, cutting the group out of its batches) is charged to the key that
    caused it. The wait before a task's first call goes to `waits`, to be shared by rows
    (`BalancedApply.key_costs`). All of it is measured on `own_clock`, the task stats too.
    """
    from pyspark import TaskContext
    from pyspark.errors import PySparkException

    takes_key = _takes_key(func)
    clock = TaskClock()  # unpickled afresh, and so restarted, by every task
    last_end: dict[int, float] = {}

    def call(item: int, data: pd.DataFrame) -> tuple[Key, pd.DataFrame]:
        own_start = own_clock()
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
        own_end = own_clock()
        since = last_end.get(pid, own_start)
        last_end[pid] = own_end
        begun = clock.begin(pid, own_start)
        task_start = own_start if begun is None else begun
        if begun is not None and waits is not None:
            waits.add({pid: [own_start - begun]})
        if tasks is not None:
            tasks.add({pid: [len(data), task_start, own_end, own_end - own_start, 1]})
        if items is not None and item >= 0:
            items.add({item: [len(data), max(0.0, own_end - since), 1]})
        if combine_group is not None:
            out = out.copy()
            group = combine_group.get(item)
            out[COMBINE_COLUMN] = group if group is not None else -1 - max(pid, 0)
        return key, out

    return call


class PandasTerms(NamedTuple):
    """The session settings by which applyInPandas turns a group's Arrow rows into pandas and its
    output back into Arrow (the confs pyspark's worker reads), read when `balanced_apply` is called."""

    timezone: str
    prefer_int_ext_dtype: bool  # spark.sql.execution.pythonUDF.pandas.preferIntExtensionDtype
    safecheck: bool  # spark.sql.execution.pandas.convertToArrowArraySafely
    large_var_types: bool  # spark.sql.execution.arrow.useLargeVarTypes
    int_to_decimal: bool  # spark.sql.execution.pythonUDF.pandas.intToDecimalCoercionEnabled

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


def _unseen_groups(table: pa.Table, terms: PandasTerms, key_columns: list[str]) -> list[pd.DataFrame]:
    """Rows of keys the plan never saw, one frame per key, grouped as Spark groups them: nulls
    together, NaNs together (the item already tells null from NaN, see `_with_slot_columns`).
    Each key's rows are converted on their own, as applyInPandas converts a group."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    keys = terms.to_pandas(table.select(key_columns))
    try:
        codes = keys.groupby(key_columns, dropna=False, sort=False).ngroup().to_numpy()
    except TypeError:  # unhashable values (a struct key arrives as a dict): group by their text
        text = pd.Series([repr(tuple(row)) for row in keys.itertuples(index=False)])
        codes = pd.factorize(text)[0]
    order = np.argsort(codes, kind="stable")
    cuts = np.flatnonzero(np.diff(codes[order])) + 1
    return [terms.to_pandas(table.take(pa.array(positions))) for positions in np.split(order, cuts)]


OUTPUT_ROWS = 10_000  # rows the grouped map gathers from its calls before converting them to Arrow


def _grouped_map(
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
            for group in _unseen_groups(table, terms, key_columns):
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


def _make_merge(combine: Callable[..., Any], columns: list[str]) -> Callable[[pd.DataFrame], pd.DataFrame]:
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


def balanced_apply(
    df: DataFrame,
    key: str | Sequence[str],
    func: Callable[..., pd.DataFrame],
    schema: Any,
    partitions: int | None = None,
    split_by: str | None = None,
    combine: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
    cost: str = "rows",
    store: PlanStore | str | Path | None = None,
    max_moves: int | None = None,
) -> BalancedApply:
    """`df.groupBy(key).applyInPandas(func, schema)`, with keys placed on tasks by measured cost.

    Runs a counting job on `df` now (cache `df` if it is costly to compute); `result.frame` stays
    lazy. `func` gets a key's rows with `df`'s columns, or (key tuple, rows) if it takes two
    arguments, as with applyInPandas. See docs/pipeline.md for the contract of `split_by`/`combine`.
    """
    key_columns = [key] if isinstance(key, str) else list(key)
    _check_arguments(df, key_columns, func, partitions, split_by, combine, cost, max_moves)
    spark = df.sparkSession
    out_schema = parse_schema(schema)
    slots = partitions if partitions is not None else default_parallelism(spark)
    plan_store = store if isinstance(store, PlanStore) or store is None else PlanStore(store)
    if plan_store is not None:
        _flush_pending(plan_store)
    measured = plan_store.key_costs(key_columns) if plan_store is not None and cost == "seconds" else {}
    previous = plan_store.previous_owner(key_columns, slots) if plan_store is not None else {}
    counts = _count_keys(df, key_columns)
    buckets: dict[Key, dict[int, int]] = {}
    if split_by is not None and slots > 1:
        heavy = [k for k, n in _shard_counts(counts, slots, cost, measured)[1].items() if n > 1]
        if heavy:
            buckets = _count_buckets(df, key_columns, split_by, heavy)
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
    keyed = _with_slot_columns(df, plan, index, split_by)
    by_name = str(
        spark.conf.get("spark.sql.legacy.execution.pandas.groupedMap.assignColumnsByName", "true")
    ).lower() == "true"
    call = _make_call(
        func, key_columns, OutputCheck(out_schema.fieldNames(), by_name), tasks, items, waits, combine_group
    )
    terms = PandasTerms.of(spark)
    # One exchange realises the plan; each task sorts its rows by item (an int: the keys were
    # compared once, in the broadcast join) and `_grouped_map` cuts the items out in Python.
    frame = (
        keyed.repartition(slots, SLOT_COLUMN)
        .sortWithinPartitions(ITEM_COLUMN)
        .drop(SLOT_COLUMN)
        .mapInArrow(_grouped_map(call, key_columns, terms, stage_schema), stage_schema)
    )
    if combining and combine is not None:
        frame = frame.groupBy(COMBINE_COLUMN).applyInPandas(
            _make_merge(combine, out_schema.fieldNames()), out_schema
        )
    result = BalancedApply(
        frame=frame, plan=plan, _tasks=tasks, _items=items, _waits=waits, _index=index, _store=plan_store
    )
    if plan_store is not None:
        plan_store.save_plan(plan)
        with _pending_lock:
            _pending[plan_store.path.resolve()] = result
    return result
