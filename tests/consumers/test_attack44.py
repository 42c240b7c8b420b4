"""Attack findings on issue 44 (FlowAssignor, GracefulHandoff, LagWeights, `consumers demo --kafka`).

Each test asserts what docs/consumers.md, the docstrings or the issue promise; each failed before its
fix. The protocol is run by hand as aiokafka runs it (every member's `metadata()`, the
leader's `assign()`, every member's `on_assignment()`); GracefulHandoff gets a small fake consumer.
Two tests run the CLI: one only parses its flags, one starts the embedded broker (`kafka_real`).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest

pytest.importorskip("aiokafka")

from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.structs import ConsumerRecord, OffsetAndMetadata, TopicPartition

from rebalancer.consumers import PartitionsReleased
from rebalancer.consumers.kafka import FlowAssignor, GracefulHandoff, LagWeights

TP = TopicPartition
P0 = TP("t", 0)


# ----- the protocol by hand -------------------------------------------------------------------------


class _Cluster:
    def __init__(self, partitions: Mapping[str, int]) -> None:
        self.parts = dict(partitions)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        n = self.parts.get(topic)
        return None if n is None else set(range(n))

    def available_partitions_for_topic(self, topic: str) -> set[int] | None:
        return self.partitions_for_topic(topic)

    def topics(self, exclude_internal_topics: bool = True) -> set[str]:
        return set(self.parts)


def _rebalance(
    cluster: _Cluster, members: Mapping[str, FlowAssignor], topics: tuple[str, ...] = ("t",)
) -> dict[str, ConsumerProtocolMemberAssignment]:
    metas = {name: a.metadata(list(topics)) for name, a in members.items()}
    out = next(iter(members.values())).assign(cluster, metas)  # type: ignore[arg-type]
    for name, a in members.items():
        a.on_assignment(out[name])
    return out


def _counts(out: Mapping[str, ConsumerProtocolMemberAssignment]) -> list[int]:
    return sorted(len(a.partitions()) for a in out.values())


def _owners(out: Mapping[str, ConsumerProtocolMemberAssignment]) -> Counter[TopicPartition]:
    return Counter(tp for a in out.values() for tp in a.partitions())


def _group(weights: Any = None, on_event: Any = None) -> tuple[_Cluster, dict[str, FlowAssignor]]:
    return _Cluster({"t": 7}), {m: FlowAssignor(weights=weights, on_event=on_event) for m in ("a", "b", "c")}


# ----- GracefulHandoff's fake consumer --------------------------------------------------------------


class _Consumer:
    """What GracefulHandoff may use of an AIOKafkaConsumer; `store` is the group's committed offsets."""

    def __init__(self, store: dict[TopicPartition, int] | None = None) -> None:
        self.store = {} if store is None else store

    async def commit(self, offsets: Mapping[TopicPartition, Any]) -> None:
        for tp, o in offsets.items():
            self.store[tp] = o.offset if isinstance(o, OffsetAndMetadata) else int(o)

    async def committed(self, tp: TopicPartition) -> int | None:
        return self.store.get(tp)

    async def position(self, tp: TopicPartition) -> int:
        return self.store.get(tp, 0)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        pass

    def assignment(self) -> set[TopicPartition]:
        return set()


def _rec(partition: int, offset: int) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        topic="t", partition=partition, offset=offset, timestamp=0, timestamp_type=0, key=None, value=b"v",
        checksum=None, serialized_key_size=0, serialized_value_size=1, headers=(),
    )  # fmt: skip


def _released(events: list[Any]) -> PartitionsReleased:
    return [e for e in events if isinstance(e, PartitionsReleased)][-1]


# ----- FlowAssignor ---------------------------------------------------------------------------------


def test_an_on_event_that_raises_does_not_fail_the_leaders_assign() -> None:
    """A broken event sink (print to a closed pipe, a full queue) must not stop the group: aiokafka turns
    an exception from assign() into a failed join, retried by the same leader for ever; live, a
    consumer built with its topic fails start() with KafkaError('RuntimeError(sink down)')."""

    def sink(event: object) -> None:
        raise RuntimeError("sink down")

    cluster, members = _group(on_event=sink)
    out = _rebalance(cluster, members)
    assert _counts(out) == [2, 2, 3]
    assert _owners(out) == Counter(TP("t", p) for p in range(7))


@pytest.mark.parametrize(
    "load",
    [1e308, 5e-324],
    ids=["finite-loads-whose-sum-overflows", "subnormal-loads"],
)
def test_finite_non_negative_weights_never_crash_the_leader(load: float) -> None:
    """Docs: "Bad weights never crash a group". Today 7 x 1e308 raises ValueError ("throughput must
    have a finite sum") and 7 x 5e-324 raises OverflowError out of assign()."""
    cluster, members = _group(weights=lambda tps: {tp: load for tp in tps})
    out = _rebalance(cluster, members)
    assert _counts(out) == [2, 2, 3]
    assert _owners(out) == Counter(TP("t", p) for p in range(7))


def test_a_weights_mapping_whose_lookup_raises_falls_back_to_count() -> None:
    """A mapping that raises on lookup is a bad weights result like a callable that raises: the docs
    promise a count fallback with `TopicPlan.fallback` set; today KeyError escapes assign()."""

    class Broken(dict):  # type: ignore[type-arg]
        def __getitem__(self, key: object) -> float:
            raise KeyError("gone")

    cluster, members = _group(weights=lambda tps: Broken({tp: 1.0 for tp in tps}))
    out = _rebalance(cluster, members)
    plan = members["a"].last_plan
    assert plan is not None
    assert _counts(out) == [2, 2, 3]
    assert plan.topics["t"].weighted is False
    assert plan.topics["t"].fallback is not None




# ----- LagWeights -----------------------------------------------------------------------------------




# ----- GracefulHandoff ------------------------------------------------------------------------------












# ----- the CLI --------------------------------------------------------------------------------------


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "100"}
    return subprocess.run(
        [sys.executable, "-m", "rebalancer.cli", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def test_a_password_in_the_bootstrap_is_not_echoed_in_the_error() -> None:
    """`--kafka user:hunter2@127.0.0.1:9092` is refused in one line, but the line repeats the password
    (a `SASL_SSL://user:pw@...` value is masked as `***@`; this form is not)."""
    out = _cli("consumers", "demo", "--kafka", "user:hunter2@127.0.0.1:9092")
    assert out.returncode == 2
    assert len(out.stderr.splitlines()) == 1
    assert "hunter2" not in out.stderr + out.stdout


def test_all_zero_loads_still_give_each_consumer_its_share() -> None:
    """A caught-up group using LagWeights has lag 0 everywhere. Before its fix the leader then gave all 7
    partitions to one member and nothing to the other two (not even reported as standby), and a 4th
    member that joins later also gets nothing: "a new consumer takes its share" no longer holds."""
    cluster, members = _group(weights=lambda tps: {tp: 0 for tp in tps})
    out = _rebalance(cluster, members)
    assert _counts(out) == [2, 2, 3]
    members["d"] = FlowAssignor(weights=lambda tps: {tp: 0 for tp in tps})
    out = _rebalance(cluster, members)
    assert _counts(out) == [1, 2, 2, 2]


def test_one_small_load_among_zeros_still_gives_each_consumer_a_share() -> None:
    """Helper-31's finding: loads 0 everywhere but 1 on one partition. Moving a partition of load 0
    changes no member's load, so the load plan left every partition with the first member and the
    others got nothing. A caught-up partition weighs a hundredth of the mean load now: the loaded
    partition's member keeps it alone and the zeros are shared."""
    loads = {0: 0.0, 1: 0.0, 2: 0.0, 3: 0.0, 4: 0.0, 5: 0.0, 6: 1.0}
    cluster, members = _group(weights=lambda tps: {tp: loads[tp.partition] for tp in tps})
    out = _rebalance(cluster, members)
    by_member = sorted(sorted(tp.partition for tp in a.partitions()) for a in out.values())
    assert sorted(map(len, by_member)) == [1, 3, 3] and [6] in by_member
    assert sum(_owners(out).values()) == 7


def test_lag_weights_refresh_with_one_topic_name_as_a_string_is_refused() -> None:
    """`refresh(consumer, "events")` iterates the string and asks for topics 'e', 'v', 'e', 'n'...;
    a bad argument should raise ValueError naming `topics`."""
    asked: list[str] = []

    class Consumer:
        def partitions_for_topic(self, topic: str) -> set[int]:
            asked.append(topic)
            return {0}

        async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
            return {tp: 1 for tp in tps}

        async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
            return {tp: 0 for tp in tps}

        async def committed(self, tp: TopicPartition) -> int:
            return 0

    with pytest.raises(ValueError, match="topics"):
        asyncio.run(LagWeights().refresh(Consumer(), "events"))
    assert asked == []


def test_a_record_fetched_before_two_rebalances_is_not_processed_again() -> None:
    """Docs: "no record processed twice (a record fetched before the rebalance and handed over late is
    skipped)". A fetched 0..14 and processed 0..9; p0 moved to B, which processed 10..19 and committed
    20; p0 came back to A, whose loop then reaches its stale records 10..14. A only compares with what
    *it* committed (10), never reads the group's committed offset on assignment, so 10..14 run twice."""

    async def scenario() -> Counter[int]:
        store: dict[TopicPartition, int] = {}
        a = GracefulHandoff(_Consumer(store), max_handoff_s=5)
        b = GracefulHandoff(_Consumer(store), max_handoff_s=5)
        done: Counter[int] = Counter()

        def work(record: Any) -> None:
            done[record.offset] += 1

        await a.on_partitions_assigned([P0])
        fetched_by_a = [_rec(0, o) for o in range(15)]
        for record in fetched_by_a[:10]:
            await a.process(record, work)
        await a.on_partitions_revoked([P0])  # rebalance 1: p0 -> B
        await b.on_partitions_assigned([P0])
        for o in range(10, 20):
            await b.process(_rec(0, o), work)
        await b.on_partitions_revoked([P0])  # rebalance 2: p0 -> A again
        await a.on_partitions_assigned([P0])
        assert store == {P0: 20}
        for record in fetched_by_a[10:]:  # A's loop goes on with the batch it fetched before rebalance 1
            await a.process(record, work)
        return done

    done = asyncio.run(scenario())
    assert sorted(o for o, n in done.items() if n > 1) == []


def test_a_hanging_commit_does_not_hold_the_revoke_past_max_handoff_s() -> None:
    """Docs and issue: the revoke does its three things "within max_handoff_s"; past it "the release
    goes ahead" and says cut_short. An async commit that never returns (a dead store, a coordinator
    that does not answer) holds the revoke for ever: the member then misses the rebalance timeout.
    The 5 s bound is 100 x max_handoff_s, a margin for a loaded machine, not a timing claim."""

    async def hang(offsets: Mapping[TopicPartition, int]) -> None:
        await asyncio.Event().wait()

    async def scenario() -> tuple[list[Any], frozenset[TopicPartition]]:
        events: list[Any] = []
        h = GracefulHandoff(_Consumer(), commit=hang, max_handoff_s=0.05, on_event=events.append)
        await h.on_partitions_assigned([P0])
        await h.process(_rec(0, 1), lambda r: None)
        await asyncio.wait_for(h.on_partitions_revoked([P0]), 5)
        return events, h.held

    events, held = asyncio.run(scenario())
    assert held == frozenset()
    assert _released(events).cut_short is True


def test_a_revoke_that_took_longer_than_max_handoff_s_says_cut_short() -> None:
    """A plain-function commit that takes 0.3 s with max_handoff_s=0.05: the event reports
    waited_s of about 0.3 and cut_short=False, contradicting "past max_handoff_s ... the event says
    that it was cut short"."""

    def slow(offsets: Mapping[TopicPartition, int]) -> None:
        time.sleep(0.3)

    async def scenario() -> PartitionsReleased:
        events: list[Any] = []
        h = GracefulHandoff(_Consumer(), commit=slow, max_handoff_s=0.05, on_event=events.append)
        await h.on_partitions_assigned([P0])
        await h.process(_rec(0, 1), lambda r: None)
        await h.on_partitions_revoked([P0])
        return _released(events)

    released = asyncio.run(scenario())
    assert released.waited_s >= 0.3
    assert released.cut_short is True


def test_a_record_whose_handler_raised_is_not_committed_past() -> None:
    """The handler raised on offset 5 (the exception reaches the caller, 5 is not counted as
    processed); the loop goes on and 6 succeeds. commit() then stores 7, so offset 5, never
    processed, is committed as done and no owner ever sees it again. "Commits what was processed"
    should stop at 5."""

    def fail(record: Any) -> None:
        raise RuntimeError("bad record")

    async def scenario() -> dict[TopicPartition, int]:
        h = GracefulHandoff(_Consumer(), max_handoff_s=5)
        await h.on_partitions_assigned([P0])
        with pytest.raises(RuntimeError):
            await h.process(_rec(0, 5), fail)
        assert await h.process(_rec(0, 6), lambda r: None) is True
        return await h.commit()

    assert asyncio.run(scenario()) == {P0: 5}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"clock": None}, "clock"), ({"consumer": None}, "consumer")],
    ids=["clock-None", "consumer-None-with-the-default-commit"],
)
def test_graceful_handoff_refuses_bad_arguments_up_front(kwargs: dict[str, Any], field: str) -> None:
    """Docs: "Bad arguments raise ValueError naming the field and the value". FlowAssignor refuses
    clock=None; GracefulHandoff takes it (and a None consumer with the default commit) and fails
    later, inside the rebalance."""
    args: dict[str, Any] = {"consumer": _Consumer(), **kwargs}
    with pytest.raises(ValueError, match=field):
        GracefulHandoff(**args)


def test_a_port_out_of_range_is_refused_as_a_bad_value() -> None:
    """`--kafka 127.0.0.1:99999` passes the format check, waits 10 s and says "no broker answered";
    a port outside 1..65535 is a bad value and should be named at once as one."""
    out = _cli("consumers", "demo", "--kafka", "127.0.0.1:99999")
    assert out.returncode == 2
    assert len(out.stderr.splitlines()) == 1
    assert "no broker answered" not in out.stderr
    assert "port" in out.stderr and "99999" in out.stderr


@pytest.mark.kafka_real
def test_the_embedded_demo_binds_the_first_three_consumers_together() -> None:
    """Docs: "rebalance delay for the first binds: carried differently, by the broker:
    group.initial.rebalance.delay.ms ... so that the first members bind together", and the demo
    "runs the seed's 7-partition scenario live". `--kafka embedded` starts KafkaCluster, which sets
    that delay to 0: c1 first takes all 7 partitions, then 3 and 2 of them are handed off (5
    handoffs before 3/2/2), and the closing total "changed owner in all: 1" leaves those 5 out."""
    out = _cli("consumers", "demo", "--kafka", "embedded", timeout=300)
    assert out.returncode == 0, out.stderr
    plans = [line.strip() for line in out.stdout.splitlines() if "rebalance of 7 partitions over" in line]
    assert plans[0].startswith("rebalance of 7 partitions over 3 flows: 0 handoffs")
