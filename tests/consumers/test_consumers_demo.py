"""`rebalancer consumers demo`: the seed's seven-partition example, exactly."""

from __future__ import annotations

import pytest

from rebalancer.cli import main
from rebalancer.consumers import HandoffCompleted, HandoffStarted, PartitionsAssigned, RebalancePlanned
from rebalancer.consumers.commands import DemoConfig, replay
from rebalancer.consumers.events import describe_event as describe


def _events(steps, kind):
    return [e for step in steps for e in step.events if isinstance(e, kind)]


def test_the_seed_example_step_by_step():
    steps, pq = replay()
    assert [(s.at, s.action, s.status) for s in steps] == [
        (0.0, "c1, c2, c3 bind", "holddown"),
        (5.0, "the rebalance delay passes", "ready"),
        (6.0, "each owner receives 2 messages per partition, not yet acked", "ready"),
        (7.0, "c4 binds", "holddown"),
        (12.0, "the rebalance delay passes", "rebalancing"),
        (13.0, "c1 acks the 2 messages it holds of partition 6", "ready"),
    ]
    assert steps[1].assignment == {"c1": [0, 3, 6], "c2": [1, 4], "c3": [2, 5]}
    assert steps[3].assignment == {"c1": [0, 3, 6], "c2": [1, 4], "c3": [2, 5], "c4": []}
    assert steps[-1].assignment == {"c1": [0, 3], "c2": [1, 4], "c3": [2, 5], "c4": [6]}
    # The first mapping needs no handoff; the 4th flow needs exactly one, paused until c1 acked.
    assert [(e.partitions, e.flow) for e in _events(steps[:2], PartitionsAssigned)] == [
        ((0, 3, 6), "c1"), ((1, 4), "c2"), ((2, 5), "c3"),
    ]
    assert [e.handoffs for e in _events(steps, RebalancePlanned)] == [0, 1]
    assert [(e.partition, e.from_flow, e.to_flow, e.at) for e in _events(steps, HandoffStarted)] == [(6, "c1", "c4", 12.0)]
    done = _events(steps, HandoffCompleted)
    assert [(d.partition, d.at, d.forced, d.unacked) for d in done] == [(6, 13.0, False, 0)]
    assert pq.handoff_count == 1 and pq.unacked(6) == 0 and pq.standby == []


def test_a_slow_ack_forces_the_handoff_at_max_handoff_time():
    steps, pq = replay(DemoConfig(ack_after_s=5.0))
    done = _events(steps, HandoffCompleted)
    assert [(d.partition, d.at, d.forced, d.unacked) for d in done] == [(6, 15.0, True, 2)]
    assert steps[-1].action == "c1 has not acked partition 6 within max-handoff-time"
    assert pq.unacked(6) == 2  # never lost: the unacked count stays with the partition
    assert describe(done[0]) == "handoff done: partition 6 c1 -> c4 (forced after max-handoff-time, 2 still unacked)"


def test_more_partitions_take_the_fewest_handoffs_and_an_excess_flow_waits():
    steps, pq = replay(DemoConfig(partitions=10))
    assert sorted(len(p) for p in pq.assignment.values()) == [2, 2, 3, 3]
    assert pq.handoff_count == 2
    steps, pq = replay(DemoConfig(partitions=3, flows=3))
    assert pq.standby == ["c4"] and pq.handoff_count == 0
    assert "c4 waits on standby" in [describe(e) for e in steps[3].events]


def test_the_command_prints_the_timeline(capsys):
    assert main(["consumers", "demo"]) == 0
    out = capsys.readouterr().out
    assert "handoff starts: partition 6 c1 -> c4, paused until c1 acks" in out
    assert out.rstrip().endswith("balanced: 2/2/2/1 partitions per flow after 1 handoff; standby flows: none")


@pytest.mark.parametrize(("argv", "message"), [
    (["--flows", "0"], "--flows must be an integer >= 1, got 0"),
    (["--unacked", "-1"], "--unacked must be an integer >= 0, got -1"),
    (["--rebalance-delay", "-1"], "--rebalance-delay must be a finite number of seconds >= 0, got -1.0"),
    (["--ack-after", "-2"], "--ack-after must be a finite number of seconds >= 0, got -2.0"),
])
def test_bad_flags_exit_2_with_one_line(capsys, argv, message):
    assert main(["consumers", "demo", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"rebalancer: error: {message}\n"
    assert captured.out == ""
