"""Streaming: stopped mid-way, crashed after writing a batch, restarted; no duplicates, no gaps."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from pipeline_data import good_frame, reference_metrics

from rebalancer.pipeline.generate import write_frame
from rebalancer.pipeline.ingest.inspect import inspect_input
from rebalancer.pipeline.stream.driver import run_stream
from rebalancer.pipeline.stream.state import StreamConfig

pytestmark = pytest.mark.spark
FILES = 4


def test_stream_stop_crash_restart_gives_each_batch_exactly_once(spark, tmp_path):
    from pyspark.errors import StreamingQueryException

    good = good_frame(events=2000, seed=11)
    input_dir = tmp_path / "input"
    write_frame(good, input_dir, "parquet", FILES)
    spec = inspect_input(input_dir)
    out = tmp_path / "out"
    base = {"partitions": 2, "rebalance_every": 2, "max_moves": 2}

    # 1. Stopped after two micro-batches.
    first = run_stream(spark, spec, out, StreamConfig(**base, max_batches=2))
    assert first["batches"] == 2 and first["last_batch_id"] == 1
    assert sorted(p.name for p in (out / "metrics").iterdir()) == ["batch_id=0", "batch_id=1"]

    # 2. Restarted, and crashes after writing batch 2's outputs but before committing it.
    with pytest.raises(StreamingQueryException, match="injected crash"):
        run_stream(spark, spec, out, StreamConfig(**base, crash_after_batch=2))
    state = json.loads((out / "_checkpoint" / "rebalancer" / "state.json").read_text())
    assert state["last_batch_id"] == 1  # batch 2 was written but not counted
    assert (out / "metrics" / "batch_id=2").is_dir()

    # 3. Restarted again: batch 2 is replayed over its own output, then batch 3; then the input is drained.
    final = run_stream(spark, spec, out, StreamConfig(**base, available_now=True))
    assert final["batches"] == FILES and final["last_batch_id"] == FILES - 1
    assert final["ingested"] == final["accepted"] == len(good)
    assert final["quarantined"] == 0
    assert final["plans"] == 2  # planned at batch 0 and re-planned at batch 2
    assert sum(final["task_rows"]) == len(good)

    metrics = pd.read_parquet(out / "metrics")
    assert sorted(metrics["batch_id"].astype(int).unique().tolist()) == list(range(FILES))  # no gaps
    assert not metrics.duplicated(["batch_id", "type", "entity", "minute"]).any()  # no duplicates
    assert metrics["count"].sum() == len(good)
    # A key split over two batches is two partial rows; their counts add up to the reference.
    metrics["minute"] = pd.to_datetime(metrics["minute"]).dt.tz_localize(None)
    got = metrics.groupby(["type", "entity", "minute"])["count"].sum().sort_index()
    want = reference_metrics(good).set_index(["type", "entity", "minute"])["count"].sort_index()
    assert got.to_dict() == want.to_dict()
    plan = json.loads((out / "plan.json").read_text())
    assert plan["batch_id"] == 2
    assert sum(1 for move in plan["moves"] if move["from"] >= 0) <= 2  # move-limited
