"""rebalancer.pipeline: the PySpark telemetry pipeline (needs the 'spark' extra).

The public names below load on first use, so `import rebalancer.pipeline` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rebalancer._extras import require_extra
from rebalancer._lazy import lazy_exports

require_extra("rebalancer.pipeline", "spark")

if TYPE_CHECKING:
    from rebalancer.pipeline.apply import ApplyPlan, BalancedApply, PlanStore, TaskStats, balanced_apply
    from rebalancer.pipeline.outputs.summary import RunSummary
    from rebalancer.pipeline.resolved import RunRequest
    from rebalancer.pipeline.routing.handler_map import Pipeline
    from rebalancer.pipeline.runner import run

_PUBLIC = {
    "ApplyPlan": "rebalancer.pipeline.apply",
    "BalancedApply": "rebalancer.pipeline.apply",
    "PlanStore": "rebalancer.pipeline.apply",
    "TaskStats": "rebalancer.pipeline.apply",
    "balanced_apply": "rebalancer.pipeline.apply",
    "Pipeline": "rebalancer.pipeline.routing.handler_map",
    "RunRequest": "rebalancer.pipeline.resolved",
    "RunSummary": "rebalancer.pipeline.outputs.summary",
    "run": "rebalancer.pipeline.runner",
}
__all__ = [
    "ApplyPlan",
    "BalancedApply",
    "Pipeline",
    "PlanStore",
    "RunRequest",
    "RunSummary",
    "TaskStats",
    "balanced_apply",
    "run",
]

__getattr__, __dir__ = lazy_exports("rebalancer.pipeline", _PUBLIC)
