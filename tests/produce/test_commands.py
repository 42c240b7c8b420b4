"""`rebalancer produce demo`: runs end to end against its own mock cluster; bad flags exit 2."""

from __future__ import annotations

import re

import pytest

from rebalancer.cli import main
from rebalancer.produce.commands import counted

pytestmark = pytest.mark.kafka


def test_demo_counts_the_messages_it_says_it_sends(capsys, monkeypatch):
    """Issue 46, item 8: "50,000 messages" then "acked (messages): 50,001": the warm-up message was
    counted. It is named in the title and left out of every figure."""
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["produce", "demo", "--messages", "3000", "--partitions", "30", "--rate", "100000", "--linger-ms", "50"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "3,000 messages (+1 warm-up, not counted), 30 partitions, 3 brokers"
    rows = {}
    for line in lines[1:]:
        cells = [cell.strip() for cell in line.strip("│┃").split("│")]
        if len(cells) == 2:
            rows[cells[0]] = cells[1]
    assert (rows["acked (messages)"], rows["failed (messages)"]) == ("3,000", "0")
    assert list(rows)[:9] == [
        "ProduceRequests (counted by the brokers)", "sends (planned ProduceRequests)", "partitions per send (mean)",
        "messages per ProduceRequest (mean)", "linger before a send (ms, mean)", "send-to-ack latency p50 (ms)",
        "send-to-ack latency p99 (ms)", "acked (messages)", "failed (messages)",
    ]
    by_trigger = {reason: int(n.replace(",", "")) for reason, n in re.findall(r"(\w+) ([\d,]+)", rows["sends by trigger"])}
    assert sum(by_trigger.values()) == int(rows["sends (planned ProduceRequests)"].replace(",", ""))


def test_counted_takes_the_warm_up_out_of_counts_and_means():
    before = {
        "sends": 1, "requests": 1, "acked": 1, "failed": 0, "produced": 1, "partitions_per_send_avg": 1.0,
        "wait_ms_avg": 2.0, "msgs_per_request": 1.0, "triggers_by_reason": {"flush": 1, "broker_linger": 0},
        "latency_ms_p99": 4.0,
    }
    after = {
        "sends": 4, "requests": 4, "acked": 301, "failed": 0, "produced": 301,
        "partitions_per_send_avg": 4.0,  # 1 + 3 x 5 partitions over 4 sends
        "wait_ms_avg": 8.0,  # 2 + 3 x 10 ms
        "msgs_per_request": 75.25,  # 1 + 3 x 100 messages over 4 requests
        "triggers_by_reason": {"flush": 2, "broker_linger": 2}, "latency_ms_p99": 5.0,
    }
    assert counted(before, after) == {
        "sends": 3, "requests": 3, "acked": 300, "failed": 0, "produced": 300, "partitions_per_send_avg": 5.0,
        "wait_ms_avg": 10.0, "msgs_per_request": 100.0, "triggers_by_reason": {"flush": 1, "broker_linger": 2},
        "latency_ms_p99": 5.0,
    }


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
