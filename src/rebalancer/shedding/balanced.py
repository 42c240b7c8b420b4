"""BalancedShedder: our strategy, planned moves with predicted post-move load.

Ideas, and why:

* Score = current weighted max resource usage, as AvgShedder: it sees heterogeneous machines and
  processes sharing the host. No history-weighted score, so no over-unloading from a stale EMA.
* Hysteresis through per-broker hit counts only: a broker must stay ``avg_shedder_low_threshold``
  above the coolest broker for ``low_hits`` cycles (``high_hits`` when the gap reaches
  ``avg_shedder_high_threshold``). Short spikes never trigger.
* Moves come from the shared planner, ``rebalancer.balance.plan_rebalance`` with ``capacity=``:
  repeatedly the hottest source and the coolest destination by *predicted* usage are planned as two
  machines of unequal speed, each broker's capacity being the message rate one usage point is worth
  there (a fast machine counts a bundle as less load than a slow one), and what cannot move as fixed
  load. The plan stops at the cluster's level rather than the pair's midpoint. Brokers whose usage
  does not come from bundles (an idle broker sharing its host with another process) are left out of
  the target average.
* Moves in flight (unloaded but not yet in the load reports) keep counting on their destination, the
  preallocation idea that spares LeastLongTermMessageRate from over-placement, so stale reports do not
  cause a second round of unloading.
* A bundle never returns to a broker it left within ``no_return_cycles``: no oscillation by design.
* A predicted usage never goes below zero. A broker reports its usage and its bundles' rates sampled
  at different times, so its bundles can be worth more usage points than it reports; moving them
  would take it below zero, and what it cannot move (its fixed load) is ``max(0, usage - bundles)``.
  Pulsar's TransferShedder clamps the same way (``Math.max(0, maxLoad - offload)``). Each clamp is
  counted in ``clamped`` and logged at DEBUG.
"""

from __future__ import annotations

import logging
import math
import statistics
from dataclasses import dataclass

from rebalancer.balance import plan_rebalance
from rebalancer.balance.checks import describe, is_int, is_real
from rebalancer.shedding.base import LoadSheddingStrategy, PlanBoundPlacement
from rebalancer.shedding.model import ClusterLoad, ShedderConfig

log = logging.getLogger(__name__)

# The planner's loads, in `resolution` units, stay below this: exact in a float, and far inside int64.
MAX_UNITS = 2.0**53


def _beyond_rounding(have: float, take: float) -> bool:
    """`take` exceeds `have` by more than float rounding (moving all of a broker's load would
    otherwise count as taking more than it has, by a last bit)."""
    return not math.isclose(have, take, rel_tol=1e-9, abs_tol=1e-12)


def _count(name: str, value: int, minimum: int) -> int:
    """An int (numpy's too, not a bool) >= `minimum`: a float count such as NaN passes `value < 1`."""
    if not is_int(value) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {describe(value)}")
    return int(value)


def _amount(name: str, value: float, *, positive: bool = False) -> float:
    """A finite int or float >= 0 (> 0 when `positive`); NaN passes every `<` check, so it is named."""
    if not is_real(value) or (value <= 0 if positive else value < 0):
        raise ValueError(
            f"{name} must be a finite number {'>' if positive else '>='} 0, got {describe(value)}"
        )
    return float(value)


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
        resolution: float = 2.0,
    ) -> None:
        if seed is not None and not is_int(seed):
            raise ValueError(f"seed must be an int or None, got {describe(seed)}")
        PlanBoundPlacement.__init__(self, None if seed is None else int(seed))
        self.low_hits = _count("low_hits", low_hits, 1)
        self.high_hits = _count("high_hits", high_hits, 1)
        self.stop_gap = _amount("stop_gap", stop_gap)
        self.tolerance = _amount("tolerance", tolerance)
        self.max_moves_per_cycle = _count("max_moves_per_cycle", max_moves_per_cycle, 0)
        self.no_return_cycles = _count("no_return_cycles", no_return_cycles, 1)
        self.in_flight_timeout_cycles = _count("in_flight_timeout_cycles", in_flight_timeout_cycles, 1)
        self.resolution = _amount("resolution", resolution, positive=True)
        self.cycle = 0
        self.hits: dict[str, int] = {}
        self.in_flight: dict[str, _InFlight] = {}
        self.departures: dict[str, dict[str, int]] = {}
        self.preallocated: dict[str, dict[str, float]] = {}
        # Times a broker's bundles, at its usage per msg/s, were worth more than its (predicted) usage,
        # which was then taken as 0 rather than below (see the module docstring).
        self.clamped = 0
        # Pairs left unplanned because their numbers were too large for the planner's integer units
        # (rates or usages far beyond a real broker's), rather than failing the cycle.
        self.unplannable = 0

    # -- estimates ---------------------------------------------------------------------------------

    @staticmethod
    def _usage(cluster: ClusterLoad, conf: ShedderConfig) -> dict[str, float]:
        return {b: d.max_resource_usage_with_weight(conf) * 100 for b, d in cluster.brokers.items()}

    @staticmethod
    def _usage_per_rate(cluster: ClusterLoad, usage: dict[str, float]) -> dict[str, float]:
        """Usage points per msg/s on each broker; brokers without traffic get the cluster median.

        A broker's rate is the larger of its own and its bundles' sum: the two are sampled apart, and
        by the smaller its bundles would be worth more than all its usage. A ratio that underflows to
        0 or overflows (rates far beyond a real broker's) counts as no traffic."""
        raw = {}
        for b, d in cluster.brokers.items():
            rate = max(d.msg_rate, sum(load.msg_rate for _, load in cluster.bundles_with_data(b)))
            ratio = usage[b] / rate if rate > 0 else 0.0
            if 0.0 < ratio < math.inf:
                raw[b] = ratio
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

    def _drop(self, predicted: dict[str, float], broker: str, points: float, bundle: str) -> float:
        """Take `points` off `broker`'s predicted usage, never below zero; the points taken."""
        before = predicted[broker]
        if points > before:
            if _beyond_rounding(before, points):
                self.clamped += 1
                log.debug(
                    "BalancedShedder: bundle %s is worth %.3g usage points on %s, which has %.3g; left at 0",
                    bundle, points, broker, before,
                )
            points = before
        predicted[broker] = before - points
        return points

    def _predicted(self, cluster: ClusterLoad, usage: dict[str, float]) -> dict[str, float]:
        predicted = dict(usage)
        for bundle, move in self.in_flight.items():
            owner = cluster.owner_of(bundle)
            if owner == move.source and move.source in predicted:
                self._drop(predicted, move.source, move.source_drop, bundle)
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
        budget = self.max_moves_per_cycle or None
        moved_from: set[str] = set()
        destinations = set(balancing)

        for _ in range(4 * len(cluster.brokers)):
            if not sources or budget == 0:
                break
            source = max(sources, key=lambda b: (predicted[b], b))
            options = sorted((b for b in destinations if b != source), key=lambda b: (predicted[b], b))
            if not options or predicted[source] - predicted[options[0]] <= self.stop_gap:
                sources.discard(source)
                continue
            moves = self._plan_pair(source, options[0], movable, per_rate, predicted, target, budget)
            if not moves:
                sources.discard(source)
                continue
            for bundle, rate, src, dst in moves:
                drop, gain = self._drop(predicted, src, per_rate[src] * rate, bundle), per_rate[dst] * rate
                predicted[dst] += gain
                movable[src] = [item for item in movable[src] if item[0] != bundle]
                movable[dst].append((bundle, rate))
                selected.setdefault(src, []).append(bundle)
                self.bundle_broker_plan[bundle] = dst
                self.in_flight[bundle] = _InFlight(src, dst, drop, gain, self.cycle)
                self.departures.setdefault(bundle, {})[src] = self.cycle
                moved_from.add(src)
            if budget is not None:
                budget -= len(moves)
        for broker in moved_from:
            self.hits.pop(broker, None)
        return selected

    def _plan_pair(
        self,
        source: str,
        destination: str,
        movable: dict[str, list[tuple[str, float]]],
        per_rate: dict[str, float],
        predicted: dict[str, float],
        target: float,
        budget: int | None,
    ) -> list[tuple[str, float, str, str]]:
        """(bundle, rate, from, to) for the moves `plan_rebalance` finds between two brokers.

        The pair is planned as two machines of unequal speed (capacity = msg/s per usage point), with
        what cannot move as fixed load. To stop at the cluster's level rather than at the pair's
        midpoint, the destination is planned as if it sat higher: then balancing the pair moves
        `min(source - target - tolerance / 4, target - destination)` points, and no more.
        A bundle never goes back to a broker it left within `no_return_cycles`: it stays put.
        """
        pair = (source, destination)
        k = [per_rate[source], per_rate[destination]]
        # A source within tolerance / 4 of the level counts as there: that last point is not worth a move.
        margin = self.tolerance / 4
        shed = min((predicted[source] - target - margin) / k[0], (target - predicted[destination]) / k[1])
        if shed * k[0] <= 0:
            return []
        level = [predicted[source], max(predicted[destination], predicted[source] - (k[0] + k[1]) * shed)]
        # Only the source's bundles move (the destination's are fixed load), and none back to where it was.
        names, rates = [], []
        for bundle, rate in movable[source]:
            left = self.departures.get(bundle, {}).get(destination)
            if left is None or self.cycle - left > self.no_return_cycles:
                names.append(bundle)
                rates.append(rate)
        if not names:
            return []
        owner = [0] * len(names)
        # What cannot move: the source's usage its bundles do not explain (none when they explain more
        # than all of it), and all of the destination's. Predicted usages are >= 0 (`_drop`).
        unexplained = level[0] / k[0] - sum(rates)
        if unexplained < 0 and _beyond_rounding(level[0] / k[0], sum(rates)):
            self.clamped += 1
            log.debug(
                "BalancedShedder: %s's bundles are worth %.3g msg/s more than its usage; its fixed load is 0",
                source, -unexplained,
            )
        fixed = [max(0.0, unexplained), level[1] / k[1]]
        # Rates in units of `resolution` usage points on the source: the planner then sees plans that
        # differ by less as equal, and of those takes the one with the fewest moves.
        unit = self.resolution / k[0]
        units = [r / unit for r in rates]
        fixed_units = [f / unit for f in fixed]
        capacity = [1 / k[0], 1 / k[1]]
        if not (sum(units) + sum(fixed_units) < MAX_UNITS and all(map(math.isfinite, capacity))):
            self.unplannable += 1
            log.debug("BalancedShedder: %s -> %s: numbers too large to plan; no move", source, destination)
            return []
        plan = plan_rebalance(
            [round(u) for u in units],
            owner,
            2,
            capacity=capacity,
            fixed_load=fixed_units,
            skip_ratio=1.0,
            max_moves=budget,
        )
        if plan.skipped is not None:
            return []
        return [(names[p], rates[p], pair[old], pair[new]) for p, old, new in plan.moves]

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
