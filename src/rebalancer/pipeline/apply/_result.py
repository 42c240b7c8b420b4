"""What `balanced_apply` returns: the lazy frame, its plan, and the per-task and per-key
measurements its action reports through accumulators, which go into the plan store."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.accumulators import AccumulatorParam

from rebalancer.pipeline.apply._items import ApplyItem, Key
from rebalancer.pipeline.apply._key_plan import ApplyPlan, KeyCost
from rebalancer.pipeline.apply._store import PlanStore
from rebalancer.pipeline.handler.builtin import task_stats

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


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


# Results whose measurements are not in their store yet, by store path; see PlanStore.
_pending: dict[Path, BalancedApply] = {}
_pending_lock = threading.Lock()


def flush_pending(store: PlanStore) -> None:
    """Record the measurements of the last result planned with `store`, if it has not yet."""
    with _pending_lock:
        result = _pending.pop(store.path.resolve(), None)
    if result is not None:
        result.record()


def hold_pending(store: PlanStore, result: BalancedApply) -> None:
    """`result`'s measurements go into `store` later: after its action has run (see PlanStore)."""
    with _pending_lock:
        _pending[store.path.resolve()] = result
