"""Issue 11 at the CLI: every refused input or output is one line on stderr, exit 2, before Spark starts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rebalancer.cli import main

ROW = {"ts": "2026-01-01T00:00:00Z", "type": "a", "entity": "e", "value": 1.0}


@pytest.fixture(autouse=True)
def _no_spark_started(monkeypatch):
    """A refused run must fail before Spark: starting a session here fails the test."""
    import rebalancer.pipeline.session.build as session

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("Spark was started for a run that should have been refused")

    monkeypatch.setattr(session, "build_session", refuse)


def _csv(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([ROW]).to_csv(path, index=False)
    return path


def _fails(capsys, argv: list[str], message: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert message in err, err
    return err


def test_parquet_with_duplicate_column_names_exits_2(tmp_path, capsys):
    data = tmp_path / "in"
    data.mkdir()
    table = pa.Table.from_arrays(
        [pa.array(["2026-01-01T00:00:00Z"]), pa.array(["a"]), pa.array(["e"]), pa.array([1.0]), pa.array([2.0])],
        names=["ts", "type", "entity", "value", "value"],
    )
    pq.write_table(table, data / "dup.parquet")
    err = _fails(capsys, ["pipeline", "run", "--input", str(data), "--output", str(tmp_path / "out")],
                 "duplicate column 'value'")
    assert "dup.parquet" in err
    assert not (tmp_path / "out").exists()


def test_parquet_columns_equal_but_for_case_are_duplicates(tmp_path, capsys):
    """Spark matches Parquet columns case-insensitively, so `value` and `VALUE` are ambiguous to it."""
    table = pa.table({"ts": ["2026-01-01T00:00:00Z"], "type": ["a"], "entity": ["e"], "value": [1.0], "VALUE": [2.0]})
    pq.write_table(table, tmp_path / "case.parquet")
    _fails(capsys, ["pipeline", "run", "--input", str(tmp_path / "case.parquet"), "--output", str(tmp_path / "o")],
           "duplicate column 'value'")


def test_output_equal_to_the_input_file_exits_2(tmp_path, capsys):
    data = _csv(tmp_path / "in.csv")
    before = data.read_bytes()
    _fails(capsys, ["pipeline", "run", "--input", str(data), "--output", str(data)], "is the input file")
    assert data.read_bytes() == before


def test_output_equal_to_the_input_directory_exits_2(tmp_path, capsys):
    data = tmp_path / "in"
    _csv(data / "a.csv")
    _fails(capsys, ["pipeline", "run", "--input", str(data), "--output", str(data)], "is the input directory")
    # The same directory under another spelling is still the same directory.
    _fails(capsys, ["pipeline", "run", "--input", str(data), "--output", f"{data}/../in/."], "is the input directory")
    assert sorted(p.name for p in data.iterdir()) == ["a.csv"]


def test_output_inside_the_input_tree_exits_2(tmp_path, capsys):
    data = tmp_path / "in"
    _csv(data / "a.csv")
    _fails(capsys, ["pipeline", "run", "--input", str(data), "--output", str(data / "sub" / "out")],
           "inside the input")
    assert not (data / "sub").exists()
    link = tmp_path / "link"
    link.symlink_to(data)
    _fails(capsys, ["pipeline", "run", "--input", str(data), "--output", str(link / "out")], "inside the input")


def test_input_inside_the_output_tree_exits_2(tmp_path, capsys):
    """Reading OUT/metrics while writing OUT would overwrite the rows being read."""
    out = tmp_path / "out"
    _csv(out / "metrics" / "a.csv")
    _fails(capsys, ["pipeline", "run", "--input", str(out / "metrics"), "--output", str(out)], "inside the output")


def test_output_under_a_regular_file_exits_2(tmp_path, capsys):
    data = _csv(tmp_path / "in.csv")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    _fails(capsys, ["pipeline", "run", "--input", str(data), "--output", str(blocker / "out")], "not a directory")
    _fails(capsys, ["pipeline", "run", "--input", str(data), "--output", str(blocker)], "must be a directory")


def test_read_only_output_directory_exits_2(tmp_path, capsys):
    """Without write permission. Root ignores mode bits, so as root the child drops that capability."""
    data = _csv(tmp_path / "in.csv")
    readonly = tmp_path / "readonly"
    readonly.mkdir()
    readonly.chmod(0o555)
    argv = ["pipeline", "run", "--input", str(data), "--output", str(readonly / "out")]
    try:
        if os.geteuid() != 0:
            _fails(capsys, argv, "not writable")
            return
        if shutil.which("setpriv") is None:
            pytest.skip("root without setpriv: cannot drop CAP_DAC_OVERRIDE")
        drop = "-dac_override,-dac_read_search"
        # build_session is not patched in the child: a one-line exit 2 shows the refusal came first.
        child = subprocess.run(
            ["setpriv", f"--inh-caps={drop}", f"--bounding-set={drop}", sys.executable, "-c",
             "import sys; from rebalancer.cli import main; sys.exit(main(sys.argv[1:]))", *argv],
            capture_output=True, text=True, timeout=120, check=False,
        )
        assert child.returncode == 2, child.stderr
        lines = child.stderr.strip().splitlines()
        assert len(lines) == 1 and "not writable" in lines[0], child.stderr
        assert not (readonly / "out").exists()
    finally:
        readonly.chmod(0o755)


def test_directory_mixing_csv_and_jsonl_exits_2(tmp_path, capsys):
    data = tmp_path / "in"
    _csv(data / "a.csv")
    (data / "b.jsonl").write_text('{"ts": "2026-01-01T00:00:00Z", "type": "a", "entity": "e", "value": 1}\n')
    _fails(capsys, ["pipeline", "run", "--input", str(data), "--output", str(tmp_path / "out")],
           "mixes .csv and .jsonl files")


def test_unknown_extension_next_to_data_exits_2(tmp_path, capsys):
    data = tmp_path / "in"
    _csv(data / "a.csv")
    (data / "notes.txt").write_text("not telemetry\n")
    err = _fails(capsys, ["pipeline", "run", "--input", str(data), "--output", str(tmp_path / "out")],
                 "cannot tell the input format")
    assert "notes.txt" in err


def test_missing_columns_error_names_every_missing_column(tmp_path, capsys):
    data = tmp_path / "in.csv"
    pd.DataFrame({"ts": ["2026-01-01T00:00:00Z"], "type": ["a"]}).to_csv(data, index=False)
    _fails(capsys, ["pipeline", "run", "--input", str(data), "--output", str(tmp_path / "out")],
           "missing columns 'entity', 'value'")


def test_columns_mapping_names_the_mapped_missing_column(tmp_path, capsys):
    data = tmp_path / "in.csv"
    pd.DataFrame({"event_time": ["2026-01-01T00:00:00Z"], "metric": ["a"], "host": ["h"], "v": [1.0]}).to_csv(
        data, index=False
    )
    _fails(capsys, ["pipeline", "run", "--input", str(data), "--output", str(tmp_path / "out"),
                    "--columns", "ts=event_time,type=metric,entity=hostname,value=v"],
           "missing column 'hostname' (entity)")
    _fails(capsys, ["pipeline", "run", "--input", str(data), "--columns", "ts=event_time,time=x"],
           "columns: unknown column 'time'")
    _fails(capsys, ["pipeline", "run", "--input", str(data), "--columns", "ts"], "columns: expected NAME=SOURCE")
    _fails(capsys, ["pipeline", "run", "--input", str(data), "--columns", "ts=v,value=v"],
           "columns: 'v' is mapped twice")


def test_run_help_says_timestamps_without_offset_are_utc(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["pipeline", "run", "--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "without an offset are UTC" in text
    assert "--columns" in text
