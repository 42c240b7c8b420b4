"""Seed 003's rules on real Kafka consumer groups: FlowAssignor against aiokafka's own assignors
(issue 44).

Setup: `rebalancer.testing.KafkaCluster(brokers=3)` (Apache Kafka 4.3.1, KRaft, loopback, classic
group protocol), started by this script. Every consumer is its own process
(`rebalancer.consumers.kafka_group`), so a kill is a real SIGKILL.

One membership script, run once per assignor, each on its own 7-partition topic holding the same
records: c1, c2, c3 start; then c4 joins, c5 joins, c2 leaves, c3 is killed, c2 rejoins, four more
join (8 consumers on 7 partitions: one is standby), and those four leave. Before each step 1,000 more
records are produced, so records are in flight at every change. After each step the script waits
until every live consumer holds partitions of one generation covering all 7 once.

- `moves_*`: partitions that changed owner while their old owner stayed in the group, summed over the
  steps; `moves_lower_bound`: the fewest any ±1 plan could do, from the counts alone.
- `dup_processed_*`: records processed twice around graceful changes (join, leave, rejoin).
  `dup_after_kill_ours`: records the killed consumer had processed and the next owner processed
  again; `kill_uncommitted_ours` is what the killed consumer held processed but uncommitted at the
  kill: the former must not exceed the latter.
- `lag_balance_*`: a 24-partition topic whose partition 0 holds 10x the records of each other one,
  three consumers, nothing processed yet: max/mean of the records each consumer owns. Ours weighs
  partitions by lag (`LagWeights`); round-robin cannot.
- `lost_*`: records never processed. A killed consumer under auto commit may have committed
  offsets of records it fetched but had not processed yet: nobody gets them again.
- `rebalance_ms_p50_*`: from the change to the settled group, median over the steps (the kill's
  step includes the 6 s session timeout, for every assignor alike).

Ours is FlowAssignor with GracefulHandoff (processed offsets committed on revoke); aiokafka's are
run as aiokafka documents them (auto commit, no listener): what a user of those assignors has.

Targets: moves_ours == moves_lower_bound, moves_ours <= moves_sticky, dup_processed_ours == 0,
lag_balance_ours <= 1.2.

    .venv/bin/python benchmarks/consumers_kafka.py       # about 5 minutes on 2 cores

Last line: RESULT moves_ours=… moves_lower_bound=… moves_sticky=… moves_roundrobin=… moves_range=…
dup_processed_ours=… dup_processed_sticky=… dup_after_kill_ours=… lag_balance_ours=…
lag_balance_roundrobin=… rebalance_ms_p50_ours=… rebalance_ms_p50_sticky=…
"""

from __future__ import annotations

import argparse
import logging
import signal
import statistics
import sys
import time
from typing import Any

from rebalancer.consumers.kafka_group import LiveGroup, lower_bound_between, moves_between

PARTITIONS = 7
SLICE = 1000
ASSIGNORS = ("flow", "sticky", "roundrobin", "range")


def _terminate(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt("SIGTERM")  # the finally blocks stop the consumers and the brokers


def _produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 0})
    for partition, n in per_partition.items():
        for i in range(n):
            producer.produce(topic, value=b"%d" % i, partition=partition)
        producer.poll(0)
    if producer.flush(60):
        raise RuntimeError(f"records for {topic} not acked within 60 s")


def _even(n: int) -> dict[int, int]:
    return {p: n // PARTITIONS + (p < n % PARTITIONS) for p in range(PARTITIONS)}


def run_script(cluster: Any, assignor: str) -> dict[str, Any]:
    topic = f"bench-{assignor}"
    cluster.create_topic(topic, PARTITIONS)
    bootstrap = cluster.bootstrap_servers
    killed: set[str] = set()
    kill_uncommitted = 0
    moves = bound = 0
    waits: list[float] = []
    with LiveGroup(bootstrap, topic, f"g-{topic}", PARTITIONS, assignor=assignor, handler_delay_s=0.002) as group:
        for name in ("c1", "c2", "c3"):
            group.join(name)
        state = group.wait_stable()
        steps: list[tuple[str, list[str]]] = [
            ("join", ["c4"]),
            ("join", ["c5"]),
            ("leave", ["c2"]),
            ("kill", ["c3"]),
            ("join", ["c2"]),
            ("join", ["c6", "c7", "c8", "c9"]),
            ("leave", ["c6", "c7", "c8", "c9"]),
        ]
        for action, names in steps:
            before = {n: group.processed_by.get(n, 0) for n in names}
            _produce(bootstrap, topic, _even(SLICE))
            if action == "kill":  # mid-work: the victim is processing this slice when it dies
                for name in names:
                    group.wait_progress(name, before[name] + 20)
            if action == "join":
                for name in names:
                    group.join(name)
            started = time.monotonic()
            if action == "leave":
                for name in names:
                    group.leave(name)
            elif action == "kill":
                for name in names:
                    kill_uncommitted += group.kill(name)
                    killed.add(name)
            after = group.wait_stable(after=state.generation + 1)
            waits.append((time.monotonic() - started) * 1000)
            step_moves, step_bound = moves_between(state, after), lower_bound_between(state, after, PARTITIONS)
            moves += step_moves
            bound += step_bound
            print(
                f"  {assignor:<10} {action:<5} {','.join(names):<12} moves {step_moves} (bound {step_bound})  "
                f"{waits[-1]:7.0f} ms  {dict(sorted(after.counts().items()))}",
                flush=True,
            )
            state = after
        lost = group.wait_caught_up({p: n * len(steps) for p, n in _even(SLICE).items()})
        dups = group.duplicates
        after_kill = sum(1 for _, _, first, _ in dups if first in killed)
    return {
        "moves": moves,
        "bound": bound,
        "dup": len(dups) - after_kill,
        "dup_after_kill": after_kill,
        "kill_uncommitted": kill_uncommitted,
        "lost": lost,
        "rebalance_ms_p50": statistics.median(waits),
    }


def lag_balance(cluster: Any, assignor: str) -> float:
    topic = f"bench-load-{assignor}"
    cluster.create_topic(topic, 24)
    load = {p: (1000 if p == 0 else 100) for p in range(24)}
    _produce(cluster.bootstrap_servers, topic, load)
    with LiveGroup(
        cluster.bootstrap_servers, topic, f"g-{topic}", 24, assignor=assignor,
        lag_weights=assignor == "flow", hold=True,
    ) as group:  # fmt: skip
        for name in ("c1", "c2", "c3"):
            group.join(name)
            group.wait_stable()
        per = [sum(load[p] for p in ps) for ps in group.wait_stable().assignment.values()]
    return max(per) / (sum(per) / len(per))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    signal.signal(signal.SIGTERM, _terminate)
    from rebalancer.testing import KafkaCluster

    with KafkaCluster(brokers=3) as cluster:
        print(f"KafkaCluster: 3 brokers (Apache Kafka {cluster.version}) up in {cluster.startup_s:.1f} s", flush=True)
        runs = {a: run_script(cluster, a) for a in ASSIGNORS}
        balance = {a: lag_balance(cluster, a) for a in ("flow", "roundrobin")}
    print()
    print(f"{'assignor':<12}{'moves':>6}{'bound':>6}{'dups':>6}{'after kill':>11}{'lost':>6}{'p50 ms':>8}")
    for a, r in runs.items():
        name = "FlowAssignor" if a == "flow" else a
        print(
            f"{name:<12}{r['moves']:>6}{r['bound']:>6}{r['dup']:>6}{r['dup_after_kill']:>11}{r['lost']:>6}"
            f"{r['rebalance_ms_p50']:>8.0f}"
        )
    print(f"lag balance (max/mean of records owned): ours {balance['flow']:.3f}, round-robin {balance['roundrobin']:.3f}")
    print(f"the killed consumer held {runs['flow']['kill_uncommitted']} records processed but uncommitted")
    ours = runs["flow"]
    print(
        f"RESULT moves_ours={ours['moves']} moves_lower_bound={ours['bound']} moves_sticky={runs['sticky']['moves']} "
        f"moves_roundrobin={runs['roundrobin']['moves']} moves_range={runs['range']['moves']} "
        f"dup_processed_ours={ours['dup']} dup_processed_sticky={runs['sticky']['dup']} "
        f"dup_after_kill_ours={ours['dup_after_kill']} lag_balance_ours={balance['flow']:.3f} "
        f"lag_balance_roundrobin={balance['roundrobin']:.3f} "
        f"rebalance_ms_p50_ours={ours['rebalance_ms_p50']:.0f} "
        f"rebalance_ms_p50_sticky={runs['sticky']['rebalance_ms_p50']:.0f} "
        f"kill_uncommitted_ours={ours['kill_uncommitted']} lost_ours={ours['lost']} "
        f"lost_sticky={runs['sticky']['lost']} dup_after_kill_sticky={runs['sticky']['dup_after_kill']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
