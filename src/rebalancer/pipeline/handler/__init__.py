"""The built-in aggregation handler, its per-task statistics, and the dispatch of rows onto slots.

The names below load on first use (`rebalancer._lazy`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rebalancer._lazy import lazy_exports

if TYPE_CHECKING:
    from rebalancer.pipeline.handler.builtin import STATS_COLUMNS, TaskStatsParam, task_stats

_HOMES = {
    "STATS_COLUMNS": "rebalancer.pipeline.handler.builtin",
    "TaskStatsParam": "rebalancer.pipeline.handler.builtin",
    "task_stats": "rebalancer.pipeline.handler.builtin",
}
__all__ = ["STATS_COLUMNS", "TaskStatsParam", "task_stats"]
__getattr__ = lazy_exports("rebalancer.pipeline.handler", _HOMES)
