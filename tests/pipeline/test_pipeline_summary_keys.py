"""summary.json keeps its keys, in their order, now that RunSummary is typed and JSON is made only at
the file (issue 43): a batch run's and a stream's, as written before the change."""

from __future__ import annotations

import json

import pytest

from rebalancer.pipeline import RunRequest, RunSummary, run

BATCH_KEYS = [
    "version", "finished_at", "input", "format", "output", "output_mode", "plan_reused", "ingested", "accepted",
    "quarantined", "quarantine_reasons", "types", "partitions", "partitioning", "group_cost", "sharded_types",
    "elapsed_s", "stage_seconds", "task_rows", "task_seconds", "skew_ratio", "seconds_skew_ratio", "planned_load",
    "hash_load", "hash_skew_ratio", "top_types", "handled", "unhandled", "unhandled_types", "handlers",
]
STREAM_KEYS = [
    "mode", "input", "format", "output", "output_mode", "ingested", "accepted", "quarantined", "quarantine_reasons",
    "types", "partitions", "partitioning", "batches", "last_batch_id", "plans", "moves", "elapsed_s", "task_rows",
    "task_seconds", "skew_ratio", "handled", "unhandled", "unhandled_types", "handlers",
]
BUILTIN_SECTION = ["types", "rows", "calls", "task_rows", "task_seconds", "skew_ratio", "seconds_skew_ratio"]
STREAM_SECTION = ["types", "rows", "calls", "seen_types"]


@pytest.mark.spark
def test_summary_json_keeps_its_keys_in_order_for_a_batch_run_and_a_stream(spark, dataset, tmp_path):
    source, _ = dataset
    batch = run(RunRequest(source, tmp_path / "batch", partitions=2, report=False), spark)
    stream = run(RunRequest(source, tmp_path / "stream", partitions=2, stream=True, available_now=True), spark)
    for name, summary, keys, section in (
        ("batch", batch, BATCH_KEYS, BUILTIN_SECTION),
        ("stream", stream, STREAM_KEYS, STREAM_SECTION),
    ):
        written = json.loads((tmp_path / name / "summary.json").read_text())
        assert list(written) == keys
        assert list(written["handlers"]["metrics"]) == section
        assert written == summary.to_json() == RunSummary.from_json(written).to_json()
        assert summary["partitions"] == 2 and summary.details == written
