"""FlowAssignor and GracefulHandoff without brokers: the protocol run by hand, exactly as aiokafka runs it.

Each member has its own assignor; a rebalance is: every member's `metadata()`, the leader's `assign()`,
then every member's `on_assignment()`. Live group tests are in test_consumers_kafka_live.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("aiokafka")

from aiokafka.structs import TopicPartition

from rebalancer.consumers import (
    FlowStandby,
    HandoffStarted,
    PartitionsAssigned,
    PartitionsReleased,
    PartitionsResumed,
    RebalancePlanned,
)
from rebalancer.consumers.aiokafka_adapter import ConsumerProtocolMemberMetadata
from rebalancer.consumers.kafka import FlowAssignor, GracefulHandoff

TOPIC = "events"


class _Cluster:
    """The one ClusterMetadata call an assignor makes."""

    def __init__(self, partitions: Mapping[str, int]) -> None:
        self._partitions = dict(partitions)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        n = self._partitions.get(topic)
        return None if n is None else set(range(n))


class _Group:
    """Members by member id, each with its own FlowAssignor; `rebalance()` runs one round."""

    def __init__(self, partitions: int = 7, **assignor_kwargs: Any) -> None:
        self.cluster = _Cluster({TOPIC: partitions})
        self.members: dict[str, FlowAssignor] = {}
        self.topics: dict[str, list[str]] = {}
        self.kwargs = assignor_kwargs
        self.events: list[object] = []
        self.assignment: dict[str, tuple[int, ...]] = {}

    def join(self, member_id: str, instance_id: str | None = None, topics: list[str] | None = None) -> None:
        self.members[member_id] = FlowAssignor(on_event=self.events.append, instance_id=instance_id, **self.kwargs)
        self.topics[member_id] = topics or [TOPIC]

    def leave(self, member_id: str) -> None:
        del self.members[member_id]
        del self.topics[member_id]

    def rebalance(self, leader: str | None = None) -> dict[str, tuple[int, ...]]:
        metadata = {m: a.metadata(self.topics[m]) for m, a in self.members.items()}
        leader = leader or sorted(self.members)[0]
        result = self.members[leader].assign(self.cluster, metadata)  # type: ignore[arg-type]
        for m, assignment in result.items():
            self.members[m].on_assignment(assignment)
        self.assignment = {m: tuple(tp.partition for tp in a.partitions()) for m, a in result.items()}
        self.leader = leader
        return self.assignment


def _moved(before: Mapping[str, tuple[int, ...]], after: Mapping[str, tuple[int, ...]]) -> int:
    owner = {p: m for m, ps in before.items() for p in ps}
    new = {p: m for m, ps in after.items() for p in ps}
    return sum(1 for p, m in owner.items() if m in after and new[p] != m)


def test_the_seeds_example_three_then_four_then_one_leaves() -> None:
    g = _Group(7)
    for m in ("a", "b", "c"):
        g.join(m)
    first = g.rebalance()
    assert sorted(len(ps) for ps in first.values()) == [2, 2, 3]
    assert sorted(p for ps in first.values() for p in ps) == list(range(7))
    g.join("d")
    second = g.rebalance()
    assert sorted(len(ps) for ps in second.values()) == [1, 2, 2, 2]
    assert _moved(first, second) == 1
    plan = g.members[g.leader].last_plan
    assert plan is not None and plan.moved == plan.lower_bound == 1
    gone = second["b"]
    g.leave("b")
    third = g.rebalance()
    assert sorted(len(ps) for ps in third.values()) == [2, 2, 3]
    assert _moved(second, third) == 0  # only b's partitions changed owner
    changed = {p for m, ps in third.items() for p in ps if p not in second.get(m, ())}
    assert changed == set(gone)


def test_the_events_say_what_the_plan_did() -> None:
    g = _Group(7)
    for m in ("a", "b", "c"):
        g.join(m)
    g.rebalance()
    g.events.clear()
    g.join("d")
    g.rebalance()
    planned = [e for e in g.events if isinstance(e, RebalancePlanned)]
    assert [(e.topic, e.partition_count, e.handoffs, e.assigned) for e in planned] == [(TOPIC, 7, 1, 0)]
    started = [e for e in g.events if isinstance(e, HandoffStarted)]
    assert len(started) == 1 and started[0].to_flow == "d" and started[0].topic == TOPIC
    assert not [e for e in g.events if isinstance(e, PartitionsAssigned)]


def test_standby_takes_a_departed_owners_partition_and_nothing_else_moves() -> None:
    g = _Group(7)
    for i in range(8):
        g.join(f"m{i}")
    first = g.rebalance()
    assert sorted(len(ps) for ps in first.values()) == [0, 1, 1, 1, 1, 1, 1, 1]
    assert first["m7"] == ()  # the last to join is the standby
    plan = g.members[g.leader].last_plan
    assert plan is not None and plan.standby == ("m7",)
    assert [e for e in g.events if isinstance(e, FlowStandby)] == [FlowStandby("m7", True, plan.at)]
    g.events.clear()
    victim = first["m3"]
    g.leave("m3")
    second = g.rebalance()
    assert second["m7"] == victim
    assert _moved(first, second) == 0
    assert {m: ps for m, ps in second.items() if m != "m7"} == {m: ps for m, ps in first.items() if m not in ("m3", "m7")}
    assert [e.standby for e in g.events if isinstance(e, FlowStandby)] == [False]


def test_a_static_member_restarting_as_leader_gets_its_partitions_back() -> None:
    g = _Group(7)
    for m in ("a", "b", "c"):
        g.join(f"id-{m}", instance_id=m)
    first = g.rebalance(leader="id-a")
    mine = first["id-a"]
    g.leave("id-a")
    g.join("id-a2", instance_id="a")  # a fresh process, a new member id, the same instance id
    second = g.rebalance(leader="id-a2")
    assert second["id-a2"] == mine
    assert second["id-b"] == first["id-b"] and second["id-c"] == first["id-c"]


def test_the_newest_round_wins_over_a_stale_claim() -> None:
    g = _Group(6)
    g.join("a")
    g.join("b")
    g.rebalance()
    stale = g.members["b"].metadata([TOPIC])  # b's view at round 1
    g.join("c")
    after = g.rebalance()
    # b reports its round-1 table again (as a member that missed a round would): it must lose.
    metadata = {m: a.metadata([TOPIC]) for m, a in g.members.items()}
    metadata["b"] = stale
    result = g.members["a"].assign(g.cluster, metadata)  # type: ignore[arg-type]
    again = {m: tuple(tp.partition for tp in a.partitions()) for m, a in result.items()}
    assert again == after


def test_malformed_user_data_is_ignored_not_trusted() -> None:
    g = _Group(4)
    g.join("a")
    g.join("b")
    metadata = {
        "a": ConsumerProtocolMemberMetadata(0, [TOPIC], b"\xff not json"),
        "b": ConsumerProtocolMemberMetadata(
            0, [TOPIC], json.dumps({"format": 1, "table": {"round": 9, "keys": ["x"], "since": [1], "owners": {TOPIC: [5, 5, 5, 5]}}}).encode()
        ),
    }
    result = g.members["a"].assign(g.cluster, metadata)  # type: ignore[arg-type]
    parts = sorted(tp.partition for a in result.values() for tp in a.partitions())
    assert parts == [0, 1, 2, 3]
    assert sorted(len(a.partitions()) for a in result.values()) == [2, 2]


def test_two_instances_share_no_state() -> None:
    one, two = FlowAssignor(), FlowAssignor()
    g = _Group(3)
    g.members = {"a": one}
    g.topics = {"a": [TOPIC]}
    g.rebalance()
    assert one.round == 1 and one.last_plan is not None
    assert two.round == 0 and two.last_plan is None and two.assigned == ()


def test_weights_balance_by_load() -> None:
    load = {TopicPartition(TOPIC, p): (10.0 if p == 0 else 1.0) for p in range(24)}
    g = _Group(24, weights=lambda tps: {tp: load[tp] for tp in tps})
    for m in ("a", "b", "c"):
        g.join(m)
    out = g.rebalance()
    per = [sum(load[TopicPartition(TOPIC, p)] for p in ps) for ps in out.values()]
    assert max(per) / (sum(per) / 3) <= 1.2
    plan = g.members[g.leader].last_plan
    assert plan is not None and plan.topics[TOPIC].weighted and plan.topics[TOPIC].fallback is None


@pytest.mark.parametrize(
    ("weights", "why"),
    [
        (lambda tps: {tp: -1.0 for tp in tps}, "weights[0] must be a finite number >= 0, got -1.0"),
        (lambda tps: {tp: math.nan for tp in tps}, "weights[0] must be a finite number >= 0, got nan"),
        (lambda tps: {tp: 1.0 for tp in tps[1:]}, "weights gave no load for partition 0"),
        (lambda tps: {tp: "3" for tp in tps}, "weights[0] must be a finite number >= 0, got '3'"),
        (lambda tps: [1.0] * len(tps), "weights returned a list, not a mapping"),
        (lambda tps: 1 / 0, "weights raised ZeroDivisionError: division by zero"),
    ],
    ids=["negative", "nan", "missing", "string", "not-a-mapping", "raises"],
)
def test_bad_weights_fall_back_to_count_balance_with_one_warning(
    weights: Any, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    g = _Group(7, weights=weights)
    for m in ("a", "b", "c"):
        g.join(m)
    with caplog.at_level(logging.WARNING, logger="rebalancer.consumers.kafka"):
        out = g.rebalance()
    assert sorted(len(ps) for ps in out.values()) == [2, 2, 3]
    plan = g.members[g.leader].last_plan
    assert plan is not None and plan.topics[TOPIC].fallback == why and not plan.topics[TOPIC].weighted
    assert [r.getMessage() for r in caplog.records] == [f"topic 'events' balanced by count this round: {why}"]


def test_a_topic_without_partitions_is_skipped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    g = _Group(7)
    g.join("a", topics=[TOPIC, "ghost"])
    with caplog.at_level(logging.WARNING, logger="rebalancer.consumers.kafka"):
        out = g.rebalance()
    assert out == {"a": tuple(range(7))}
    assert [r.getMessage() for r in caplog.records] == [
        "topic 'ghost' has no partition metadata: nothing of it is assigned this round"
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"weights": {"p": 1}}, "weights must be None or a callable giving {TopicPartition: load}, got {'p': 1} (dict)"),
        ({"on_event": 3}, "on_event must be None or a callable, got 3 (int)"),
        ({"instance_id": ""}, "instance_id must be None or a non-empty str, got ''"),
    ],
)
def test_flow_assignor_rejects_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        FlowAssignor(**kwargs)
    assert str(info.value) == message


# ----- GracefulHandoff, with a stand-in consumer ---------------------------------------------------------


@dataclass
class _Record:
    topic: str
    partition: int
    offset: int


class _Consumer:
    def __init__(self) -> None:
        self.commits: list[dict[TopicPartition, int]] = []

    async def commit(self, offsets: Mapping[TopicPartition, Any]) -> None:
        self.commits.append({tp: o.offset for tp, o in offsets.items()})


def test_revoke_waits_for_in_flight_work_then_commits_it() -> None:
    async def scenario() -> tuple[list[object], _Consumer, list[str]]:
        consumer, events, order = _Consumer(), [], []
        handoff = GracefulHandoff(consumer, max_handoff_s=30, on_event=events.append)
        tp = TopicPartition(TOPIC, 0)
        await handoff.on_partitions_assigned([tp])
        release = asyncio.Event()

        async def slow(record: _Record) -> None:
            order.append(f"start {record.offset}")
            await release.wait()
            order.append(f"end {record.offset}")

        assert await handoff.process(_Record(TOPIC, 0, 0), lambda r: order.append("did 0"))
        work = asyncio.create_task(handoff.process(_Record(TOPIC, 0, 1), slow))
        await asyncio.sleep(0)
        revoke = asyncio.create_task(handoff.on_partitions_revoked([tp]))
        await asyncio.sleep(0)
        order.append("revoke waiting")
        # a record of the partition being released is not started
        assert not await handoff.process(_Record(TOPIC, 0, 2), lambda r: order.append("wrong"))
        release.set()
        await work
        await revoke
        order.append("released")
        return events, consumer, order

    events, consumer, order = asyncio.run(scenario())
    assert order == ["did 0", "start 1", "revoke waiting", "end 1", "released"]
    assert consumer.commits == [{TopicPartition(TOPIC, 0): 2}]
    assert [type(e) for e in events] == [PartitionsResumed, PartitionsReleased]
    released = events[1]
    assert isinstance(released, PartitionsReleased)
    assert (released.committed, released.in_flight, released.cut_short) == ({(TOPIC, 0): 2}, 0, False)


def test_past_max_handoff_the_release_goes_ahead_and_says_cut_short() -> None:
    async def scenario() -> tuple[list[object], _Consumer, GracefulHandoff]:
        consumer, events = _Consumer(), []
        handoff = GracefulHandoff(consumer, max_handoff_s=0.05, on_event=events.append)
        tp = TopicPartition(TOPIC, 0)
        await handoff.on_partitions_assigned([tp])
        await handoff.process(_Record(TOPIC, 0, 0), lambda r: None)
        never = asyncio.Event()
        work = asyncio.create_task(handoff.process(_Record(TOPIC, 0, 1), lambda r: never.wait()))
        await asyncio.sleep(0)
        await handoff.on_partitions_revoked([tp])
        work.cancel()
        return events, consumer, handoff

    events, consumer, handoff = asyncio.run(scenario())
    released = events[-1]
    assert isinstance(released, PartitionsReleased)
    assert (released.cut_short, released.in_flight, released.committed) == (True, 1, {(TOPIC, 0): 1})
    assert consumer.commits == [{TopicPartition(TOPIC, 0): 1}]  # offset 1 was in flight: not committed
    assert handoff.cut_short == 1


def test_a_kept_partition_skips_records_below_what_it_committed() -> None:
    async def scenario() -> tuple[list[int], GracefulHandoff]:
        consumer, did = _Consumer(), []
        handoff = GracefulHandoff(consumer)
        tp = TopicPartition(TOPIC, 0)
        await handoff.on_partitions_assigned([tp])
        for o in range(3):
            await handoff.process(_Record(TOPIC, 0, o), lambda r: did.append(r.offset))
        await handoff.on_partitions_revoked([tp])
        await handoff.on_partitions_assigned([tp])  # kept: resumes from offset 3
        for o in (2, 3):  # 2 was fetched before the rebalance and handed over late
            await handoff.process(_Record(TOPIC, 0, o), lambda r: did.append(r.offset))
        return did, handoff

    did, handoff = asyncio.run(scenario())
    assert did == [0, 1, 2, 3]
    assert (handoff.processed, handoff.skipped) == (4, 1)


def test_a_failed_commit_on_revoke_is_reported_not_raised() -> None:
    class Refusing(_Consumer):
        async def commit(self, offsets: Mapping[TopicPartition, Any]) -> None:
            raise RuntimeError("CommitFailedError: the group rebalanced")

    async def scenario() -> list[object]:
        events: list[object] = []
        handoff = GracefulHandoff(Refusing(), on_event=events.append)
        tp = TopicPartition(TOPIC, 1)
        await handoff.on_partitions_assigned([tp])
        await handoff.process(_Record(TOPIC, 1, 0), lambda r: None)
        await handoff.on_partitions_revoked([tp])
        return events

    released = asyncio.run(scenario())[-1]
    assert isinstance(released, PartitionsReleased)
    assert released.commit_error == "RuntimeError: CommitFailedError: the group rebalanced"
    assert released.committed == {}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_handoff_s": 0}, "max_handoff_s must be a finite number of seconds > 0, got 0"),
        ({"max_handoff_s": math.inf}, "max_handoff_s must be a finite number of seconds > 0, got inf"),
        ({"max_handoff_s": "10"}, "max_handoff_s must be a finite number of seconds > 0, got '10'"),
        ({"commit": "yes"}, "commit must be None or a callable, got 'yes' (str)"),
    ],
)
def test_graceful_handoff_rejects_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        GracefulHandoff(_Consumer(), **kwargs)
    assert str(info.value) == message
