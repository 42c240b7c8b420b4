"""Every wait of the pipeline is bounded by a day (`_checks.SECONDS_MAX`), checked before any work.

`--connect-timeout 1e12` passed the finite-number check and crashed in `socket.settimeout` with an
OverflowError traceback; the library took the same value, and a stream's `trigger_seconds` of any
size or sign. No Spark starts here: every case fails at its check.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rebalancer.pipeline.session.build import build_session, check_reachable
from rebalancer.pipeline.stream.state import StreamConfig

EXE = str(Path(sys.executable).with_name("rebalancer"))
WANTED = "must be a number of seconds > 0 and at most 86400, got"


def test_cli_connect_timeout_over_a_day_is_one_line_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [EXE, "pipeline", "run", "--input", str(tmp_path / "data"), "--output", str(tmp_path / "o"),
         "--master", "spark://127.0.0.1:1", "--connect-timeout", "1e12"],
        capture_output=True, text=True, timeout=120,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        "rebalancer pipeline run: error: argument --connect-timeout: "
        "must be a finite number > 0 and <= 86400, got '1e12'"
    ]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("timeout", [1e12, 86_400.5, 0, -1.0, float("nan"), True, "5"])
def test_library_connect_timeout_names_the_field(timeout: object) -> None:
    with pytest.raises(ValueError) as raised:
        build_session("spark://127.0.0.1:1", connect_timeout=timeout)  # type: ignore[arg-type]
    assert str(raised.value) == f"connect_timeout {WANTED} {timeout!r}"
    with pytest.raises(ValueError) as raised:
        check_reachable("spark://127.0.0.1:1", timeout)  # type: ignore[arg-type]
    assert str(raised.value) == f"timeout {WANTED} {timeout!r}"


@pytest.mark.parametrize("seconds", [1e12, 0, -2.0, float("inf"), None])
def test_stream_trigger_seconds_is_bounded(seconds: object) -> None:
    with pytest.raises(ValueError) as raised:
        StreamConfig(partitions=2, trigger_seconds=seconds).validate()  # type: ignore[arg-type]
    assert str(raised.value) == f"trigger_seconds {WANTED} {seconds!r}"


def test_a_day_is_taken() -> None:
    StreamConfig(partitions=2, trigger_seconds=86_400).validate()
