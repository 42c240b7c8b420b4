"""The summary table fits 80 columns and wraps only between phrases: no "6.71 with Spark's / hash"."""

from __future__ import annotations

import io

from rich.console import Console

from rebalancer.pipeline.compare_hash import wall_comparison
from rebalancer.pipeline.outputs.summary import RunSummary
from rebalancer.pipeline.terminal import fit, print_summary


def _summary() -> dict:
    return {
        "input": "data/telemetry",
        "output": "/nonexistent/out",
        "partitioning": "weighted",
        "partitions": 16,
        "ingested": 300_000,
        "accepted": 299_700,
        "quarantined": 300,
        "quarantine_reasons": {"value_not_a_number": 200, "ts_missing": 60, "type_missing": 40},
        "types": 400,
        "skew_ratio": 1.02,
        "hash_skew_ratio": 6.71,
        "planned_load": [18_731] * 16,
        "hash_load": [90_000] + [13_980] * 15,
        "elapsed_s": 31.4,
        "stage_seconds": {"read_and_count": 2.1, "plan": 0.1, "quarantine": 0.5, "dispatch": 26.7},
        "compare_hash": wall_comparison(41.0, 29.4),
        "handlers": {
            "metrics": {"types": 380, "rows": 280_000, "calls": 16, "seconds_skew_ratio": 1.2},
            "mine": {"types": 20, "rows": 19_700, "calls": 20, "seconds_skew_ratio": 3.25},
        },
    }


def test_phrases_stay_whole_at_80_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = io.StringIO()
    print_summary(Console(file=out, markup=False), RunSummary.from_json(_summary()), report=False)
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) == 80
    cells = [line.split("│")[2].strip() for line in lines if line.count("│") == 3]
    assert cells == [
        "data/telemetry",
        "weighted over 16 tasks",
        "300,000",
        "299,700",
        "300  (value_not_a_number 200,",
        "ts_missing 60, type_missing 40)",
        "400",
        "1.02 this run (weighted),",
        "6.71 with Spark's hash",
        "18,731 planned, 90,000 with Spark's hash",
        "31.4 s  (read and count 2.1, plan 0.1,",
        "quarantine 0.5, dispatch 26.7, other 2.0)",
        "41.0 s with Spark's hash,",
        "29.4 s under the plan: 11.6 s saved (28%)",
        "metrics: 380 types, 280,000 rows, 16 calls,",
        "skew 1.20 (max/median task seconds)",
        "mine: 20 types, 19,700 rows, 20 calls,",
        "skew 3.25 (max/median task seconds)",
        "",  # files written: none under a missing output
    ]


def test_fit_breaks_only_between_phrases():
    assert fit(["one two,", "three four", " (five)"], 18) == "one two,\nthree four  (five)"
    assert fit(["one two,", "three four", " (five)"], 40) == "one two, three four  (five)"
    assert fit(["a phrase longer than the line"], 10) == "a phrase longer than the line"
