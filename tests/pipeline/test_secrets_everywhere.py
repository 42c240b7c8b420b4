"""Issue 42 (items 12-16): a secret given in any field a user can fill never shows anywhere.

Each field gets a secret of its own (`Zq<n>Leak`): a URL's user info (with an unencoded '?' too),
the `kafka.*` options librdkafka flags sensitive, an output, input, checkpoint or plan URI's
password, a PostgreSQL sink URL, Spark Connect's `;token=`. The library (`run(RunRequest(...))`
in this process, every logger at DEBUG, Py4J's included) and the CLI (a subprocess, at the default
verbosity, which logs Spark to spark.log, and at -vvv) run with them, to success or to failure, and
no secret appears in stdout, stderr, an exception's text and traceback, a repr, a log record, or
any file the run wrote (summary.json, report.html, spark.log, ...).
"""

from __future__ import annotations

import logging
import re
import socket
import subprocess
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

from rebalancer.pipeline.generate import GenerateConfig, make_frame
from rebalancer.pipeline.kafka.telemetry import encode_events, produce_events
from rebalancer.pipeline.resolved import RunRequest
from rebalancer.pipeline.runner import run

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

GUARD_S = 560  # a subprocess's guard, not a timed assertion (a Spark run on a loaded 2-core box)
SECRET = re.compile(r"Zq\d+Leak")
# librdkafka's sensitive consumer options (a plaintext mock cluster ignores them: the run succeeds)
SECRET_OPTIONS = {
    "kafka.sasl.password": "Zq1Leak",
    "kafka.ssl.key.pem": "Zq2Leak",
    "kafka.sasl.oauthbearer.config": "Zq3Leak",
    "kafka.ssl.keystore.password": "Zq4Leak",
    "kafka.sasl.username": "Zq5Leak",
    "kafka.ssl.ca.pem": "Zq6Leak",
}


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def telemetry_topic(kafka_mock_cluster) -> str:
    """A topic of the session's mock cluster holding a small sample."""
    topic = "secrets-everywhere"
    kafka_mock_cluster.create_topic(topic, partitions=2)
    keys, values = encode_events(make_frame(GenerateConfig(events=400, types=8, format="jsonl", seed=5)))
    produce_events(kafka_mock_cluster.bootstrap_servers, topic, keys, values)
    return topic


def kafka_url(bootstrap: str, topic: str) -> str:
    return f"kafka://{bootstrap}/{topic}?" + "&".join(f"{k}={v}" for k, v in SECRET_OPTIONS.items())


def failures(bootstrap: str, topic: str, tmp: Path) -> dict[str, dict[str, str]]:
    """{case: RunRequest fields}: each run fails, on a secret-bearing field or next to one."""
    port = closed_port()
    data = tmp / "in"
    return {
        "user info": {"input": f"kafka://bob:Zq7Leak@{bootstrap}/{topic}"},
        "user info with ?": {"input": f"kafka://bob:pa?Zq8Leak@{bootstrap}/{topic}"},
        "bad option": {"input": kafka_url(bootstrap, topic) + "&maxRecordsPerTask=x"},
        "missing topic": {"input": kafka_url(bootstrap, "no-such-topic")},
        "ftp output": {"input": str(data), "output": f"ftp://u:Zq9Leak@127.0.0.1:{port}/o"},
        "ftp input": {"input": f"ftp://u:Zq10Leak@127.0.0.1:{port}/in"},
        "file output": {"input": str(data), "output": "file://u:Zq11Leak@/data/x"},
        "ftp plan": {"input": str(data), "plan_from": f"ftp://u:Zq12Leak@127.0.0.1:{port}/plan.json"},
        "ftp checkpoint": {"input": str(data), "stream": "1", "checkpoint": f"ftp://u:Zq13Leak@127.0.0.1:{port}/c"},
    }


def sample_input(tmp: Path) -> None:
    from pipeline_data import write_dataset

    write_dataset(tmp / "in")


def found(where: str, text: str) -> list[str]:
    return [f"{where}: {match.group(0)} in ...{text[max(0, match.start() - 80):match.end() + 40]!r}"
            for match in SECRET.finditer(text)]


def files_under(root: Path) -> Iterator[tuple[str, str]]:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            yield str(path.relative_to(root)), path.read_bytes().decode("utf-8", "replace")


@pytest.fixture
def every_record() -> Iterator[list[logging.LogRecord]]:
    """Every log record of this process, at DEBUG, as an application logging everything gets them."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    root = logging.getLogger()
    handler = Keep(logging.DEBUG)
    saved = {name: logging.getLogger(name).level for name in ("", "rebalancer", "py4j")}
    root.addHandler(handler)
    for name in saved:
        logging.getLogger(name).setLevel(logging.DEBUG)
    try:
        yield records
    finally:
        root.removeHandler(handler)
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def request_of(fields: dict[str, str], out: Path) -> RunRequest:
    given: dict[str, object] = {"output": str(out), "partitions": 2, "report": True, **fields}
    if "stream" in given:
        given.update(stream=True, available_now=True)
    if "plan_from" in given:
        given.update(partitions=None)  # a remote plan is read once Spark runs
    return RunRequest(**given)  # type: ignore[arg-type]


def test_the_library_shows_no_secret_on_success(spark, kafka_mock_cluster, telemetry_topic, tmp_path, every_record):
    request = RunRequest(input=kafka_url(kafka_mock_cluster.bootstrap_servers, telemetry_topic),
                         output=str(tmp_path / "out"), partitions=2)
    summary = run(request, spark)
    assert summary.ingested == 400
    leaks = found("repr(request)", repr(request)) + found("repr(summary)", repr(summary))
    leaks += found("summary.details", str(summary.details))
    leaks += [leak for record in every_record for leak in found(f"log {record.name}", record.getMessage())]
    leaks += [leak for name, text in files_under(tmp_path / "out") for leak in found(name, text)]
    assert not leaks, leaks
    assert any(r.name.startswith("py4j") and r.levelno == logging.DEBUG for r in every_record)  # they were on


@pytest.mark.parametrize(
    "case",
    ["user info", "user info with ?", "bad option", "missing topic", "ftp output", "ftp input", "file output",
     "ftp plan", "ftp checkpoint"],
)
def test_the_library_shows_no_secret_on_failure(spark, kafka_mock_cluster, telemetry_topic, tmp_path, every_record,
                                                case):
    sample_input(tmp_path)
    fields = failures(kafka_mock_cluster.bootstrap_servers, telemetry_topic, tmp_path)[case]
    leaks: list[str] = []
    try:
        request = request_of(fields, tmp_path / "out")
        leaks += found("repr(request)", repr(request))
        run(request, spark)
    except Exception as exc:  # any failure: its text is what is checked
        leaks += found("str(exc)", str(exc)) + found("repr(exc)", repr(exc))
        leaks += found("traceback", "".join(traceback.format_exception(exc)))
    else:
        pytest.fail(f"{case}: the run succeeded")
    leaks += [leak for record in every_record for leak in found(f"log {record.name}", record.getMessage())]
    leaks += [leak for name, text in files_under(tmp_path) for leak in found(name, text)]
    assert not leaks, leaks


def cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rebalancer.cli", *args], capture_output=True, text=True,
                          timeout=GUARD_S, cwd=tmp)


def cli_leaks(done: subprocess.CompletedProcess[str], tmp: Path) -> list[str]:
    leaks = found("stdout", done.stdout) + found("stderr", done.stderr)
    for log in re.findall(r"Spark's log: (\S+?)\)", done.stderr):  # spark.log outside the output too
        leaks += found(log, Path(log).read_text(errors="replace"))
    leaks += [leak for name, text in files_under(tmp) for leak in found(name, text)]
    return leaks


@pytest.mark.timeout(600)
@pytest.mark.parametrize("verbose", [[], ["-vvv"]], ids=["quiet", "vvv"])
def test_the_cli_shows_no_secret_on_success(kafka_mock_cluster, telemetry_topic, tmp_path, verbose):
    """Item 16: at -vvv Py4J logs a line per JVM call; the reader options' values were in them."""
    url = kafka_url(kafka_mock_cluster.bootstrap_servers, telemetry_topic)
    done = cli(tmp_path, *verbose, "pipeline", "run", "--input", url, "--output", str(tmp_path / "out"),
               "--partitions", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "out" / "summary.json").is_file() and (tmp_path / "out" / "report.html").is_file()
    if verbose:
        assert re.search(r"DEBUG py4j\.clientserver: Command to send: c o\d+ option s\*\*\* s\*\*\* e", done.stderr)
    else:
        assert (tmp_path / "out" / "spark.log").is_file()
    assert not cli_leaks(done, tmp_path), cli_leaks(done, tmp_path)


CLI_FLAGS = {"input": "--input", "output": "--output", "plan_from": "--plan-from", "checkpoint": "--checkpoint"}


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("case", "verbose"),
    [pytest.param(case, [], id=case) for case in ("user info", "user info with ?", "bad option", "missing topic",
                                                  "ftp output", "ftp input", "file output", "ftp plan",
                                                  "ftp checkpoint", "sink", "connect token")]
    + [pytest.param("ftp output", ["-vvv"], id="ftp output -vvv")],
)
def test_the_cli_shows_no_secret_on_failure(kafka_mock_cluster, telemetry_topic, tmp_path, case, verbose):
    sample_input(tmp_path)
    args = ["pipeline", "run", "--output", str(tmp_path / "out"), "--partitions", "2"]
    if case == "sink":
        args += ["--input", str(tmp_path / "in"), "--sink", f"postgresql://u:Zq14Leak@127.0.0.1:{closed_port()}/db"]
    elif case == "connect token":
        args += ["--input", str(tmp_path / "in"), "--remote", f"sc://127.0.0.1:{closed_port()}/;token=Zq15Leak",
                 "--connect-timeout", "2"]
    else:
        for name, value in failures(kafka_mock_cluster.bootstrap_servers, telemetry_topic, tmp_path)[case].items():
            args += ["--stream", "--available-now"] if name == "stream" else [CLI_FLAGS[name], value]
    done = cli(tmp_path, *verbose, *args)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert not cli_leaks(done, tmp_path), cli_leaks(done, tmp_path)


def test_a_spark_error_reason_masks_a_uri_it_quotes() -> None:
    from rebalancer.pipeline.session.build import spark_error_reason

    error = RuntimeError("[PATH_NOT_FOUND] Path does not exist: ftp://u:Zq16Leak@h/in. SQLSTATE: 42K03")
    assert spark_error_reason(error) == "[PATH_NOT_FOUND] Path does not exist: ftp://***@h/in."

