"""The worked examples of PIP-364, checked against the ports."""

from __future__ import annotations

import pytest
from shedding_helpers import MB, broker, bundle, cluster, loaded_cluster

from rebalancer.shedding import AvgShedder, LeastResourceUsageWithWeight, ShedderConfig, ThresholdShedder


def _two_brokers(u1: float, u2: float):
    names1 = [f"b1-{i}" for i in range(4)]
    names2 = [f"b2-{i}" for i in range(4)]
    brokers = {
        "broker1": broker(u1, u1 * 1000, u1 * 2 * MB, names1),
        "broker2": broker(u2, u2 * 1000, u2 * 2 * MB, names2),
    }
    data = {n: bundle(u1 * 250, u1 * MB / 2) for n in names1}
    data.update({n: bundle(u2 * 250, u2 * MB / 2) for n in names2})
    return cluster(brokers, data)


def test_history_weight_drifts_90_10_to_86_14_and_keeps_unloading_a_balanced_broker():
    shedder, conf = ThresholdShedder(), ShedderConfig()
    first = shedder.find_bundles_for_unloading(_two_brokers(90, 10), conf)
    assert list(first) == ["broker1"]
    # The move balanced the real load at 50/50, but the EMA says 86/14.
    second = shedder.find_bundles_for_unloading(_two_brokers(50, 50), conf)
    assert shedder.broker_avg_resource_usage["broker1"] == pytest.approx(0.86)
    assert shedder.broker_avg_resource_usage["broker2"] == pytest.approx(0.14)
    assert list(second) == ["broker1"], "over-unloading: a broker at the average still sheds"
    # broker1 really is at 14 now and still scores 78.8.
    shedder.find_bundles_for_unloading(_two_brokers(14, 86), conf)
    assert shedder.broker_avg_resource_usage["broker1"] == pytest.approx(0.788)
    assert shedder.broker_avg_resource_usage["broker2"] == pytest.approx(0.212)


def _pairing_cluster():
    # usages 20, 30, 52, 70, 80; the 80 broker carries 1000 msg/s, the 20 broker 500.
    top = {"top-400": 400, "top-200": 200, "top-150": 150, "top-100a": 100, "top-100b": 100, "top-50": 50}
    second = {"sec-300a": 300, "sec-300b": 300, "sec-150a": 150, "sec-150b": 150}
    brokers = {
        "b80": broker(80, 1000, 0, list(top)),
        "b20": broker(20, 500, 0, ["low-0"]),
        "b52": broker(52, 700, 0, ["mid-0"]),
        "b70": broker(70, 900, 0, list(second)),
        "b30": broker(30, 600, 0, ["low-1"]),
    }
    data = {name: bundle(rate) for name, rate in {**top, **second}.items()}
    data.update({"low-0": bundle(500), "low-1": bundle(600), "mid-0": bundle(700)})
    return cluster(brokers, data)


def test_avg_shedder_pairs_20_with_80_and_30_with_70_and_moves_half_the_difference():
    conf = ShedderConfig(max_unload_percentage=0.5, min_unload_message=100)
    shedder = AvgShedder(seed=1)
    view = _pairing_cluster()
    assert shedder.find_bundles_for_unloading(view, conf) == {}, "the first hit is not enough"
    assert shedder.hit_count_high == {"b20": 1, "b80": 1, "b30": 1, "b70": 1}
    result = shedder.find_bundles_for_unloading(view, conf)
    # (1000 - 500) * 0.5 = 250: 400 is too big, 200 fits, 150 and 100 do not fit the 50 left, 50 does.
    assert result == {"b80": ["top-200", "top-50"], "b70": ["sec-150a"]}
    assert shedder.select_broker({"b20", "b30", "b52", "b70", "b80"}, "top-200", view, conf) == "b20"
    assert shedder.select_broker({"b20", "b30", "b52", "b70", "b80"}, "top-50", view, conf) == "b20"
    assert shedder.select_broker({"b20", "b30", "b52", "b70", "b80"}, "sec-150a", view, conf) == "b30"
    assert shedder.bundle_broker_plan == {}, "placed bundles leave the plan (apache/pulsar#26246)"


@pytest.mark.parametrize(
    ("usages", "threshold", "expected"),
    [
        # PIP-364 lists b1 and b2, but b2 sits exactly at the average of 60%: Pulsar sums the usages in
        # its candidate HashSet's order (b2, b3, b4, b5, b1), which comes to 0.5999999999999999, so b2
        # misses the average by a hair and b1 is the only candidate.
        ({"b1": 10, "b2": 60, "b3": 70, "b4": 80, "b5": 80}, 0, ["b1"]),
        ({"b1": 40, "b2": 40, "b3": 40, "b4": 40, "b5": 69, "b6": 70}, 10, []),
        ({"b1": 10, "b2": 30, "b3": 80}, 10, ["b1", "b2"]),
    ],
)
def test_least_resource_usage_with_weight_candidate_lists(usages, threshold, expected):
    conf = ShedderConfig(average_resource_usage_difference_threshold_percentage=threshold)
    placement = LeastResourceUsageWithWeight(seed=3)
    view = loaded_cluster(usages)
    view = cluster(view.brokers, {**view.bundles, "new": bundle(10)})
    assert sorted(placement.best_brokers(set(usages), view, conf)) == expected
    chosen = {placement.select_broker(set(usages), "new", view, conf) for _ in range(40)}
    # An empty list falls back to every candidate: the bundle may land on the 69 or 70 broker.
    assert chosen <= set(expected or usages)
    if not expected:
        assert chosen & {"b5", "b6"}, "the fallback draws from overloaded brokers too"
