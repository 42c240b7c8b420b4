"""Port of ``OverloadShedder`` (modular load manager): shed from any broker at or above the overload
threshold enough to go 5% below it."""

from __future__ import annotations

from rebalancer.shedding.base import LoadSheddingStrategy
from rebalancer.shedding.model import ClusterLoad, ShedderConfig
from rebalancer.shedding.pulsar.shared import (
    ADDITIONAL_THRESHOLD_PERCENT_MARGIN,
    broker_order,
    local_usage,
    shed_from,
)


class OverloadShedder(LoadSheddingStrategy):
    """Sheds from any broker at or above the overload threshold (85%) enough to go 5% below it."""

    name = "OverloadShedder"

    def find_bundles_for_unloading(self, cluster: ClusterLoad, conf: ShedderConfig) -> dict[str, list[str]]:
        selected: dict[str, list[str]] = {}
        threshold = conf.broker_overloaded_threshold_percentage / 100.0
        for broker in broker_order(cluster):
            data = cluster.brokers[broker]
            current = local_usage(data, conf)
            if current < threshold:
                continue
            share = current - threshold + ADDITIONAL_THRESHOLD_PERCENT_MARGIN
            minimum = data.msg_throughput * share
            shed_from(cluster, broker, minimum, selected)
        return selected
