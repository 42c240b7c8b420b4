"""The built-in aggregation handler, its per-task statistics, and the dispatch of rows onto slots.

The names below load on first use (`rebalancer._lazy`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rebalancer._lazy import lazy_exports

if TYPE_CHECKING:
    from rebalancer.pipeline.handler.builtin import (
        STATS_COLUMNS,
        STATS_SCHEMA,
        TaskStatsParam,
        collect_task_stats,
        report_task_stats,
        split_task_stats,
        task_stats,
    )

_HOMES = {
    "collect_task_stats": "rebalancer.pipeline.handler.builtin",
    "split_task_stats": "rebalancer.pipeline.handler.builtin",
    "report_task_stats": "rebalancer.pipeline.handler.builtin",
    "STATS_SCHEMA": "rebalancer.pipeline.handler.builtin",
    "STATS_COLUMNS": "rebalancer.pipeline.handler.builtin",
    "TaskStatsParam": "rebalancer.pipeline.handler.builtin",
    "task_stats": "rebalancer.pipeline.handler.builtin",
}
__all__ = ["STATS_COLUMNS", "STATS_SCHEMA", "TaskStatsParam", "collect_task_stats", "report_task_stats", "split_task_stats", "task_stats"]
__getattr__, __dir__ = lazy_exports("rebalancer.pipeline.handler", _HOMES)
