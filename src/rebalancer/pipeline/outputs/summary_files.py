"""The one writer of a run's summary files: plan.json, report.html and summary.json, for a batch run
and a stream alike. JSON is made here, at the file, from the typed `RunSummary`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rebalancer.pipeline.paths import OutputPath, write_json

if TYPE_CHECKING:
    from rebalancer.pipeline.outputs.summary import RunSummary
    from rebalancer.pipeline.plan.slots import SlotPlan
    from rebalancer.pipeline.plan_from import PreviousRun

__all__ = ["summarise_and_write"]


def summarise_and_write(
    reports: OutputPath,
    summary: RunSummary,
    plan_json: dict[str, Any] | None,
    plan: SlotPlan | None = None,
    previous: PreviousRun | None = None,
    step: Callable[[str], None] | None = None,
) -> RunSummary:
    """Check that `summary` reconciles, then write into `reports` (made if missing): plan.json
    (`plan_json`, the plan as the file holds it; none for a stream that never planned), report.html
    (when `plan` is given: a batch run's, compared with the `previous` run's seconds per task) and,
    last, summary.json. Returns `summary`."""
    summary.check_reconciled()
    reports.mkdir(parents=True, exist_ok=True)
    if plan_json is not None:
        write_json(reports / "plan.json", {"partitioning": summary.partitioning, **plan_json})
    if plan is not None:
        if step is not None:
            step("report")
        from rebalancer.pipeline.outputs.report import write_report

        # elapsed_s stays the time to the metrics written: one number in the report, the file and the terminal.
        write_report(reports / "report.html", summary, plan, previous)
    write_json(reports / "summary.json", summary.to_json())
    return summary
