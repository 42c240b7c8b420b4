"""Inputs and outputs as Hadoop filesystem URIs: passed to Spark as written, checked where they live."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from pipeline_data import BAD_ROWS, write_dataset

from rebalancer.cli import main
from rebalancer.pipeline import paths
from rebalancer.pipeline.batch import run_batch
from rebalancer.pipeline.ingest.inspect import inspect_input
from rebalancer.pipeline.paths import HadoopFS, UriPath, local_path, location_argument, split_uri


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err


def test_uris_are_kept_as_written_and_file_uris_are_literal_local_paths():
    # argparse's type for --input/--output/--checkpoint: a Path would fold `hdfs:///x` into `hdfs:/x`.
    for uri in ("hdfs:///telemetry", "hdfs://nn:8020/telemetry//day=1", "s3a://bucket/out", "gs://b/x",
                "abfs://c@acct.dfs.core.windows.net/x", "file:///tmp/a%20b"):
        assert location_argument(uri) == uri
    assert location_argument("out//x") == Path("out/x")
    assert split_uri("hdfs://nn:8020/t") == ("hdfs", "hdfs://nn:8020", "/t")
    assert split_uri("s3a://bucket") == ("s3a", "s3a://bucket", "")
    assert split_uri("c:/x") is None and split_uri("name:with-colon") is None
    # Hadoop takes a path literally: `%20` is three characters, not a space.
    assert local_path("file:///tmp/a%20b") == Path("/tmp/a%20b")
    assert local_path("file:/tmp/x") == Path("/tmp/x")
    assert local_path("file://localhost/tmp/x") == Path("/tmp/x")
    assert local_path("hdfs:///x") is None
    with pytest.raises(ValueError, match="host 'elsewhere'"):
        local_path("file://elsewhere/tmp/x")
    assert str(UriPath("file:///tmp/o") / "metrics") == "file:///tmp/o/metrics"
    assert str((UriPath("file:///tmp/o/") / "summary.json").with_name(".summary.json.tmp")) == (
        "file:///tmp/o/.summary.json.tmp"
    )


def test_missing_file_uri_input_exits_2_with_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    missing = f"file://{tmp_path}/nowhere"
    err = _one_line_error(capsys, ["pipeline", "run", "--input", missing, "--output", f"file://{tmp_path}/out"])
    assert err == f"rebalancer: error: input path does not exist: {missing}"
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no output, and no `file:` directory


@pytest.mark.spark
def test_hdfs_uri_reaches_spark_unchanged(spark, tmp_path, capsys, monkeypatch):
    """`--input hdfs:///telemetry` is listed through Hadoop and read by Spark as written.

    There is no HDFS here: Hadoop's answers for it are stubbed, and the reader, after recording the
    path it was handed, reads a local copy of the data.
    """
    from pyspark.sql.readwriter import DataFrameReader

    data = tmp_path / "telemetry"
    data.mkdir()
    frame = pd.DataFrame({"ts": ["2026-01-01T00:00:05Z"] * 4, "type": ["a", "a", "b", "c"],
                          "entity": ["e1", "e2", "e1", "e1"], "value": [1.0, 2.0, 3.0, 4.0]})
    frame.to_parquet(data / "part-0.parquet")
    uri = "hdfs:///telemetry"
    fake_listing = {uri: [("/telemetry/part-0.parquet", (data / "part-0.parquet").stat().st_size)]}

    class Directory:
        def isDirectory(self) -> bool:  # Hadoop's FileStatus
            return True

    monkeypatch.setattr(HadoopFS, "status", lambda self, where: Directory() if where == uri else None)
    monkeypatch.setattr(HadoopFS, "list_files", lambda self, where: fake_listing[where])
    monkeypatch.setattr(HadoopFS, "qualified", lambda self, where: where)
    handed: list[tuple[str, ...]] = []
    real_parquet = DataFrameReader.parquet

    def parquet(self, *where, **options):
        handed.append(where)
        return real_parquet(self, str(data), **options) if where == (uri,) else real_parquet(self, *where, **options)

    monkeypatch.setattr(DataFrameReader, "parquet", parquet)
    out, reports = tmp_path / "out", tmp_path / "reports"
    argv = ["pipeline", "run", "--input", uri, "--output", str(out), "--partitions", "2", "--report-dir", str(reports)]
    assert main(argv) == 0, capsys.readouterr().err
    assert handed and all(where == (uri,) for where in handed), handed  # the schema check, then the read
    summary = json.loads((reports / "summary.json").read_text())
    assert summary["input"] == uri and summary["ingested"] == 4 == summary["accepted"]
    assert sorted(p.name for p in reports.iterdir()) == ["_manifest.json", "plan.json", "report.html", "summary.json"]
    # --report-dir takes the summaries; the data stays in the output.
    assert not (out / "summary.json").exists() and (out / "metrics").is_dir()
    assert pd.read_parquet(out / "metrics")["count"].sum() == 4


@pytest.mark.spark
def test_file_uri_in_a_directory_whose_name_would_be_mangled(spark, tmp_path, capsys, monkeypatch):
    """`%20` stays three characters (Hadoop's reading), `//` is not folded into a relative `file:` directory."""
    monkeypatch.chdir(tmp_path)
    data, good = write_dataset(tmp_path / "in%20put [1]")
    out = tmp_path / "out%2Fday"
    argv = ["pipeline", "run", "--input", f"file://{data}", "--output", f"file://{out}", "--partitions", "2"]
    assert main(argv) == 0, capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in%20put [1]", "out%2Fday"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["input"] == f"file://{data}" and summary["output"] == f"file://{out}"
    assert summary["ingested"] == len(good) + len(BAD_ROWS)
    assert summary["quarantined"] == len(BAD_ROWS)
    assert pd.read_parquet(out / "metrics")["count"].sum() == len(good) == summary["accepted"]
    assert len(pd.read_parquet(out / "quarantine")) == len(BAD_ROWS)
    assert (out / "plan.json").exists() and (out / "report.html").exists()


@pytest.mark.spark
def test_remote_output_is_written_through_hadoop_and_never_locally(spark, tmp_path, monkeypatch):
    """With `file:` counted as remote, every check and write takes the Hadoop FileSystem path: Hadoop's
    local filesystem leaves its `.crc` checksum next to each file it writes, Python's I/O does not."""
    monkeypatch.setattr(paths, "LOCAL_SCHEMES", frozenset())
    data, good = write_dataset(tmp_path / "input")
    spec = inspect_input(f"file://{data}", spark=spark)
    assert spec.uri == f"file://{data}" and spec.headers  # CSV headers read through Hadoop
    out = tmp_path / "out"
    first = run_batch(spark, spec, f"file://{out}", "weighted", 2, report=False)
    for name in ("summary.json", "plan.json"):
        assert (out / f".{name}.crc").exists(), name
    assert json.loads((out / "summary.json").read_text())["accepted"] == first["accepted"] == len(good)
    # The second run, asked to, reads the first's plan back through Hadoop and keeps it: nothing moves.
    second = run_batch(spark, spec, f"file://{out}", "weighted", 2, report=False, plan_from=f"file://{out}")
    assert second["plan_reused"]["moved"] == 0 and second["plan_reused"]["kept"] > 0
    assert json.loads((out / "plan.json").read_text())["moves"] == []
    with pytest.raises(FileNotFoundError, match=f"input path does not exist: file://{tmp_path}/nowhere"):
        inspect_input(f"file://{tmp_path}/nowhere", spark=spark)
    with pytest.raises(ValueError, match="is inside the input"):
        run_batch(spark, spec, f"file://{data}/out", "weighted", 2, report=False)


@pytest.mark.spark
def test_output_on_a_filesystem_spark_lacks_exits_2_without_a_local_directory(spark, tmp_path, capsys, monkeypatch):
    """The issue's `--output s3a://bucket/out`: one line from Hadoop, exit 2, no local `s3a:` directory."""
    monkeypatch.chdir(tmp_path)
    data, _good = write_dataset(tmp_path / "input")
    err = _one_line_error(capsys, ["pipeline", "run", "--input", str(data), "--output", "s3a://bucket/out"])
    # Spark's Hadoop maps s3a to S3AFileSystem, whose jar (hadoop-aws) the wheel does not ship.
    assert err.startswith("rebalancer: error: s3a://bucket/out: RuntimeException"), err
    assert "S3AFileSystem not found" in err and "Hadoop connector" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["input"]
