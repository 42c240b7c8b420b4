"""`rebalancer produce demo`: runs end to end against its own mock cluster; bad flags exit 2."""

from __future__ import annotations

import pytest

from rebalancer.cli import main

pytestmark = pytest.mark.kafka


def test_demo_runs_and_reports_broker_counted_requests(capsys):
    assert main(["produce", "demo", "--messages", "3000", "--partitions", "30", "--rate", "100000", "--linger-ms", "50"]) == 0
    out = capsys.readouterr().out
    assert "ProduceRequests (counted by the brokers)" in out and "3,001" in out  # acked: warm-up + 3000
    assert "send-to-ack latency p99 (ms)" in out and "triggers_by_reason" not in out  # units, no bare keys


def test_demo_bad_flag_is_a_usage_error(capsys):
    assert main(["produce", "demo", "--partitions", "0"]) == 2
    assert "--partitions must be >= 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--brokers", "100000"], "brokers must be an int in 1..100, got 100000 (int)"),
        (["--partitions", "1000000000"], "partitions must be an int in 1..9999, got 1000000000 (int)"),
    ],
)
def test_demo_beyond_the_clusters_bounds_is_one_line_not_an_abort(flags: list[str], message: str) -> None:
    """librdkafka's mock aborted the process (SIGABRT) for both: run as a user runs it, in a subprocess."""
    import subprocess
    import sys
    from pathlib import Path

    exe = str(Path(sys.executable).with_name("rebalancer"))
    done = subprocess.run([exe, "produce", "demo", *flags], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (2, f"rebalancer: error: {message}\n")
