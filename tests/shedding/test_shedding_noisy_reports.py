"""Issue 42, item 8: a shedder never fails on a valid report.

A broker reports its usage, its own rates and its bundles' rates sampled at different times, so its
bundles can be worth more usage than it reports. BalancedShedder raised `fixed_load[1] must be >= 0`
on such reports; Pulsar's strategies never derive a fixed load (TransferShedder clamps its predicted
load at zero, `Math.max(0, maxLoad - offload)`), and ours now clamps the same way, counting each clamp.
"""

from __future__ import annotations

import logging
import sys

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from shedding_helpers import broker, bundle, cluster

from rebalancer.shedding import (
    AvgShedder,
    BalancedShedder,
    BrokerLoad,
    BundleLoad,
    ClusterLoad,
    LeastLongTermMessageRate,
    LeastResourceUsageWithWeight,
    OverloadShedder,
    ShedderConfig,
    ThresholdShedder,
    TransferShedder,
    UniformLoadShedder,
)
from rebalancer.shedding.reports import Snapshot, _shifted, replay
from rebalancer.shedding.sim import COMBINATIONS

DATA = {"a0": bundle(1000), "a1": bundle(1000), "b0": bundle(250), "c0": bundle(1000)}
# a is hot; b is the coolest. One usage point per 25 msg/s on every broker.
BEFORE = cluster(
    {"a": broker(80, 2000, 0, ["a0", "a1"]), "b": broker(10, 250, 0, ["b0"]), "c": broker(40, 1000, 0, ["c0"])},
    DATA,
)
# a0 has left a's CPU and reached b's, but both still list the bundles they listed before: a0 is worth
# 40 points on a, which reports 30.
APART = cluster(
    {"a": broker(30, 1000, 0, ["a0", "a1"]), "b": broker(50, 1250, 0, ["b0"]), "c": broker(40, 1000, 0, ["c0"])},
    DATA,
)
SEQUENCE = [BEFORE, BEFORE, APART, APART]


def test_balanced_shedder_takes_reports_whose_bundles_outweigh_the_usage(caplog):
    """The reproducer: before, the fourth report raised `fixed_load[1] must be >= 0, got -3.0...`
    (a's predicted usage was 30 - 40 = -10, and a, the coolest, was planned as a destination)."""
    shedder, conf = BalancedShedder(), ShedderConfig()
    with caplog.at_level(logging.DEBUG, logger="rebalancer.shedding.balanced"):
        decisions = [shedder.find_bundles_for_unloading(view, conf) for view in SEQUENCE]
    assert decisions == [{}, {"a": ["a0"]}, {}, {"b": ["b0"]}]
    assert shedder.select_broker({"a", "b", "c"}, "b0", APART, conf) == "a"  # a is predicted at 0, not -10
    assert (shedder.clamped, shedder.unplannable) == (2, 0)  # cycles 3 and 4: a0 still in flight
    expected = "BalancedShedder: bundle a0 is worth 40 usage points on a, which has 30; left at 0"
    assert [r.getMessage() for r in caplog.records] == [expected, expected]


def test_pulsars_strategies_take_the_same_reports():
    """They select by the brokers' own rates and never subtract bundles from usage: nothing to clamp."""
    conf = ShedderConfig()
    for strategy in (ThresholdShedder(), OverloadShedder(), UniformLoadShedder(), AvgShedder(0), TransferShedder(0)):
        assert [strategy.find_bundles_for_unloading(view, conf) for view in SEQUENCE] == [{}, {}, {}, {}]


def test_a_broker_whose_own_rate_lags_its_bundles_is_costed_by_its_bundles():
    """`lagging` reports 100 msg/s and a bundle of 1000: by its own rate the bundle was worth 500 points
    on a broker at 50%, and the second report raised `fixed_load[1] must be >= 0, got -1.857...`."""
    view = cluster(
        {
            "idle": broker(0),
            "busy": broker(50, 3000, 0, ["busy-0", "busy-1", "busy-2"]),
            "lagging": broker(50, 100, 0, ["hot"]),
        },
        {"busy-0": bundle(1000), "busy-1": bundle(1000), "busy-2": bundle(1000), "hot": bundle(1000)},
    )
    shedder, conf = BalancedShedder(), ShedderConfig()
    assert [shedder.find_bundles_for_unloading(view, conf) for _ in range(3)] == [{}, {"busy": ["busy-0"]}, {}]
    assert shedder.bundle_broker_plan == {"busy-0": "idle"} and shedder.clamped == 0


def test_a_pair_with_numbers_too_large_to_plan_is_left_unplanned(caplog):
    """b's rate of 1e-300 msg/s makes a usage point worth 1e302 times less than on a: a's bundles come
    to about 1e304 planner units, beyond int64 (before: `throughput[0] must fit in int64`)."""
    view = cluster(
        {"a": broker(95, 2000, 0, ["a0", "a1"]), "b": broker(90, 1e-300), "c": broker(0)},
        {"a0": bundle(1000), "a1": bundle(1000)},
    )
    shedder = BalancedShedder(high_hits=1)
    with caplog.at_level(logging.DEBUG, logger="rebalancer.shedding.balanced"):
        assert shedder.find_bundles_for_unloading(view, ShedderConfig()) == {}
    assert shedder.unplannable == 1
    assert "BalancedShedder: a -> c: numbers too large to plan; no move" in caplog.text


# -- every strategy, on random valid report sequences --------------------------------------------------

_NUMBERS = st.one_of(
    st.floats(0.0, 1e308, allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, 5e-324, 1e-300, 1.0, 100.0, 1000.0]),
)
_USAGES = st.one_of(
    st.floats(0.0, 1e6, allow_nan=False, allow_infinity=False), st.sampled_from([0.0, 5e-324, 50.0, 100.0])
)


@st.composite
def report_sequences(draw: st.DrawFn) -> list[ClusterLoad]:
    """1 to 6 reports of 1 to 4 brokers; each report draws every usage and rate afresh, so a bundle's
    rates have nothing to do with its broker's, and bundles may change owner between reports."""
    brokers = [f"broker-{i}" for i in range(draw(st.integers(1, 4)))]
    owners = {f"bundle-{j}": draw(st.sampled_from(brokers)) for j in range(draw(st.integers(0, 8)))}
    views = []
    for t in range(draw(st.integers(1, 6))):
        for name in owners:
            if draw(st.booleans()):
                owners[name] = draw(st.sampled_from(brokers))
        owned: dict[str, list[str]] = {b: [] for b in brokers}
        for name, owner in owners.items():
            owned[owner].append(name)
        reports = {
            b: BrokerLoad(*(draw(_USAGES) for _ in range(5)), *(draw(_NUMBERS) for _ in range(4)), bundles=owned[b])
            for b in brokers
        }
        data = {name: BundleLoad(*(draw(_NUMBERS) for _ in range(4))) for name in owners if draw(st.booleans())}
        views.append(ClusterLoad(reports, data, timestamp=60.0 * t))
    return views


# Every threshold low, so that the strategies act on most sequences rather than wait.
EAGER = ShedderConfig(
    avg_shedder_hit_count_low_threshold=1,
    avg_shedder_hit_count_high_threshold=1,
    shedding_condition_hit_count_threshold=0,
    shedding_delay_in_seconds=0,
    min_unload_message=0,
    min_unload_message_throughput=0,
    bundle_unload_min_throughput_threshold=0,
)
PROPERTY = settings(
    max_examples=300, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)


@PROPERTY
@example(views=SEQUENCE)
@given(views=report_sequences())
def test_no_strategy_raises_on_a_valid_report_sequence(views: list[ClusterLoad]) -> None:
    for conf in (ShedderConfig(), EAGER):
        shedders = [ThresholdShedder(), OverloadShedder(), UniformLoadShedder(), AvgShedder(0), TransferShedder(0)]
        for shedder in [*shedders, BalancedShedder(0), BalancedShedder(0, low_hits=1, high_hits=1)]:
            for view in views:
                for source, unloaded in shedder.find_bundles_for_unloading(view, conf).items():
                    assert all(view.owner_of(name) == source for name in unloaded)
                    for name in unloaded:
                        select = getattr(shedder, "select_broker", None)
                        if select is not None:  # a strategy that places what it unloads
                            assert select(set(view.brokers), name, view, conf) in view.brokers
        for placer in (LeastLongTermMessageRate(0), LeastResourceUsageWithWeight(0)):
            for view in views:
                for name in view.bundles:
                    assert placer.select_broker(set(view.brokers), name, view, conf) in view.brokers


@pytest.mark.parametrize("combo", COMBINATIONS, ids=lambda combo: combo.name)
@settings(PROPERTY, max_examples=60)  # a replay per example and combination
@given(views=report_sequences().filter(lambda views: len(views) >= 2))
def test_a_replay_of_valid_reports_never_raises(combo, views: list[ClusterLoad]) -> None:
    """Replay moves bundles by the strategy's decisions and shifts every later report by them."""
    snapshots = [Snapshot(view.timestamp, view.brokers, view.bundles, {}) for view in views]
    result = replay(snapshots, combo)
    assert len(result.spread) == len(snapshots)


def test_a_report_shifted_by_a_replay_stays_a_valid_report():
    """Replay moves a bundle's rates from one broker's report to another's. A broker whose own rate
    lags its bundles' goes to 0, not below; one whose rates overflow stays at a float's largest (before:
    `msg_rate_in must be a finite rate >= 0, got inf`, found by the property test above)."""
    huge = sys.float_info.max / 2
    cost = {"cpu": 0.01, "direct_memory": 0.0, "bandwidth_in": 0.0, "bandwidth_out": 0.0}
    data = {"x": BundleLoad(huge, 500, 0, 0), "y": BundleLoad(100, 100, 0, 0)}
    taking = BrokerLoad(40, 0, 0, 0, 0, huge * 1.5, 0, 0, 0, bundles=["y"])
    shifted = _shifted(taking, ["x", "y"], data, cost)
    assert (shifted.msg_rate_in, shifted.msg_rate_out, shifted.cpu) == (sys.float_info.max, 500.0, 100.0)
    giving = BrokerLoad(40, 0, 0, 0, 0, 50, 50, 0, 0, bundles=["x", "y"])  # its own rate lags its bundles'
    shifted = _shifted(giving, ["y"], data, cost)
    assert (shifted.msg_rate_in, shifted.msg_rate_out, shifted.cpu) == (0.0, 0.0, 0.0)
