"""What several of the modular manager's strategies share: Pulsar's ``LoadManagerShared`` and the
order of the leader's ``LoadData`` maps, from which their ties are broken."""

from __future__ import annotations

import logging

from rebalancer.shedding.java import concurrent_hash_map_order, hash_map_order, sorted_descending
from rebalancer.shedding.model import BrokerLoad, ClusterLoad, ShedderConfig

log = logging.getLogger(__name__)

# The share of a broker's throughput shed beyond its excess (ThresholdShedder, OverloadShedder).
ADDITIONAL_THRESHOLD_PERCENT_MARGIN = 0.05


def local_usage(data: BrokerLoad, conf: ShedderConfig) -> float:
    """``LocalBrokerData.getMaxResourceUsageWithWeight``: cpu, direct memory and bandwidth; fraction."""
    return (
        max(
            data.cpu * conf.cpu_resource_weight,
            data.direct_memory * conf.direct_memory_resource_weight,
            data.bandwidth_in * conf.bandwidth_in_resource_weight,
            data.bandwidth_out * conf.bandwidth_out_resource_weight,
        )
        / 100
    )


def broker_order(cluster: ClusterLoad) -> list[str]:
    """The order of ``LoadData.getBrokerData()``, a ConcurrentHashMap filled in report order."""
    return concurrent_hash_map_order(cluster.brokers)


def shedding_order(cluster: ClusterLoad) -> list[str]:
    """The order of ``LoadData.getBundleDataForLoadShedding()``: a HashMap copied from the bundle map."""
    return hash_map_order(concurrent_hash_map_order(cluster.bundles))[0]


def select_by_throughput(cluster: ClusterLoad, broker: str, minimum_to_offload: float) -> list[str]:
    """Largest bundles by short-term throughput until the minimum is covered (at least one)."""
    recent = cluster.recently_unloaded
    owned = set(cluster.brokers[broker].bundles)
    data = cluster.bundles
    candidates = [
        (name, data[name].msg_throughput)
        for name in shedding_order(cluster)
        if name in owned and name not in recent
    ]
    selected: list[str] = []
    marked = 0.0
    for name, throughput in sorted_descending(candidates):
        if marked < minimum_to_offload or not selected:
            selected.append(name)
            marked += throughput
    return selected


def shed_from(cluster: ClusterLoad, broker: str, minimum: float, selected: dict[str, list[str]]) -> None:
    """Select ``broker``'s bundles worth ``minimum``; a broker with one bundle keeps it (Pulsar warns)."""
    bundles = cluster.brokers[broker].bundles
    if len(bundles) > 1:
        chosen = select_by_throughput(cluster, broker, minimum)
        if chosen:
            selected[broker] = chosen
    elif len(bundles) == 1:
        log.warning("sole bundle %s is overloading broker %s; not shedding", bundles[0], broker)
