"""`RunRequest`'s checks, the output modes and `generate --overwrite`: no Spark needed.

Each case a new user met: a second run mixing its outputs into the first's `out/`, a stream's
batch_id=N/ folders next to a batch run's date=…/ ones, a stale report.html, and `generate` with
fewer files leaving the older ones to be read too.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from rebalancer._extras import MissingExtraError
from rebalancer.pipeline.generate import GenerateConfig, generate
from rebalancer.pipeline.ingest.inspect import inspect_input
from rebalancer.pipeline.kafka.telemetry import parse_kafka_url
from rebalancer.pipeline.outputs.summary import RunSummary
from rebalancer.pipeline.resolved import RunRequest
from rebalancer.pipeline.routing.handler_map import Pipeline
from rebalancer.pipeline.stream.state import StreamConfig

EXE = str(Path(sys.executable).with_name("rebalancer"))


def _batch_run(out: Path) -> Path:
    """What a batch run leaves: metrics by date, quarantine, the report files and a handler's plan store."""
    (out / "metrics" / "date=2026-01-01").mkdir(parents=True)
    (out / "metrics" / "date=2026-01-01" / "part-0.parquet").write_bytes(b"x")
    (out / "quarantine").mkdir()
    (out / "_plans" / "top").mkdir(parents=True)
    for name in ("summary.json", "plan.json", "report.html"):
        (out / name).write_text("{}")
    return out


def _stream_run(out: Path) -> Path:
    (out / "metrics" / "batch_id=0" / "date=2026-01-01").mkdir(parents=True)
    (out / "_checkpoint" / "rebalancer").mkdir(parents=True)
    (out / "_checkpoint" / "rebalancer" / "state.json").write_text("{}")
    (out / "summary.json").write_text("{}")
    return out


def _checkpoint(where: Path) -> Path:
    """What a stream leaves in its --checkpoint: Spark's query checkpoint and the rebalancer's state."""
    (where / "query").mkdir(parents=True)
    (where / "query" / "metadata").write_text('{"id": "q"}')
    (where / "rebalancer").mkdir()
    (where / "rebalancer" / "state.json").write_text("{}")
    return where


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"partitions": 0}, "partitions must be an int in 1..10000, got 0"),
        ({"partitions": True}, "partitions must be an int in 1..10000, got True"),
        ({"mode": "replace"}, "mode must be one of error, overwrite, append, got 'replace'"),
        ({"partitioning": "range"}, "partitioning must be one of weighted, hash, got 'range'"),
        ({"cost": "bytes"}, "cost must be one of rows, seconds, got 'bytes'"),
        ({"rebalance_every": 0, "stream": True}, "rebalance-every must be an int in 1..1000000000, got 0"),
        ({"max_moves": -1}, "max-moves must be an int in 0..1000000000, got -1"),
        ({"files_per_batch": 0}, "files-per-batch must be an int in 1..1000000000, got 0"),
        ({"group_cost": -2}, "group-cost must be an int in 0..1000000000, got -2"),
        ({"format": "xml"}, "format must be one of parquet, csv, jsonl, got 'xml'"),
        # issue 42, item 18: what RunRequest used to take, to fail later inside run() in other words
        ({"kafka_timeout": math.nan, "input": "kafka://h:9092/t"}, "kafka-timeout must be a finite number > 0 and at most 86400, got nan"),
        ({"kafka_timeout": math.inf, "input": "kafka://h:9092/t"}, "kafka-timeout must be a finite number > 0 and at most 86400, got inf"),
        ({"kafka_timeout": "5", "input": "kafka://h:9092/t"}, "kafka-timeout must be a finite number > 0 and at most 86400, got '5'"),
        ({"kafka_timeout": True, "input": "kafka://h:9092/t"}, "kafka-timeout must be a finite number > 0 and at most 86400, got True"),
        ({"group_cost": math.nan}, "group-cost must be an int in 0..1000000000, got nan"),
        ({"group_cost": 1.5}, "group-cost must be an int in 0..1000000000, got 1.5"),
        ({"group_cost": math.inf}, "group-cost must be an int in 0..1000000000, got inf"),
        ({"group_cost": 2.0}, "group-cost must be an int in 0..1000000000, got 2.0"),
        ({"input": 123}, "input must be a path or a URI (str or Path), or an inspected input, got 123 (int)"),
        ({"input": None}, "input must be a path or a URI (str or Path), or an inspected input, got None (NoneType)"),
        ({"input": ""}, "input must be a path or a URI (str or Path), or an inspected input, got ''"),
        ({"output": None}, "output must be a path or a URI (str or Path), got None (NoneType)"),
        ({"checkpoint": 7, "stream": True}, "checkpoint must be a path or a URI (str or Path), got 7 (int)"),
        ({"sink": "postgresql://u:Secret@h/db"}, "sink must be a PostgresSink (opened from a URL), got <str, hidden>"),
        ({"handlers": "handlers.py"}, "handlers must be a Pipeline (rebalancer.pipeline.Pipeline), got 'handlers.py'"),
        ({"columns": {"time": "ts"}}, "columns: unknown column 'time' (the columns are ts, type, entity, value)"),
        ({"columns": {"ts": ""}}, "columns: the source name for 'ts' is empty"),
        ({"columns": {"ts": 3}}, "columns must map column names to the input's names (str to str), got {'ts': 3} (dict)"),
        ({"columns": "ts=t"}, "columns must map column names to the input's names (str to str), got 'ts=t'"),
        ({"rebalance_every": 1.5, "stream": True}, "rebalance-every must be an int in 1..1000000000, got 1.5"),
        ({"max_batches": True, "stream": True}, "max-batches must be an int in 1..1000000000, got True"),
        ({"max_moves": 2.0, "stream": True}, "max-moves must be an int in 0..1000000000, got 2.0"),
        ({"files_per_batch": False, "stream": True}, "files-per-batch must be an int in 1..1000000000, got False"),
        ({"stream": 1}, "stream must be True or False, got 1"),
        ({"available_now": "yes", "stream": True}, "available-now must be True or False, got 'yes'"),
        ({"report": None}, "report must be True or False, got None"),
        ({"compare_hash": 0}, "compare-hash must be True or False, got 0"),
        # every numeric setting has an upper bound, checked before Spark starts: 10**30 was a Py4J
        # error inside the run, 10**6 partitions over 200 rows ran 9 minutes, a group cost of 10**47
        # failed in the planner ("throughput[0] must fit in int64")
        ({"partitions": 10**30}, f"partitions must be an int in 1..10000, got {10**30}"),
        ({"partitions": 10**6}, "partitions must be an int in 1..10000, got 1000000"),
        ({"group_cost": 10**47}, f"group-cost must be an int in 0..1000000000, got {10**47}"),
        ({"rebalance_every": 10**9 + 1, "stream": True}, "rebalance-every must be an int in 1..1000000000, got 1000000001"),
        ({"max_moves": 10**10, "stream": True}, "max-moves must be an int in 0..1000000000, got 10000000000"),
        ({"max_batches": 2**63, "stream": True}, f"max-batches must be an int in 1..1000000000, got {2**63}"),
        ({"files_per_batch": 2**31, "stream": True}, "files-per-batch must be an int in 1..1000000000, got 2147483648"),
        ({"kafka_timeout": 1e300, "input": "kafka://h:9092/t"}, "kafka-timeout must be a finite number > 0 and at most 86400, got 1e+300"),
        ({"kafka_timeout": 86401, "input": "kafka://h:9092/t"}, "kafka-timeout must be a finite number > 0 and at most 86400, got 86401"),
    ],
)
def test_a_bad_request_is_refused_naming_the_field(fields: dict, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        RunRequest(**{"input": "data", **fields})
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        # issue 42, item 19: every stream-only setting refused alike in a batch run
        ({"max_moves": 3}, "max-moves: is for a stream (--stream), got 3"),
        ({"files_per_batch": 2}, "files-per-batch: is for a stream (--stream), got 2"),
        ({"available_now": True}, "available-now: is for a stream (--stream), got True"),
        ({"checkpoint": "ck"}, "checkpoint: is for a stream (--stream), got ck"),
        ({"max_batches": 2}, "max-batches: is for a stream (--stream), got 2"),
        ({"rebalance_every": 2}, "rebalance-every: is for a stream (--stream), got 2"),
        ({"checkpoint": "s3a://AKID:Secret@bucket/ck"}, "checkpoint: is for a stream (--stream), got s3a://***@bucket/ck"),
        # issue 42, item 17: hash placement ignores a plan, and every other weighted-only setting
        ({"partitioning": "hash", "plan_from": "p.json"},
         "plan-from: is for --partitioning weighted (hash placement ignores it), got p.json"),
        ({"partitioning": "hash", "group_cost": 3},
         "group-cost: is for --partitioning weighted (hash placement ignores it), got 3"),
        ({"partitioning": "hash", "stream": True, "max_moves": 2},
         "max-moves: is for --partitioning weighted (hash placement ignores it), got 2"),
        ({"partitioning": "hash", "stream": True, "rebalance_every": 2},
         "rebalance-every: is for --partitioning weighted (hash placement ignores it), got 2"),
        # ... and the other settings a run ignored
        ({"plan_from": "p.json", "stream": True}, "plan-from: is for a batch run, not a stream (--stream), got p.json"),
        ({"group_cost": 3, "stream": True}, "group-cost: is for a batch run, not a stream (--stream), got 3"),
        ({"cost": "seconds"}, "cost: is for --handlers (it places their types), got seconds"),
        ({"kafka_timeout": 5.0}, "kafka-timeout: is for a kafka:// input, got 5.0"),
        ({"input": "kafka://h:9092/t", "format": "csv"}, "format: is for an input of files, not a kafka:// topic, got csv"),
        ({"input": "kafka://h:9092/t", "stream": True, "files_per_batch": 4},
         "files-per-batch: is for an input of files, not a kafka:// topic, got 4"),
    ],
)
def test_a_setting_the_run_would_ignore_is_refused(fields: dict, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        RunRequest(**{"input": "data", **fields})
    assert str(caught.value) == message


def test_a_setting_at_its_default_is_what_the_run_does_anyway_and_is_taken() -> None:
    """The defaults are RunRequest's own: the command passes every flag, at these values when not given."""
    batch = RunRequest(
        input="data", files_per_batch=1, available_now=False, rebalance_every=5, max_moves=None,
        max_batches=None, checkpoint=None, cost="rows", kafka_timeout=None,
    )
    assert (batch.files_per_batch, batch.available_now, batch.rebalance_every) == (1, False, 5)
    hashed = RunRequest(input="data", partitioning="hash", group_cost=0, plan_from=None, stream=True, rebalance_every=5)
    assert hashed.partitioning == "hash"
    stream = RunRequest(input="data", stream=True, max_moves=3, files_per_batch=2, available_now=True,
                        checkpoint="ck", max_batches=2, rebalance_every=2)
    assert (stream.max_moves, stream.files_per_batch, stream.max_batches) == (3, 2, 2)
    assert RunRequest(input="kafka://h:9092/t", kafka_timeout=2, stream=True, available_now=True).kafka_timeout == 2
    assert RunRequest(input=Path("data"), output=Path("o"), columns={"ts": "time"}).columns == {"ts": "time"}


def test_handlers_with_a_kafka_group_run_are_refused_when_the_request_is_made() -> None:
    """run_batch refused them only once the run had begun, after --mode overwrite had cleared the output."""
    pipeline = Pipeline()

    @pipeline.handler("a", schema="n long")
    def rows(frame: object) -> object:
        return frame

    with pytest.raises(ValueError) as caught:
        RunRequest(input="kafka://h:9092/t?group=g", handlers=pipeline, mode="overwrite")
    assert str(caught.value) == (
        "handlers: a kafka:// input with ?group= takes no --handlers yet (their outputs are not kept per run)"
    )
    assert RunRequest(input="kafka://h:9092/t", handlers=pipeline).handlers is pipeline  # no group: fine
    assert RunRequest(input="kafka://h:9092/t", handlers=pipeline, stream=True).stream  # a stream keeps them
    assert RunRequest(input="kafka://h:9092/t?group=g", handlers=Pipeline()).handlers is not None  # no handler in it


def test_the_settings_table_holds_every_field_of_the_request_in_its_order() -> None:
    """A field added without a setting would go unchecked."""
    from rebalancer.pipeline.run_fields import SETTINGS

    assert list(SETTINGS) == [f.name for f in dataclasses.fields(RunRequest)]


def test_an_inspected_input_is_taken_as_an_input(tmp_path: Path) -> None:
    data = tmp_path / "data"
    generate(GenerateConfig(events=40, types=2, files=1), data)
    spec = inspect_input(data)
    assert RunRequest(input=spec).input is spec
    kafka = parse_kafka_url("kafka://h:9092/t")
    assert RunRequest(input=kafka).is_kafka


@pytest.mark.parametrize(
    ("url", "blocked", "message"),
    [
        ("kafka://127.0.0.1:1/t", "confluent_kafka",
         "a kafka:// input needs confluent_kafka, from the 'kafka' extra: pip install 'partition-rebalancer[kafka]'"),
        ("kafka://embedded/t", "aiokafka",
         "kafka://embedded/ (a Kafka cluster in this process) needs aiokafka, from the 'kafka' extra: "
         "pip install 'partition-rebalancer[kafka]'"),
    ],
)
def test_a_kafka_input_without_its_extra_is_refused_when_the_request_is_made(
    monkeypatch: pytest.MonkeyPatch, url: str, blocked: str, message: str
) -> None:
    """Issue 42, item 9: not a ModuleNotFoundError inside run(), after Spark has started."""
    monkeypatch.setitem(sys.modules, blocked, None)  # what an install without the extra sees
    with pytest.raises(MissingExtraError) as caught:
        RunRequest(input=url)
    assert str(caught.value) == message
    RunRequest(input="data")  # files need no extra
    if blocked == "aiokafka":
        RunRequest(input=url.replace("embedded", "127.0.0.1:1"))  # a remote topic is read without it


def test_a_local_plan_from_is_checked_with_the_request_when_partitions_are_given(tmp_path: Path) -> None:
    """Before Spark starts: the same checks (and words) as the run's own `load_plan`."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"partitions": 8, "items": []}))
    for source in (plan, tmp_path, str(plan), f"file://{plan}"):
        with pytest.raises(ValueError) as caught:
            RunRequest(input="data", partitions=4, plan_from=source)
        shown = f"file://{plan}" if str(source).startswith("file:") else str(plan)
        assert str(caught.value) == f"plan-from: {shown} was made for 8 partitions, this run has 4"
    with pytest.raises(ValueError) as caught:
        RunRequest(input="data", partitions=4, plan_from=tmp_path / "missing.json")
    assert str(caught.value) == f"plan-from: no such file: {tmp_path / 'missing.json'}"
    assert RunRequest(input="data", partitions=8, plan_from=plan).plan_from == plan
    # Without --partitions the run's count is the session's; a remote file is read through Spark.
    assert RunRequest(input="data", plan_from=plan).plan_from == plan
    assert RunRequest(input="data", partitions=4, plan_from="hdfs://nn/plan.json").plan_from == "hdfs://nn/plan.json"


def test_a_kafka_request_knows_a_group_keys_by_batch() -> None:
    assert RunRequest(input="kafka://h:9092/t?group=g").keyed_by_batch is True
    assert RunRequest(input="kafka://h:9092/t").keyed_by_batch is False
    assert RunRequest(input="data", stream=True).keyed_by_batch is True
    assert RunRequest(input="data").keyed_by_batch is False


def test_error_mode_refuses_a_directory_holding_a_run_naming_the_flag(tmp_path: Path) -> None:
    out = _batch_run(tmp_path / "out")
    with pytest.raises(ValueError) as caught:
        RunRequest(input="data", output=out).check_output()
    assert str(caught.value) == (
        f"output {out} already holds a run's outputs (_plans, metrics, plan.json, …): "
        "--mode overwrite replaces them, --mode append adds this run to them"
    )
    RunRequest(input="data", output=tmp_path / "new").check_output()  # nothing there: fine
    (tmp_path / "empty").mkdir()
    RunRequest(input="data", output=tmp_path / "empty").check_output()


def test_error_mode_also_refuses_a_report_dir_holding_a_summary(tmp_path: Path) -> None:
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "summary.json").write_text("{}")
    with pytest.raises(ValueError, match=r"^report-dir .* already holds a run's outputs \(summary.json\)"):
        RunRequest(input="data", output=tmp_path / "out", report_dir=tmp_path / "reports").check_output()


def test_error_mode_refuses_a_given_checkpoint_holding_a_stream(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path / "ck")
    request = RunRequest(input="data", output=tmp_path / "new", stream=True, checkpoint=checkpoint)
    with pytest.raises(ValueError) as caught:
        request.check_output()
    assert str(caught.value) == (
        f"checkpoint {checkpoint} already holds a stream's state: --mode append resumes from it, "
        "--mode overwrite starts afresh"
    )
    RunRequest(input="data", output=tmp_path / "new", stream=True, checkpoint=checkpoint, mode="append").check_output()


def test_append_refuses_a_stream_into_a_batch_output_and_the_reverse(tmp_path: Path) -> None:
    batch_out = _batch_run(tmp_path / "batch")
    stream_out = _stream_run(tmp_path / "stream")
    with pytest.raises(ValueError) as caught:
        RunRequest(input="data", output=batch_out, stream=True, mode="append").check_output()
    assert str(caught.value) == (
        f"output {batch_out} holds a batch run's outputs, metrics/date=…/; --mode append would mix in "
        "a stream's (or a Kafka group run's) outputs, metrics/batch_id=N/: give another --output or "
        "--mode overwrite"
    )
    with pytest.raises(ValueError, match=r"holds a stream's \(or a Kafka group run's\) outputs"):
        RunRequest(input="data", output=stream_out, mode="append").check_output()
    # Like onto like is what append is for: a stream resuming, a group run adding its batch.
    RunRequest(input="data", output=stream_out, stream=True, mode="append").check_output()
    RunRequest(input="kafka://h:9092/t?group=g", output=stream_out, mode="append").check_output()
    RunRequest(input="data", output=batch_out, mode="append").check_output()


def test_checking_the_output_changes_nothing(tmp_path: Path) -> None:
    """`check_output` only looks, in every mode: the replacing is the run's, once it is complete."""
    out = _batch_run(tmp_path / "out")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    with pytest.raises(ValueError, match="already holds a run's outputs"):
        RunRequest(input="data", output=out).check_output()
    RunRequest(input="data", output=out, mode="overwrite").check_output()
    RunRequest(input="data", output=out, mode="append").check_output()
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_the_summary_reads_summary_json_and_says_how_it_came_by_its_plan() -> None:
    data = {
        "input": "data", "output": "out", "output_mode": "overwrite", "partitions": 4,
        "partitioning": "weighted", "ingested": 10, "accepted": 9, "quarantined": 1,
        "quarantine_reasons": {"ts_missing": 1}, "types": 3, "task_rows": [3, 3, 2, 1],
        "task_seconds": [0.1, 0.1, 0.1, 0.1], "skew_ratio": 1.2, "elapsed_s": 1.5,
        "plan_reused": {"from": "old/plan.json", "kept": 5, "moved": 2}, "handlers": {},
    }
    summary = RunSummary.from_json(data)
    assert (summary.skew_ratio, summary.output, summary.output_mode) == (1.2, "out", "overwrite")
    assert summary.plan_line() == "plan: reused from old/plan.json (5 items kept, 2 moved)"
    assert summary.to_json() == data
    assert RunSummary.from_json({**data, "plan_reused": None}).plan_line() == "plan: made afresh"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"events": 1.5}, "events must be an int in 0..100000000, got 1.5"),
        ({"events": math.nan}, "events must be an int in 0..100000000, got nan"),
        ({"types": 2.5}, "types must be an int in 1..1000000, got 2.5"),
        ({"entities": math.inf}, "entities must be an int in 1..1000000, got inf"),
        ({"files": True}, "files must be an int in 1..10000, got True"),
        ({"minutes": 1.5}, "minutes must be an int in 1..1000000, got 1.5"),
        ({"seed": -1}, "seed must be an int in 0..9223372036854775807, got -1"),
        # upper bounds: made in memory before a file is written
        ({"events": 10**9}, "events must be an int in 0..100000000, got 1000000000"),
        ({"types": 10**7}, "types must be an int in 1..1000000, got 10000000"),
        ({"files": 10**5}, "files must be an int in 1..10000, got 100000"),
    ],
)
def test_generate_config_refuses_counts_that_are_no_ints(tmp_path: Path, fields: dict, message: str) -> None:
    """The same mistake as RunRequest's (issue 42, item 18): they failed inside numpy, naming no field."""
    with pytest.raises(ValueError) as caught:
        generate(GenerateConfig(**fields), tmp_path / "data")
    assert str(caught.value) == message
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"rebalance_every": math.nan}, "rebalance_every must be an int in 1..1000000000, got nan"),  # never re-planned
        ({"rebalance_every": 1.5}, "rebalance_every must be an int in 1..1000000000, got 1.5"),
        ({"max_batches": 1.5}, "max_batches must be an int in 1..1000000000, got 1.5"),
        ({"files_per_batch": True}, "files_per_batch must be an int in 1..1000000000, got True"),
        ({"max_moves": 2.0}, "max_moves must be an int in 0..1000000000, got 2.0"),
        ({"partitions": 2.5}, "partitions must be an int in 1..10000, got 2.5"),
        ({"partitions": 10**6}, "partitions must be an int in 1..10000, got 1000000"),
        ({"rebalance_every": 10**30}, f"rebalance_every must be an int in 1..1000000000, got {10**30}"),
    ],
)
def test_stream_config_refuses_counts_that_are_no_ints(fields: dict, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        StreamConfig(**{"partitions": 2, **fields}).validate()
    assert str(caught.value) == message


def test_generate_refuses_a_non_empty_directory_and_overwrite_leaves_no_older_files(tmp_path: Path) -> None:
    out = tmp_path / "data"
    assert len(generate(GenerateConfig(events=400, types=5, files=4), out)) == 4
    with pytest.raises(ValueError) as caught:
        generate(GenerateConfig(events=400, types=5, files=2), out)
    assert str(caught.value) == f"out: {out} is not empty; --overwrite clears it first"
    assert len(list(out.iterdir())) == 4
    written = generate(GenerateConfig(events=400, types=5, files=2), out, overwrite=True)
    assert sorted(out.iterdir()) == sorted(written) and len(written) == 2


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_cli_run_into_a_used_output_fails_in_one_line_before_spark(tmp_path: Path) -> None:
    generate(GenerateConfig(events=200, types=3, files=1), tmp_path / "data")
    _batch_run(tmp_path / "out")
    done = _cli("pipeline", "run", "--input", "data", "--out", "out", cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "output out already holds a run's outputs" in lines[0] and "--mode overwrite" in lines[0]
    assert json.loads((tmp_path / "out" / "summary.json").read_text()) == {}  # nothing touched


def test_cli_stream_append_into_a_batch_output_fails_in_one_line(tmp_path: Path) -> None:
    generate(GenerateConfig(events=200, types=3, files=1), tmp_path / "data")
    _batch_run(tmp_path / "out")
    done = _cli("pipeline", "run", "--input", "data", "--out", "out", "--stream", "--mode", "append", cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "holds a batch run's outputs" in lines[0] and "--mode overwrite" in lines[0]


def test_cli_generate_into_a_non_empty_directory_fails_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "part-00007.parquet").write_bytes(b"x")  # left by an earlier, larger generate
    done = _cli("pipeline", "generate", "--out", "data", "--events", "100", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "rebalancer: error: out: data is not empty; --overwrite clears it first"
    ], done.stderr
    done = _cli("pipeline", "generate", "--out", "data", "--events", "100", "--files", "2", "--overwrite", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["part-00000.parquet", "part-00001.parquet"]


def test_generate_overwrite_removes_only_its_own_files(tmp_path: Path) -> None:
    """Nothing is deleted that the project did not write: `--out ~/Documents --overwrite` once emptied it."""
    out = tmp_path / "data"
    generate(GenerateConfig(events=400, types=5, files=3), out)
    (out / "thesis.tex").write_text("years of work")
    (out / "part-00009.csv").mkdir()  # generate's name, but a directory: not one of its files
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(ValueError) as caught:
        generate(GenerateConfig(events=400, types=5, files=2), out, overwrite=True)
    assert str(caught.value) == (
        f"out: {out} holds part-00009.csv, thesis.tex, which generate did not write: --overwrite replaces only "
        "its own part-NNNNN files; give an empty or new --out"
    )
    assert sorted(p.name for p in out.iterdir()) == before
