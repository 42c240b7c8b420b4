"""`run(RunRequest(...))`, the Python entry point: what `rebalancer pipeline run` does, from Python.

Three Spark runs cover the new user's cases: a second run into a used output is refused; a plan
left in the output is not read (it once changed the next run's skew); `--mode overwrite` replaces
the whole previous run; `plan_from` reuses a plan and says what it kept.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from rebalancer.pipeline import RunRequest, RunSummary, run


@pytest.mark.timeout(1200)  # three small runs, and the session's start if first, on a loaded 2-core box
def test_run_from_python_then_refused_reused_and_overwritten(
    spark, dataset: tuple[Path, pd.DataFrame], tmp_path: Path
) -> None:
    data, expected = dataset
    first = run(RunRequest(input=data, output=tmp_path / "first", partitions=4), spark=spark)
    assert isinstance(first, RunSummary)
    assert (first.ingested, first.output_mode, first.plan_reused) == (
        json.loads((tmp_path / "first" / "summary.json").read_text())["ingested"],
        "error",
        None,
    )
    assert first.accepted == len(expected) and first.partitions == 4 and len(first.task_seconds) == 4
    assert first.skew_ratio is not None and first.skew_ratio >= 1.0
    assert first.output == str(tmp_path / "first")
    assert json.loads((tmp_path / "first" / "summary.json").read_text())["output_mode"] == "error"

    # The same output again, by default: refused before any work, naming the flag.
    before = (tmp_path / "first" / "summary.json").read_text()
    with pytest.raises(ValueError, match=r"already holds a run's outputs .*: --mode overwrite replaces them"):
        run(RunRequest(input=data, output=tmp_path / "first", partitions=4), spark=spark)
    assert (tmp_path / "first" / "summary.json").read_text() == before

    # A plan left in the output, every item on slot 0: not read unless asked.
    plan = json.loads((tmp_path / "first" / "plan.json").read_text())
    skewed = {**plan, "items": [{**item, "slot": 0} for item in plan["items"]]}
    stale = tmp_path / "second"
    stale.mkdir()
    (stale / "plan.json").write_text(json.dumps(skewed))
    second = run(RunRequest(input=data, output=stale, partitions=4, mode="append", report=False), spark=spark)
    assert second.plan_reused is None and second.output_mode == "append"
    assert second.details["planned_load"] == first.details["planned_load"]

    # overwrite replaces the whole previous run (a stale date folder too), and plan_from is explicit.
    stray = tmp_path / "first" / "metrics" / "date=1999-01-01"
    stray.mkdir()
    (tmp_path / "skewed.json").write_text(json.dumps(skewed))
    third = run(
        RunRequest(
            input=data, output=tmp_path / "first", partitions=4, mode="overwrite", plan_from=tmp_path / "skewed.json"
        ),
        spark=spark,
    )
    assert not stray.exists()
    reused = third.plan_reused
    assert reused is not None and reused["from"] == str(tmp_path / "skewed.json")
    placed = {
        (item["type"], item["shard"]): item["slot"]
        for item in json.loads((tmp_path / "first" / "plan.json").read_text())["items"]
    }
    asked = {(item["type"], item["shard"]) for item in skewed["items"]}
    assert reused["kept"] == sum(1 for key, slot in placed.items() if key in asked and slot == 0)
    assert reused["kept"] + reused["moved"] == len(asked & set(placed))
    assert reused["moved"] > 0  # every item on one slot of four is not kept as it is
    assert third.plan_line() == (
        f"plan: reused from {tmp_path / 'skewed.json'} ({reused['kept']} items kept, {reused['moved']} moved)"
    )
    assert json.loads((tmp_path / "first" / "summary.json").read_text())["output_mode"] == "overwrite"


def test_plan_from_a_plan_for_other_partitions_is_refused(spark, dataset: tuple[Path, pd.DataFrame], tmp_path: Path) -> None:
    (tmp_path / "plan.json").write_text(json.dumps({"partitions": 8, "items": []}))
    with pytest.raises(ValueError) as caught:
        run(RunRequest(input=dataset[0], output=tmp_path / "out", partitions=4, plan_from=tmp_path), spark=spark)
    assert str(caught.value) == f"plan-from: {tmp_path / 'plan.json'} was made for 8 partitions, this run has 4"
    assert not (tmp_path / "out").exists()
