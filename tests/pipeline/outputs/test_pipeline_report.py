"""report.html shows every row count with thousands separators: in its table and on the charts' axes."""

from __future__ import annotations

import re

import pytest

import rebalancer.pipeline.outputs.report as report
from rebalancer.pipeline import RunSummary
from rebalancer.pipeline.plan.slots import SlotPlan

GROUPED = re.compile(r"^\d{1,3}(,\d{3})*$")


def big_summary() -> dict:
    return {
        "input": "data/telemetry",
        "output": "out",
        "partitioning": "weighted",
        "partitions": 4,
        "ingested": 1_234_567,
        "accepted": 1_234_265,
        "quarantined": 302,
        "quarantine_reasons": {"value_not_a_number": 300, "ts_missing": 2},
        "types": 1_200,
        "sharded_types": ["t0"],
        "hash_skew_ratio": 6.5,
        "skew_ratio": 1.0,
        "hash_load": [800_000, 200_000, 150_000, 84_265],
        "task_rows": [308_567, 308_566, 308_566, 308_566],
        "task_seconds": [1.5, 1.4, 1.5, 1.4],
        "top_types": {"t0": 219_000, "t1": 104_000, "t2": 70_000},
        "elapsed_s": 21.0,
        "version": "0.0.0",
        "finished_at": "2026-11-23T12:00:00Z",
    }


def test_the_table_groups_row_counts_by_thousands():
    plan = SlotPlan(partitions=4, owner={}, counts={}, load_before=[0] * 4, load_after=[0] * 4)
    html = report.render_report(RunSummary.from_json(big_summary()), plan, None)
    assert "<td>1,234,567 / 1,234,265 / 302</td>" in html
    assert "<td>1,200 (t0)</td>" in html


def test_every_row_axis_groups_its_tick_labels_by_thousands(monkeypatch: pytest.MonkeyPatch):
    figures = []
    monkeypatch.setattr(report, "_png", lambda figure: figures.append(figure) or "")
    plan = SlotPlan(partitions=4, owner={}, counts={}, load_before=[0] * 4, load_after=[0] * 4)
    report.render_report(RunSummary.from_json(big_summary()), plan, None)
    row_axes = {}
    for figure in figures:
        figure.canvas.draw()
        (axis,) = figure.axes
        for value_axis, label in ((axis.yaxis, axis.get_ylabel()), (axis.xaxis, axis.get_xlabel())):
            if label.startswith("rows"):
                texts = [t.get_text() for t in value_axis.get_ticklabels() if t.get_text()]
                row_axes[axis.get_title()] = texts
    assert set(row_axes) == {
        "Rows per task (skew = largest task's rows / median task's rows)",
        "Rows of the hottest types",
        "Rows ingested, accepted and quarantined (by reason)",
    }
    for title, texts in row_axes.items():
        assert texts and all(GROUPED.match(t) for t in texts), (title, texts)
        assert any("," in t for t in texts), (title, texts)  # the largest counts reach the thousands
    assert {"1", "1,000", "1,000,000"} <= set(row_axes["Rows ingested, accepted and quarantined (by reason)"])
    (counts,) = [f.axes[0] for f in figures if f.axes[0].get_title().startswith("Rows ingested")]
    bar_labels = [t.get_text() for t in counts.texts]
    assert bar_labels == ["2", "300", "302", "1,234,265", "1,234,567"]
