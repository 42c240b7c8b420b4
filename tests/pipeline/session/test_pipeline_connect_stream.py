"""Stream mode through Spark Connect (the server of tests/pipeline/connect_fixtures.py): foreachBatch
runs in the server's Python worker, and the client prints progress and the summary from the state the
worker saves. Stopped after one batch, restarted, fed new files: the outputs of one local stream."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from pipeline_data import BAD_ROWS, good_frame
from stop_helpers import LINE, assert_stopped_by_ctrl_c, interrupt_after_first_line

CLI = [sys.executable, "-m", "rebalancer.cli"]
ROWS_PER_FILE = 200
FIRST_FILES = 6  # three batches of two files
LATER_FILES = 2  # one more batch, after a restart
FILES_PER_BATCH = 2
# The same in the Connect run and the local one: counts, plans and where every row went.
SAME_KEYS = ("ingested", "accepted", "quarantined", "quarantine_reasons", "types", "batches", "last_batch_id",
             "plans", "moves", "task_rows", "skew_ratio")


def _write_files(input_dir: Path, first: int, count: int, seed: int) -> int:
    """CSV files `part-{first}`… in order (a streaming source takes them by modification time): good
    rows and one bad row each. Returns the rows written."""
    input_dir.mkdir(parents=True, exist_ok=True)
    good = good_frame(events=count * (ROWS_PER_FILE - 1), seed=seed).astype({"value": "float64"})
    written = 0
    for index in range(count):
        chunk = good.iloc[index * (ROWS_PER_FILE - 1) : (index + 1) * (ROWS_PER_FILE - 1)].astype(str)
        bad = pd.DataFrame([BAD_ROWS[(first + index) % len(BAD_ROWS)][:4]], columns=list(chunk.columns))
        rows = pd.concat([chunk, bad], ignore_index=True)
        tmp = input_dir / f".part-{first + index:05d}.csv.tmp"
        rows.to_csv(tmp, index=False)
        tmp.replace(input_dir / f"part-{first + index:05d}.csv")  # never seen half-written
        written += len(rows)
    return written


def _stream(url: str, input_dir: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [*CLI, "pipeline", "run", "--stream", "--remote", url, "--input", str(input_dir), "--out", str(out),
               "--partitions", "2", "--rebalance-every", "2", "--files-per-batch", str(FILES_PER_BATCH), *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=out.parent)


def _batch_lines(run: subprocess.CompletedProcess[str], server_log: Path) -> list[tuple[int, int, bool]]:
    """(batch id, rows, re-planned) of each progress line, after checking the run ended well."""
    assert run.returncode == 0, run.stderr + run.stdout + "\n" + server_log.read_text()[-3000:]
    assert "Traceback" not in run.stderr, run.stderr
    lines = [line for line in run.stdout.splitlines() if line.startswith("batch ")]
    matches = [LINE.match(line) for line in lines]
    assert all(matches), lines
    return [(int(m.group(1)), int(m.group(2).replace(",", "")), "re-planned" in m.string) for m in matches if m]


def _frame(path: Path) -> pd.DataFrame:
    frame = pd.read_parquet(path)
    for column in ("date", "batch_id"):
        if column in frame:
            frame[column] = frame[column].astype(str)
    return frame.sort_values(sorted(frame.columns)).reset_index(drop=True)


@pytest.mark.spark
@pytest.mark.connect
@pytest.mark.postgres
@pytest.mark.timeout(1500)  # the server's start (if first), three runs through it and a local one
def test_stream_through_connect_stops_restarts_and_matches_a_local_stream(
    connect_server, spark, postgres, pg_schema, pg_connect, tmp_path
):
    from rebalancer.pipeline.ingest.inspect import inspect_input
    from rebalancer.pipeline.sinks import open_sink
    from rebalancer.pipeline.sinks.outputs import stream_query_id
    from rebalancer.pipeline.stream.driver import run_stream
    from rebalancer.pipeline.stream.state import StreamConfig

    input_dir, out = tmp_path / "input", tmp_path / "connect"
    first_rows = _write_files(input_dir, 0, FIRST_FILES, seed=21)

    # 1. --max-batches 1: exactly one batch, a normal stop (the worker's StopAfterBatches is not an error).
    lines = _batch_lines(_stream(connect_server.url, input_dir, out, "--max-batches", "1"), connect_server.log)
    assert lines == [(0, FILES_PER_BATCH * ROWS_PER_FILE, True)]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["batches"] == 1 and summary["ingested"] == FILES_PER_BATCH * ROWS_PER_FILE

    # 2. Restarted: the batch that was stopped before its commit runs now, then the rest; one line each,
    # and every 2nd batch re-plans.
    # --mode append: a restart adds to its own outputs (the default refuses an output that holds a run).
    lines = _batch_lines(_stream(connect_server.url, input_dir, out, "--available-now", "--mode", "append"), connect_server.log)
    assert lines == [(1, FILES_PER_BATCH * ROWS_PER_FILE, False), (2, FILES_PER_BATCH * ROWS_PER_FILE, True)]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["batches"] == 3 and summary["ingested"] == first_rows

    # 3. New files arrive: only they are processed, on the same checkpoint; this run also sinks them.
    later_rows = _write_files(input_dir, FIRST_FILES, LATER_FILES, seed=22)
    run = _stream(
        connect_server.url, input_dir, out, "--available-now", "--mode", "append", "--sink", postgres.url, "--sink-schema", pg_schema
    )
    assert _batch_lines(run, connect_server.log) == [(3, later_rows, False)]
    remote = json.loads((out / "summary.json").read_text())
    assert remote["ingested"] == first_rows + later_rows == remote["accepted"] + remote["quarantined"]
    assert remote["quarantined"] == FIRST_FILES + LATER_FILES  # one bad row per file
    assert sum(remote["task_rows"]) == remote["accepted"]  # task stats without an accumulator
    assert remote["skew_ratio"] is not None

    # The same input as one local stream: the same batches, outputs and counts.
    local_out = tmp_path / "local"
    config = StreamConfig(partitions=2, rebalance_every=2, files_per_batch=FILES_PER_BATCH, available_now=True)
    local = run_stream(spark, inspect_input(input_dir), local_out, config)
    assert {key: remote[key] for key in SAME_KEYS} == {key: local[key] for key in SAME_KEYS}
    for output in ("metrics", "quarantine"):
        pd.testing.assert_frame_equal(_frame(out / output), _frame(local_out / output))
    metrics = _frame(out / "metrics")
    assert sorted(metrics["batch_id"].unique()) == ["0", "1", "2", "3"]  # each batch once, no duplicates
    assert not metrics.duplicated(["batch_id", "type", "entity", "minute"]).any()
    assert metrics["count"].sum() == remote["accepted"]
    assert json.loads((out / "plan.json").read_text()) == json.loads((local_out / "plan.json").read_text())

    # The sink ran in the server's worker: batch 3 committed once, with the rows of its Parquet output.
    assert open_sink(postgres.url, pg_schema).committed_batches(stream_query_id(out / "_checkpoint")) == [3]
    batch = metrics[metrics["batch_id"] == "3"]
    in_db = pg_connect.execute(f"SELECT count(*), sum(count) FROM {pg_schema}.metrics WHERE batch_id = 3").fetchone()
    assert (in_db[0], int(in_db[1])) == (len(batch), int(batch["count"].sum()))
    assert pg_connect.execute(f"SELECT count(*) FROM {pg_schema}.metrics").fetchone()[0] == len(batch)
    assert pg_connect.execute(f"SELECT count(*) FROM {pg_schema}.quarantine").fetchone()[0] == LATER_FILES
    assert remote["sink"]["batches"] == 1 and remote["sink"]["tables"]["metrics"]["rows"] == len(batch)


@pytest.mark.spark
@pytest.mark.connect
@pytest.mark.timeout(1200)  # the server's start (if first), a first micro-batch, then the stop
def test_ctrl_c_stops_a_stream_through_connect_and_exits_130(connect_server, tmp_path):
    input_dir, out = tmp_path / "input", tmp_path / "out"
    _write_files(input_dir, 0, 3, seed=23)
    # A trigger every 2 s over one file per batch: the query is still running when the signal comes.
    command = [*CLI, "pipeline", "run", "--stream", "--remote", connect_server.url, "--input", str(input_dir),
               "--out", str(out), "--partitions", "2"]
    assert_stopped_by_ctrl_c(*interrupt_after_first_line(command, tmp_path), out, 3)


def test_the_processor_travels_to_the_connect_worker_and_resumes_from_the_saved_state(tmp_path):
    """Pickled for the server's worker without its lock or the client's callback; unpickled, it reads
    the state file again (a worker started afresh continues from what was saved)."""
    from pyspark import cloudpickle

    from rebalancer.pipeline.stream.processor import BatchProcessor
    from rebalancer.pipeline.stream.state import StreamConfig, StreamState

    path = tmp_path / "rebalancer" / "state.json"
    state = StreamState(path, 2)
    processor = BatchProcessor(tmp_path / "out", StreamConfig(partitions=2), state)
    processor.on_batch = print  # the client's; never sent
    state.data.batches = 7
    state.save()
    state.data.batches = 99  # in memory only: not what a worker must start from
    copy = pickle.loads(cloudpickle.dumps(processor))
    assert copy.state.data.batches == 7 and copy.state.path == path
    assert copy.on_batch is None and copy.lock is not processor.lock
    assert copy.lock.acquire(blocking=False)


def test_a_connect_stop_after_batches_is_told_from_other_failures():
    from rebalancer.pipeline.stream.query import stopped_after_batches
    from rebalancer.pipeline.stream.state import StopAfterBatches

    worker_text = (
        "[STREAM_FAILED] Query [id = 1] terminated with exception: [PYTHON_EXCEPTION] Found error inside "
        "foreachBatch Python process: Traceback (most recent call last):\n  File \"x.py\", line 1\n"
        "rebalancer.pipeline.stream.StopAfterBatches: stopping before batch 2\n SQLSTATE: 38000"
    )
    assert stopped_after_batches(RuntimeError(worker_text))
    assert not stopped_after_batches(RuntimeError(worker_text.replace("StopAfterBatches", "InjectedCrash")))
    assert not stopped_after_batches(RuntimeError("StopAfterBatches mentioned in a user's value"))
    assert stopped_after_batches(RuntimeError(f"{StopAfterBatches.__module__}.StopAfterBatches: x"))
