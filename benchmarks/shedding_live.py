"""BalancedShedder against AvgShedder on real Pulsar brokers: the same skewed load, the same starting
placement, each strategy acting through `rebalancer shedding watch --apply` (issue 45).

Setup: `rebalancer.testing.PulsarCluster(brokers=2)` (Apache Pulsar 4.2.4, the modular load manager,
its own shedding off; the jars from `make pulsar`), started by this script and timed
(`cluster_start_s`), with a 5 Mbit/s NIC per broker and the cluster's `loadBalancer*` settings at
Pulsar's defaults but `maxUnloadPercentage=0.5` (as Pulsar's docs advise for AvgShedder) and a
minimum to unload of 100 msg/s or 100 KB/s (Pulsar's 1,000 msg/s and 1 MB/s are production sizes).
The watch runs every strategy with the cluster's own settings (`--cluster-settings`).

For each strategy, in turn: a namespace of 16 bundles, one topic in each (Zipf-like rates from 160
down to 4 msg/s, 520 in all, 1 kB messages, from the `pulsar-client` wheel, consumed as they come), every bundle
moved to broker 0 first (the same starting placement, made before the clients connect and waited
for in the brokers' load reports), then `SheddingWatch(apply=strategy)` every
--interval seconds for --cycles cycles. The brokers share one host, so each broker's usage is its
own throughput against its NIC (`bandwidth_from_throughput`). Then the load stops and every
message acknowledged in must have come out.

RESULT keys: `moves_*` (bundles unloaded), `spread_before` (max - min usage, % points, at the first
cycle, the mean of both runs), `spread_after_*` (the mean of the last three cycles),
`seconds_to_balance_*` (from the first cycle to the one from which the spread stayed under
--target; -1 if it never did), `lost` (messages acknowledged in and never out, both runs),
`cluster_start_s`.

Targets: BalancedShedder's spread at most AvgShedder's with no more moves; lost == 0;
cluster_start_s <= 120.

    .venv/bin/python benchmarks/shedding_live.py             # about 6 minutes on 2 cores
    .venv/bin/python benchmarks/shedding_live.py --cycles 12 --interval 3

Last line: RESULT moves_avg=… moves_balanced=… spread_before=… spread_after_avg=…
spread_after_balanced=… seconds_to_balance_avg=… seconds_to_balance_balanced=… lost=… cluster_start_s=…
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# The skewed-load driver is test code, shared with tests/shedding/test_live_pulsar.py.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "shedding"))

from live_load import SkewedLoad, place_all_on, wait_for_load

from rebalancer.shedding.live import CLUSTER_SETTINGS, Cycle, SheddingWatch
from rebalancer.testing import PulsarCluster

# Zipf-like: the hottest topic 40 times the coolest; about 520 msg/s in all.
RATES = [160.0, 96.0, 64.0, 48.0, 32.0, 24.0, 20.0, 16.0, 12.0, 10.0, 8.0, 8.0, 6.0, 6.0, 5.0, 4.0]
NIC_GBPS = 0.005
BROKER_CONFIG = {"maxUnloadPercentage": 0.5, "minUnloadMessage": 100, "minUnloadMessageThroughput": 100 * 1024}


@dataclass
class Run:
    strategy: str
    cycles: list[Cycle]
    moves: int
    lost: int
    acked: int
    failed: int
    seconds_to_balance: float

    @property
    def spread_before(self) -> float:
        return self.cycles[0].spread

    @property
    def spread_after(self) -> float:
        return statistics.fmean(c.spread for c in self.cycles[-3:])


def seconds_to_balance(cycles: list[Cycle], target: float) -> float:
    """From the first cycle to the first from which the spread stayed under `target`; -1 if never."""
    for i, cycle in enumerate(cycles):
        if all(c.spread < target for c in cycles[i:]):
            return cycle.timestamp - cycles[0].timestamp
    return -1.0


def run(cluster: PulsarCluster, strategy: str, args: argparse.Namespace, record: Path) -> Run:
    namespace = f"bench/{strategy.lower()}"
    cluster.create_namespace(namespace, bundles=16)
    load = SkewedLoad(cluster.admin_url, cluster.service_url, namespace, RATES)
    try:
        place_all_on(cluster.admin_url, namespace, load.by_bundle, cluster.brokers[0])  # before any client
        load.start()
        wait_for_load(cluster.brokers, namespace, list(load.by_bundle), cluster.brokers[0])
        time.sleep(args.warm_up)
        with SheddingWatch(cluster.admin_url, strategy, CLUSTER_SETTINGS, interval_s=args.interval,
                           record=record / strategy, apply=strategy, bandwidth_from_throughput=True) as watch:
            cycles = []
            for cycle in watch.run(args.cycles):
                cycles.append(cycle)
                moved = sum(a.outcome == "unloaded" for a in cycle.applied)
                usage = "  ".join(f"{u:5.1f}" for u in cycle.usage.values())
                print(f"  {strategy:<16} cycle {cycle.index + 1:>2}: usage {usage}  spread {cycle.spread:5.1f}"
                      f"  unloaded {moved}", flush=True)
    finally:
        load.stop()
        load.close()
    moves = sum(a.outcome == "unloaded" for c in cycles for a in c.applied)
    return Run(strategy, cycles, moves, load.lost, load.acked, load.failed, seconds_to_balance(cycles, args.target))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=24, help="watch cycles per strategy")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between cycles")
    parser.add_argument("--warm-up", type=float, default=8.0,
                        help="seconds of load before the first cycle, once the load reports show it")
    parser.add_argument("--target", type=float, default=10.0, help="balanced: spread under this many points")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    load_average = os.getloadavg()[0]
    started = time.monotonic()
    with PulsarCluster(brokers=2, nic_speed_gbps=NIC_GBPS, broker_config=BROKER_CONFIG) as cluster, \
            tempfile.TemporaryDirectory(prefix="shedding-live-") as tmp:
        cluster_start_s = cluster.start_seconds
        print(f"PulsarCluster: 2 brokers, Apache Pulsar {cluster.version}, up in {cluster_start_s:.1f} s "
              f"(1-minute load average {load_average:.1f} on {os.cpu_count()} cores)", flush=True)
        runs = [run(cluster, strategy, args, Path(tmp)) for strategy in ("AvgShedder", "BalancedShedder")]
    avg, balanced = runs
    print()
    print(f"{'strategy':<16} {'moves':>5} {'spread before':>13} {'spread after':>12} {'s to balance':>12} "
          f"{'acked':>7} {'lost':>4}")
    for r in runs:
        print(f"{r.strategy:<16} {r.moves:>5} {r.spread_before:>13.1f} {r.spread_after:>12.1f} "
              f"{r.seconds_to_balance:>12.0f} {r.acked:>7} {r.lost:>4}")
    print(f"{time.monotonic() - started:.0f} s in all; 1-minute load average now {os.getloadavg()[0]:.1f}")
    print(
        f"RESULT moves_avg={avg.moves} moves_balanced={balanced.moves} "
        f"spread_before={statistics.fmean(r.spread_before for r in runs):.1f} "
        f"spread_after_avg={avg.spread_after:.1f} spread_after_balanced={balanced.spread_after:.1f} "
        f"seconds_to_balance_avg={avg.seconds_to_balance:.0f} "
        f"seconds_to_balance_balanced={balanced.seconds_to_balance:.0f} "
        f"lost={avg.lost + balanced.lost} cluster_start_s={cluster_start_s:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
