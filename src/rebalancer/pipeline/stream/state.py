"""A stream's configuration, progress and state file: what survives a restart, checked when read."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rebalancer._secrets import masks_errors
from rebalancer.balance.metrics import max_over_median
from rebalancer.pipeline.checks import check_partitions, check_seconds
from rebalancer.pipeline.ingest.contract import SKEW_DIGITS, RowCounts
from rebalancer.pipeline.paths import OutputPath, write_json
from rebalancer.pipeline.plan.slots import (
    SlotPlan,
    items_from_json,
)
from rebalancer.pipeline.routing.handler_map import HandlerTotals, Routing
from rebalancer.pipeline.sinks.outputs import SinkSection


@dataclass(frozen=True)
class StreamConfig:
    partitions: int
    partitioning: str = "weighted"
    rebalance_every: int = 5
    max_moves: int | None = None
    max_batches: int | None = None
    files_per_batch: int = 1
    available_now: bool = False
    checkpoint: str | Path | None = None  # a local path or a Hadoop filesystem URI
    trigger_seconds: float = 2.0
    # Fault injection for tests: raise after this batch's outputs are written, before its state is.
    crash_after_batch: int | None = None

    def validate(self) -> None:
        """Counts are ints: a rebalance_every of nan or 1.5 was taken, and never re-planned. Each is
        checked by its `RunRequest` field's rule (`run_fields.SETTINGS`; partitions, which a stream
        cannot leave to the session, by `check_partitions`), named by this class's field, and stored
        as a plain int (numpy's ints are ints too)."""
        from rebalancer.pipeline.run_fields import SETTINGS, plain_number

        object.__setattr__(self, "partitions", check_partitions(self.partitions))
        for name in ("partitioning", "rebalance_every", "max_batches", "files_per_batch", "max_moves"):
            value = getattr(self, name)
            SETTINGS[name].rule.check(name, value)
            object.__setattr__(self, name, plain_number(value))  # equal to what was there: a plain int
        check_seconds(self.trigger_seconds, "trigger_seconds")


@dataclass(frozen=True)
class BatchProgress:
    """One micro-batch as applied, for `run_stream`'s `on_batch` (the CLI prints it as one line)."""

    batch_id: int
    rows: int
    accepted: int
    quarantined: int
    seconds: float
    skew_ratio: float | None  # max/median rows over this batch's tasks
    replanned: bool
    moves: int

    def line(self) -> str:
        skew = "n/a" if self.skew_ratio is None else f"{self.skew_ratio:.2f}"
        plan = f", re-planned ({self.moves} moved)" if self.replanned else ""
        return (
            f"batch {self.batch_id}: {self.rows:,} rows ({self.quarantined:,} quarantined) in "
            f"{self.seconds:.1f} s, skew {skew}{plan}"
        )


class StopAfterBatches(Exception):
    """Raised inside foreachBatch to end the query before the batch commits: it reruns on restart."""

    # Its public home: Spark Connect's client tells this stop from failures by the qualified name in
    # the worker's traceback text (`stopped_after_batches`), which must not depend on the module layout.
    __module__ = "rebalancer.pipeline.stream"


class InjectedCrash(RuntimeError):
    """The test hook's simulated crash."""


# 2: items are (type, shard) records and bucket counts (type, bucket, rows) lists, never "type#n" strings.
STATE_VERSION = 2
# The state keeps the progress of this many latest batches, for a client that prints them from there
# (Spark Connect, where foreachBatch runs on the server); older ones are dropped.
PROGRESS_KEPT = 100


# The keys state.json may hold besides the fixed ones, in the order a batch adds them.
_OPTIONAL = ("sink", "handlers", "unhandled_types", "progress")


@dataclass
class StreamData:
    """A stream's state, typed; `to_json`/`from_json` keep state.json's keys as they were, so a
    checkpoint written before this class still loads, and one written now reads the same."""

    partitions: int
    task_rows: list[int]
    task_seconds: list[float]
    version: int = STATE_VERSION
    last_batch_id: int = -1
    batches: int = 0
    plans: int = 0
    owner: list[dict[str, Any]] = field(default_factory=list)  # items_to_json's {type, shard, slot}
    sharded: list[str] = field(default_factory=list)
    shard_of: dict[str, dict[str, int]] = field(default_factory=dict)  # type -> {bucket (text): shard}
    window_type_counts: dict[str, int] = field(default_factory=dict)
    window_bucket_counts: list[list[Any]] = field(default_factory=list)  # [type, bucket, rows]
    totals: RowCounts = field(default_factory=RowCounts)
    type_totals: dict[str, int] = field(default_factory=dict)
    moves: int = 0
    last_plan: dict[str, Any] | None = None
    # None until a batch adds them: a state without them is written without the key.
    sink: SinkSection | None = None
    handlers: dict[str, dict[str, Any]] | None = None
    unhandled_types: dict[str, int] | None = None
    progress: list[dict[str, Any]] | None = None
    # Keys this version does not know, written back as they were read.
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def empty(cls, partitions: int) -> StreamData:
        return cls(partitions, [0] * partitions, [0.0] * partitions)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "version": self.version,
            "partitions": self.partitions,
            "last_batch_id": self.last_batch_id,
            "batches": self.batches,
            "plans": self.plans,
            "owner": self.owner,
            "sharded": self.sharded,
            "shard_of": self.shard_of,
            "window_type_counts": self.window_type_counts,
            "window_bucket_counts": self.window_bucket_counts,
            "totals": self.totals.to_json(),
            "type_totals": self.type_totals,
            "task_rows": self.task_rows,
            "task_seconds": self.task_seconds,
            "moves": self.moves,
            "last_plan": self.last_plan,
        }
        for key in _OPTIONAL:
            value = getattr(self, key)
            if value is not None:
                data[key] = value
        return {**data, **self.extra}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StreamData:
        """A state `_state_problem` found usable."""
        known = set(cls.empty(0).to_json()) | set(_OPTIONAL)
        return cls(
            partitions=data["partitions"],
            task_rows=list(data["task_rows"]),
            task_seconds=list(data["task_seconds"]),
            version=data["version"],
            last_batch_id=data["last_batch_id"],
            batches=data["batches"],
            plans=data["plans"],
            owner=list(data["owner"]),
            sharded=list(data["sharded"]),
            shard_of=dict(data["shard_of"]),
            window_type_counts=dict(data["window_type_counts"]),
            window_bucket_counts=list(data["window_bucket_counts"]),
            totals=RowCounts.from_json(data["totals"]),
            type_totals=dict(data["type_totals"]),
            moves=data["moves"],
            last_plan=data.get("last_plan"),
            sink=data.get("sink"),
            handlers=data.get("handlers"),
            unhandled_types=data.get("unhandled_types"),
            progress=data.get("progress"),
            extra={key: value for key, value in data.items() if key not in known},
        )


def _empty_state(partitions: int) -> dict[str, Any]:
    """An empty state as state.json holds it: the shape `_state_problem` checks a file against."""
    return StreamData.empty(partitions).to_json()


def _state_problem(data: Any, partitions: int) -> str | None:
    """What makes a parsed state unusable (a key missing, a value of the wrong JSON type); None if fine.

    The top-level keys are checked, and the totals' counters: what every batch and the summary read.
    """
    if not isinstance(data, dict):
        return f"expected a JSON object, got {type(data).__name__}"
    if data.get("version") != STATE_VERSION or data.get("partitions") != partitions:
        return None  # another version, other partitions: the caller's own errors say which
    for key, empty in _empty_state(partitions).items():
        if empty is None:
            continue
        value = data.get(key)
        kind = float if isinstance(empty, float) else type(empty)
        if value is None or isinstance(value, bool) or not isinstance(value, kind):
            return f"{key} must be a JSON {_JSON_TYPE[kind]}, got {_shown_json(value)}"
        if key in ("task_rows", "task_seconds") and len(value) != partitions:
            return f"{key} must hold one number per partition ({partitions}), got {len(value)}"
    totals = data["totals"]
    for counter in ("ingested", "accepted", "quarantined"):
        if isinstance(totals.get(counter), bool) or not isinstance(totals.get(counter), int):
            return f"totals.{counter} must be a JSON integer, got {_shown_json(totals.get(counter))}"
    return None


_JSON_TYPE: dict[type, str] = {int: "integer", float: "number", list: "array", dict: "object", str: "string"}


def _shown_json(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


class StreamState:
    """The rebalancer's state under the checkpoint directory, replaced atomically per batch.

    No file is a new checkpoint: an empty state. A file that cannot be read, or does not hold a
    state, is refused in one line naming it, never replaced by an empty state: it holds the last
    batch applied (what keeps a batch Spark replays from being counted twice) and the totals of
    every batch before, while Spark's own checkpoint next to it would go on from its offsets, so the
    run would go on with its counts silently restarted from zero.
    """

    @masks_errors  # its messages name the checkpoint: a URI's password shows as ***
    def __init__(self, path: OutputPath, partitions: int) -> None:
        self.path = path
        self.partitions = partitions
        problem: str | None
        raw: Any
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raw = _empty_state(partitions)
            problem = None
        except (OSError, ValueError) as exc:  # ValueError: not JSON, not UTF-8, or Hadoop's one-line error
            problem = f"{type(exc).__name__}: {exc}"
        else:
            problem = _state_problem(raw, partitions)
        if problem is not None:
            raise ValueError(
                f"checkpoint state {path} cannot be used: {' '.join(problem.split())}; "
                "restore it, or start with a new --checkpoint"
            )
        if raw.get("version") != STATE_VERSION:
            raise ValueError(
                f"checkpoint state {path} is from an older rebalancer (version {raw.get('version', 1)}, "
                f"need {STATE_VERSION}); start with a new --checkpoint"
            )
        if raw.get("partitions") != partitions:
            raise ValueError(f"partitions must match the checkpoint's {raw.get('partitions')}, got {partitions}")
        self.data = StreamData.from_json(raw)

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json(self.path, self.data.to_json())

    def __reduce__(self) -> tuple[type[StreamState], tuple[OutputPath, int]]:
        """Unpickled (in Spark Connect's foreachBatch worker) by reading the file again: a worker
        started afresh mid-query continues from what was saved, not from what the client once read."""
        return type(self), (self.path, self.partitions)


def add_routing(data: StreamData, routing: Routing, sections: dict[str, HandlerTotals]) -> None:
    """Add one batch's handler totals (types seen, rows, calls) and unhandled rows to the state."""
    if data.handlers is None:
        data.handlers = {}
    handlers = data.handlers
    parts = {name: (types, sections.get(name)) for name, types in routing.handlers.items()}
    builtin = routing.builtin_counts.type_counts
    if builtin:
        parts["metrics"] = (list(builtin), None)
    for name, (types, section) in parts.items():
        total = handlers.setdefault(name, {"types": 0, "rows": 0, "calls": 0, "seen_types": []})
        seen = sorted({*total["seen_types"], *types})
        total["seen_types"] = seen
        total["types"] = len(seen)
        total["rows"] += sum(int(routing.counts.type_counts[t]) for t in types)
        total["calls"] += int(section.calls or 0) if section is not None else 0
    if data.unhandled_types is None:
        data.unhandled_types = {}
    unhandled = data.unhandled_types
    for type_name, count in routing.unhandled.items():
        unhandled[type_name] = unhandled.get(type_name, 0) + count


def _shard_map(data: StreamData, type_name: str) -> dict[int, int]:
    return {int(b): int(s) for b, s in data.shard_of.get(type_name, {}).items()}


def _progress(before: StreamData, after: StreamData, batch_id: int, seconds: float) -> BatchProgress:
    """What one batch added to the state."""
    task_rows = [new - old for new, old in zip(after.task_rows, before.task_rows)]
    totals, previous = after.totals, before.totals
    return BatchProgress(
        batch_id=batch_id,
        rows=totals.ingested - previous.ingested,
        accepted=totals.accepted - previous.accepted,
        quarantined=totals.quarantined - previous.quarantined,
        seconds=round(seconds, 3),
        skew_ratio=max_over_median(task_rows, SKEW_DIGITS),
        replanned=after.plans > before.plans,
        moves=after.moves - before.moves,
    )


def _keep_progress(data: StreamData, progress: BatchProgress) -> None:
    """The batch's progress line in the state, numbered by the batches applied so far."""
    kept = [*(data.progress or []), {"batches": data.batches, **dataclasses.asdict(progress)}]
    data.progress = kept[-PROGRESS_KEPT:]


def _plan_from_state(data: StreamData, partitions: int) -> SlotPlan:
    zeros = [0] * partitions
    return SlotPlan(
        partitions,
        items_from_json(data.owner),
        {},
        list(zeros),
        list(zeros),
        sharded=list(data.sharded),
        skipped="kept",
        shard_of={t: _shard_map(data, t) for t in data.shard_of},
    )
