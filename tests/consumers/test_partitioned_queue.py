"""PartitionedQueue: the seed's rules, one scenario at a time, with exact events."""

from __future__ import annotations

import pytest

from rebalancer.consumers import (
    FlowChangeUpdate,
    FlowStandby,
    FlowUnbound,
    HandoffAborted,
    HandoffCompleted,
    HandoffStarted,
    PartitionedQueue,
    PartitionsAssigned,
    PartitionsRemoved,
    RebalancePlanned,
    ScaleStatusChanged,
    StatusChanged,
)


def of(events, kind):
    return [e for e in events if isinstance(e, kind)]


def counts(pq):
    return {f: len(ps) for f, ps in pq.assignment.items()}


def balanced_three(partitions=7, **kw):
    """c1..c3 bound at t=0 and settled by t=5: the seed's starting point."""
    pq = PartitionedQueue(partition_count=partitions, rebalance_delay_s=5.0, max_handoff_time_s=3.0, **kw)
    for f in ("c1", "c2", "c3"):
        pq.bind(f, now=0.0)
    assert pq.status == "holddown"
    pq.poll(now=5.0)
    assert pq.status == "ready"
    return pq


def test_seed_example_3_2_2_then_a_fourth_flow_gives_2_2_2_1_with_one_handoff():
    pq = balanced_three()
    assert sorted(counts(pq).values(), reverse=True) == [3, 2, 2]
    assert pq.handoff_count == 0
    before = pq.assignment

    pq.bind("c4", now=10.0)
    events = pq.poll(now=14.99)
    assert [e for e in events if not isinstance(e, StatusChanged)] == []
    assert pq.status == "holddown" and pq.holddown_until == 15.0
    assert pq.assignment["c4"] == []

    events = pq.poll(now=15.0)
    assert sorted(counts(pq).values(), reverse=True) == [2, 2, 2, 1]
    assert pq.handoff_count == 1
    (started,) = of(events, HandoffStarted)
    (done,) = of(events, HandoffCompleted)
    assert started == HandoffStarted(started.partition, "c1", "c4", 15.0)
    assert done == HandoffCompleted(started.partition, "c1", "c4", 15.0, forced=False, unacked=0)
    assert started.partition in before["c1"]
    assert FlowChangeUpdate("c4", True, 15.0) in events
    assert of(events, RebalancePlanned)[0].handoffs == 1
    assert [(e.old, e.new) for e in of(events, StatusChanged)] == [
        ("holddown", "rebalancing"),
        ("rebalancing", "ready"),
    ]
    # Everyone else kept what they had.
    for f in ("c2", "c3"):
        assert pq.assignment[f] == before[f]


def test_holddown_revert_bind_then_unbind_within_the_delay_moves_nothing():
    pq = balanced_three()
    before = pq.assignment
    pq.bind("c4", now=10.0)
    pq.unbind("c4", now=12.0)
    events = pq.poll(now=30.0)
    assert of(events, HandoffStarted) == []
    assert pq.handoff_count == 0
    assert pq.assignment == before
    assert pq.status == "ready"


def test_a_flow_that_disconnects_and_returns_within_the_delay_gets_its_partitions_back():
    pq = balanced_three()
    before = pq.assignment
    pq.unbind("c2", now=10.0)
    assert [pq.partition_status(p) for p in before["c2"]] == ["unbound"] * len(before["c2"])
    with pytest.raises(ValueError, match="has no owner"):
        pq.delivered(before["c2"][0])
    pq.bind("c2", now=12.0)
    assert pq.assignment == before
    events = pq.poll(now=30.0)
    assert of(events, HandoffStarted) == [] and pq.handoff_count == 0
    assert PartitionsAssigned("c2", tuple(before["c2"]), 12.0) in events


def test_the_holddown_ends_at_the_first_change_plus_the_delay():
    pq = balanced_three()
    pq.bind("c4", now=10.0)
    pq.bind("c5", now=13.0)
    assert pq.holddown_until == 15.0
    pq.poll(now=14.9)
    assert pq.status == "holddown" and pq.handoff_count == 0
    events = pq.poll(now=15.0)
    assert of(events, StatusChanged)[0] == StatusChanged("holddown", "rebalancing", 15.0)
    assert sorted(counts(pq).values(), reverse=True) == [2, 2, 1, 1, 1]
    # Lower bound: c1 3->2... targets go ceil to the holders of 3 and 2: exactly 2 handoffs.
    assert pq.handoff_count == 2


def test_sliding_holddown_is_an_option_that_restarts_on_every_change():
    pq = balanced_three(sliding_holddown=True)
    pq.bind("c4", now=10.0)
    pq.bind("c5", now=13.0)
    pq.poll(now=17.9)
    assert pq.status == "holddown" and pq.handoff_count == 0
    events = pq.poll(now=18.0)
    assert of(events, StatusChanged)[0] == StatusChanged("holddown", "rebalancing", 18.0)
    assert pq.handoff_count == 2


def test_departed_flows_partitions_go_to_the_others_without_handoffs():
    pq = balanced_three()
    gone = pq.assignment["c1"]
    pq.unbind("c1", now=10.0)
    events = pq.poll(now=15.0)
    assert of(events, HandoffStarted) == []
    assert sorted(counts(pq).values()) == [3, 4]
    assigned = sorted(p for e in of(events, PartitionsAssigned) for p in e.partitions)
    assert assigned == gone


def test_standby_takes_over_at_once_without_holddown():
    pq = balanced_three(partitions=3)
    pq.bind("c4", now=6.0)
    assert pq.standby == ["c4"] and "c4" not in pq.assignment
    assert pq.status == "ready"
    left = pq.assignment["c2"]
    pq.unbind("c2", now=7.0)
    # No poll needed, and no holddown: c4 already holds c2's partition.
    assert pq.assignment == {"c1": pq.assignment["c1"], "c3": pq.assignment["c3"], "c4": left}
    assert pq.standby == []
    assert pq.status == "ready"
    events = pq.poll(now=7.0)
    assert FlowUnbound("c2", tuple(left), {}, 7.0) in events
    assert FlowStandby("c4", False, 7.0) in events
    assert PartitionsAssigned("c4", tuple(left), 7.0) in events
    assert of(events, StatusChanged) == [] and of(events, HandoffStarted) == []


def test_standby_list_keeps_bind_order_and_a_standby_unbind_changes_nothing():
    pq = balanced_three(partitions=3)
    for f, t in (("s1", 6.0), ("s2", 6.5), ("s3", 7.0)):
        pq.bind(f, now=t)
    pq.unbind("s2", now=8.0)
    assert pq.standby == ["s1", "s3"] and pq.status == "ready"
    pq.unbind("c1", now=9.0)
    assert pq.standby == ["s3"] and "s1" in pq.assignment


def test_unacked_messages_are_redelivered_when_a_flow_leaves():
    pq = balanced_three()
    p = pq.assignment["c3"][0]
    pq.delivered(p, n=4)
    pq.unbind("c3", now=8.0)
    (gone,) = of(pq.poll(now=8.0), FlowUnbound)
    assert gone.redelivered == {p: 4}
    assert pq.unacked(p) == 0


def start_handoff_with_unacked(unacked: int):
    pq = balanced_three()
    p = pq.assignment["c1"][-1]
    pq.delivered(p, n=unacked)
    pq.bind("c4", now=10.0)
    events = pq.poll(now=15.0)
    assert of(events, HandoffStarted) == [HandoffStarted(p, "c1", "c4", 15.0)]
    return pq, p


def test_forced_handoff_after_max_handoff_time_with_unacked_messages():
    pq, p = start_handoff_with_unacked(2)
    assert pq.status == "rebalancing"
    assert pq.partition_status(p) == "paused" and pq.paused == [p]
    assert p not in pq.deliverable("c1") and p in pq.partitions_of("c1")
    with pytest.raises(ValueError, match=rf"partition {p} is paused"):
        pq.delivered(p)
    assert of(pq.poll(now=17.99), HandoffCompleted) == []
    pq.acked(p, n=1)  # one of two: still waiting
    # Polling late still completes the handoff at the instant the timer fired.
    events = pq.poll(now=100.0)
    assert of(events, HandoffCompleted) == [HandoffCompleted(p, "c1", "c4", 18.0, forced=True, unacked=1)]
    assert pq.owner(p) == "c4" and pq.partition_status(p) == "ready" and pq.status == "ready"
    # The old flow may still ack what it holds; nothing is lost.
    assert pq.unacked(p) == 1
    pq.acked(p, n=1)
    assert pq.unacked(p) == 0


def test_prompt_handoff_when_the_old_flow_acks():
    pq, p = start_handoff_with_unacked(3)
    pq.acked(p, n=2, now=15.5)
    assert pq.handoff is not None
    pq.acked(p, n=1, now=16.0)
    assert pq.handoff is None and pq.owner(p) == "c4"
    events = pq.poll(now=16.0)
    assert of(events, HandoffCompleted) == [HandoffCompleted(p, "c1", "c4", 16.0, forced=False, unacked=0)]


def test_ack_without_now_happens_at_the_last_time_seen():
    pq, p = start_handoff_with_unacked(1)
    pq.poll(now=16.5)
    pq.acked(p)
    (done,) = of(pq.poll(now=17.0), HandoffCompleted)
    assert done.at == 16.5 and not done.forced


def test_infinite_max_handoff_time_never_forces():
    pq = PartitionedQueue(partition_count=2, rebalance_delay_s=0.0, max_handoff_time_s=float("inf"))
    pq.bind("a", now=0.0)
    pq.delivered(1, n=1)
    pq.bind("b", now=1.0)
    assert pq.handoff is not None and pq.handoff.partition == 1
    assert of(pq.poll(now=1e12), HandoffCompleted) == []
    pq.acked(1)
    assert pq.assignment == {"a": [0], "b": [1]}
    with pytest.raises(
        ValueError, match="rebalance_delay_s must be a finite number of seconds >= 0, got inf"
    ):
        PartitionedQueue(partition_count=2, rebalance_delay_s=float("inf"))


def test_handoffs_run_one_at_a_time():
    pq = PartitionedQueue(partition_count=8, rebalance_delay_s=1.0, max_handoff_time_s=2.0)
    pq.bind("a", now=0.0)
    pq.poll(now=1.0)
    for p in range(8):
        pq.delivered(p, n=1)
    pq.bind("b", now=2.0)
    pq.poll(now=3.0)
    # 4 handoffs, each forced after 2 s: they start at 3, 5, 7, 9.
    events = pq.poll(now=20.0)
    started = [e.at for e in of(events, HandoffStarted)]
    done = [e.at for e in of(events, HandoffCompleted)]
    assert started == [5.0, 7.0, 9.0] and done == [5.0, 7.0, 9.0, 11.0]
    assert counts(pq) == {"a": 4, "b": 4}


def test_flow_change_update_when_a_flow_loses_its_last_partition():
    pq = PartitionedQueue(partition_count=2, rebalance_delay_s=0.0, max_handoff_time_s=1.0)
    pq.bind("a", now=0.0)
    pq.poll(now=0.0)
    assert pq.assignment == {"a": [0, 1]}
    pq.set_partition_count(1, now=1.0)
    events = pq.poll(now=1.0)
    assert PartitionsRemoved((1,), {}, 1.0) in events
    pq.bind("b", now=2.0)
    # "b" exceeds the partition count: standby. Scale up: it is promoted and the rebalance runs at once.
    assert pq.standby == ["b"]
    pq.set_partition_count(2, now=3.0)
    assert pq.assignment == {"a": [0], "b": [1]}
    pq.set_partition_count(1, now=4.0)
    events = pq.poll(now=4.0)
    assert FlowChangeUpdate("b", False, 4.0) in events
    assert FlowStandby("b", True, 4.0) in events
    assert pq.standby == ["b"] and pq.assignment == {"a": [0]}


def test_scale_up_rebalances_immediately_without_holddown():
    pq = balanced_three()
    pq.set_partition_count(9, now=6.0)
    assert pq.scale_status == "ready" and pq.status == "ready"
    assert sorted(counts(pq).values()) == [3, 3, 3]
    events = pq.poll(now=6.0)
    assert [(e.old, e.new) for e in of(events, ScaleStatusChanged)] == [
        ("ready", "scaling-up"),
        ("scaling-up", "ready"),
    ]
    assert sorted(p for e in of(events, PartitionsAssigned) for p in e.partitions) == [7, 8]
    # 3/2/2 + two new partitions: they fill the two flows holding 2, so no handoff at all.
    assert pq.handoff_count == 0


def test_scale_down_removes_the_highest_partitions_first_and_reports_unacked():
    pq = balanced_three(partitions=9)
    pq.delivered(8, n=5)
    pq.delivered(0, n=1)
    pq.set_partition_count(6, now=6.0)
    assert pq.scale_status == "scaling-down"
    assert [pq.partition_status(p) for p in (6, 7, 8)] == ["paused"] * 3
    with pytest.raises(ValueError, match="partition 7 is being removed"):
        pq.delivered(7)
    pq.acked(8, n=2, now=7.0)
    assert pq.partition_count == 9 and pq.target_partition_count == 6
    events = pq.poll(now=50.0)
    (removed,) = of(events, PartitionsRemoved)
    assert removed == PartitionsRemoved((6, 7, 8), {8: 3}, 9.0)
    assert pq.removed_unacked_total == 3
    assert pq.partition_count == 6 and pq.scale_status == "ready" and pq.status == "ready"
    assert sorted(counts(pq).values()) == [2, 2, 2]
    assert pq.unacked(0) == 1
    with pytest.raises(ValueError, match=r"partition must be in \[0, 6\), got 8"):
        pq.partition_status(8)


def test_scale_down_finishes_at_once_when_nothing_is_unacked():
    pq = balanced_three(partitions=9)
    pq.set_partition_count(4, now=6.0)
    assert pq.scale_status == "ready" and pq.partition_count == 4
    events = pq.poll(now=6.0)
    assert of(events, PartitionsRemoved) == [PartitionsRemoved((4, 5, 6, 7, 8), {}, 6.0)]
    assert sorted(counts(pq).values()) == [1, 1, 2]


def test_scale_during_holddown_starts_the_rebalance_at_once():
    pq = balanced_three()
    pq.bind("c4", now=10.0)
    pq.set_partition_count(8, now=11.0)
    assert pq.status == "ready"
    assert sorted(counts(pq).values()) == [2, 2, 2, 2]


def test_exclusive_one_active_flow_holds_every_partition():
    pq = PartitionedQueue(partition_count=4, rebalance_delay_s=2.0, max_handoff_time_s=1.0, exclusive=True)
    pq.bind("a", now=0.0)
    pq.bind("b", now=0.5)
    pq.bind("c", now=1.0)
    assert pq.standby == ["b", "c"]
    pq.poll(now=2.0)
    assert pq.assignment == {"a": [0, 1, 2, 3]}
    pq.unbind("a", now=3.0)
    assert pq.assignment == {"b": [0, 1, 2, 3]} and pq.status == "ready"
    pq.set_partition_count(6, now=4.0)
    assert pq.assignment == {"b": [0, 1, 2, 3, 4, 5]} and pq.standby == ["c"]
    pq.unbind("b", now=5.0)
    pq.unbind("c", now=5.0)
    assert pq.assignment == {} and pq.status == "holddown"
    pq.bind("d", now=6.0)
    pq.bind("e", now=6.0)
    pq.poll(now=8.0)
    assert pq.assignment == {"d": [0, 1, 2, 3, 4, 5]} and pq.standby == ["e"]
    assert pq.handoff_count == 0


def test_unbinding_the_receiving_flow_aborts_the_handoff():
    pq, p = start_handoff_with_unacked(2)
    pq.unbind("c4", now=16.0)
    events = pq.poll(now=16.0)
    assert of(events, HandoffAborted) == [HandoffAborted(p, "c1", "c4", 16.0, "flow 'c4' unbound")]
    assert pq.owner(p) == "c1" and pq.partition_status(p) == "ready"
    assert pq.status == "holddown"
    pq.poll(now=30.0)
    assert pq.handoff_count == 0 and sorted(counts(pq).values()) == [2, 2, 3]


def test_unbinding_the_giving_flow_completes_the_handoff_to_the_receiver():
    pq, p = start_handoff_with_unacked(2)
    pq.unbind("c1", now=16.0)
    events = pq.poll(now=16.0)
    assert of(events, HandoffCompleted) == [HandoffCompleted(p, "c1", "c4", 16.0, forced=False, unacked=0)]
    (gone,) = of(events, FlowUnbound)
    assert gone.redelivered == {p: 2} and p not in gone.partitions
    assert pq.owner(p) == "c4"


def test_receiver_replaced_by_standby_keeps_the_plan():
    pq = PartitionedQueue(partition_count=4, rebalance_delay_s=1.0, max_handoff_time_s=5.0)
    pq.bind("a", now=0.0)
    pq.poll(now=1.0)
    pq.delivered(3, n=1)
    for f in ("b", "c", "d", "s"):
        pq.bind(f, now=2.0)
    assert pq.standby == ["s"]
    pq.poll(now=3.0)
    assert pq.handoff is not None
    h = pq.handoff
    pq.unbind(h.to_flow, now=4.0)
    assert pq.standby == []
    pq.acked(3, now=4.5)
    pq.poll(now=20.0)
    assert sorted(counts(pq).values()) == [1, 1, 1, 1]
    assert pq.handoff_count == 3


def test_giver_replaced_by_standby_mid_rebalance_keeps_the_plan():
    pq = PartitionedQueue(partition_count=4, rebalance_delay_s=1.0, max_handoff_time_s=5.0)
    pq.bind("a", now=0.0)
    pq.poll(now=1.0)
    for p in range(4):
        pq.delivered(p, n=1)
    for f in ("b", "c", "d", "s"):
        pq.bind(f, now=2.0)
    pq.poll(now=3.0)  # a holds 4 and must give 3: the first handoff waits for an ack
    assert pq.standby == ["s"] and pq.handoff is not None and pq.handoff.from_flow == "a"
    pq.unbind("a", now=4.0)  # s takes over what a still holds, and a's place in the plan
    events = pq.poll(now=20.0)
    assert counts(pq) == {"b": 1, "c": 1, "d": 1, "s": 1} and pq.status == "ready"
    assert {e.from_flow for e in of(events, HandoffCompleted)} == {"a", "s"}
    assert pq.handoff_count == 3


def test_weights_pick_which_partitions_move():
    pq = PartitionedQueue(
        partition_count=4, rebalance_delay_s=0.0, max_handoff_time_s=1.0, weights=[9, 9, 1, 1]
    )
    pq.bind("a", now=0.0)
    pq.poll(now=0.0)
    pq.bind("b", now=1.0)
    pq.poll(now=1.0)
    loads = {f: sum([9, 9, 1, 1][p] for p in ps) for f, ps in pq.assignment.items()}
    assert loads == {"a": 10, "b": 10} and pq.handoff_count == 2


def test_rebalance_now_ends_the_holddown():
    pq = PartitionedQueue(partition_count=6, rebalance_delay_s=60.0)
    for f in ("a", "b", "c"):
        pq.bind(f, now=100.0)
    pq.rebalance_now(now=100.5)
    assert counts(pq) == {"a": 2, "b": 2, "c": 2} and pq.status == "ready"


def test_driven_by_a_real_monotonic_clock():
    import time

    pq = PartitionedQueue(partition_count=4, rebalance_delay_s=0.0, max_handoff_time_s=0.5)
    pq.bind("w0", now=time.monotonic())
    pq.bind("w1", now=time.monotonic())
    pq.poll(now=time.monotonic())
    assert counts(pq) == {"w0": 2, "w1": 2}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda pq: pq.unbind("nobody", now=6.0), "unknown flow 'nobody': it is not bound"),
        (lambda pq: pq.bind("c1", now=6.0), "flow 'c1' is already bound"),
        (lambda pq: pq.delivered(0, n=-1), "n must be an int >= 0, got -1"),
        (lambda pq: pq.acked(0, n=-2), "n must be an int >= 0, got -2"),
        (lambda pq: pq.acked(0, n=1), "n=1 exceeds the 0 unacked messages of partition 0"),
        (lambda pq: pq.delivered(7), r"partition must be in [0, 7), got 7"),
        (lambda pq: pq.partition_status(-1), r"partition must be in [0, 7), got -1"),
        (lambda pq: pq.poll(now=4.0), "now must not go backwards: got 4.0, after 5.0"),
        (lambda pq: pq.set_partition_count(0, now=6.0), "partition_count must be an int >= 1, got 0"),
        (lambda pq: pq.set_weights([-1.0]), "weights[0] must be a finite number >= 0, got -1.0"),
        (lambda pq: pq.partitions_of("zz"), "unknown flow 'zz': it is not bound"),
    ],
)
def test_bad_input_names_field_and_value(call, message):
    pq = balanced_three()
    with pytest.raises(ValueError) as err:
        call(pq)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"partition_count": -3}, "partition_count must be an int >= 1, got -3"),
        (
            {"partition_count": 2, "rebalance_delay_s": -1.0},
            "rebalance_delay_s must be a finite number of seconds >= 0, got -1.0",
        ),
        (
            {"partition_count": 2, "max_handoff_time_s": float("nan")},
            "max_handoff_time_s must be a number of seconds >= 0 (inf allowed), got nan",
        ),
    ],
)
def test_bad_constructor_arguments(kwargs, message):
    with pytest.raises(ValueError) as err:
        PartitionedQueue(**kwargs)
    assert message in str(err.value)
