"""The public CLI: bad input gives one line on stderr, exit 2 and no output; a good run writes everything."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from rebalancer.cli import main


def _fails_cleanly(capsys, argv: list[str], message: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert message in err, err


def test_missing_input_path_exits_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    _fails_cleanly(capsys, ["pipeline", "run", "--input", str(tmp_path / "nope"), "--output", str(out)],
                   "input path does not exist")
    assert not out.exists()


def test_missing_column_exits_2_and_writes_nothing(tmp_path, capsys):
    data = tmp_path / "in"
    data.mkdir()
    pd.DataFrame({"ts": ["2026-01-01T00:00:00Z"], "type": ["a"], "value": [1.0]}).to_csv(data / "x.csv", index=False)
    out = tmp_path / "out"
    _fails_cleanly(capsys, ["pipeline", "run", "--input", str(data), "--output", str(out)], "missing column 'entity'")
    assert not out.exists()


def test_missing_column_in_jsonl_exits_2(tmp_path, capsys):
    data = tmp_path / "in.jsonl"
    data.write_text('{"ts": "2026-01-01T00:00:00Z", "type": "a", "entity": "e"}\n')
    _fails_cleanly(capsys, ["pipeline", "run", "--input", str(data), "--output", str(tmp_path / "out")],
                   "missing column 'value'")
    assert not (tmp_path / "out").exists()


def test_unreadable_parquet_file_exits_2(tmp_path, capsys):
    data = tmp_path / "in"
    data.mkdir()
    (data / "broken.parquet").write_bytes(b"this is not parquet")
    _fails_cleanly(capsys, ["pipeline", "run", "--input", str(data), "--output", str(tmp_path / "out")],
                   "unreadable file")
    assert not (tmp_path / "out").exists()


def test_unknown_format_and_bad_flags_exit_2(tmp_path, capsys):
    data = tmp_path / "in"
    data.mkdir()
    (data / "x.txt").write_text("ts,type,entity,value\n")
    _fails_cleanly(capsys, ["pipeline", "run", "--input", str(data)], "cannot tell the input format")
    _fails_cleanly(capsys, ["pipeline", "run", "--input", str(data), "--partitions", "0"], "partitions must be an int in 1..10000, got 0")
    _fails_cleanly(capsys, ["pipeline", "generate", "--out", str(tmp_path / "g"), "--events", "-1"],
                   "events must be an int in 0..100000000, got -1")
    # RunRequest's check, in the library's words (test_pipeline_run_request_cli.py), not argparse's
    _fails_cleanly(capsys, ["pipeline", "run", "--partitioning", "round-robin"],
                   "rebalancer: error: partitioning must be one of weighted, hash, got 'round-robin'")
    with pytest.raises(SystemExit) as exited:  # argparse's own check of what is no flag: exits 2 itself
        main(["pipeline", "run", "--partitionning", "hash"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --partitionning hash" in capsys.readouterr().err


@pytest.mark.spark
def test_generate_then_run_end_to_end(spark, tmp_path, capsys):
    data = tmp_path / "data"
    assert main(["pipeline", "generate", "--out", str(data), "--events", "3000", "--types", "20",
                 "--entities", "5", "--bad-rate", "0.01", "--format", "jsonl", "--minutes", "2", "--seed", "5"]) == 0
    out = tmp_path / "out"
    assert main(["pipeline", "run", "--input", str(data), "--output", str(out), "--partitions", "2"]) == 0
    printed = capsys.readouterr().out
    assert "ingested" in printed and "3,000" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ingested"] == 3000 == summary["accepted"] + summary["quarantined"]
    assert summary["quarantined"] > 0 and summary["partitioning"] == "weighted"
    for name in ("metrics", "quarantine", "plan.json", "report.html"):
        assert (out / name).exists(), name
    assert pd.read_parquet(out / "metrics")["count"].sum() == summary["accepted"]
    assert not spark.sparkContext._jsc.sc().isStopped()  # the CLI left the shared session alone


@pytest.mark.spark
def test_paths_that_look_like_rich_markup_are_printed_as_written(spark, tmp_path, capsys, monkeypatch):
    """`[bold]` in a directory name is a name, not a style; `[/x]` would make rich raise MarkupError."""
    monkeypatch.setenv("COLUMNS", "400")  # one line per path: nothing wraps in the table
    data = tmp_path / "in [bold] put"
    assert main(["pipeline", "generate", "--out", str(data), "--events", "400", "--types", "5",
                 "--entities", "3", "--format", "jsonl", "--minutes", "1", "--seed", "2"]) == 0
    assert f"files to {data}\n" in capsys.readouterr().out
    out = tmp_path / "out [red]x[/red] [/x]"
    assert main(["pipeline", "run", "--input", str(data), "--output", str(out), "--partitions", "2"]) == 0
    printed = capsys.readouterr().out
    assert str(data) in printed
    assert f"{out}/metrics/" in printed and f"{out}/summary.json" in printed
