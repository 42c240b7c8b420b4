"""`run(RunRequest(...))`, the Python entry point: what `rebalancer pipeline run` does, from Python.

Three Spark runs cover the new user's cases: a second run into a used output is refused; a plan
left in the output is not read (it once changed the next run's skew); `--mode overwrite` replaces
the whole previous run; `plan_from` reuses a plan and says what it kept.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from rebalancer.pipeline import RunRequest, RunSummary, run
from rebalancer.pipeline.apply import PlanStore, plan_keys
from rebalancer.pipeline.plan.slots import WHOLE, Item, SlotPlan
from rebalancer.pipeline.plan_from import load_plan

EXE = str(Path(sys.executable).with_name("rebalancer"))


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

    # A plan left in an earlier run's output (one from before manifests: its summary.json says a run
    # was there), every item on slot 0: not read unless asked.
    plan = json.loads((tmp_path / "first" / "plan.json").read_text())
    skewed = {**plan, "items": [{**item, "slot": 0} for item in plan["items"]]}
    stale = tmp_path / "second"
    stale.mkdir()
    (stale / "plan.json").write_text(json.dumps(skewed))
    (stale / "summary.json").write_text((tmp_path / "first" / "summary.json").read_text())
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

    # Overwrite an output while reusing the plan it holds: the plan is read before the output is cleared.
    own = tmp_path / "first" / "plan.json"
    kept_plan = json.loads(own.read_text())
    fourth = run(
        RunRequest(input=data, output=tmp_path / "first", partitions=4, mode="overwrite", plan_from=own, report=False),
        spark=spark,
    )
    assert fourth.plan_reused == {"from": str(own), "kept": len(kept_plan["items"]), "moved": 0}
    assert json.loads(own.read_text())["items"] == kept_plan["items"]


def test_plan_from_a_plan_for_other_partitions_is_refused(spark, dataset: tuple[Path, pd.DataFrame], tmp_path: Path) -> None:
    (tmp_path / "plan.json").write_text(json.dumps({"partitions": 8, "items": []}))
    with pytest.raises(ValueError) as caught:
        run(RunRequest(input=dataset[0], output=tmp_path / "out", partitions=4, plan_from=tmp_path), spark=spark)
    assert str(caught.value) == f"plan-from: {tmp_path / 'plan.json'} was made for 8 partitions, this run has 4"
    assert not (tmp_path / "out").exists()


def _store(path: Path, counts: dict[tuple[object, ...], int], partitions: int, columns: list[str]) -> PlanStore:
    """A plan store written as `balanced_apply(store=…)` writes it: plan_keys, then save_plan."""
    store = PlanStore(path)
    store.save_plan(plan_keys(counts, {}, partitions, columns))
    return store


def test_plan_from_a_one_column_store_maps_its_keys_to_items_and_counts_kept_and_moved(tmp_path: Path) -> None:
    # "a" is split into two shards; the null key (rows without a type are quarantined) is left out.
    plan = plan_keys(
        {("a",): 900, ("b",): 300, ("c",): 200, (None,): 5}, {("a",): {0: 300, 1: 300, 2: 300}}, 3, ["type"]
    )
    assert {item.shard for item in plan.owner if item.key == ("a",)} == {0, 1}
    PlanStore(tmp_path / "store").save_plan(plan)
    expected = {Item(str(item.key[0]), item.shard): slot for item, slot in plan.owner.items() if item.key != (None,)}
    for source in (tmp_path / "store", tmp_path / "store" / "plan.json"):  # the directory or the file
        reused = load_plan(source, 3)
        assert reused.source == str(source) and reused.owner == expected
    # This run keeps b and a's shards where the store had them, moves c, and adds a type the store never saw.
    owner = {**expected, Item("c"): (expected[Item("c")] + 1) % 3, Item("new"): 0}
    ran = SlotPlan(partitions=3, owner=owner, counts={}, load_before=[0] * 3, load_after=[0] * 3)
    assert load_plan(tmp_path / "store", 3).outcome(ran) == {"from": str(tmp_path / "store"), "kept": 3, "moved": 1}


def test_plan_from_a_store_of_several_columns_or_other_partitions_is_refused(tmp_path: Path) -> None:
    _store(tmp_path / "two", {("a", "x"): 10, ("b", "y"): 5}, 3, ["type", "entity"])
    with pytest.raises(ValueError) as caught:
        load_plan(tmp_path / "two", 3)
    assert str(caught.value) == (
        f"plan-from: {tmp_path / 'two' / 'plan.json'} is a plan store keyed by 2 columns (type, entity); "
        "only a store keyed by one column (the type) maps onto the pipeline's types"
    )
    _store(tmp_path / "one", {("a",): 10, ("b",): 5}, 3, ["type"])
    with pytest.raises(ValueError) as caught:
        load_plan(tmp_path / "one", 4)
    assert str(caught.value) == f"plan-from: {tmp_path / 'one' / 'plan.json'} was made for 3 partitions, this run has 4"
    floats = _store(tmp_path / "floats", {(1.5,): 10}, 3, ["type"])
    with pytest.raises(ValueError) as caught:
        load_plan(floats.path, 3)
    assert str(caught.value) == (
        f"plan-from: {floats.path / 'plan.json'} cannot be used: its key type holds 1.5, not a type name"
    )
    stored = json.loads((tmp_path / "one" / "plan.json").read_text())
    (tmp_path / "v9.json").write_text(json.dumps({**stored, "version": 9}))
    with pytest.raises(ValueError) as caught:
        load_plan(tmp_path / "v9.json", 3)
    assert str(caught.value) == (
        f"plan-from: {tmp_path / 'v9.json'} cannot be used: it is a plan store of version 9; "
        "this rebalancer reads version 1"
    )
    (tmp_path / "bad.json").write_text(json.dumps({**stored, "items": [{"key": ["a"], "shard": None, "slot": 7}]}))
    with pytest.raises(ValueError) as caught:
        load_plan(tmp_path / "bad.json", 3)
    assert str(caught.value) == (
        f"plan-from: {tmp_path / 'bad.json'} cannot be used: items[0]: slot must be an int in [0, 3), got 7"
    )


@pytest.mark.timeout(600)
def test_run_reuses_a_plan_store_keyed_by_type(spark, dataset: tuple[Path, pd.DataFrame], tmp_path: Path) -> None:
    data, good = dataset
    counts = {(name,): int(rows) for name, rows in good["type"].value_counts().items()}
    store = _store(tmp_path / "store", counts, 4, ["type"])
    stored = {Item(item.key[0], item.shard): slot for item, slot in store.previous_owner(["type"], 4).items()}
    done = run(RunRequest(input=data, output=tmp_path / "out", partitions=4, plan_from=store.path), spark=spark)
    placed = {
        Item(row["type"], WHOLE if row["shard"] is None else row["shard"]): row["slot"]
        for row in json.loads((tmp_path / "out" / "plan.json").read_text())["items"]
    }
    kept = sum(1 for item, slot in placed.items() if stored.get(item) == slot)
    moved = sum(1 for item, slot in placed.items() if item in stored and stored[item] != slot)
    assert done.plan_reused == {"from": str(store.path), "kept": kept, "moved": moved}
    assert kept > 0  # the store's types are the run's: its whole types are kept where it put them
    assert done.plan_line() == f"plan: reused from {store.path} ({kept} items kept, {moved} moved)"


@pytest.mark.parametrize("where", ["store", "file://{root}/store"])
def test_cli_refuses_a_plan_store_of_several_columns_in_one_line_before_spark_starts(
    dataset: tuple[Path, pd.DataFrame], tmp_path: Path, where: str
) -> None:
    """A local --plan-from with --partitions is checked with the request: no JVM start, no Spark log."""
    _store(tmp_path / "store", {("a", "x"): 10}, 2, ["type", "entity"])
    done = subprocess.run(
        [EXE, "pipeline", "run", "--input", str(dataset[0]), "--output", "out", "--partitions", "2",
         "--plan-from", where.format(root=tmp_path), "--master", "local[1]"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False,
    )
    shown = "store/plan.json" if where == "store" else f"file://{tmp_path}/store/plan.json"
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"rebalancer: error: plan-from: {shown} is a plan store keyed by 2 columns (type, entity); "
        "only a store keyed by one column (the type) maps onto the pipeline's types"
    ]
    assert not (tmp_path / "out").exists()  # refused before Spark started: not even its log
