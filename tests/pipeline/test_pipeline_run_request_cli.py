"""`rebalancer pipeline run` and `RunRequest` refuse the same values in the same words (issue 42).

Each case is run both ways: `RunRequest(...)` from Python, and the command as a user runs it (a
subprocess, its real stderr). The command's line must be the library's message, whole, and nothing
may have been written: every refusal comes before any work. A missing extra is refused the same
way, before Spark starts.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from rebalancer.pipeline.resolved import RunRequest

EXE = str(Path(sys.executable).with_name("rebalancer"))  # the console script, as a user runs it
DEADLINE_S = 120
KAFKA = "kafka://127.0.0.1:1/t"

# (the flags after `pipeline run --input data`, the same request's fields after `input="data"`)
CASES: list[tuple[list[str], dict[str, object]]] = [
    # a field's own value (item 18)
    (["--input", KAFKA, "--kafka-timeout", "nan"], {"input": KAFKA, "kafka_timeout": math.nan}),
    (["--input", KAFKA, "--kafka-timeout", "inf"], {"input": KAFKA, "kafka_timeout": math.inf}),
    (["--input", KAFKA, "--kafka-timeout", "0"], {"input": KAFKA, "kafka_timeout": 0}),
    (["--input", KAFKA, "--kafka-timeout", "soon"], {"input": KAFKA, "kafka_timeout": "soon"}),
    (["--group-cost", "nan"], {"group_cost": math.nan}),
    (["--group-cost", "1.5"], {"group_cost": 1.5}),
    (["--group-cost", "inf"], {"group_cost": math.inf}),
    (["--group-cost=-5"], {"group_cost": -5}),
    (["--partitions", "0"], {"partitions": 0}),
    (["--partitions", "٣"], {"partitions": "٣"}),  # a digit to str.isdigit(), not to the number grammar
    (["--stream", "--rebalance-every", "1.5"], {"stream": True, "rebalance_every": 1.5}),
    (["--stream", "--max-batches", "0"], {"stream": True, "max_batches": 0}),
    (["--stream", "--max-moves=-1"], {"stream": True, "max_moves": -1}),
    (["--stream", "--files-per-batch", "0"], {"stream": True, "files_per_batch": 0}),
    (["--partitioning", "range"], {"partitioning": "range"}),
    (["--cost", "bytes"], {"cost": "bytes"}),
    (["--mode", "replace"], {"mode": "replace"}),
    (["--format", "xml"], {"format": "xml"}),
    (["--columns", "time=ts"], {"columns": {"time": "ts"}}),
    (["--out", ""], {"output": ""}),
    # stream-only settings in a batch run (item 19)
    (["--max-moves", "3"], {"max_moves": 3}),
    (["--files-per-batch", "2"], {"files_per_batch": 2}),
    (["--available-now"], {"available_now": True}),
    (["--checkpoint", "ck"], {"checkpoint": "ck"}),
    (["--max-batches", "2"], {"max_batches": 2}),
    (["--rebalance-every", "2"], {"rebalance_every": 2}),
    # what hash placement ignores (item 17), and the other settings a run would ignore
    (["--partitioning", "hash", "--plan-from", "p.json"], {"partitioning": "hash", "plan_from": "p.json"}),
    (["--partitioning", "hash", "--group-cost", "3"], {"partitioning": "hash", "group_cost": 3}),
    (["--partitioning", "hash", "--stream", "--max-moves", "2"], {"partitioning": "hash", "stream": True, "max_moves": 2}),
    (["--stream", "--plan-from", "p.json"], {"stream": True, "plan_from": "p.json"}),
    (["--stream", "--group-cost", "3"], {"stream": True, "group_cost": 3}),
    (["--cost", "seconds"], {"cost": "seconds"}),
    (["--kafka-timeout", "3"], {"kafka_timeout": 3}),
    (["--input", KAFKA, "--format", "csv"], {"input": KAFKA, "format": "csv"}),
    (["--input", KAFKA, "--stream", "--files-per-batch", "2"], {"input": KAFKA, "stream": True, "files_per_batch": 2}),
    # upper bounds: before Spark, not a Py4J error, a 9-minute run or the planner's int64 error
    (["--partitions", "1000000"], {"partitions": 10**6}),
    (["--partitions", "1" + "0" * 30], {"partitions": 10**30}),
    (["--group-cost", "1e47"], {"group_cost": 1e47}),
    (["--group-cost", "1" + "0" * 47], {"group_cost": 10**47}),
    (["--input", KAFKA, "--kafka-timeout", "1e300"], {"input": KAFKA, "kafka_timeout": 1e300}),
    (["--stream", "--rebalance-every", "10000000000"], {"stream": True, "rebalance_every": 10**10}),
    (["--stream", "--max-batches", "10000000000"], {"stream": True, "max_batches": 10**10}),
    (["--stream", "--files-per-batch", "2147483648"], {"stream": True, "files_per_batch": 2**31}),
    (["--stream", "--max-moves", "10000000000"], {"stream": True, "max_moves": 10**10}),
    # the reader's batch-or-stream rules for a kafka:// input's options (one place: parse_options)
    (["--input", KAFKA + "?endingOffsets=latest", "--stream"], {"input": KAFKA + "?endingOffsets=latest", "stream": True}),
    (["--input", KAFKA + "?maxOffsetsPerTrigger=5"], {"input": KAFKA + "?maxOffsetsPerTrigger=5"}),
    # a mapping's rule, in column_mapping's words (the command had its own for `ts=`)
    (["--columns", "ts="], {"columns": {"ts": ""}}),
    (["--columns", "ts=time,type= "], {"columns": {"ts": "time", "type": ""}}),
]


def _library_message(fields: dict[str, object]) -> str:
    with pytest.raises(ValueError) as caught:
        RunRequest(**{"input": "data", **fields})  # type: ignore[arg-type]
    return str(caught.value)


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.parametrize(("flags", "fields"), CASES, ids=[" ".join(flags) for flags, _ in CASES])
def test_the_command_refuses_a_value_in_the_words_of_the_library(
    tmp_path: Path, flags: list[str], fields: dict[str, object]
) -> None:
    message = _library_message(fields)
    done = subprocess.run(
        [EXE, "pipeline", "run", "--input", "data", *flags],
        capture_output=True, text=True, cwd=tmp_path, timeout=DEADLINE_S,
    )
    assert _one_line(done) == f"rebalancer: error: {message}"
    assert list(tmp_path.iterdir()) == []  # refused before any work: no out/, no spark.log


def test_the_messages_name_the_flag_and_the_value() -> None:
    """The words compared above, pinned for a few (the rest: test_pipeline_run_request.py)."""
    assert _library_message(CASES[0][1]) == "kafka-timeout must be a finite number > 0 and at most 86400, got nan"
    assert _library_message(CASES[5][1]) == "group-cost must be an int in 0..1000000000, got 1.5"
    assert _library_message(CASES[20][1]) == "max-moves: is for a stream (--stream), got 3"
    assert _library_message(CASES[26][1]) == (
        "plan-from: is for --partitioning weighted (hash placement ignores it), got p.json"
    )
    assert _library_message(CASES[-2][1]) == "columns: the source name for 'ts' is empty"
    assert _library_message(CASES[-11][1]) == "group-cost must be an int in 0..1000000000, got 1e+47"
    assert _library_message(CASES[-4][1]) == (
        "option endingOffsets is for batch reads; a stream reads on as data arrives"
    )


def test_a_group_stream_is_refused_by_the_library_as_by_the_command(tmp_path: Path) -> None:
    """`?group=` with a stream: the command refused it, RunRequest took it (one rule now: the
    reader's parse_options, for the request's mode)."""
    url = KAFKA + "?group=g"
    message = _library_message({"input": url, "stream": True})
    assert message == "option group is for batch reads; a stream keeps its offsets in its checkpoint"
    done = subprocess.run(
        [EXE, "pipeline", "run", "--input", url, "--stream"],
        capture_output=True, text=True, cwd=tmp_path, timeout=DEADLINE_S,
    )
    assert _one_line(done) == f"rebalancer: error: {message}"
    # The group's claim on the output is taken before the request is made (kafka/claim.py); it
    # leaves its lock file, and nothing else.
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["out", "out/_kafka_group.lock"]


# Runs the command with `blocked` unimportable: what an install without their extra sees. None in
# sys.modules makes `import` fail and find_spec answer None, as for a package that is not there.
BLOCKING = """\
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
from rebalancer.cli import main
sys.exit(main(sys.argv[2:]))
"""


RUN = ["pipeline", "run", "--out", "out"]


@pytest.mark.parametrize(
    ("argv", "blocked", "needs"),
    [
        ([*RUN, "--input", "kafka://127.0.0.1:1/topic"], "confluent_kafka",
         "a kafka:// input needs confluent_kafka, from the 'kafka' extra: pip install 'partition-rebalancer[kafka]'"),
        ([*RUN, "--input", "kafka://127.0.0.1:1/topic", "--stream"], "confluent_kafka,aiokafka",
         "a kafka:// input needs confluent_kafka, from the 'kafka' extra: pip install 'partition-rebalancer[kafka]'"),
        ([*RUN, "--input", "kafka://embedded/telemetry"], "confluent_kafka,aiokafka",
         "kafka://embedded/ (a Kafka cluster in this process) needs aiokafka, confluent_kafka, from the 'kafka' "
         "extra: pip install 'partition-rebalancer[kafka]'"),
        ([*RUN, "--input", "kafka://embedded/telemetry"], "aiokafka",
         "kafka://embedded/ (a Kafka cluster in this process) needs aiokafka, from the 'kafka' extra: "
         "pip install 'partition-rebalancer[kafka]'"),
        # Without --input the run would generate its sample first: that too waits for the check.
        ([*RUN, "--sink", "postgresql://u:Secret@127.0.0.1:1/db"], "psycopg",
         "--sink (the PostgreSQL sink) needs psycopg, from the 'postgres' extra: "
         "pip install 'partition-rebalancer[postgres]'"),
        ([*RUN, "--input", "data", "--remote", "sc://127.0.0.1:1"], "grpc",
         "Spark Connect (sc://) needs grpc, from the 'spark' extra: pip install 'partition-rebalancer[spark]'"),
        # The same mistake in the pipeline's other commands: a traceback (produce), or one after
        # initdb had made the server's directory (postgres).
        (["pipeline", "produce", "--bootstrap", "127.0.0.1:1", "--topic", "t", "--events", "10"], "aiokafka",
         "rebalancer pipeline produce needs aiokafka, from the 'kafka' extra: pip install 'partition-rebalancer[kafka]'"),
        (["pipeline", "postgres", "start", "--dir", "pg"], "psycopg",
         "rebalancer pipeline postgres needs psycopg, from the 'postgres' extra: "
         "pip install 'partition-rebalancer[postgres]'"),
    ],
)
def test_a_missing_extra_is_one_line_naming_it_before_any_work(
    tmp_path: Path, argv: list[str], blocked: str, needs: str
) -> None:
    """Issue 42, item 9: a run without the 'kafka' extra was a 20-line traceback (a topic), or a
    line once Spark had started, leaving out/spark.log behind (kafka://embedded/)."""
    done = subprocess.run(
        [sys.executable, "-c", BLOCKING, blocked, *argv],
        capture_output=True, text=True, cwd=tmp_path, timeout=DEADLINE_S,
    )
    assert _one_line(done) == f"rebalancer: error: {needs}"
    assert list(tmp_path.iterdir()) == []  # no out/spark.log (no JVM), no generated sample, no server
