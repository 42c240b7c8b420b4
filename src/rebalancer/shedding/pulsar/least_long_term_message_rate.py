"""Port of ``LeastLongTermMessageRate`` (modular load manager's default placement)."""

from __future__ import annotations

import math

from rebalancer.shedding.base import PlacementStrategy, sorted_candidates
from rebalancer.shedding.java import concurrent_hash_map_order, hash_set_order
from rebalancer.shedding.model import ClusterLoad, ShedderConfig
from rebalancer.shedding.pulsar.shared import local_usage

# ModularLoadManagerImpl's stats for a reported bundle it has no data for (DEFAULT_MESSAGE_RATE, per way).
DEFAULT_MESSAGE_RATE = 50.0


class LeastLongTermMessageRate(PlacementStrategy):
    """Least long-term message rate, counting bundles assigned but not yet reported (preallocation)."""

    name = "LeastLongTermMessageRate"

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(seed)
        # broker -> bundle -> its long-term msg rate, in the order the bundles were preallocated
        self.preallocated: dict[str, dict[str, float]] = {}

    def _forget_reported(self, cluster: ClusterLoad) -> None:
        """A preallocation ends once any report lists the bundle (Pulsar's bundle gains/losses)."""
        for broker, bundles in self.preallocated.items():
            for bundle in [b for b in bundles if cluster.owner_of(b) is not None]:
                del bundles[bundle]
            if broker not in cluster.brokers:
                bundles.clear()

    def score(self, broker: str, cluster: ClusterLoad, conf: ShedderConfig) -> float:
        data = cluster.check_broker(broker)
        if local_usage(data, conf) > conf.broker_overloaded_threshold_percentage / 100.0:
            return math.inf
        placed = self.preallocated.get(broker, {})
        preallocated = 0.0
        for bundle in concurrent_hash_map_order(placed):  # BrokerData.preallocatedBundleData
            preallocated += placed[bundle]
        return preallocated + self.long_term_msg_rate(broker, cluster)

    @staticmethod
    def long_term_msg_rate(broker: str, cluster: ClusterLoad) -> float:
        """``TimeAverageBrokerData``: the broker's bundles' long-term rates (in and out summed apart);
        a bundle without data counts ModularLoadManagerImpl's default 50 msg/s each way."""
        rate_in = rate_out = 0.0
        for bundle in hash_set_order(cluster.brokers[broker].bundles):
            load = cluster.bundles.get(bundle)
            if load is None:
                rate_in += DEFAULT_MESSAGE_RATE
                rate_out += DEFAULT_MESSAGE_RATE
            else:
                rate_in += float(load.long_term_msg_rate_in)  # type: ignore[arg-type]
                rate_out += float(load.long_term_msg_rate_out)  # type: ignore[arg-type]
        return rate_in + rate_out

    def best_brokers(self, candidates: set[str], cluster: ClusterLoad, conf: ShedderConfig) -> list[str]:
        """The brokers Pulsar draws from: those with the least score, else (none finite) all."""
        ordered = hash_set_order(sorted_candidates(candidates, cluster))
        best: list[str] = []
        min_score = math.inf
        for broker in ordered:
            score = self.score(broker, cluster, conf)
            if score < min_score:
                best, min_score = [broker], score
            elif score == min_score:
                best.append(broker)
        return best or ordered

    def choices(
        self, candidates: set[str], bundle: str, cluster: ClusterLoad, conf: ShedderConfig
    ) -> list[str]:
        cluster.check_bundle(bundle)
        self._forget_reported(cluster)
        return sorted(self.best_brokers(candidates, cluster, conf))

    def select_broker(
        self, candidates: set[str], bundle: str, cluster: ClusterLoad, conf: ShedderConfig
    ) -> str | None:
        best = self.choices(candidates, bundle, cluster, conf)
        if not best:
            return None
        chosen = self.draw(best)
        load = cluster.bundles.get(bundle)
        self.preallocated.setdefault(chosen, {})[bundle] = load.long_term_msg_rate if load else 0.0
        return chosen

    def on_active_brokers_change(self, active_brokers: set[str]) -> None:
        for broker in [b for b in self.preallocated if b not in active_brokers]:
            del self.preallocated[broker]
