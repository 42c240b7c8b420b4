"""`pipeline run` shows its stages: a live line on a terminal, a line per stage in a pipe, none with --quiet."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from rebalancer.cli import main
from rebalancer.pipeline.batch import run_batch
from rebalancer.pipeline.ingest.inspect import inspect_input
from rebalancer.pipeline.terminal import stages


def _ticks(*times: float) -> Iterator[float]:
    yield from times


def test_a_pipe_gets_a_line_as_each_stage_starts_and_one_with_its_seconds_as_it_ends() -> None:
    out = io.StringIO()
    console = Console(file=out, width=80)  # a file: not a terminal
    clock = _ticks(0.0, 2.13, 2.5, 10.0)
    with stages(console, clock=lambda: next(clock)) as step:
        step("read and count")
        step("plan")
    # The last stage ends with the block; 7.5 s is the plan's.
    assert out.getvalue().splitlines() == [
        "stage: read and count ...",
        "stage: read and count done (2.1 s)",
        "stage: plan ...",
        "stage: plan done (7.5 s)",
    ]


def test_quiet_prints_no_stage() -> None:
    out = io.StringIO()
    with stages(Console(file=out, width=80), quiet=True) as step:
        step("read and count")
        step("plan")
    assert out.getvalue() == ""


def test_a_failed_stage_prints_its_start_and_no_end() -> None:
    out = io.StringIO()
    with pytest.raises(RuntimeError), stages(Console(file=out, width=80)) as step:
        step("read and count")
        raise RuntimeError("the read failed")
    assert out.getvalue().splitlines() == ["stage: read and count ..."]


@pytest.mark.spark
def test_the_pass_reports_its_stages_in_order(spark, tmp_path: Path) -> None:
    data = tmp_path / "in.csv"
    pd.DataFrame(
        [{"ts": "2026-01-01T00:00:00", "type": t, "entity": "e", "value": 1.0} for t in ("a", "b", "b")]
    ).to_csv(data, index=False)
    seen: list[str] = []
    run_batch(spark, inspect_input(data), tmp_path / "out", "weighted", 2, progress=seen.append)
    assert seen == ["read and count", "plan", "quarantine", "dispatch and persist", "report"]


@pytest.mark.spark
def test_quiet_run_prints_the_summary_and_no_stage(spark, dataset, tmp_path, monkeypatch, capsys) -> None:
    data, _ = dataset
    monkeypatch.setenv("COLUMNS", "300")
    argv = ["pipeline", "run", "--input", str(data), "--out", str(tmp_path / "out"), "--partitions", "2",
            "--no-report", "--quiet"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "rows ingested" in printed
    assert [line for line in printed.splitlines() if line.startswith("stage: ")] == []
