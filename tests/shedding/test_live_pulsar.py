"""SheddingWatch on the real cluster (the session's `pulsar_cluster`: two brokers on loopback), with
skewed load from the `pulsar-client` wheel on 16-bundle namespaces.

- The watch records its cycles, and on every recorded snapshot each Pulsar strategy's decision is
  Pulsar's own class's decision (the conformance harness, conformance/pulsar, runs both).
- Apply mode: the planned bundles end on the planned brokers, the spread shrinks, no bundle is
  unloaded twice within the grace period, and every message acknowledged in comes out.
- A broker killed during a watch is reported once and the watch goes on.

The brokers share one host, so their CPU and NIC readings are the host's: the watch takes each
broker's own throughput as its bandwidth usage (`bandwidth_from_throughput`), weighted by 16 so that
a load Python sends on two cores (about 0.5 MB/s) reads as tens of percent of the cluster's 0.1 Gbit/s
NIC (the same as a NIC 16 times slower).
"""

from __future__ import annotations

import json
import logging
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from live_load import SkewedLoad, place_all_on, wait_for_load

from pulsar_conformance import verdict
from rebalancer.shedding import ShedderConfig
from rebalancer.shedding.live import Cycle, SheddingWatch, read_decisions

pytestmark = [pytest.mark.pulsar_real, pytest.mark.pulsar]

LOGGER = "rebalancer.shedding.live"
# Bandwidth counted 16 times (see the docstring); CPU not at all (the host's); Pulsar's defaults else,
# but the minimum to unload, which Pulsar sets for production rates (1,000 msg/s, 1 MB/s).
CONFIG = ShedderConfig(
    cpu_resource_weight=0.0,
    bandwidth_in_resource_weight=16.0,
    bandwidth_out_resource_weight=16.0,
    max_unload_percentage=0.5,
    min_unload_message=100,
    min_unload_message_throughput=100 * 1024,
)
# Four hot topics, twelve cool ones: about 500 msg/s of 1 kB.
RATES = [80.0] * 4 + [15.0] * 12
PULSAR_SHEDDERS = ("AvgShedder", "ThresholdShedder", "UniformLoadShedder", "OverloadShedder")
RESOURCES = ("cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut")
RATE_KEYS = ("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut")


def skewed_load(cluster: Any, namespace: str) -> SkewedLoad:
    """The namespace with 16 bundles, all on broker 0, the load running, and every broker's load report
    showing it, so that the first cycle sees the skew.

    The placement is read from the lookup API and the reports are waited for: a report lists a
    bundle only from its broker's next stats update, so one read just after the clients connected
    may list none of another broker's bundles, and a placement checked against it left half of them
    there (the load then started balanced and nothing was planned).
    """
    cluster.create_namespace(namespace, bundles=16)
    load = SkewedLoad(cluster.admin_url, cluster.service_url, namespace, RATES)
    try:
        place_all_on(cluster.admin_url, namespace, load.by_bundle, cluster.brokers[0])
        load.start()
        wait_for_load(cluster.brokers, namespace, list(load.by_bundle), cluster.brokers[0])
    except BaseException:
        load.stop(drain_s=0)
        load.close()
        raise
    return load


def properties(conf: ShedderConfig) -> dict[str, object]:
    """The settings as Pulsar's properties, each in its Java type: what the harness configures."""
    out: dict[str, object] = {}
    for f in fields(conf):
        java_type = f.metadata["java_type"]
        if java_type == "String":
            continue
        value = getattr(conf, f.name)
        out[f.metadata["java_name"]] = int(value) if java_type in ("int", "long") else value
    return out


def harness_cycle(path: Path, recently_unloaded: dict[str, int], strategy: str) -> dict[str, Any]:
    """A recorded snapshot as one cycle of a conformance case."""
    data = json.loads(path.read_text())
    brokers = [
        {"name": name, **{r: [b[r]["usage"], b[r]["limit"]] for r in RESOURCES}, **{k: b[k] for k in RATE_KEYS},
         "bundles": b["bundles"]}
        for name, b in data["brokers"].items()
    ]
    bundles = [
        {"name": name, "shortTerm": [d["shortTermData"][k] for k in RATE_KEYS],
         "longTerm": [d["longTermData"][k] for k in RATE_KEYS], "numSamples": d["shortTermData"]["numSamples"]}
        for name, d in data["bundles"].items()
    ]
    cycle = {"timestamp": data["timestamp"] / 1000, "brokers": brokers, "bundles": bundles,
             "recentlyUnloaded": recently_unloaded}
    if strategy == "AvgShedder":
        cycle["placeUnloaded"] = True
    return cycle


def test_the_watch_records_and_each_pulsar_strategy_decides_as_pulsars_own_class(pulsar_cluster, pulsar_harness, tmp_path):
    load = skewed_load(pulsar_cluster, "live/watch")
    strategies = ",".join((*PULSAR_SHEDDERS, "BalancedShedder"))
    try:
        with SheddingWatch(pulsar_cluster.admin_url, strategies, CONFIG, interval_s=3.0, record=tmp_path,
                           bandwidth_from_throughput=True) as watch:
            cycles = list(watch.run(6))
    finally:
        load.stop()
        load.close()
    assert len(cycles) == 6 and all(c.snapshot is not None for c in cycles)
    files = sorted(tmp_path.glob("snapshot-*.json"))
    assert len(files) == 6
    lines = read_decisions(tmp_path)
    assert any(c.decisions["AvgShedder"] for c in cycles), [c.usage for c in cycles]  # the skew is acted on
    for strategy in PULSAR_SHEDDERS:
        case = {
            "id": f"live-{strategy}",
            "strategy": strategy,
            "conf": properties(CONFIG),
            "cycles": [harness_cycle(f, line["recently_unloaded"], strategy) for f, line in zip(files, lines)],
        }
        (java,) = pulsar_harness.run([case])
        result = verdict(case, java)
        assert result.status == "match", result.detail
        for index, (pulsar_cycle, line) in enumerate(zip(java["cycles"], lines)):
            pulsar_unloads = sorted((row[0], row[1]) for row in pulsar_cycle["unloads"])
            assert sorted(tuple(u) for u in line["unloads"][strategy]) == pulsar_unloads, (strategy, index)
            if strategy == "AvgShedder":  # each move's destination is the one Pulsar's placement chose
                placed = {p["bundle"]: p["candidates"] for p in pulsar_cycle["placements"]}
                for bundle, _, destination in line["decisions"][strategy]:
                    assert destination in placed[bundle], (index, bundle)
    assert load.lost == 0 and load.failed == 0


def _owner(cycle: Cycle, bundle: str) -> str | None:
    assert cycle.snapshot is not None
    return cycle.snapshot.cluster().owner_of(bundle)


def test_apply_moves_the_planned_bundles_and_the_spread_shrinks_without_losing_a_message(pulsar_cluster, tmp_path):
    namespace = "live/apply"
    load = skewed_load(pulsar_cluster, namespace)
    try:
        with SheddingWatch(pulsar_cluster.admin_url, "AvgShedder,BalancedShedder", CONFIG, interval_s=4.0,
                           record=tmp_path, apply="AvgShedder", bandwidth_from_throughput=True) as watch:
            cycles = list(watch.run(9))
    finally:
        load.stop()
        load.close()
    applied = [(c.index, a) for c in cycles for a in c.applied]
    unloaded = [(i, a.move) for i, a in applied if a.outcome == "unloaded"]
    assert unloaded, [c.usage for c in cycles]
    assert [a for _, a in applied if a.outcome in ("failed", "gave up")] == []
    bundles = [m.bundle for _, m in unloaded]
    assert len(bundles) == len(set(bundles))  # the grace period is 30 minutes: none twice
    last = cycles[-1]
    for _, move in unloaded:
        assert _owner(last, move.bundle) == move.destination, move
    assert last.spread < cycles[0].spread
    assert load.lost == 0 and load.failed == 0 and load.acked == load.sent > 0


def test_a_broker_killed_during_a_watch_is_reported_once_and_the_watch_goes_on(pulsar_cluster, caplog):
    caplog.set_level(logging.WARNING, LOGGER)
    b0, b1 = pulsar_cluster.brokers
    with SheddingWatch(pulsar_cluster.admin_url, "AvgShedder,BalancedShedder", CONFIG, interval_s=2.0,
                       bandwidth_from_throughput=True) as watch:
        before = watch.poll()
        pulsar_cluster.set_down(1)
        try:
            during = list(watch.run(8))  # 16 s: beyond the 10 s after which the broker leaves the list
        finally:
            pulsar_cluster.set_up(1)
    about_b1 = [r.getMessage() for r in caplog.records if r.name == LOGGER and b1 in r.getMessage()]
    assert len(about_b1) == 1, about_b1
    assert about_b1[0].startswith((f"broker {b1}: GET /admin/v2/broker-stats/load-report: ",
                                   f"broker {b1} left the cluster"))
    assert set(before.brokers) == {b0, b1}  # in the order the admin API lists them
    assert all(c.snapshot is not None and c.brokers == (b0,) for c in during)
