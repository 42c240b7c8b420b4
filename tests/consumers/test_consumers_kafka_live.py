"""Seed 003 on real Kafka consumer groups: FlowAssignor and GracefulHandoff on the session's brokers.

Every member is its own process (rebalancer.consumers.kafka_group), so a kill is a real SIGKILL. The
tests wait on what the members report (assignments of one generation covering every partition once),
never on the clock; the only timeouts are generous upper bounds that fail with what each member said.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("aiokafka")

from rebalancer.consumers.kafka_group import LiveGroup, lower_bound_between, moves_between

pytestmark = pytest.mark.kafka_real

_names = itertools.count()


def _topic(cluster: Any, partitions: int) -> str:
    name = f"flows-{next(_names)}"
    cluster.create_topic(name, partitions)
    return name


def _produce(cluster: Any, topic: str, per_partition: dict[int, int]) -> int:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 20, "log_level": 0})
    total = 0
    for partition, n in per_partition.items():
        for i in range(n):
            producer.produce(topic, value=b"%d" % i, partition=partition)
            total += 1
            if i % 5000 == 0:
                producer.poll(0)
    left = producer.flush(60)
    assert left == 0
    return total


def test_seven_partitions_three_then_four_consumers_then_one_leaves(kafka_real_cluster: Any) -> None:
    topic = _topic(kafka_real_cluster, 7)
    with LiveGroup(kafka_real_cluster.bootstrap_servers, topic, f"g-{topic}", 7) as group:
        for name in ("c1", "c2", "c3"):
            group.join(name)
        first = group.wait_stable()
        assert sorted(first.counts().values()) == [2, 2, 3]
        group.join("c4")
        second = group.wait_stable(after=first.generation + 1)
        assert sorted(second.counts().values()) == [1, 2, 2, 2]
        assert moves_between(first, second) == 1 == lower_bound_between(first, second, 7)
        leaving = second.assignment["c2"]
        group.leave("c2")
        third = group.wait_stable(after=second.generation + 1)
        assert sorted(third.counts().values()) == [2, 2, 3]
        assert moves_between(second, third) == 0
        changed = {p for m, ps in third.assignment.items() for p in ps if p not in second.assignment[m]}
        assert changed == set(leaving)


def test_a_standby_takes_a_killed_owners_partition_and_nothing_else_moves(kafka_real_cluster: Any) -> None:
    topic = _topic(kafka_real_cluster, 7)
    with LiveGroup(kafka_real_cluster.bootstrap_servers, topic, f"g-{topic}", 7) as group:
        for i in range(8):
            group.join(f"c{i}")
        first = group.wait_stable()
        standby = [m for m, ps in first.assignment.items() if not ps]
        assert len(standby) == 1 and sorted(first.counts().values()) == [0] + [1] * 7
        victim = next(m for m in sorted(first.assignment) if m not in standby)
        group.kill(victim)
        second = group.wait_stable(after=first.generation + 1)  # after the victim's session times out
        assert second.assignment[standby[0]] == first.assignment[victim]
        assert moves_between(first, second) == 0
        assert {m: ps for m, ps in second.assignment.items() if m != standby[0]} == {
            m: ps for m, ps in first.assignment.items() if m not in (victim, standby[0])
        }


def test_a_static_member_that_restarts_within_the_session_timeout_moves_nothing(kafka_real_cluster: Any) -> None:
    topic = _topic(kafka_real_cluster, 7)
    with LiveGroup(
        kafka_real_cluster.bootstrap_servers, topic, f"g-{topic}", 7, session_timeout_ms=45_000
    ) as group:
        for name in ("s1", "s2", "s3"):
            group.join(name, instance_id=name)
        first = group.wait_stable()
        follower = next(m for m in ("s1", "s2", "s3") if m != group.leader)
        for name in (follower, group.leader):  # a follower, then the leader
            assert name is not None
            before = group.wait_stable(after=first.generation)
            group.leave(name)  # a static member sends no LeaveGroup: the broker keeps its place
            group.join(name, instance_id=name)
            after = group.wait_stable(after=before.generation)
            assert after.assignment == before.assignment
            assert moves_between(before, after) == 0


def test_churn_every_record_processed_exactly_once(kafka_real_cluster: Any) -> None:
    topic = _topic(kafka_real_cluster, 7)
    total = 0
    with LiveGroup(
        kafka_real_cluster.bootstrap_servers, topic, f"g-{topic}", 7, handler_delay_s=0.0005, max_handoff_s=5.0
    ) as group:
        group.join("c0")
        group.join("c1")
        group.wait_stable()
        script = ["+c2", "+c3", "-c0", "+c4", "-c2", "+c5", "-c1", "+c6", "-c4", "+c7"]
        for step in script:
            total += _produce(kafka_real_cluster, topic, {p: 2000 // 7 + (p < 2000 % 7) for p in range(7)})
            if step[0] == "+":
                group.join(step[1:])
            else:
                group.leave(step[1:])
            group.wait_stable()
        assert total == 20_000
        group.wait_processed(total, timeout_s=180)
        group.leave(group.live[0])  # a last graceful change after everything was processed
        group.wait_stable()
        counts = group.processed
        assert len(counts) == 20_000
        twice = sum(c - 1 for c in counts.values())
        assert twice == 0, f"{twice} records processed more than once"


def test_lag_weights_balance_a_hot_partition_better_than_round_robin(kafka_real_cluster: Any) -> None:
    topic = _topic(kafka_real_cluster, 24)
    load = {p: (1000 if p == 0 else 100) for p in range(24)}
    _produce(kafka_real_cluster, topic, load)
    ratios = {}
    for assignor in ("flow", "roundrobin"):
        with LiveGroup(
            kafka_real_cluster.bootstrap_servers, topic, f"g-{topic}-{assignor}", 24,
            assignor=assignor, lag_weights=assignor == "flow", hold=True,
        ) as group:  # fmt: skip
            for name in ("c1", "c2", "c3"):
                group.join(name)
                group.wait_stable()
            state = group.wait_stable()
            per = [sum(load[p] for p in ps) for ps in state.assignment.values()]
            ratios[assignor] = max(per) / (sum(per) / len(per))
    assert ratios["flow"] <= 1.2
    # round-robin deals 8 partitions to each: one holds the hot partition and 7 others
    assert ratios["roundrobin"] == pytest.approx(1700 / (3300 / 3))


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "100"}
    return subprocess.run(
        [sys.executable, "-m", "rebalancer.cli", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def test_the_cli_demo_runs_the_seeds_example_on_real_brokers(kafka_real_cluster: Any) -> None:
    out = _cli("consumers", "demo", "--kafka", kafka_real_cluster.bootstrap_servers)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line.strip() for line in lines if "changed owner" in line] == [
        "partitions that changed owner: 1 (lower bound 1)",
        "partitions that changed owner: 0 (lower bound 0)",
        "balanced: 3/2/2 partitions per consumer; partitions that changed owner in all: 1 (lower bound 1)",
    ]
    assert any("c1, c2, c3 join" in line for line in lines)
    assert any(line.strip().startswith("rebalance of 7 partitions over 4 flows: 1 handoff") for line in lines)
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("not a host", "--kafka must be 'embedded' or host:port[,host:port...], got 'not a host'"),
        ("127.0.0.1:9", "--kafka 127.0.0.1:9: no broker answered within 10 s"),
    ],
    ids=["malformed", "unreachable"],
)
def test_the_cli_demo_refuses_a_bad_bootstrap_in_one_line(value: str, message: str) -> None:
    out = _cli("consumers", "demo", "--kafka", value, timeout=120)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [f"rebalancer: error: {message}"]
