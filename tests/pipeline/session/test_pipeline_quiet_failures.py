"""Issue 35, sections 5 and 6: what a new user met, each now one line on stderr (exit 2, or 130 for
Ctrl-C) with Spark's logs in OUTPUT/spark.log, and the README's commands working as written.

Spark's executor ERROR logs go straight to the process's stderr, where capsys cannot see them, so
the failures that start a JVM run the CLI as a subprocess and count the lines of its real stderr.
Three such runs start a JVM (a handler's failure, workers without pandas, Ctrl-C); the others fail
before Spark starts, or run in-process on the shared session.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from pipeline_data import good_frame

import rebalancer
from rebalancer.cli import main
from rebalancer.pipeline.generate import write_frame

CLI = [sys.executable, "-m", "rebalancer.cli"]
README = Path(__file__).resolve().parents[3] / "README.md"
# A JVM's start and a first stage on a loaded 2-core machine; the tests wait for events, not time.
JVM_RUN_DEADLINE_S = 900
MAX_STDERR_LINES = 3


@pytest.fixture(scope="module")
def small_input(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("quiet") / "input"
    write_frame(good_frame(events=400, seed=3), data, "parquet", 1)
    return data


def _quiet_failure(done: subprocess.CompletedProcess[str], code: int = 2) -> str:
    """The exit code, at most 3 lines on stderr, and none of Spark's logs or of a traceback."""
    lines = done.stderr.splitlines()
    assert done.returncode == code, done.stderr[-3000:]
    assert 1 <= len(lines) <= MAX_STDERR_LINES, done.stderr[-3000:]
    for noise in ("Traceback", " ERROR ", "\tat ", "Py4J", "py4j"):
        assert noise not in done.stderr, done.stderr[-3000:]
    return lines[-1]


# -- A handler that returns the wrong columns: was 180 lines of executor ERROR logs first --------
WRONG_COLUMNS = """\
from rebalancer.pipeline import Pipeline

pipeline = Pipeline()


@pipeline.handler("*", schema="type string, n long")
def wrong(frame):
    return frame[["type", "entity"]].head(1)
"""


@pytest.mark.timeout(JVM_RUN_DEADLINE_S)
def test_a_handler_with_the_wrong_columns_is_one_line_naming_the_spark_log(small_input, tmp_path):
    handlers = tmp_path / "handlers.py"
    handlers.write_text(WRONG_COLUMNS)
    out = tmp_path / "out"
    done = subprocess.run(
        [*CLI, "pipeline", "run", "--input", str(small_input), "--out", str(out), "--partitions", "2",
         "--handlers", str(handlers)],
        capture_output=True, text=True, timeout=JVM_RUN_DEADLINE_S, cwd=tmp_path,
    )
    line = _quiet_failure(done)
    assert line.startswith("rebalancer: error: handler 'wrong' failed: "), line
    assert "Missing: n. Unexpected: entity." in line, line
    assert line.endswith(f" (Spark's log: {out / 'spark.log'})"), line
    log = (out / "spark.log").read_text()
    # What stderr used to show is in the log: the executor's ERROR lines with their Java frames, and
    # the driver's Python traceback.
    assert " ERROR " in log and "\tat org.apache.spark." in log and "RESULT_COLUMN_NAMES_MISMATCH" in log


# -- Spark's workers on a Python without pandas: was 60 lines of Java and Python trace ------------
@pytest.mark.timeout(JVM_RUN_DEADLINE_S)
def test_workers_on_a_python_without_the_packages_are_one_paragraph_naming_pyspark_python(small_input, tmp_path):
    """The README user ran a script with the venv's python, and the workers ran the system python3,
    which has no pandas. Here the workers run this interpreter with -S: no site-packages at all."""
    python = tmp_path / "bare-python"
    python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -S "$@"\n')
    python.chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "PYSPARK_PYTHON": str(python)}
    done = subprocess.run(
        [*CLI, "pipeline", "run", "--input", str(small_input), "--out", str(out), "--partitions", "2"],
        capture_output=True, text=True, timeout=JVM_RUN_DEADLINE_S, cwd=tmp_path, env=env,
    )
    line = _quiet_failure(done)
    assert line.startswith("rebalancer: error: "), line
    assert f"Spark's Python workers run {python}, which cannot import " in line, line
    assert "Set PYSPARK_PYTHON" in line and line.endswith(f" (Spark's log: {out / 'spark.log'})"), line
    assert "No module named" in (out / "spark.log").read_text()


# -- Ctrl-C in a batch run: was 50 to 83 lines of Py4J and Java tracebacks ------------------------
BLOCKING = """\
import time
from pathlib import Path

from rebalancer.pipeline import Pipeline

pipeline = Pipeline()
STARTED = Path({started!r})


@pipeline.handler("*", schema="type string, n long")
def blocks(frame):
    STARTED.touch()  # the test's signal to press Ctrl-C: a Spark job is running a handler
    while not STARTED.with_suffix(".release").exists():
        time.sleep(0.05)
    return frame[["type"]].assign(n=len(frame)).head(1)
"""


@pytest.mark.timeout(JVM_RUN_DEADLINE_S)
def test_ctrl_c_in_a_batch_run_is_one_line_and_exit_130(small_input, tmp_path):
    started = tmp_path / "handler-started"
    handlers = tmp_path / "handlers.py"
    handlers.write_text(BLOCKING.format(started=str(started)))
    out = tmp_path / "out"
    run = subprocess.Popen(
        [*CLI, "pipeline", "run", "--input", str(small_input), "--out", str(out), "--partitions", "2",
         "--handlers", str(handlers)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, start_new_session=True,
    )
    try:
        while not started.exists():  # the handler runs: the process is inside a Spark job
            if run.poll() is not None:
                pytest.fail("the run ended before its handler started:\n" + (run.stderr.read() if run.stderr else ""))
            time.sleep(0.1)
        os.killpg(run.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
        stdout, stderr = run.communicate(timeout=JVM_RUN_DEADLINE_S)
    finally:
        started.with_suffix(".release").touch()  # a worker the signal missed may finish and exit
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    line = _quiet_failure(subprocess.CompletedProcess(run.args, run.returncode, stdout, stderr), code=130)
    assert line == f"rebalancer: interrupted (Spark's log: {out / 'spark.log'})"
    assert not (out / "summary.json").exists() and not (out / "report.html").exists()


# -- A master or Connect server nothing answers at: was a 73-line traceback after 81 s -----------
@pytest.mark.parametrize(("flag", "url"), [("--master", "spark://127.0.0.1:1"), ("--remote", "sc://127.0.0.1:1")])
def test_an_unreachable_master_is_one_line_naming_it_and_the_flag(small_input, tmp_path, flag, url):
    out = tmp_path / "out"
    done = subprocess.run(
        [*CLI, "pipeline", "run", "--input", str(small_input), "--out", str(out), flag, url,
         "--connect-timeout", "5"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert _quiet_failure(done) == (
        f"rebalancer: error: {flag}: cannot reach {url} within 5 s (127.0.0.1:1: Connection refused); "
        "--connect-timeout sets the wait"
    )
    assert not out.exists()  # refused before Spark started: nothing written


@contextmanager
def _listener(reply: bytes | None) -> Iterator[int]:
    """A port that accepts TCP connections and answers each with `reply` then closes it, or, with
    None, keeps it open and never says a word: no Spark master or Connect server behind it."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stopped = threading.Event()

    def accept() -> None:
        while not stopped.is_set():
            try:
                connection, _ = server.accept()
            except OSError:  # closed: the test is over
                return
            if reply is None:
                held.append(connection)  # kept open, unanswered
                continue
            with connection:
                try:
                    connection.sendall(reply)
                except OSError:  # the client went first
                    pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stopped.set()
        server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept(), which close() alone does not
        server.close()
        for connection in held:
            connection.close()
        thread.join()


@pytest.fixture()
def silent_master() -> Iterator[int]:
    with _listener(None) as port:
        yield port


@pytest.fixture()
def http_server() -> Iterator[int]:
    """Another protocol on the port: an HTTP/1.0 answer to whatever is sent, at once."""
    with _listener(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nnot Spark\r\n") as port:
        yield port


def test_a_master_that_accepts_but_never_answers_is_one_line_naming_it(small_input, tmp_path, silent_master):
    url = f"spark://127.0.0.1:{silent_master}"
    out = tmp_path / "out"
    done = subprocess.run(
        [*CLI, "pipeline", "run", "--input", str(small_input), "--out", str(out), "--master", url,
         "--connect-timeout", "5"],
        capture_output=True, text=True, timeout=JVM_RUN_DEADLINE_S, cwd=tmp_path,
    )
    assert _quiet_failure(done) == (
        f"rebalancer: error: --master: {url} accepted a connection but did not answer as a Spark master "
        f"within 5 s; --connect-timeout sets the wait (Spark's log: {out / 'spark.log'})"
    )
    assert not (out / "summary.json").exists()


# -- An sc:// listener that never answers, or answers HTTP: the gRPC client retried for minutes ---
@pytest.mark.parametrize("listener", ["silent_master", "http_server"])
def test_a_connect_server_that_does_not_answer_as_one_is_one_line_naming_it(
    small_input, tmp_path, request, listener
):
    url = f"sc://127.0.0.1:{request.getfixturevalue(listener)}"
    out = tmp_path / "out"
    done = subprocess.run(
        [*CLI, "pipeline", "run", "--input", str(small_input), "--out", str(out), "--remote", url,
         "--connect-timeout", "5"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert _quiet_failure(done) == (
        f"rebalancer: error: --remote: {url} accepted a connection but did not answer as a Spark Connect "
        "server within 5 s; --connect-timeout sets the wait"
    )
    assert not (out / "summary.json").exists()


def test_master_addresses_reads_every_kind_of_master_url():
    from rebalancer.pipeline.session.build import master_addresses

    assert master_addresses("spark://a:7078,b") == [("a", 7078), ("b", 7077)]
    assert master_addresses("sc://h/;user_id=x") == [("h", 15002)]
    assert master_addresses("sc://h:9/;token=t") == [("h", 9)]
    assert master_addresses("k8s://https://api:6443") == [("api", 6443)]
    assert master_addresses("k8s://api") == [("api", 443)]
    assert master_addresses("local[2]") == master_addresses("yarn") == master_addresses(None) == []
    with pytest.raises(ValueError, match="master: bad port in 'spark://a:x'"):
        master_addresses("spark://a:x")


# -- An input whose values are all text: was exit 0, 0 rows, and three empty charts ---------------
@pytest.mark.spark
def test_no_accepted_row_is_a_warning_and_a_report_in_words(spark, tmp_path, capsys):
    data = tmp_path / "in"
    data.mkdir()
    rows = "".join(f"2026-01-01T00:00:{i:02d}Z,t{i % 3},e,text{i}\n" for i in range(40))
    (data / "x.csv").write_text("ts,type,entity,value\n" + rows)
    out = tmp_path / "out"
    assert main(["pipeline", "run", "--input", str(data), "--out", str(out), "--partitions", "2"]) == 0
    captured = capsys.readouterr()
    assert captured.err == (
        "rebalancer: warning: 0 of 40 rows accepted; every row was quarantined: value_not_numeric 100%\n"
    )
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["ingested"], summary["accepted"], summary["quarantined"]) == (40, 0, 40)
    report = (out / "report.html").read_text()
    assert "<img" not in report
    assert "0 of 40 rows accepted; every row was quarantined: value_not_numeric 100%. No row reached" in report


def test_the_no_rows_sentence_names_each_reason_by_its_share():
    from rebalancer.pipeline.outputs.report import no_rows_accepted
    from rebalancer.pipeline.outputs.summary import RunSummary

    assert no_rows_accepted(RunSummary.from_json({"ingested": 5, "accepted": 1, "quarantine_reasons": {"x": 4}})) is None
    assert no_rows_accepted(RunSummary.from_json({"ingested": 0, "accepted": 0, "quarantine_reasons": {}})) == (
        "0 rows accepted: the input has no rows"
    )
    # Attack 46: a stream stopped by Ctrl-C before its first micro-batch blamed the input.
    stopped = {"ingested": 0, "accepted": 0, "quarantine_reasons": {}, "batches": 0, "interrupted": True}
    assert no_rows_accepted(RunSummary.from_json(stopped)) == "0 rows accepted: stopped by Ctrl-C before any row was read"
    assert no_rows_accepted(RunSummary.from_json({**stopped, "interrupted": False})) == (
        "0 rows accepted: the input has no rows"
    )
    reasons = {"ts_unparseable": 1, "value_not_numeric": 1998, "type_missing": 1}
    assert no_rows_accepted(RunSummary.from_json({"ingested": 2000, "accepted": 0, "quarantine_reasons": reasons})) == (
        "0 of 2,000 rows accepted; every row was quarantined: value_not_numeric >99%, ts_unparseable <1%, "
        "type_missing <1%"
    )


# -- The README's commands, as written ---------------------------------------------------------
def test_ship_dist_creates_dist_in_a_fresh_clone(tmp_path):
    done = subprocess.run([sys.executable, "-m", "rebalancer.pipeline.ship", "dist/"], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    archive = tmp_path / "dist" / f"rebalancer-{rebalancer.__version__}.zip"
    assert done.stdout.strip() == str(Path("dist") / archive.name) and archive.is_file()


def test_ship_refuses_a_file_in_the_way(tmp_path):
    from rebalancer.pipeline.ship import package_zip

    (tmp_path / "dist").write_text("not a directory")
    with pytest.raises(ValueError, match=r"dest must be a directory or a \.zip path, got the file"):
        package_zip(tmp_path / "dist")
    assert package_zip(tmp_path / "new" / "r.zip") == tmp_path / "new" / "r.zip"


def _readme_stream_commands() -> list[list[str]]:
    """The README's lines that make and read data/stream, each without its comment."""
    found = []
    for line in README.read_text().replace("\\\n", " ").splitlines():  # a command continued with a backslash
        if line.startswith("rebalancer ") and "data/stream" in line:
            found.append(shlex.split(line, comments=True))
    return found


@pytest.mark.spark
def test_the_readme_stream_example_makes_its_input_and_ends(spark, tmp_path, capsys):
    """The README's two lines, in an empty directory (a fresh clone has no data/). Its relative paths
    are made absolute: the shared session's JVM keeps the working directory it started in."""
    commands = _readme_stream_commands()
    assert [words[:3] for words in commands] == [["rebalancer", "pipeline", "generate"],
                                                 ["rebalancer", "pipeline", "run"]]
    for words in commands:
        argv = [str(tmp_path / word) if word in ("data/stream", "out-stream") else word for word in words[1:]]
        assert main(argv) == 0, capsys.readouterr().err
    summary = json.loads((tmp_path / "out-stream" / "summary.json").read_text())
    files = len(list((tmp_path / "data" / "stream").iterdir()))
    assert summary["batches"] == files and summary["ingested"] == summary["accepted"] + summary["quarantined"] > 0
    assert "interrupted" not in summary


def test_py4j_records_go_to_the_spark_log_and_ours_to_the_console(tmp_path, capfd):
    """Py4J logs a Ctrl-C in the middle of a call on the root logger, with a traceback: such records
    are told by their file, and kept off the console with the ones of Py4J's own loggers."""
    import logging

    import py4j

    from rebalancer.pipeline.session.quiet import spark_python_logs_to

    root = logging.getLogger()
    console = logging.StreamHandler(sys.stderr)
    root.addHandler(console)
    log_file = tmp_path / "spark.log"
    try:
        with spark_python_logs_to(log_file):
            in_py4j = str(Path(py4j.__file__).parent / "java_gateway.py")
            root.handle(root.makeRecord("root", logging.ERROR, in_py4j, 1, "KeyboardInterrupt while sending command.",
                                        None, None))
            logging.getLogger("py4j.clientserver").error("Error while receiving.")
            logging.getLogger("rebalancer.pipeline").error("ours")
        logging.getLogger("py4j.clientserver").error("after")
    finally:
        root.removeHandler(console)
    assert capfd.readouterr().err == "ours\nafter\n"
    logged = log_file.read_text()
    assert "ERROR root: KeyboardInterrupt while sending command." in logged
    assert "ERROR py4j.clientserver: Error while receiving." in logged and "ours" not in logged
