"""Faithful ports of the modular load manager's strategies (apache/pulsar 4.2.4, broker/loadbalance/impl).

Behaviour follows the Java sources of Pulsar 4.2.4, quirks included (EMA advanced on every call,
integer truncation of UniformLoadShedder's remaining budget), and is checked against those very classes
by the conformance harness (conformance/pulsar, tests/conformance, docs/shedding.md). Ties are broken as
Pulsar breaks them: brokers and bundles are visited in the order Pulsar's hash maps iterate
(``rebalancer.shedding.javaorder``), not in report order. Usages are Pulsar's ``percentUsage()``
values; the modular manager weighs cpu, direct memory and bandwidth, never heap memory.

One known bug is left out, and listed as a deviation in docs/shedding.md: AvgShedder keyed its
bundle -> broker plan by a mutable bundle-stats object, so entries became unreachable and bundles with
equal stats shared one entry (apache/pulsar#26246). Here the plan is keyed by bundle name and an entry
is dropped once the bundle has been placed.
"""

from __future__ import annotations

import logging
import math
import zlib
from collections.abc import Iterable

from rebalancer.shedding.base import (
    LoadSheddingStrategy,
    PlacementStrategy,
    PlanBoundPlacement,
    descending,
    sorted_candidates,
)
from rebalancer.shedding.javaorder import concurrent_hash_map_order, hash_map_order
from rebalancer.shedding.model import MB, BrokerLoad, ClusterLoad, ShedderConfig

log = logging.getLogger(__name__)

ADDITIONAL_THRESHOLD_PERCENT_MARGIN = 0.05
LOWER_BOUNDARY_THRESHOLD_MARGIN = 0.5
_EPS = 1e-6
_INT_MAX = 2**31 - 1
_INT_MIN = -(2**31)
# ModularLoadManagerImpl's stats for a reported bundle it has no data for (DEFAULT_MESSAGE_RATE, per way).
DEFAULT_MESSAGE_RATE = 50.0


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


def hash_set_order(keys: Iterable[str]) -> list[str]:
    """The order of a ``new HashSet<>()`` filled with ``keys`` in order."""
    return hash_map_order(keys)[0]


def java_int(x: float) -> int:
    """Java's ``(int)`` cast of a double: truncation, saturating at the int range, NaN to 0."""
    if math.isnan(x):
        return 0
    if x >= _INT_MAX:
        return _INT_MAX
    if x <= _INT_MIN:
        return _INT_MIN
    return int(x)


def _wrap_int(x: int) -> int:
    """Java int arithmetic wraps around."""
    return (x - _INT_MIN) % 2**32 + _INT_MIN


def _select_by_throughput(cluster: ClusterLoad, broker: str, minimum_to_offload: float) -> list[str]:
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
    for name, throughput in descending(candidates):
        if marked < minimum_to_offload or not selected:
            selected.append(name)
            marked += throughput
    return selected


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
            if len(data.bundles) > 1:
                bundles = _select_by_throughput(cluster, broker, minimum)
                if bundles:
                    selected[broker] = bundles
            elif len(data.bundles) == 1:
                log.warning("sole bundle %s is overloading broker %s; not shedding", data.bundles[0], broker)
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
        bundles = _select_by_throughput(cluster, max_broker, minimum)
        if bundles:
            selected[max_broker] = bundles

    def on_active_brokers_change(self, active_brokers: set[str]) -> None:
        for broker in [b for b in self.broker_avg_resource_usage if b not in active_brokers]:
            del self.broker_avg_resource_usage[broker]


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
            if len(data.bundles) > 1:
                bundles = _select_by_throughput(cluster, broker, minimum)
                if bundles:
                    selected[broker] = bundles
            elif len(data.bundles) == 1:
                log.warning("sole bundle %s is overloading broker %s; not shedding", data.bundles[0], broker)
        return selected


class UniformLoadShedder(LoadSheddingStrategy):
    """Moves load from the highest to the lowest broker by message rate or throughput."""

    name = "UniformLoadShedder"

    def find_bundles_for_unloading(self, cluster: ClusterLoad, conf: ShedderConfig) -> dict[str, list[str]]:
        selected: dict[str, list[str]] = {}
        max_rate, max_tp = -1.0, -1.0
        min_rate, min_tp = float(_INT_MAX), float(_INT_MAX)
        rate_over: str | None = None
        tp_over: str | None = None
        for broker in broker_order(cluster):
            data = cluster.brokers[broker]
            rate, tp = data.msg_rate, data.msg_throughput
            if rate > max_rate:
                rate_over, max_rate = broker, rate
            if tp > max_tp:
                tp_over, max_tp = broker, tp
            if rate < min_rate:
                min_rate = rate
            if tp < min_tp:
                min_tp = tp
        if -_EPS <= min_rate <= _EPS:
            min_rate = 1.0
        if -_EPS <= min_tp <= _EPS:
            min_tp = 1.0
        rate_diff_pct = (max_rate - min_rate) * 100 / min_rate
        tp_ratio = max_tp / min_tp
        rate_exceeded = (
            conf.msg_rate_difference_shedder_threshold > 0
            and rate_diff_pct > conf.msg_rate_difference_shedder_threshold
        )
        tp_exceeded = (
            conf.msg_throughput_multiplier_difference_shedder_threshold > 0
            and tp_ratio > conf.msg_throughput_multiplier_difference_shedder_threshold
        )
        if not (rate_exceeded or tp_exceeded):
            return selected
        limit = conf.max_unload_bundle_num_per_shedding
        # Java's MutableInt: the budget is (int)-cast, and each bundle subtracts its (int)-cast size.
        over: str | None
        if rate_exceeded:
            over, required = rate_over, java_int((max_rate - min_rate) * conf.max_unload_percentage)
            minimum, value = conf.min_unload_message, "msg_rate"
        else:
            over, required = tp_over, java_int((max_tp - min_tp) * conf.max_unload_percentage)
            minimum, value = conf.min_unload_message_throughput, "msg_throughput"
        if over is None:
            return selected  # no broker at all
        broker = over
        data = cluster.brokers[broker]
        if len(data.bundles) <= 1 or required < minimum:
            return selected
        recent = cluster.recently_unloaded
        owned = set(data.bundles)
        items = [
            (n, getattr(cluster.bundles[n], value))
            for n in shedding_order(cluster)
            if n in owned and n not in recent
        ]
        chosen: list[str] = []
        for name, amount in descending(items):
            if limit != -1 and len(chosen) >= limit:
                break
            if amount <= required:
                required = _wrap_int(required + java_int(-amount))
                chosen.append(name)
        if chosen:
            selected[broker] = chosen
        return selected


class AvgShedder(LoadSheddingStrategy, PlanBoundPlacement):
    """PIP-364: pair highest with lowest brokers, require repeated hits, bind shedding to placement."""

    name = "AvgShedder"

    def __init__(self, seed: int | None = None) -> None:
        PlanBoundPlacement.__init__(self, seed)
        self.broker_scores: dict[str, float] = {}
        self.hit_count_high: dict[str, int] = {}
        self.hit_count_low: dict[str, int] = {}
        self._score_map_capacity = 16  # Pulsar's score map is a HashMap that is cleared, never shrunk

    def find_bundles_for_unloading(self, cluster: ClusterLoad, conf: ShedderConfig) -> dict[str, list[str]]:
        selected: dict[str, list[str]] = {}
        order, self._score_map_capacity = hash_map_order(broker_order(cluster), self._score_map_capacity)
        self.broker_scores = {b: local_usage(cluster.brokers[b], conf) * 100 for b in order}
        brokers = sorted(order, key=self.broker_scores.__getitem__)  # stable, as Java's sort
        pairs = self._find_pairs(brokers, conf.avg_shedder_low_threshold, conf.avg_shedder_high_threshold)
        if not pairs:
            self.hit_count_high.clear()
            self.hit_count_low.clear()
            return selected
        for low, high in pairs:
            hit = (
                self.hit_count_high.get(low, 0) >= conf.avg_shedder_hit_count_high_threshold
                or self.hit_count_high.get(high, 0) >= conf.avg_shedder_hit_count_high_threshold
                or self.hit_count_low.get(low, 0) >= conf.avg_shedder_hit_count_low_threshold
                or self.hit_count_low.get(high, 0) >= conf.avg_shedder_hit_count_low_threshold
            )
            if not hit:
                continue
            for counter in (self.hit_count_high, self.hit_count_low):
                counter.pop(low, None)
                counter.pop(high, None)
            self._select_bundles(cluster, conf, high, low, selected)
        return selected

    def _find_pairs(
        self, brokers: list[str], low_threshold: float, high_threshold: float
    ) -> list[tuple[str, str]]:
        pairs: list[tuple[str, str]] = []
        i, j = 0, len(brokers) - 1
        scores = self.broker_scores
        while i <= j:
            high, low = brokers[j], brokers[i]
            diff = scores[high] - scores[low]
            if diff < low_threshold:
                for counter in (self.hit_count_high, self.hit_count_low):
                    counter.pop(high, None)
                    counter.pop(low, None)
            else:
                pairs.append((low, high))
                self.hit_count_low[low] = self.hit_count_low.get(low, 0) + 1
                self.hit_count_low[high] = self.hit_count_low.get(high, 0) + 1
                if diff < high_threshold:
                    self.hit_count_high.pop(high, None)
                    self.hit_count_high.pop(low, None)
                else:
                    self.hit_count_high[low] = self.hit_count_high.get(low, 0) + 1
                    self.hit_count_high[high] = self.hit_count_high.get(high, 0) + 1
            i += 1
            j -= 1
        return pairs

    def _select_bundles(
        self, cluster: ClusterLoad, conf: ShedderConfig, high: str, low: str, selected: dict[str, list[str]]
    ) -> None:
        min_data, max_data = cluster.brokers[low], cluster.brokers[high]
        msg_required = (max_data.msg_rate - min_data.msg_rate) * conf.max_unload_percentage
        tp_required = (max_data.msg_throughput - min_data.msg_throughput) * conf.max_unload_percentage
        if msg_required > conf.min_unload_message:
            by_rate, remaining = True, msg_required
        elif tp_required > conf.min_unload_message_throughput:
            by_rate, remaining = False, tp_required
        else:
            return
        if len(max_data.bundles) == 1:
            log.warning("sole bundle %s is overloading broker %s", max_data.bundles[0], high)
        recent = cluster.recently_unloaded
        owned = set(max_data.bundles)
        data = cluster.bundles
        items = [
            (name, data[name].msg_rate if by_rate else data[name].msg_throughput)
            for name in shedding_order(cluster)
            if name in owned and name not in recent
        ]
        for name, traffic in descending(items):
            if 0 < traffic <= remaining:
                selected.setdefault(high, []).append(name)
                self.bundle_broker_plan[name] = low
                remaining -= traffic

    def unplanned_broker(
        self, ordered: list[str], bundle: str, cluster: ClusterLoad, conf: ShedderConfig
    ) -> str:
        # Cluster start, broker shutdown or a plan for a broker that left: hash a random number, as
        # Pulsar does, so one dead broker's bundles do not all land on the same neighbour.
        token = str(self._rng.randrange(-(2**31), 2**31)).encode()
        return ordered[zlib.crc32(token) % len(ordered)]

    def unplanned_choices(
        self, ordered: list[str], bundle: str, cluster: ClusterLoad, conf: ShedderConfig
    ) -> list[str]:
        return list(ordered)

    def on_active_brokers_change(self, active_brokers: set[str]) -> None:
        # Pulsar's AvgShedder keeps its hit counters when brokers change (it only logs the change).
        return None


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
        chosen = best[self._rng.randrange(len(best))]
        load = cluster.bundles.get(bundle)
        self.preallocated.setdefault(chosen, {})[bundle] = load.long_term_msg_rate if load else 0.0
        return chosen

    def on_active_brokers_change(self, active_brokers: set[str]) -> None:
        for broker in [b for b in self.preallocated if b not in active_brokers]:
            del self.preallocated[broker]


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
        return best[self._rng.randrange(len(best))]

    def on_active_brokers_change(self, active_brokers: set[str]) -> None:
        stale = [b for b in self.broker_avg_resource_usage_with_weight if b not in active_brokers]
        for broker in stale:
            del self.broker_avg_resource_usage_with_weight[broker]
