"""Small builders for hand-made clusters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rebalancer.shedding import BrokerLoad, BundleLoad, ClusterLoad

MB = 1024 * 1024


def broker(
    cpu: float, rate: float = 0.0, throughput: float = 0.0, bundles: Sequence[str] = (), **usages: float
) -> BrokerLoad:
    """A broker whose max usage is ``cpu``; rates are totals split evenly between in and out."""
    return BrokerLoad(
        cpu=cpu,
        memory=usages.get("memory", 0.0),
        direct_memory=usages.get("direct_memory", 0.0),
        bandwidth_in=usages.get("bandwidth_in", 0.0),
        bandwidth_out=usages.get("bandwidth_out", 0.0),
        msg_rate_in=rate / 2,
        msg_rate_out=rate / 2,
        msg_throughput_in=throughput / 2,
        msg_throughput_out=throughput / 2,
        bundles=list(bundles),
    )


def bundle(rate: float = 0.0, throughput: float = 0.0) -> BundleLoad:
    return BundleLoad(rate / 2, rate / 2, throughput / 2, throughput / 2)


def cluster(
    brokers: Mapping[str, BrokerLoad],
    bundles: Mapping[str, BundleLoad] | None = None,
    recently_unloaded: Mapping[str, float] | None = None,
    timestamp: float = 0.0,
) -> ClusterLoad:
    return ClusterLoad(
        brokers=dict(brokers),
        bundles=dict(bundles or {}),
        recently_unloaded=dict(recently_unloaded or {}),
        timestamp=timestamp,
    )


def loaded_cluster(
    usages: Mapping[str, float], bundles_per_broker: int = 4, throughput_per_point: float = MB
) -> ClusterLoad:
    """Each broker's usage spread evenly over its bundles; rate and throughput proportional to usage."""
    brokers, data = {}, {}
    for name, cpu in usages.items():
        names = [f"{name}-b{i}" for i in range(bundles_per_broker)]
        rate = cpu * 1000
        tp = cpu * throughput_per_point
        brokers[name] = broker(cpu, rate, tp, names)
        for n in names:
            data[n] = bundle(rate / bundles_per_broker, tp / bundles_per_broker)
    return cluster(brokers, data)
