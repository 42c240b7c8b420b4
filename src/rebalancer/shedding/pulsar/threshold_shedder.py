"""Port of ``ThresholdShedder`` (modular load manager): unload brokers whose history-weighted usage
exceeds the cluster average by a threshold."""

from __future__ import annotations

import logging

from rebalancer.shedding.base import LoadSheddingStrategy
from rebalancer.shedding.model import MB, ClusterLoad, ShedderConfig
from rebalancer.shedding.pulsar.shared import (
    ADDITIONAL_THRESHOLD_PERCENT_MARGIN,
    broker_order,
    local_usage,
    select_by_throughput,
    shed_from,
)

log = logging.getLogger(__name__)

LOWER_BOUNDARY_THRESHOLD_MARGIN = 0.5


class ThresholdShedder(LoadSheddingStrategy):
    """Unloads brokers whose history-weighted usage exceeds the cluster average by a threshold."""

    name = "ThresholdShedder"

    def __init__(self) -> None:
        self.broker_avg_resource_usage: dict[str, float] = {}

    def _update(self, broker: str, cluster: ClusterLoad, conf: ShedderConfig) -> float:
        usage = local_usage(cluster.brokers[broker], conf)
        history = self.broker_avg_resource_usage.get(broker)
        pct = conf.history_resource_percentage
        value = usage if history is None else history * pct + (1 - pct) * usage
        self.broker_avg_resource_usage[broker] = value
        return value

    def _avg_usage(self, cluster: ClusterLoad, conf: ShedderConfig) -> float:
        total = 0.0
        for broker in broker_order(cluster):
            total += self._update(broker, cluster, conf)
        return total / len(cluster.brokers) if cluster.brokers else 0.0

    def find_bundles_for_unloading(self, cluster: ClusterLoad, conf: ShedderConfig) -> dict[str, list[str]]:
        selected: dict[str, list[str]] = {}
        threshold = conf.broker_threshold_shedder_percentage / 100.0
        min_throughput = conf.bundle_unload_min_throughput_threshold * MB
        avg = self._avg_usage(cluster, conf)
        if avg == 0:
            log.warning("average max resource usage is 0")
            return selected
        for broker in broker_order(cluster):
            data = cluster.brokers[broker]
            current = self.broker_avg_resource_usage.get(broker, 0.0)
            if current < avg + threshold:
                continue
            share = current - avg - threshold + ADDITIONAL_THRESHOLD_PERCENT_MARGIN
            minimum = data.msg_throughput * share
            if minimum < min_throughput:
                continue
            shed_from(cluster, broker, minimum, selected)
        if not selected and conf.lower_boundary_shedding_enabled:
            self._lower_boundary(cluster, conf, selected)
        return selected

    def _lower_boundary(
        self, cluster: ClusterLoad, conf: ShedderConfig, selected: dict[str, list[str]]
    ) -> None:
        threshold = conf.broker_threshold_shedder_percentage / 100.0
        # Pulsar recomputes the average here, which advances every broker's EMA a second time.
        avg = self._avg_usage(cluster, conf)
        max_usage = avg - threshold
        max_broker = ""
        below_lower_bound = False
        for broker in broker_order(cluster):
            data = cluster.brokers[broker]
            current = self.broker_avg_resource_usage.get(broker, 0.0)
            if current > max_usage and len(data.bundles) > 1:
                max_usage = current
                max_broker = broker
            if current < avg - threshold:
                below_lower_bound = True
        if not below_lower_bound or max_broker not in cluster.brokers:
            return
        data = cluster.brokers[max_broker]
        minimum = data.msg_throughput * threshold * LOWER_BOUNDARY_THRESHOLD_MARGIN
        if conf.bundle_unload_min_throughput_threshold * MB > minimum:
            return
        bundles = select_by_throughput(cluster, max_broker, minimum)
        if bundles:
            selected[max_broker] = bundles

    def on_active_brokers_change(self, active_brokers: set[str]) -> None:
        for broker in [b for b in self.broker_avg_resource_usage if b not in active_brokers]:
            del self.broker_avg_resource_usage[broker]
