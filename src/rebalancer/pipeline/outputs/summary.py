"""`RunSummary`, a run's outcome, typed: what summary.json holds, for a batch run and a stream alike.

The drivers build it, the terminal and the report read its fields, and JSON is made only at the
file: `to_json` (summary.json, key for key as it has always been written) and `from_json` (a
previous run's file, or a test's dict). The one writer of summary.json, plan.json and report.html
is `summary_files.summarise_and_write`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, NotRequired, TypedDict

from rebalancer.pipeline.ingest.contract import RowCounts
from rebalancer.pipeline.routing.handler_map import HandlerTotals, RoutingTotals
from rebalancer.pipeline.sinks.outputs import SinkSection

__all__ = [
    "BatchFigures",
    "GroupSection",
    "PlanReuse",
    "RunSummary",
    "StreamFigures",
    "WallComparison",
]

# summary.json's `plan_reused`: where the plan came from, the items this run kept on their slot and
# those it moved. A TypedDict: "from" is no identifier, and it is read and compared as summary.json holds it.
PlanReuse = TypedDict("PlanReuse", {"from": str, "kept": int, "moved": int})


class WallComparison(TypedDict):
    """--compare-hash's walls (`compare_hash.hash_wall`): both medians, what the plan saved (negative:
    lost) in seconds and percent of hash's, the verdict and the noise it was judged against, each
    pass's wall, the passes' own time; then how they were measured."""

    hash_s: float
    plan_s: float
    saved_s: float
    saved_pct: float | None
    verdict: NotRequired[str]
    noise_s: NotRequired[float]
    hash_runs: NotRequired[list[float]]
    plan_runs: NotRequired[list[float]]
    passes_s: NotRequired[float]
    stages: NotRequired[list[str]]
    hash_stage_seconds: NotRequired[dict[str, float]]
    plan_stage_seconds: NotRequired[dict[str, float]]
    cores: NotRequired[int]
    hash_largest_share: NotRequired[float | None]


class GroupSection(TypedDict):
    """A Kafka `?group=` run's range: the batch it wrote and the offsets it read, per partition (text)."""

    group: str
    topic: str
    batch_id: int
    cluster: str | None
    start: dict[str, int]
    end: dict[str, int]


@dataclass(frozen=True)
class BatchFigures:
    """What only a batch run records: its plan against Spark's hash, and its stages' seconds."""

    version: str = ""
    finished_at: str = ""
    plan_reused: PlanReuse | None = None
    group_cost: int = 0
    sharded_types: list[str] = field(default_factory=list)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    seconds_skew_ratio: float | None = None
    planned_load: list[int] = field(default_factory=list)
    hash_load: list[int] = field(default_factory=list)
    hash_skew_ratio: float | None = None
    top_types: dict[str, int] = field(default_factory=dict)
    compare_hash: WallComparison | None = None
    kafka_group: GroupSection | None = None


@dataclass(frozen=True)
class StreamFigures:
    """What only a stream records: its micro-batches and re-plans, and whether Ctrl-C stopped it."""

    batches: int = 0
    last_batch_id: int = -1
    plans: int = 0
    moves: int = 0
    interrupted: bool = False


@dataclass(frozen=True)
class RunSummary:
    """A run's outcome, as summary.json holds it: a batch run's (`batch`) or a stream's (`stream`)."""

    input: str
    output: str
    output_mode: str | None
    partitions: int
    partitioning: str
    counts: RowCounts
    types: int
    task_rows: list[int]
    task_seconds: list[float]
    skew_ratio: float | None
    elapsed_s: float
    format: str | None = None
    routing: RoutingTotals = field(default_factory=RoutingTotals)
    sink: SinkSection | None = None
    batch: BatchFigures | None = None
    stream: StreamFigures | None = None
    # The file this summary was read from (`from_json`), written back as it was: an older or newer
    # version's keys, or a part of one, are kept, never filled in or dropped.
    read_from: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def ingested(self) -> int:
        return self.counts.ingested

    @property
    def accepted(self) -> int:
        return self.counts.accepted

    @property
    def quarantined(self) -> int:
        return self.counts.quarantined

    @property
    def quarantine_reasons(self) -> dict[str, int]:
        return self.counts.reasons

    @property
    def plan_reused(self) -> PlanReuse | None:
        return self.batch.plan_reused if self.batch is not None else None

    @property
    def batches(self) -> int | None:
        """A stream's micro-batches; None for a batch run."""
        return self.stream.batches if self.stream is not None else None

    @property
    def interrupted(self) -> bool:
        return self.stream is not None and self.stream.interrupted

    @property
    def compare_hash(self) -> WallComparison | None:
        return self.batch.compare_hash if self.batch is not None else None

    @property
    def details(self) -> dict[str, Any]:
        """summary.json's whole content (the documented way to read a figure that has no field)."""
        return self.to_json()

    def __getitem__(self, key: str) -> Any:
        """summary.json's `key`, read-only: `run_batch(...)["batches"]`, as callers always indexed it."""
        return self.to_json()[key]

    def __contains__(self, key: object) -> bool:
        return key in self.to_json()

    def check_reconciled(self) -> None:
        """Every row is accounted for: ingested == accepted + quarantined == handled + unhandled + quarantined."""
        if self.ingested != self.accepted + self.quarantined:
            raise RuntimeError("reconciliation failed: ingested != accepted + quarantined")
        if self.accepted != self.routing.handled + self.routing.unhandled:
            raise RuntimeError("reconciliation failed: accepted != handled + unhandled")

    def plan_line(self) -> str:
        """How the run came by its plan, in one line."""
        reused = self.plan_reused
        if reused is None:
            return "plan: made afresh" if self.stream is None else "plan: the stream's own, re-planned as it goes"
        return f"plan: reused from {reused['from']} ({reused['kept']} items kept, {reused['moved']} moved)"

    def to_json(self) -> dict[str, Any]:
        """summary.json's content: a batch run's keys, or a stream's, each in the order always written;
        `sink`, `compare_hash`, `kafka_group` and `interrupted` only when there is one."""
        if self.read_from is not None:
            return dict(self.read_from)
        counts = {
            "ingested": self.ingested,
            "accepted": self.accepted,
            "quarantined": self.quarantined,
            "quarantine_reasons": self.quarantine_reasons,
        }
        where = {"input": self.input, "format": self.format, "output": self.output, "output_mode": self.output_mode}
        placement = {"types": self.types, "partitions": self.partitions, "partitioning": self.partitioning}
        data: dict[str, Any]
        if self.stream is not None:
            stream = self.stream
            data = {
                "mode": "stream",
                **where,
                **counts,
                **placement,
                "batches": stream.batches,
                "last_batch_id": stream.last_batch_id,
                "plans": stream.plans,
                "moves": stream.moves,
                "elapsed_s": self.elapsed_s,
                "task_rows": self.task_rows,
                "task_seconds": self.task_seconds,
                "skew_ratio": self.skew_ratio,
                **routing_json(self.routing),
            }
        else:
            batch = self.batch or BatchFigures()
            data = {
                "version": batch.version,
                "finished_at": batch.finished_at,
                **where,
                "plan_reused": batch.plan_reused,
                **counts,
                **placement,
                "group_cost": batch.group_cost,
                "sharded_types": batch.sharded_types,
                "elapsed_s": self.elapsed_s,
                "stage_seconds": batch.stage_seconds,
                "task_rows": self.task_rows,
                "task_seconds": self.task_seconds,
                "skew_ratio": self.skew_ratio,
                "seconds_skew_ratio": batch.seconds_skew_ratio,
                "planned_load": batch.planned_load,
                "hash_load": batch.hash_load,
                "hash_skew_ratio": batch.hash_skew_ratio,
                "top_types": batch.top_types,
                **routing_json(self.routing),
            }
        if self.sink:
            data["sink"] = self.sink
        if self.batch is not None and self.batch.compare_hash is not None:
            data["compare_hash"] = self.batch.compare_hash
        if self.batch is not None and self.batch.kafka_group is not None:
            data["kafka_group"] = self.batch.kafka_group
        if self.interrupted:
            data["interrupted"] = True  # stopped by Ctrl-C: the batches above are all that were applied
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunSummary:
        """A summary.json as read: this version's, an older one's, or a part of one (a figure that is
        missing takes its empty value). A stream's has `batches`; any other is a batch run's."""
        counts = RowCounts(
            int(data.get("ingested", 0)),
            int(data.get("accepted", 0)),
            int(data.get("quarantined", 0)),
            dict(data.get("quarantine_reasons", {})),
        )
        stream = batch = None
        if data.get("mode") == "stream" or "batches" in data:
            stream = StreamFigures(
                batches=data.get("batches", 0),
                last_batch_id=data.get("last_batch_id", -1),
                plans=data.get("plans", 0),
                moves=data.get("moves", 0),
                interrupted=bool(data.get("interrupted", False)),
            )
        else:
            batch = BatchFigures(
                version=data.get("version", ""),
                finished_at=data.get("finished_at", ""),
                plan_reused=data.get("plan_reused"),
                group_cost=data.get("group_cost", 0),
                sharded_types=list(data.get("sharded_types", [])),
                stage_seconds=dict(data.get("stage_seconds", {})),
                seconds_skew_ratio=data.get("seconds_skew_ratio"),
                planned_load=list(data.get("planned_load", [])),
                hash_load=list(data.get("hash_load", [])),
                hash_skew_ratio=data.get("hash_skew_ratio"),
                top_types=dict(data.get("top_types", {})),
                compare_hash=data.get("compare_hash"),
                kafka_group=data.get("kafka_group"),
            )
        return cls(
            input=data.get("input", ""),
            output=data.get("output", ""),
            output_mode=data.get("output_mode"),
            partitions=data.get("partitions", 0),
            partitioning=data.get("partitioning", ""),
            counts=counts,
            types=data.get("types", 0),
            task_rows=list(data.get("task_rows", [])),
            task_seconds=list(data.get("task_seconds", [])),
            skew_ratio=data.get("skew_ratio"),
            elapsed_s=data.get("elapsed_s", 0.0),
            format=data.get("format"),
            routing=routing_from_json(data),
            sink=data.get("sink"),
            batch=batch,
            stream=stream,
            read_from=dict(data),
        )


def handler_json(totals: HandlerTotals) -> dict[str, Any]:
    """A handler's section of summary.json: what its kind has (see `HandlerTotals`), in the order
    always written; the skew ratios come with the tasks' figures, even when None."""
    data: dict[str, Any] = {"types": totals.types, "rows": totals.rows}
    for key in ("output", "split_types", "planned_rows", "calls"):
        if getattr(totals, key) is not None:
            data[key] = getattr(totals, key)
    if totals.task_rows is not None:
        data.update(
            task_rows=totals.task_rows,
            task_seconds=totals.task_seconds,
            skew_ratio=totals.skew_ratio,
            seconds_skew_ratio=totals.seconds_skew_ratio,
        )
    for key in ("task_stats", "seen_types"):
        if getattr(totals, key) is not None:
            data[key] = getattr(totals, key)
    return data


def routing_json(routing: RoutingTotals) -> dict[str, Any]:
    return {
        "handled": routing.handled,
        "unhandled": routing.unhandled,
        "unhandled_types": routing.unhandled_types,
        "handlers": {name: handler_json(totals) for name, totals in routing.handlers.items()},
    }


def routing_from_json(data: Mapping[str, Any]) -> RoutingTotals:
    """The routing of a summary.json, or of a stream's state (any version's, or a part of one: what
    is missing is empty)."""
    known = {f.name for f in fields(HandlerTotals)}
    handlers = data.get("handlers") or {}
    return RoutingTotals(
        handled=data.get("handled", 0),
        unhandled=data.get("unhandled", 0),
        unhandled_types=dict(data.get("unhandled_types") or {}),
        handlers={
            name: HandlerTotals(**{key: value for key, value in section.items() if key in known})
            for name, section in handlers.items()
        },
    )
