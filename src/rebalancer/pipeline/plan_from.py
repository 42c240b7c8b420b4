"""Plans and summaries a run reads from earlier runs: `--plan-from`'s plan (a plan.json or a
one-column PlanStore, asked for: any problem is an error), and the previous run's plan.json and
summary.json in the output (hints: a damaged one is a warning, and the run goes on without)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rebalancer._secrets import masks_errors, shown_location
from rebalancer.pipeline.paths import OutputPath, output_path
from rebalancer.pipeline.plan.slots import Item, SlotPlan, items_from_json

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from rebalancer.pipeline.outputs.summary import PlanReuse

__all__ = ["PreviousRun", "ReusedPlan", "load_plan", "load_previous_plan", "load_previous_summary", "previous_run"]

log = logging.getLogger("rebalancer.pipeline.batch")  # the logger these warnings always came from

_ABSENT = object()  # no file at all: a first run, not a damaged one


def _read_previous(path: OutputPath) -> tuple[Any, str | None]:
    """(the JSON in `path`, None); (_ABSENT, None) when there is no file; (None, the problem) when
    it cannot be read or parsed."""
    try:
        return json.loads(path.read_text()), None
    except FileNotFoundError:
        return _ABSENT, None
    except (OSError, ValueError) as exc:  # ValueError: not JSON, not UTF-8, or Hadoop's one-line error
        return None, f"{type(exc).__name__}: {exc}"


def _ignored(path: OutputPath, problem: str) -> None:
    """One warning naming the file: a previous run's plan or summary is a hint, the run goes on without."""
    log.warning("ignoring %s, which cannot be used: %s", shown_location(str(path)), problem)


def load_previous_plan(out: OutputPath, partitions: int) -> dict[Item, int] | None:
    """The previous run's item -> slot map, if it was made for the same number of slots.

    A plan.json from before items were (type, shard) pairs is not trusted: its names were ambiguous.
    One for another number of slots is not ours to use; a damaged one gets one warning (the plan is
    then made afresh, as `apply.PlanStore` does for its own).
    """
    path = out / "plan.json"
    saved, problem = _read_previous(path)
    if saved is _ABSENT:
        return None
    if problem is None and not isinstance(saved, dict):
        problem = f"expected a JSON object, got {type(saved).__name__}"
    if problem is not None:
        _ignored(path, problem)
        return None
    if saved.get("partitions") != partitions:
        return None
    items = saved.get("items")
    if not isinstance(items, list) or not all(isinstance(row, dict) for row in items):
        _ignored(path, "its items are not a list of objects")
        return None
    try:
        return items_from_json(items)
    except (KeyError, TypeError, ValueError) as exc:
        _ignored(path, f"an item is not {{type, shard, slot}}: {type(exc).__name__}: {exc}")
        return None


@dataclass(frozen=True)
class ReusedPlan:
    """A plan asked for with `plan_from`: where it came from and its item -> slot map."""

    source: str
    owner: dict[Item, int]

    def outcome(self, plan: SlotPlan) -> PlanReuse:
        """summary.json's `plan_reused`: the items this run kept on their slot, and those it moved."""
        kept = sum(1 for item, slot in plan.owner.items() if self.owner.get(item) == slot)
        moved = sum(1 for item, slot in plan.owner.items() if item in self.owner and self.owner[item] != slot)
        return {"from": self.source, "kept": kept, "moved": moved}


@masks_errors  # its messages name the plan's location: a URI's password shows as ***
def load_plan(source: str | Path, partitions: int, spark: SparkSession | None = None) -> ReusedPlan:
    """The plan of `source` (a plan.json, a `balanced_apply` PlanStore's file, or a directory holding
    either), asked for explicitly: anything that keeps it from being used is a ValueError naming the
    file, never a silent fresh plan. A remote URI is read through `spark`'s Hadoop FileSystem."""
    from rebalancer.pipeline.apply import is_store_file

    path = output_path(source, spark)
    if path.is_dir():
        path = path / "plan.json"
    saved, problem = _read_previous(path)
    if saved is _ABSENT:
        raise ValueError(f"plan-from: no such file: {path}")
    if problem is None and not isinstance(saved, dict):
        problem = f"expected a JSON object, got {type(saved).__name__}"
    if problem is not None:
        raise ValueError(f"plan-from: {path} cannot be used: {' '.join(problem.split())}")
    if is_store_file(saved):
        return ReusedPlan(str(source), _store_items(path, saved, partitions))
    if saved.get("partitions") != partitions:
        raise ValueError(
            f"plan-from: {path} was made for {saved.get('partitions')} partitions, this run has {partitions}"
        )
    items = saved.get("items")
    try:
        if not isinstance(items, list) or not all(isinstance(row, dict) for row in items):
            raise TypeError("its items are not a list of objects")
        return ReusedPlan(str(source), items_from_json(items))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"plan-from: {path} cannot be used: {type(exc).__name__}: {exc}") from None


def _store_items(path: OutputPath, saved: dict[str, Any], partitions: int) -> dict[Item, int]:
    """A `balanced_apply` plan store keyed by one column, as the pipeline's items: its keys are the
    types. A text key is the type; an int key the text Spark's cast gives it; a null key is no type
    (such rows are quarantined), so it is left out."""
    from rebalancer.pipeline.apply import stored_plan

    try:
        columns, made_for, owner = stored_plan(saved)
    except ValueError as exc:
        raise ValueError(f"plan-from: {path} cannot be used: {' '.join(str(exc).split())}") from None
    if len(columns) != 1:
        raise ValueError(
            f"plan-from: {path} is a plan store keyed by {len(columns)} columns ({', '.join(columns)}); "
            "only a store keyed by one column (the type) maps onto the pipeline's types"
        )
    if made_for is None:
        raise ValueError(f"plan-from: {path} is a plan store holding measurements but no plan")
    if made_for != partitions:
        raise ValueError(f"plan-from: {path} was made for {made_for} partitions, this run has {partitions}")
    items: dict[Item, int] = {}
    for item, slot in owner.items():
        (value,) = item.key
        if value is None:
            continue
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise ValueError(
                f"plan-from: {path} cannot be used: its key {columns[0]} holds {value!r}, not a type name"
            )
        items[Item(str(value), item.shard)] = slot
    return items


def load_previous_summary(out: OutputPath) -> dict[str, Any] | None:
    """The previous run's summary, for the report's comparison; a damaged one gets one warning."""
    path = out / "summary.json"
    saved, problem = _read_previous(path)
    if saved is _ABSENT:
        return None
    if problem is None:
        seconds = saved.get("task_seconds", []) if isinstance(saved, dict) else None
        if not isinstance(saved, dict):
            problem = f"expected a JSON object, got {type(saved).__name__}"
        elif not isinstance(seconds, list) or not all(
            isinstance(value, int | float) and not isinstance(value, bool) for value in seconds
        ):
            problem = "its task_seconds are not a list of numbers"
    if problem is not None:
        _ignored(path, problem)
        return None
    return saved


@dataclass(frozen=True)
class PreviousRun:
    """What the report takes from the previous run's summary.json: its placement and seconds per task."""

    partitioning: str | None
    task_seconds: list[float]


def previous_run(out: OutputPath) -> PreviousRun | None:
    """The previous run's seconds per task (`load_previous_summary`, typed), for the report's comparison."""
    saved = load_previous_summary(out)
    if saved is None:
        return None
    return PreviousRun(saved.get("partitioning"), [float(value) for value in saved.get("task_seconds", [])])
