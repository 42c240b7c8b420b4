"""Seed 003's timing and triggers, exactly: a fixed holddown, and the access-type change."""

from __future__ import annotations

import pytest

from rebalancer.balance.count import plan_count_balance
from rebalancer.consumers import (
    AccessTypeChanged,
    FlowStandby,
    HandoffCompleted,
    HandoffStarted,
    PartitionedQueue,
    RebalancePlanned,
    ScaleStatusChanged,
    StatusChanged,
)


def of(events, kind):
    return [e for e in events if isinstance(e, kind)]


def test_binds_at_20_and_24_with_a_delay_of_5_rebalance_at_25():
    pq = PartitionedQueue(partition_count=8, rebalance_delay_s=5.0)
    pq.bind("a", now=0.0)
    pq.poll(now=5.0)
    assert pq.assignment == {"a": list(range(8))}
    pq.bind("b", now=20.0)
    pq.bind("c", now=24.0)
    assert pq.holddown_until == 25.0
    assert pq.poll(now=24.999) == [StatusChanged("ready", "holddown", 20.0)]
    events = pq.poll(now=25.0)
    assert of(events, StatusChanged)[0] == StatusChanged("holddown", "rebalancing", 25.0)
    assert [e.at for e in of(events, RebalancePlanned)] == [25.0]
    assert {f: len(ps) for f, ps in pq.assignment.items()} == {"a": 3, "b": 3, "c": 2}
    assert pq.status == "ready"


def _churn_plans(sliding: bool) -> list[float]:
    pq = PartitionedQueue(partition_count=100, rebalance_delay_s=5.0, sliding_holddown=sliding)
    planned: list[float] = []
    for t in range(61):
        planned += [e.at for e in of(pq.poll(now=float(t)), RebalancePlanned)]
        if t < 60:
            pq.bind(f"f{t}", now=float(t))
    return planned


def test_a_change_every_second_still_rebalances_every_delay():
    assert _churn_plans(sliding=False) == [float(t) for t in range(5, 61, 5)]


def test_the_sliding_option_postpones_the_rebalance_under_the_same_churn():
    assert _churn_plans(sliding=True) == []


def test_exclusive_to_non_exclusive_rebalances_at_once_with_its_statuses():
    pq = PartitionedQueue(partition_count=6, rebalance_delay_s=5.0, exclusive=True)
    for f in ("c1", "c2", "c3"):
        pq.bind(f, now=0.0)
    pq.poll(now=5.0)
    assert pq.assignment == {"c1": [0, 1, 2, 3, 4, 5]} and pq.standby == ["c2", "c3"]
    assert pq.access_type == "exclusive"

    pq.set_access_type("non-exclusive", now=10.0)
    events = pq.poll(now=10.0)
    assert pq.access_type == "non-exclusive"
    assert events[:6] == [
        AccessTypeChanged("exclusive", "non-exclusive", 10.0),
        ScaleStatusChanged("ready", "scaling-up", 10.0),
        ScaleStatusChanged("scaling-up", "ready", 10.0),
        FlowStandby("c2", False, 10.0),
        FlowStandby("c3", False, 10.0),
        StatusChanged("ready", "rebalancing", 10.0),
    ]
    assert of(events, RebalancePlanned) == [RebalancePlanned(("c1", "c2", "c3"), 6, 4, 0, 10.0)]
    assert len(of(events, HandoffCompleted)) == 4 and pq.handoff_count == 4
    assert "holddown" not in {e.new for e in of(events, StatusChanged)}
    assert {f: len(ps) for f, ps in pq.assignment.items()} == {"c1": 2, "c2": 2, "c3": 2}
    assert pq.status == "ready" and pq.standby == []


def test_non_exclusive_to_exclusive_hands_everything_to_the_first_flow_gracefully():
    pq = PartitionedQueue(partition_count=6, rebalance_delay_s=5.0, max_handoff_time_s=3.0)
    for f in ("c1", "c2", "c3"):
        pq.bind(f, now=0.0)
    pq.poll(now=5.0)
    c2 = pq.assignment["c2"]
    pq.delivered(c2[0], n=2)
    pq.set_access_type("exclusive", now=10.0)
    events = pq.poll(now=10.0)
    assert events[:3] == [
        AccessTypeChanged("non-exclusive", "exclusive", 10.0),
        ScaleStatusChanged("ready", "scaling-down", 10.0),
        ScaleStatusChanged("scaling-down", "ready", 10.0),
    ]
    assert of(events, RebalancePlanned) == [RebalancePlanned(("c1",), 6, 4, 0, 10.0)]
    # The first handoff waits for c2's two unacked messages; nothing else moves meanwhile.
    assert [e.partition for e in of(events, HandoffStarted)] == [c2[0]]
    assert pq.paused == [c2[0]] and pq.handoff_count == 0
    pq.acked(c2[0], n=2, now=11.0)
    events = pq.poll(now=11.0)
    assert pq.assignment == {"c1": [0, 1, 2, 3, 4, 5]}
    assert pq.standby == ["c2", "c3"] and pq.handoff_count == 4
    assert of(events, FlowStandby) == [FlowStandby("c2", True, 11.0), FlowStandby("c3", True, 11.0)]
    assert not any(e.forced for e in of(events, HandoffCompleted))
    assert pq.status == "ready"


def test_setting_the_same_access_type_changes_nothing_and_a_bad_one_is_refused():
    pq = PartitionedQueue(partition_count=4)
    pq.bind("a", now=0.0)
    pq.poll(now=0.0)
    pq.set_access_type("non-exclusive", now=1.0)
    assert pq.poll(now=1.0) == []
    with pytest.raises(ValueError, match=r"access_type must be one of .* got 'shared'"):
        pq.set_access_type("shared", now=2.0)


def test_a_bool_partition_and_an_unhashable_flow_raise_value_error():
    pq = PartitionedQueue(partition_count=4)
    pq.bind("a", now=0.0)
    pq.rebalance_now(now=0.0)
    with pytest.raises(ValueError, match=r"partition must be in .* got True"):
        pq.delivered(True)
    with pytest.raises(ValueError, match=r"partition must be in .* got True"):
        pq.owner(True)
    with pytest.raises(ValueError, match=r"weights keys must be partitions .* got False"):
        pq.set_weights({False: 1.0})
    for call in (pq.bind, pq.unbind):
        with pytest.raises(ValueError, match=r"flow must be hashable, got \['x'\]"):
            call(["x"], now=1.0)
    with pytest.raises(ValueError, match=r"flow must be hashable, got \{\}"):
        pq.partitions_of({})
    with pytest.raises(ValueError, match=r"to_flow must be hashable"):
        pq.move(0, ["x"], now=1.0)
    with pytest.raises(ValueError, match="exclusive must be a bool, got 'yes'"):
        PartitionedQueue(partition_count=4, exclusive="yes")


def test_the_count_planner_rejects_the_same_inputs():
    with pytest.raises(ValueError, match=r"flows\[1\] must be hashable, got \['b'\]"):
        plan_count_balance(["a", None], ["a", ["b"]])
    with pytest.raises(ValueError, match=r"owner_by_partition keys must be partitions .* got True"):
        plan_count_balance({True: "a"}, ["a"])
    with pytest.raises(ValueError, match=r"owner_by_partition\[0\] must be hashable"):
        plan_count_balance([["a"]], ["a"])
