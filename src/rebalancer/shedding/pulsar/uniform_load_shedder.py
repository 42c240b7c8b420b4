"""Port of ``UniformLoadShedder`` (modular load manager): move load from the highest to the lowest
broker by message rate or throughput, with Java's int arithmetic for its budget."""

from __future__ import annotations

from rebalancer.shedding.base import LoadSheddingStrategy
from rebalancer.shedding.java import INT_MAX, java_int, sorted_descending, wrap_int
from rebalancer.shedding.model import ClusterLoad, ShedderConfig
from rebalancer.shedding.pulsar.shared import broker_order, shedding_order

_EPS = 1e-6


class UniformLoadShedder(LoadSheddingStrategy):
    """Moves load from the highest to the lowest broker by message rate or throughput."""

    name = "UniformLoadShedder"

    def find_bundles_for_unloading(self, cluster: ClusterLoad, conf: ShedderConfig) -> dict[str, list[str]]:
        selected: dict[str, list[str]] = {}
        max_rate, max_tp = -1.0, -1.0
        min_rate, min_tp = float(INT_MAX), float(INT_MAX)
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
        for name, amount in sorted_descending(items):
            if limit != -1 and len(chosen) >= limit:
                break
            if amount <= required:
                required = wrap_int(required + java_int(-amount))
                chosen.append(name)
        if chosen:
            selected[broker] = chosen
        return selected
