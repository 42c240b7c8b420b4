"""Batch runs on tiny data: metrics against pandas, quarantine, idempotence, hash == weighted, placement."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pipeline_data import EXPECTED_REASONS, read_metrics, reference_metrics

from rebalancer.pipeline.batch import run_batch
from rebalancer.pipeline.core import count_input
from rebalancer.pipeline.handler.dispatch import SLOT_KEY, dispatch
from rebalancer.pipeline.ingest.classifier import accepted_rows, classify
from rebalancer.pipeline.ingest.files import read_raw
from rebalancer.pipeline.ingest.inspect import inspect_input
from rebalancer.pipeline.plan.slots import Item, make_plan, plan_items, with_slot_key

pytestmark = pytest.mark.spark
PARTITIONS = 4
METRIC_COLUMNS = ["type", "entity", "minute", "count", "sum", "min", "max", "mean", "p50", "p90", "p99"]


@pytest.fixture(scope="module")
def runs(spark, dataset, tmp_path_factory):
    """One weighted run, a re-run of it, and one hash run, shared by the tests below."""
    input_dir, good = dataset
    spec = inspect_input(input_dir)
    root = tmp_path_factory.mktemp("runs")
    weighted = run_batch(spark, spec, root / "weighted", "weighted", PARTITIONS)
    first = read_metrics(root / "weighted" / "metrics")
    rerun = run_batch(
        spark, spec, root / "weighted", "weighted", PARTITIONS, report=False, plan_from=root / "weighted" / "plan.json"
    )
    hashed = run_batch(spark, spec, root / "hash", "hash", PARTITIONS, report=False)
    return {"root": root, "good": good, "weighted": weighted, "first": first, "rerun": rerun, "hash": hashed}


def test_metrics_equal_an_independent_pandas_reference(runs):
    got = runs["first"]
    want = reference_metrics(runs["good"]).sort_values(["type", "entity", "minute"]).reset_index(drop=True)
    assert list(got.columns) == [*METRIC_COLUMNS, "date"]
    assert len(got) == len(want)
    for column in ("type", "entity"):
        assert got[column].tolist() == want[column].tolist()
    assert (got["minute"].to_numpy() == want["minute"].to_numpy().astype(got["minute"].dtype)).all()
    for column in ("count", "min", "max", "p50", "p90", "p99"):
        np.testing.assert_array_equal(got[column].to_numpy(), want[column].to_numpy(), err_msg=column)
    # Summation order differs from pandas (sorted values vs. input order): equal up to rounding.
    for column in ("sum", "mean"):
        np.testing.assert_allclose(got[column].to_numpy(), want[column].to_numpy(), rtol=1e-12, err_msg=column)
    assert set(got["date"]) == {"2026-01-01"}


def test_quarantine_reasons_counts_and_reconciliation(runs):
    summary = runs["weighted"]
    good = runs["good"]
    assert summary["quarantine_reasons"] == EXPECTED_REASONS
    assert summary["quarantined"] == sum(EXPECTED_REASONS.values())
    assert summary["accepted"] == len(good)
    assert summary["ingested"] == summary["accepted"] + summary["quarantined"]
    quarantine = pd.read_parquet(runs["root"] / "weighted" / "quarantine")
    assert sorted(quarantine.columns) == ["entity", "reason", "ts", "type", "value"]
    assert quarantine["reason"].value_counts().to_dict() == EXPECTED_REASONS
    # The original values, as strings.
    assert set(quarantine.loc[quarantine["reason"] == "value_not_numeric", "value"]) == {"abc"}
    assert set(quarantine.loc[quarantine["reason"] == "ts_unparseable", "ts"]) == {"yesterday"}
    assert sum(runs["weighted"]["task_rows"]) == len(good)


def test_rerun_is_idempotent(runs):
    again = read_metrics(runs["root"] / "weighted" / "metrics")
    pd.testing.assert_frame_equal(again, runs["first"])
    assert not again.duplicated(["type", "entity", "minute"]).any()
    assert runs["rerun"]["accepted"] == runs["weighted"]["accepted"]


def test_hash_and_weighted_give_identical_metrics(runs):
    hashed = read_metrics(runs["root"] / "hash" / "metrics")
    pd.testing.assert_frame_equal(hashed, runs["first"], check_exact=True)


def test_summary_plan_and_report_files(runs):
    out = runs["root"] / "weighted"
    summary = json.loads((out / "summary.json").read_text())
    for key in ("ingested", "accepted", "quarantined", "types", "partitions", "partitioning", "elapsed_s",
                "task_rows", "task_seconds", "skew_ratio"):
        assert key in summary
    assert summary["partitions"] == PARTITIONS and len(summary["task_rows"]) == PARTITIONS
    assert summary["types"] == 12
    plan = json.loads((out / "plan.json").read_text())
    assert plan["partitions"] == PARTITIONS
    assert plan["sharded"] == ["metric_0000"]  # the top type is over total/slots
    assert len(plan["types"]["metric_0000"]) > 1
    assert set(plan["types"]) == {f"metric_{i:04d}" for i in range(12)}
    # The weighted run lands exactly the planned rows on every task, and beats hash on skew.
    assert summary["task_rows"] == plan["load"]
    assert summary["skew_ratio"] < runs["hash"]["skew_ratio"]
    # The re-run, asked to reuse the plan, was sticky: it planned from the first run's owners and moved nothing.
    assert runs["rerun"]["task_rows"] == summary["task_rows"]
    assert runs["rerun"]["plan_reused"]["moved"] == 0 and runs["weighted"]["plan_reused"] is None
    assert [m for m in plan["moves"] if m["from"] >= 0] == []
    report = (out / "report.html").read_text()
    assert report.count("data:image/png;base64,") == 4
    assert "<script" not in report and "http" not in report.split("<body>", 1)[1]


def test_weighted_dispatch_has_one_exchange_and_exact_slots(spark, dataset):
    """From the physical plan and per-row partition ids: Spark runs the plan, not its own hash."""
    from pyspark.sql import functions as F

    input_dir, _ = dataset
    classified = classify(read_raw(spark, inspect_input(input_dir)))
    counts = count_input(classified, PARTITIONS)
    items, sharded, shard_of = plan_items(counts.type_counts, counts.bucket_counts, PARTITIONS)
    plan = make_plan(items, sharded, PARTITIONS, shard_of=shard_of)
    accepted = accepted_rows(classified)

    job = dispatch(accepted, "weighted", PARTITIONS, plan)
    job.metrics.collect()
    physical = job.metrics._jdf.queryExecution().executedPlan().toString()
    final = physical.split("Final Plan", 1)[-1].split("Initial Plan", 1)[0]
    # The slot key is a per-row expression (no join, no broadcast); exactly one shuffle, the plan's.
    exchanges = [line for line in final.splitlines() if "Exchange" in line]
    assert len(exchanges) == 1, physical
    assert "Join" not in final and "Broadcast" not in final, final
    assert f"hashpartitioning({SLOT_KEY}" in exchanges[0] and f", {PARTITIONS})" in exchanges[0]
    # Each task is one slot's group: mapped as a whole, with no grouping and no sort by slot.
    assert "MapInArrow" in final and "FlatMapGroupsInPandas" not in final
    assert not [line for line in final.splitlines() if "Sort [" in line], final
    rows, _seconds = job.task_stats()
    assert rows == plan.load_after

    # Every row of every item sits in the partition its planned slot names.
    placed = (
        with_slot_key(accepted.select("type", "entity"), plan, SLOT_KEY)
        .repartition(PARTITIONS, SLOT_KEY)
        .select(
            "type",
            F.pmod(F.hash("entity"), F.lit(64)).alias("bucket"),
            F.spark_partition_id().alias("pid"),
        )
        .distinct()
        .collect()
    )
    for type_name, bucket, pid in placed:
        item = Item(type_name, plan.shard_of[type_name][bucket]) if type_name in plan.sharded else Item(type_name)
        assert plan.owner[item] == pid, (item, pid)


def test_output_date_partitions(runs):
    dirs = sorted(p.name for p in (Path(runs["root"]) / "weighted" / "metrics").iterdir() if p.is_dir())
    assert dirs == ["date=2026-01-01"]
