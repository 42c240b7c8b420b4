"""Attack findings on issue 44 (FlowAssignor, GracefulHandoff, LagWeights, `consumers demo --kafka`).

Each test asserts what docs/consumers.md, the docstrings or the issue promise; each failed before its
fix. The protocol is run by hand as aiokafka runs it (every member's `metadata()`, the
leader's `assign()`, every member's `on_assignment()`); GracefulHandoff gets a small fake consumer.
Two tests run the CLI: one only parses its flags, one starts the embedded broker (`kafka_real`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest

pytest.importorskip("aiokafka")

from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.structs import ConsumerRecord, OffsetAndMetadata, TopicPartition

from rebalancer.consumers import PartitionsReleased
from rebalancer.consumers.kafka import FlowAssignor

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





