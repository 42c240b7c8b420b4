"""The plan store: a directory keeping the last plan (for stickiness) and each key's measured
seconds (for `cost="seconds"`), checked as a whole when read so a damaged file is ignored once."""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from rebalancer.pipeline.apply._items import (
    LOGGER,
    ApplyItem,
    Key,
    decode_key,
    encode_key,
    shard_json,
    storable,
)
from rebalancer.pipeline.apply._key_plan import ApplyPlan, KeyCost
from rebalancer.pipeline.plan.slots import WHOLE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(LOGGER)

STORE_VERSION = 1


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
    if not isinstance(columns, list) or not all(isinstance(name, str) for name in columns):
        return f"key must be a list of column names (empty for no key), got {columns!r}"
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


def is_store_file(data: Any) -> bool:
    """Whether `data` is a plan store's file rather than the pipeline's plan.json, which shares its
    name: only a store names its key columns."""
    return isinstance(data, dict) and "key" in data and "version" in data


def _owner(data: Mapping[str, Any]) -> dict[ApplyItem, int]:
    return {
        ApplyItem(decode_key(row["key"]), WHOLE if row["shard"] is None else int(row["shard"])): int(row["slot"])
        for row in data.get("items", [])
    }


def stored_plan(data: Any) -> tuple[list[str], int | None, dict[ApplyItem, int]]:
    """A store file's key columns, partitions and item -> slot map, for a caller that asked for this
    store by name: a ValueError saying why it cannot be used, where `PlanStore.load` warns and goes on."""
    version = data.get("version") if isinstance(data, dict) else None
    if version != STORE_VERSION:
        raise ValueError(f"it is a plan store of version {version!r}; this rebalancer reads version {STORE_VERSION}")
    problem = _store_problem(data)
    if problem is not None:
        raise ValueError(problem)
    return list(data["key"]), data.get("partitions"), _owner(data)


def refuse_store_in_input(store: PlanStore, frame: DataFrame) -> None:
    """A store in the directory the frame reads (or under it) would put plan.json among the data:
    the next read of that directory fails on it, or reads it. Refused before anything is written;
    the directory is the innermost one holding every file the frame reads (Spark's inputFiles)."""
    folders = set()
    for uri in frame.inputFiles():
        parts = urlsplit(uri)
        if parts.scheme in ("", "file"):
            folders.add(os.path.dirname(unquote(parts.path)))
    if not folders:
        return  # not read from local files
    root = Path(os.path.commonpath(sorted(folders)))
    where = store.path.resolve()
    if where == root or root in where.parents:
        raise ValueError(
            f"store {store.path} is in the input directory {root} that the frame reads: its plan.json would "
            "be read as data: give a store outside it"
        )


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
        return _owner(data)

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
        kept = [item for item in plan.owner if storable(item.key)]
        data.update(
            {
                "version": STORE_VERSION,
                "key": plan.key_columns,
                "partitions": plan.partitions,
                "cost": plan.cost,
                "items": [
                    {"key": encode_key(item.key), "shard": shard_json(item.shard), "slot": plan.owner[item]}
                    for item in kept
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
            if storable(key)
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
