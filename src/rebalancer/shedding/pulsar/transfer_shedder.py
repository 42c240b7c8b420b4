"""Port of the extensible load manager's TransferShedder (PIP-192, apache/pulsar 4.2.4), with its
placement fallback.

Checked against Pulsar's own class by the conformance harness (conformance/pulsar). What the brokers
do on their side is reproduced too, because the shedder's decisions depend on it:

* each broker's ``BrokerLoadData`` keeps ``weightedMaxEMA`` (heap memory included, with its weight)
  and ``msgThroughputEMA``, advanced once per call, i.e. once per load report;
* each broker publishes its top bundles as ``TopKBundles`` computes them: bundles without throughput
  left out, ranked by ``NamespaceBundleStats.compareTo`` (inbound throughput to 100 kB/s, then
  outbound, then msg rate to 100 msg/s) with a partial quicksort, and listed *smallest first*, so the
  shedder offers the smaller of a broker's top bundles first;
* the unload scheduler remembers the source broker of every unload for the cool-down.

As upstream, a recently unloaded bundle is never unloaded again, but may be swapped in from the min
broker, and the arithmetic is Java's (a division by zero gives infinity or NaN, not an error). Pulsar
only adds swapped-in traffic to ``trafficMarkedToGain`` in debug mode; that quirk is kept behind
``debug_mode_enabled``.
"""

from __future__ import annotations

import math

from rebalancer.shedding.base import LoadSheddingStrategy, PlanBoundPlacement
from rebalancer.shedding.java import concurrent_hash_map_order, jdiv, jmax, jsqrt
from rebalancer.shedding.model import ClusterLoad, ShedderConfig
from rebalancer.shedding.pulsar.top_k_bundles import top_bundles


class TransferShedder(LoadSheddingStrategy, PlanBoundPlacement):
    """Unload from the highest to the lowest brokers until the usage std meets the target."""

    name = "TransferShedder"

    def __init__(self, seed: int | None = None) -> None:
        PlanBoundPlacement.__init__(self, seed)
        self.weighted_max_ema: dict[str, float] = {}
        self.msg_throughput_ema: dict[str, float] = {}
        self.unload_condition_hit_count = 0
        self.recently_unloaded_brokers: dict[str, float] = {}

    def _update_emas(self, cluster: ClusterLoad, conf: ShedderConfig) -> None:
        pct = conf.history_resource_percentage
        for broker, data in cluster.brokers.items():
            usage = data.max_resource_usage_with_weight(conf)
            tp = data.msg_throughput
            if broker in self.weighted_max_ema:
                self.weighted_max_ema[broker] = self.weighted_max_ema[broker] * pct + (1 - pct) * usage
                self.msg_throughput_ema[broker] = self.msg_throughput_ema[broker] * pct + (1 - pct) * tp
            else:
                self.weighted_max_ema[broker] = usage
                self.msg_throughput_ema[broker] = tp

    def _underloaded(self, broker: str, avg: float, max_broker: str, conf: ShedderConfig) -> bool:
        multiplier = min(0.5, max(0.0, conf.broker_load_target_std / 2.0))
        if self.weighted_max_ema[broker] < avg * multiplier:
            return True
        return self.msg_throughput_ema[broker] < self.msg_throughput_ema[max_broker] * multiplier

    def _overloaded(self, broker: str, avg: float, conf: ShedderConfig) -> bool:
        load = self.weighted_max_ema[broker]
        return (
            load > conf.broker_overloaded_threshold_percentage / 100.0
            and load > avg + conf.broker_load_target_std
        )

    def _top_bundles(self, cluster: ClusterLoad, broker: str, conf: ShedderConfig) -> list[tuple[str, float]]:
        """The broker's published top bundles, in Pulsar's order, with their throughput."""
        data = cluster.bundles
        reported = concurrent_hash_map_order(b for b in cluster.brokers[broker].bundles if b in data)
        names = top_bundles(
            [(b, data[b]) for b in reported], conf.max_number_of_bundles_in_bundle_load_report
        )
        return [(name, data[name].msg_throughput) for name in names]

    def find_bundles_for_unloading(self, cluster: ClusterLoad, conf: ShedderConfig) -> dict[str, list[str]]:
        selected: dict[str, list[str]] = {}
        self._update_emas(cluster, conf)
        now = cluster.timestamp
        store = concurrent_hash_map_order(cluster.brokers)  # the load data store's order
        for broker in store:
            if broker not in self.recently_unloaded_brokers:
                continue
            if now - self.recently_unloaded_brokers[broker] < conf.shedding_delay_in_seconds:
                return selected  # CoolDown: brokers have not recomputed their load since the last unload
            del self.recently_unloaded_brokers[broker]
        if not cluster.brokers:
            return selected
        total = len(store)
        load_sum = sq_sum = 0.0
        for broker in store:
            load = self.weighted_max_ema[broker]
            load_sum += load
            sq_sum += load * load
        avg = load_sum / total
        std = jsqrt(sq_sum / total - avg * avg)
        by_load = sorted(store, key=self.weighted_max_ema.__getitem__)
        max_index, min_index, shed_brokers = len(by_load) - 1, 0, 0
        target_std = conf.broker_load_target_std

        if (
            std > target_std
            or self._underloaded(by_load[min_index], avg, by_load[max_index], conf)
            or self._overloaded(by_load[max_index], avg, conf)
        ):
            self.unload_condition_hit_count += 1
        else:
            self.unload_condition_hit_count = 0
        if self.unload_condition_hit_count <= conf.shedding_condition_hit_count_threshold:
            return selected

        recent = cluster.recently_unloaded
        transfer = conf.transfer_enabled
        sources: set[str] = set()
        while shed_brokers < conf.max_number_of_broker_shedding_per_cycle and min_index < max_index:
            if not (
                std > target_std
                or self._underloaded(by_load[min_index], avg, by_load[max_index], conf)
                or self._overloaded(by_load[max_index], avg, conf)
            ):
                break
            max_broker, min_broker = by_load[max_index], by_load[min_index]
            max_index -= 1
            max_load, min_load = self.weighted_max_ema[max_broker], self.weighted_max_ema[min_broker]
            offload = (max_load - min_load) / 2
            max_tp = cluster.brokers[max_broker].msg_throughput
            min_tp = cluster.brokers[min_broker].msg_throughput
            offload_tp = jdiv(max_tp * offload, max_load)
            top = self._top_bundles(cluster, max_broker, conf)
            if len(top) <= 1:
                continue
            min_top = iter(self._top_bundles(cluster, min_broker, conf))
            marked, gained, remaining = 0.0, 0.0, len(top)
            for bundle, bundle_tp in top:
                if bundle in recent:
                    continue
                if remaining <= 1:
                    break
                if bundle_tp == 0:
                    continue  # upstream: "It has zero throughput."
                swap, swaps, swap_tp = False, [], 0.0
                if marked - gained + bundle_tp > offload_tp:
                    if transfer:
                        max_new = max_tp - marked + gained - bundle_tp
                        min_new = min_tp + marked - gained + bundle_tp
                        for other, other_tp in min_top:
                            if other_tp == 0:
                                continue  # nothing to gain from it
                            if max_new + other_tp < max_tp and min_new - other_tp < max_tp:
                                swaps.append(other)
                                max_new += other_tp
                                min_new -= other_tp
                                swap_tp += other_tp
                                if min_new <= max_new and max_new < max_tp * 0.75:
                                    swap = True
                                    break
                    if not swap:
                        break
                if swap:
                    for other in swaps:
                        selected.setdefault(min_broker, []).append(other)
                        self.bundle_broker_plan[other] = max_broker
                    sources.add(min_broker)
                    if conf.debug_mode_enabled:
                        gained += swap_tp
                selected.setdefault(max_broker, []).append(bundle)
                if transfer:
                    self.bundle_broker_plan[bundle] = min_broker
                sources.add(max_broker)
                marked += bundle_tp
                remaining -= 1
            if marked > 0:
                adjusted = jdiv((marked - gained) * max_load, max_tp)
                sq_sum -= max_load * max_load + min_load * min_load
                max_after = jmax(0.0, max_load - adjusted)
                min_after = min_load + adjusted
                sq_sum += max_after * max_after + min_after * min_after
                std = math.sqrt(abs(sq_sum / total - avg * avg))
                shed_brokers += 1
                min_index += 1
        if selected:
            self.unload_condition_hit_count = 0
            # The unload scheduler's record: every source broker, at the time of its unload.
            for broker in sources:
                self.recently_unloaded_brokers[broker] = now
        return selected

    def unplanned_broker(
        self, ordered: list[str], bundle: str, cluster: ClusterLoad, conf: ShedderConfig
    ) -> str:
        """The transfer destination; otherwise the extensible manager's LeastResourceUsageWithWeight."""
        best = self.unplanned_choices(ordered, bundle, cluster, conf)
        return self.draw(best)

    def unplanned_choices(
        self, ordered: list[str], bundle: str, cluster: ClusterLoad, conf: ShedderConfig
    ) -> list[str]:
        known = [b for b in ordered if b in self.weighted_max_ema]
        best: list[str] = []
        if known:
            avg = sum(self.weighted_max_ema[b] for b in known) / len(known)
            diff = conf.average_resource_usage_difference_threshold_percentage / 100.0
            best = [b for b in known if self.weighted_max_ema[b] + diff <= avg]
        return best or list(ordered)

    def on_active_brokers_change(self, active_brokers: set[str]) -> None:
        # A broker that leaves publishes a fresh report when it returns; the unload scheduler's record
        # of recently unloaded brokers outlives it, as in Pulsar.
        for table in (self.weighted_max_ema, self.msg_throughput_ema):
            for broker in [b for b in table if b not in active_brokers]:
                del table[broker]
