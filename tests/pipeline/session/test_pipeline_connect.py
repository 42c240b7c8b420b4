"""Spark Connect: the pipeline through a real local server (tests/pipeline/connect_fixtures.py) gives
the outputs of a local run, with task stats gathered without an accumulator."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from rebalancer.cli import main
from rebalancer.pipeline.handler.builtin import STATS_COLUMNS, with_stats_columns

CLI = [sys.executable, "-m", "rebalancer.cli"]
# The same across the two runs: the inputs' counts, the plan, and where every row went.
SAME_KEYS = (
    "ingested",
    "accepted",
    "quarantined",
    "quarantine_reasons",
    "types",
    "partitions",
    "sharded_types",
    "planned_load",
    "hash_load",
    "task_rows",
)


def _frame(path) -> pd.DataFrame:
    frame = pd.read_parquet(path)
    if "date" in frame:
        frame["date"] = frame["date"].astype(str)
    return frame.sort_values(sorted(frame.columns)).reset_index(drop=True)


@pytest.mark.spark
@pytest.mark.connect
@pytest.mark.timeout(1200)  # the server's start, a run through it and a local run, on a loaded 2-core box
@pytest.mark.parametrize("partitioning", ["weighted", "hash"])
def test_cli_run_through_spark_connect_matches_a_local_run(connect_server, spark, dataset, tmp_path, partitioning):
    """weighted: one handler call per task; hash: one per type, several per task, whose stats merge
    per task as the accumulator's updates do."""
    from rebalancer.pipeline.batch import run_batch
    from rebalancer.pipeline.ingest.inspect import inspect_input

    data, _good = dataset
    remote_out = tmp_path / "connect"
    run = subprocess.run(
        [*CLI, "pipeline", "run", "--remote", connect_server.url, "--input", str(data),
         "--out", str(remote_out), "--partitions", "4", "--partitioning", partitioning, "--no-report"],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr + "\n" + connect_server.log.read_text()[-3000:]
    assert "Traceback" not in run.stderr, run.stderr

    local = run_batch(
        spark, inspect_input(data), tmp_path / "local", partitioning=partitioning, partitions=4, report=False
    )
    remote = json.loads((remote_out / "summary.json").read_text())
    assert {key: remote[key] for key in SAME_KEYS} == {key: local[key] for key in SAME_KEYS}
    # Task stats without an accumulator: every accepted row counted once, on the task the plan named.
    assert sum(remote["task_rows"]) == remote["accepted"] == len(_good)
    assert remote["task_rows"] == remote["planned_load"]
    assert len(remote["task_seconds"]) == 4 and all(s >= 0 for s in remote["task_seconds"])
    assert remote["skew_ratio"] == local["skew_ratio"]
    for output in ("metrics", "quarantine"):
        pd.testing.assert_frame_equal(_frame(remote_out / output), _frame(tmp_path / "local" / output))
    assert json.loads((remote_out / "plan.json").read_text()) == json.loads((tmp_path / "local" / "plan.json").read_text())


# balanced_apply through Connect runs in a process of its own: see the script's docstring for why.
CONNECT_APPLY = Path(__file__).parent.parent / "connect_apply_run.py"
NO_STATS = "task stats are unavailable on Spark Connect (no accumulators)"


def _by_key(path: Path) -> pd.DataFrame:
    frame = pd.read_parquet(path)
    return frame.sort_values(list(frame.columns), na_position="first").reset_index(drop=True)


@pytest.mark.spark
@pytest.mark.connect
@pytest.mark.timeout(900)  # the server's start (if this test runs first) and three cases through it
def test_balanced_apply_through_spark_connect_equals_apply_in_pandas(connect_server, tmp_path):
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, str(CONNECT_APPLY), connect_server.url, str(out)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:] + "\n" + connect_server.log.read_text()[-3000:]
    cases = json.loads((out / "cases.json").read_text())
    assert list(cases) == ["whole", "split_safe", "combine"]
    for name, case in cases.items():
        balanced, plain = _by_key(out / f"{name}.balanced.parquet"), _by_key(out / f"{name}.plain.parquet")
        # Exactly applyInPandas' rows (the sums are of quarters: exact in any order).
        pd.testing.assert_frame_equal(balanced, plain, check_exact=True)
        assert case["stats_available"] is False and case["task_stats_error"] == NO_STATS, name
    # Null keys form one group, and every row is counted once.
    whole = _by_key(out / "whole.balanced.parquet")
    assert whole["key"].isna().sum() == 1 and whole.loc[whole["key"].isna(), "n"].tolist() == [6]
    assert whole["n"].sum() == 900 + sum(10 + i for i in range(10)) + 6

    # partitions=None took the server's default parallelism (its spark.sql.shuffle.partitions=4), and
    # without split_by the hot key (90% of the rows) stays whole on one task.
    assert cases["whole"]["partitions"] == 4
    assert cases["whole"]["split"] == [] and len(cases["whole"]["hot_slots"]) == 1
    assert max(cases["whole"]["planned_rows"]) == 900
    # With split_by the hot key is split into shards on several tasks; with combine they merge back.
    for name in ("split_safe", "combine"):
        assert cases[name]["split"] == [["hot"]] and len(cases[name]["hot_slots"]) > 1, name
        assert max(cases[name]["planned_rows"]) < 900
    assert len(_by_key(out / "combine.balanced.parquet")) == 12  # one row per key, hot's partials merged
    # Without task stats, the placement is still checked: each task consumed exactly its planned rows.
    for name in ("whole", "split_safe"):
        assert cases[name]["task_rows"] == cases[name]["planned_rows"], name


def test_stats_columns_mark_a_call_that_returned_no_rows():
    """A call with no output still reports its rows, in one placeholder row that the data drops."""
    out = pd.DataFrame({"k": pd.Series([], dtype="int64"), "v": pd.Series([], dtype="float64")})
    placeholder = with_stats_columns(out, pid=2, rows=5, started=10.0, ended=10.5)
    assert len(placeholder) == 1
    assert placeholder["k"].isna().all() and placeholder["v"].isna().all()
    assert placeholder[["_stats_task", "_stats_rows", "_stats_start", "_stats_end", "_stats_only"]].iloc[0].tolist() == [
        2, 5, 10.0, 10.5, True
    ]
    full = with_stats_columns(pd.DataFrame({"k": [1, 2, 3], "v": [0.5, 1.5, 2.5]}), pid=0, rows=9, started=1.0, ended=2.0)
    assert list(full.columns) == ["k", "v", *STATS_COLUMNS]
    assert full["k"].tolist() == [1, 2, 3] and full["k"].dtype == "int64"  # data untouched
    assert full["_stats_call"].nunique() == 1 and not full["_stats_only"].any()
    assert (full["_stats_rows"] == 9).all()


def test_remote_takes_only_a_connect_url(tmp_path, capsys):
    argv = ["pipeline", "run", "--input", str(tmp_path / "nope"), "--out", str(tmp_path / "out")]
    assert main([*argv, "--remote", "spark://127.0.0.1:7077"]) == 2
    assert capsys.readouterr().err.strip() == (
        "rebalancer: error: remote must be a Spark Connect URL sc://HOST:PORT, got 'spark://127.0.0.1:7077'"
    )
    assert main([*argv, "--remote", "sc://a:1", "--master", "local[2]"]) == 2
    assert "give --master or --remote, not both" in capsys.readouterr().err


class _FakeConnectConf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class _FakeConnectSession:
    """Shaped like pyspark's Connect session: `sparkContext` raises, `conf` answers."""

    def __init__(self, values: dict[str, str]) -> None:
        self.conf = _FakeConnectConf(values)

    @property
    def sparkContext(self):
        raise AssertionError("sparkContext touched on Spark Connect")


_FakeConnectSession.__module__ = "pyspark.sql.connect.session"


def test_default_parallelism_never_touches_the_spark_context_on_connect(spark):
    from rebalancer.pipeline.session.build import default_parallelism
    from rebalancer.pipeline.session.connect import is_connect

    assert default_parallelism(spark) == spark.sparkContext.defaultParallelism and not is_connect(spark)
    assert is_connect(_FakeConnectSession({}))
    assert default_parallelism(_FakeConnectSession({"spark.sql.shuffle.partitions": "7"})) == 7
    both = {"spark.sql.shuffle.partitions": "7", "spark.default.parallelism": "3"}
    assert default_parallelism(_FakeConnectSession(both)) == 3
    assert default_parallelism(_FakeConnectSession({})) == 200  # Spark's own default
