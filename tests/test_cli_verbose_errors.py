"""Finding: with -v, a Spark error ended in its traceback and exit 1, without the `rebalancer: error:`
line it ends in without -v. -v adds a Spark error's traceback (masked) and changes nothing else: every
error class the CLI maps keeps its last line and its exit code, verbose or not.

Each case is the real CLI in a subprocess (its own stderr) whose command raises one error class: the
classes are the libraries' own (PySpark's, Py4J's, aiokafka's, confluent-kafka's), made without a JVM
or a broker, so the mapping alone is tested.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SECRET = "Secret1"
DRIVER = """\
import sys

import rebalancer.queue.commands as commands
from rebalancer.cli import main

KIND = sys.argv[1]
URL = "ftp://u:Secret1@h/in"


def fail(args):
    if KIND == "value":
        raise ValueError(f"input {URL} is unreadable")
    if KIND == "os":
        raise PermissionError(13, "Permission denied", "/x")
    if KIND == "spark":
        from pyspark.errors import AnalysisException

        raise AnalysisException(message=f"[PATH_NOT_FOUND] Path does not exist: {URL}. SQLSTATE: 42K03")
    if KIND == "py4j":
        from py4j.protocol import Py4JError

        raise Py4JError(f"An error occurred while calling o1.parquet for {URL}")
    if KIND == "aiokafka":
        from aiokafka.errors import KafkaConnectionError

        raise KafkaConnectionError(f"Unable to bootstrap from {URL}")
    if KIND == "confluent":
        from confluent_kafka import KafkaError, KafkaException

        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "broker down"))
    if KIND == "interrupt":
        raise KeyboardInterrupt
    raise RuntimeError(f"unforeseen {URL}")


commands.run_demo = fail
sys.exit(main(sys.argv[2:]))
"""
HINT = " (-v shows the traceback)"
# kind: (exit code, last line without -v, whether -v adds the traceback above it)
CASES = {
    "value": (2, "rebalancer: error: input ftp://***@h/in is unreadable", False),
    "os": (2, "rebalancer: error: /x: Permission denied", False),
    "spark": (2, f"rebalancer: error: Spark: [PATH_NOT_FOUND] Path does not exist: ftp://***@h/in.{HINT}", True),
    "py4j": (2, f"rebalancer: error: Spark: An error occurred while calling o1.parquet for ftp://***@h/in{HINT}", True),
    "aiokafka": (2, "rebalancer: error: Kafka: KafkaConnectionError: Unable to bootstrap from ftp://***@h/in", False),
    "confluent": (2, 'rebalancer: error: Kafka: KafkaException: KafkaError{code=_TRANSPORT,val=-195,str="broker down"}', False),
    "interrupt": (130, "rebalancer: interrupted", False),
}


def _cli(tmp_path: Path, kind: str, *verbose: str) -> subprocess.CompletedProcess[str]:
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    return subprocess.run(
        [sys.executable, str(driver), kind, *verbose, "queue", "demo"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip


@pytest.mark.parametrize("kind", list(CASES))
def test_v_keeps_every_mapped_errors_last_line_and_exit_code(tmp_path: Path, kind: str) -> None:
    pytest.importorskip("pyspark")
    pytest.importorskip("aiokafka")
    pytest.importorskip("confluent_kafka")
    code, line, traceback_at_v = CASES[kind]
    quiet = _cli(tmp_path, kind)
    assert (quiet.returncode, quiet.stderr.splitlines()) == (code, [line]), quiet.stderr
    for verbose in ("-v", "-vv"):
        loud = _cli(tmp_path, kind, verbose)
        lines = loud.stderr.splitlines()
        assert loud.returncode == code, loud.stderr
        assert lines[-1] == line.removesuffix(HINT), loud.stderr  # the traceback is there: no hint to it
        assert SECRET not in loud.stderr, loud.stderr
        if traceback_at_v:
            assert lines[0] == "Traceback (most recent call last):", loud.stderr
            assert "ftp://***@h/in" in lines[-2], loud.stderr  # the exception's own line, masked
        else:
            assert len(lines) == 1, loud.stderr


def test_an_unforeseen_failure_is_a_masked_traceback_and_exit_1_verbose_or_not(tmp_path: Path) -> None:
    for verbose in ((), ("-v",)):
        done = _cli(tmp_path, "other", *verbose)
        assert done.returncode == 1, done.stderr
        assert done.stderr.splitlines()[-1] == "RuntimeError: unforeseen ftp://***@h/in", done.stderr
