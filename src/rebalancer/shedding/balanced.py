"""BalancedShedder: our strategy, planned moves with predicted post-move load.

Ideas, and why:

* Score = current weighted max resource usage, as AvgShedder: it sees heterogeneous machines and
  processes sharing the host. No history-weighted score, so no over-unloading from a stale EMA.
* Hysteresis through per-broker hit counts only: a broker must stay ``avg_shedder_low_threshold``
  above the coolest broker for ``low_hits`` cycles (``high_hits`` when the gap reaches
  ``avg_shedder_high_threshold``). Short spikes never trigger.
* Moves are planned together like LPT: repeatedly the hottest source and the coolest destination by
  *predicted* usage, the largest bundle that does not overshoot. A bundle's usage on a broker is
  estimated from that broker's usage per message rate, so a fast machine counts a bundle as less load
  than a slow one (heterogeneous capacity). Brokers whose usage does not come from bundles (an idle
  broker sharing its host with another process) are left out of the target average.
* Moves in flight (unloaded but not yet in the load reports) keep counting on their destination, the
  preallocation idea that spares LeastLongTermMessageRate from over-placement, so stale reports do not
  cause a second round of unloading.
* A bundle never returns to a broker it left within ``no_return_cycles``: no oscillation by design.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from rebalancer.shedding.base import LoadSheddingStrategy, PlanBoundPlacement
from rebalancer.shedding.model import ClusterLoad, ShedderConfig


@dataclass(slots=True)
class _InFlight:
    source: str
    destination: str
    source_drop: float
    destination_gain: float
    cycle: int


class BalancedShedder(LoadSheddingStrategy, PlanBoundPlacement):
    """Shedding and placement in one plan; see the module docstring."""

    name = "BalancedShedder"

    def __init__(
        self,
        seed: int | None = None,
        *,
        low_hits: int = 5,
        high_hits: int = 2,
        stop_gap: float = 6.0,
        tolerance: float = 4.0,
        max_moves_per_cycle: int = 0,
        no_return_cycles: int = 120,
        in_flight_timeout_cycles: int = 5,
    ) -> None:
        PlanBoundPlacement.__init__(self, seed)
        for name, value in (
            ("low_hits", low_hits),
            ("high_hits", high_hits),
            ("no_return_cycles", no_return_cycles),
        ):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if stop_gap < 0 or tolerance < 0 or max_moves_per_cycle < 0 or in_flight_timeout_cycles < 1:
            raise ValueError(
                "stop_gap, tolerance, max_moves_per_cycle must be >= 0 and in_flight_timeout_cycles >= 1, got "
                f"{stop_gap}, {tolerance}, {max_moves_per_cycle}, {in_flight_timeout_cycles}"
            )
        self.low_hits = low_hits
        self.high_hits = high_hits
        self.stop_gap = stop_gap
        self.tolerance = tolerance
        self.max_moves_per_cycle = max_moves_per_cycle
        self.no_return_cycles = no_return_cycles
        self.in_flight_timeout_cycles = in_flight_timeout_cycles
        self.cycle = 0
        self.hits: dict[str, int] = {}
        self.in_flight: dict[str, _InFlight] = {}
        self.departures: dict[str, dict[str, int]] = {}
        self.preallocated: dict[str, dict[str, float]] = {}

    # -- estimates ---------------------------------------------------------------------------------

    @staticmethod
    def _usage(cluster: ClusterLoad, conf: ShedderConfig) -> dict[str, float]:
        return {b: d.max_resource_usage_with_weight(conf) * 100 for b, d in cluster.brokers.items()}

    @staticmethod
    def _usage_per_rate(cluster: ClusterLoad, usage: dict[str, float]) -> dict[str, float]:
        """Usage points per msg/s on each broker; brokers without traffic get the cluster median."""
        raw = {
            b: usage[b] / d.msg_rate for b, d in cluster.brokers.items() if d.msg_rate > 0 and usage[b] > 0
        }
        if not raw:
            return {}
        median = statistics.median(raw.values())
        return {b: min(max(raw.get(b, median), 0.5 * median), 2.0 * median) for b in cluster.brokers}

    def _refresh_in_flight(self, cluster: ClusterLoad) -> None:
        for bundle, move in list(self.in_flight.items()):
            owner = cluster.owner_of(bundle)
            done = owner == move.destination or (owner is not None and owner != move.source)
            if done or self.cycle - move.cycle > self.in_flight_timeout_cycles:
                del self.in_flight[bundle]

    def _predicted(self, cluster: ClusterLoad, usage: dict[str, float]) -> dict[str, float]:
        predicted = dict(usage)
        for bundle, move in self.in_flight.items():
            owner = cluster.owner_of(bundle)
            if owner == move.source and move.source in predicted:
                predicted[move.source] -= move.source_drop
            if owner != move.destination and move.destination in predicted:
                predicted[move.destination] += move.destination_gain
        return predicted

    # -- shedding ----------------------------------------------------------------------------------

    def find_bundles_for_unloading(self, cluster: ClusterLoad, conf: ShedderConfig) -> dict[str, list[str]]:
        self.cycle += 1
        selected: dict[str, list[str]] = {}
        if len(cluster.brokers) < 2:
            self.hits.clear()
            return selected
        usage = self._usage(cluster, conf)
        per_rate = self._usage_per_rate(cluster, usage)
        self._refresh_in_flight(cluster)
        predicted = self._predicted(cluster, usage)
        recent = cluster.recently_unloaded

        movable: dict[str, list[tuple[str, float]]] = {}
        for broker in cluster.brokers:
            items = [
                (name, load.msg_rate)
                for name, load in cluster.bundles_with_data(broker)
                if name not in recent and name not in self.in_flight and load.msg_rate > 0
            ]
            items.sort(key=lambda item: -item[1])
            movable[broker] = items

        coolest = min(predicted.values())
        for broker in cluster.brokers:
            gap = predicted[broker] - coolest
            if gap >= conf.avg_shedder_low_threshold and movable[broker] and per_rate:
                self.hits[broker] = self.hits.get(broker, 0) + 1
            else:
                self.hits.pop(broker, None)
        for broker in [b for b in self.hits if b not in cluster.brokers]:
            del self.hits[broker]

        def required(broker: str) -> int:
            gap = predicted[broker] - coolest
            return self.high_hits if gap >= conf.avg_shedder_high_threshold else self.low_hits

        sources = {b for b, n in self.hits.items() if n >= required(b)}
        if not sources:
            return selected

        # The level every balancing broker would sit at if load were fluid: brokers whose usage comes
        # from bundles, or that can take bundles, weighted by how much rate one usage point is worth
        # on each (a fast machine absorbs more rate per point).
        mean_all = sum(predicted.values()) / len(predicted)
        balancing = [
            b for b in cluster.brokers if cluster.brokers[b].msg_rate > 0 or predicted[b] <= mean_all
        ]
        target = sum(predicted[b] / per_rate[b] for b in balancing) / sum(1 / per_rate[b] for b in balancing)
        overload = conf.broker_overloaded_threshold_percentage
        budget = self.max_moves_per_cycle or 1_000_000
        moved_from: set[str] = set()
        destinations = set(balancing)

        while sources and budget > 0:
            source = max(sources, key=lambda b: (predicted[b], b))
            options = sorted((b for b in destinations if b != source), key=lambda b: (predicted[b], b))
            if not options or predicted[source] - predicted[options[0]] <= self.stop_gap:
                sources.discard(source)
                continue
            choice = self._pick(source, options, movable[source], per_rate, predicted, target, overload)
            if choice is None:
                sources.discard(source)
                continue
            bundle, rate, destination = choice
            drop, gain = per_rate[source] * rate, per_rate[destination] * rate
            predicted[source] -= drop
            predicted[destination] += gain
            movable[source] = [item for item in movable[source] if item[0] != bundle]
            selected.setdefault(source, []).append(bundle)
            self.bundle_broker_plan[bundle] = destination
            self.in_flight[bundle] = _InFlight(source, destination, drop, gain, self.cycle)
            self.departures.setdefault(bundle, {})[source] = self.cycle
            moved_from.add(source)
            budget -= 1
        for broker in moved_from:
            self.hits.pop(broker, None)
        return selected

    def _pick(
        self,
        source: str,
        options: list[str],
        bundles: list[tuple[str, float]],
        per_rate: dict[str, float],
        predicted: dict[str, float],
        target: float,
        overload: float,
    ) -> tuple[str, float, str] | None:
        """Largest bundle that moves without overshooting, to the coolest destination that takes it."""
        floor = target - self.tolerance
        for destination in options[:3]:
            ceiling = min(target + self.tolerance, overload)
            for bundle, rate in bundles:
                left = self.departures.get(bundle, {}).get(destination)
                if left is not None and self.cycle - left <= self.no_return_cycles:
                    continue
                after_source = predicted[source] - per_rate[source] * rate
                after_destination = predicted[destination] + per_rate[destination] * rate
                if after_source >= max(after_destination, floor) and after_destination <= ceiling:
                    return bundle, rate, destination
        return None

    # -- placement ---------------------------------------------------------------------------------

    def unplanned_broker(
        self, ordered: list[str], bundle: str, cluster: ClusterLoad, conf: ShedderConfig
    ) -> str:
        # Fallback (cluster start, broker failure): least predicted usage, counting bundles placed
        # since the last report, so a burst of placements spreads instead of piling on one broker.
        for placed in self.preallocated.values():
            for name in [n for n in placed if cluster.owner_of(n) is not None]:
                del placed[name]
        usage = self._usage(cluster, conf)
        per_rate = self._usage_per_rate(cluster, usage)
        predicted = self._predicted(cluster, usage)

        def score(broker: str) -> tuple[float, float]:
            pre = sum(self.preallocated.get(broker, {}).values())
            if per_rate:
                return predicted[broker] + per_rate[broker] * pre, pre
            return predicted[broker], pre

        chosen = min(ordered, key=score)
        load = cluster.bundles.get(bundle)
        self.preallocated.setdefault(chosen, {})[bundle] = load.msg_rate if load else 0.0
        return chosen

    def on_active_brokers_change(self, active_brokers: set[str]) -> None:
        for table in (self.hits, self.preallocated):
            for broker in [b for b in table if b not in active_brokers]:
                del table[broker]
