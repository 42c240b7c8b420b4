"""Port of ``LeastResourceUsageWithWeight`` (modular load manager placement, PIP-364's companion)."""

from __future__ import annotations

from rebalancer.shedding.base import PlacementStrategy, sorted_candidates
from rebalancer.shedding.java import hash_set_order
from rebalancer.shedding.model import ClusterLoad, ShedderConfig
from rebalancer.shedding.pulsar.shared import local_usage


class LeastResourceUsageWithWeight(PlacementStrategy):
    """Random choice among brokers whose history-weighted usage is below average by a margin."""

    name = "LeastResourceUsageWithWeight"

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(seed)
        self.broker_avg_resource_usage_with_weight: dict[str, float] = {}

    def _update(self, broker: str, cluster: ClusterLoad, conf: ShedderConfig) -> float:
        data = cluster.brokers[broker]
        history = self.broker_avg_resource_usage_with_weight.get(broker)
        if not data.bundles or (data.msg_rate_in == 0 and data.msg_rate_out == 0):
            history = None  # restarted or idle broker: the current usage replaces the history
        usage = local_usage(data, conf)
        pct = conf.history_resource_percentage
        value = usage if history is None else history * pct + (1 - pct) * usage
        self.broker_avg_resource_usage_with_weight[broker] = value
        return value

    def best_brokers(self, candidates: set[str], cluster: ClusterLoad, conf: ShedderConfig) -> list[str]:
        """Candidates at least the threshold below average; empty means Pulsar falls back to all.

        Advances every candidate's EMA, as each Pulsar ``selectBroker`` call does, visiting them in the
        order of the candidate HashSet (the order of the sum decides ties at the margin).
        """
        ordered = hash_set_order(sorted_candidates(candidates, cluster))
        if not ordered:
            return []
        total = 0.0
        for broker in ordered:
            total += self._update(broker, cluster, conf)
        avg = total / len(ordered)
        diff = conf.average_resource_usage_difference_threshold_percentage / 100.0
        return [b for b in ordered if self.broker_avg_resource_usage_with_weight.get(b, 1.0) + diff <= avg]

    def choices(
        self, candidates: set[str], bundle: str, cluster: ClusterLoad, conf: ShedderConfig
    ) -> list[str]:
        cluster.check_bundle(bundle)
        return sorted(self.best_brokers(candidates, cluster, conf) or candidates)

    def select_broker(
        self, candidates: set[str], bundle: str, cluster: ClusterLoad, conf: ShedderConfig
    ) -> str | None:
        best = self.choices(candidates, bundle, cluster, conf)
        if not best:
            return None
        return self.draw(best)

    def on_active_brokers_change(self, active_brokers: set[str]) -> None:
        stale = [b for b in self.broker_avg_resource_usage_with_weight if b not in active_brokers]
        for broker in stale:
            del self.broker_avg_resource_usage_with_weight[broker]
