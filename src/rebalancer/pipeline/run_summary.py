"""`RunSummary`, a run's outcome as summary.json holds it: in a module of its own so the batch run
and the report use it without importing the runner, which imports them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RunSummary:
    """A run's outcome, as summary.json holds it: the figures most callers read as fields, and
    every other one (handlers, sink, stage seconds, …) in `details`, the file's whole content."""

    input: str
    output: str
    output_mode: str | None
    partitions: int
    partitioning: str
    ingested: int
    accepted: int
    quarantined: int
    quarantine_reasons: dict[str, int]
    types: int
    task_rows: list[int]
    task_seconds: list[float]
    skew_ratio: float | None
    elapsed_s: float
    plan_reused: dict[str, Any] | None = None
    batches: int | None = None  # a stream's micro-batches; None for a batch run
    interrupted: bool = False
    details: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunSummary:
        return cls(
            input=data["input"],
            output=data["output"],
            output_mode=data.get("output_mode"),
            partitions=data["partitions"],
            partitioning=data["partitioning"],
            ingested=data["ingested"],
            accepted=data["accepted"],
            quarantined=data["quarantined"],
            quarantine_reasons=dict(data["quarantine_reasons"]),
            types=data["types"],
            task_rows=list(data["task_rows"]),
            task_seconds=list(data["task_seconds"]),
            skew_ratio=data.get("skew_ratio"),
            elapsed_s=data["elapsed_s"],
            plan_reused=data.get("plan_reused"),
            batches=data.get("batches"),
            interrupted=bool(data.get("interrupted", False)),
            details=dict(data),
        )

    def to_json(self) -> dict[str, Any]:
        """summary.json's content."""
        return dict(self.details)

    def plan_line(self) -> str:
        """How the run came by its plan, in one line."""
        reused = self.plan_reused
        if reused is None:
            return "plan: made afresh" if self.batches is None else "plan: the stream's own, re-planned as it goes"
        return f"plan: reused from {reused['from']} ({reused['kept']} items kept, {reused['moved']} moved)"
