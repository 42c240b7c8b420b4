"""Each strategy on small hand-built clusters; the AvgShedder cases mirror Pulsar's AvgShedderTest."""

from __future__ import annotations

import math

import pytest
from shedding_helpers import MB, broker, bundle, cluster, loaded_cluster

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

# --- AvgShedder, as in Pulsar's AvgShedderTest ---------------------------------------------------


def _avg_test_cluster(cpu1: float, cpu2: float, cpu3: float, prefix: str = "bundle-") -> ClusterLoad:
    names = [f"{prefix}{i}" for i in range(11)]
    return cluster(
        {
            "broker1": broker(cpu1, 20000, 0, names),
            "broker2": broker(cpu2, 2000),
            "broker3": broker(cpu3, 10000),
        },
        {n: bundle(900) for n in names},
    )


def test_avg_shedder_hit_high_threshold():
    conf = ShedderConfig(
        max_unload_percentage=0.5, avg_shedder_high_threshold=40, avg_shedder_hit_count_high_threshold=2
    )
    shedder = AvgShedder()
    view = _avg_test_cluster(80, 30, 50)
    assert shedder.find_bundles_for_unloading(view, conf) == {}
    result = shedder.find_bundles_for_unloading(view, conf)
    assert list(result) == ["broker1"] and len(result["broker1"]) == 10  # (20000-2000)/2 / 900
    for name in result["broker1"]:
        assert shedder.select_broker(set(view.brokers), name, view, conf) == "broker2"


def test_avg_shedder_hit_low_threshold():
    conf = ShedderConfig(
        max_unload_percentage=0.5, avg_shedder_low_threshold=20, avg_shedder_hit_count_low_threshold=6
    )
    shedder = AvgShedder()
    view = _avg_test_cluster(60, 40, 50)
    for _ in range(5):
        assert shedder.find_bundles_for_unloading(view, conf) == {}
    result = shedder.find_bundles_for_unloading(view, conf)
    assert len(result["broker1"]) == 10
    assert {shedder.select_broker(set(view.brokers), n, view, conf) for n in result["broker1"]} == {"broker2"}


def test_avg_shedder_sheds_multiple_pairs_in_one_cycle():
    conf = ShedderConfig(
        max_unload_percentage=0.5, avg_shedder_high_threshold=40, avg_shedder_hit_count_high_threshold=2
    )
    b1 = [f"bundle1-{i}" for i in range(11)]
    b3 = [f"bundle3-{i}" for i in range(11)]
    view = cluster(
        {
            "broker1": broker(80, 20000, 0, b1),
            "broker2": broker(30, 2000),
            "broker3": broker(75, 20000, 0, b3),
            "broker4": broker(35, 2000),
        },
        {n: bundle(900) for n in b1 + b3},
    )
    shedder = AvgShedder()
    assert shedder.find_bundles_for_unloading(view, conf) == {}
    result = shedder.find_bundles_for_unloading(view, conf)
    assert {k: len(v) for k, v in result.items()} == {"broker1": 10, "broker3": 10}
    assert {shedder.select_broker(set(view.brokers), n, view, conf) for n in result["broker1"]} == {"broker2"}
    assert {shedder.select_broker(set(view.brokers), n, view, conf) for n in result["broker3"]} == {"broker4"}


def test_avg_shedder_sorts_scores_as_floats_not_truncated_ints():
    # Pulsar's (int)(a - b) comparator kept broker B (20.6) before A (20.0), pairing B with D: 39.9 < 40.
    conf = ShedderConfig(
        avg_shedder_hit_count_high_threshold=1, min_unload_message=10, max_unload_percentage=0.5
    )
    view = cluster(
        {
            "B": broker(20.6, 100),
            "A": broker(20.0, 100),
            "C": broker(59.9, 1000, 0, ["c0"]),
            "D": broker(60.5, 1000, 0, ["d0", "d1"]),
        },
        {"c0": bundle(1000), "d0": bundle(400), "d1": bundle(600)},
    )
    result = AvgShedder().find_bundles_for_unloading(view, conf)
    assert result == {"D": ["d0"]}, "A (20.0) pairs with D (60.5): 40.5 hits the high threshold at once"


def test_avg_shedder_falls_back_to_throughput_and_skips_recently_unloaded():
    conf = ShedderConfig(max_unload_percentage=0.5, avg_shedder_hit_count_high_threshold=1)
    names = ["x0", "x1", "x2"]
    view = cluster(
        {"hot": broker(90, 100, 40 * MB, names), "cold": broker(10, 100, 0)},
        {"x0": bundle(30, 12 * MB), "x1": bundle(30, 10 * MB), "x2": bundle(40, 18 * MB)},
        recently_unloaded={"x2": 0.0},
    )
    # msg rates are equal, so the throughput branch: (40 - 0) * 0.5 = 20 MB; x2 is recently unloaded.
    assert AvgShedder().find_bundles_for_unloading(view, conf) == {"hot": ["x0"]}


def test_avg_shedder_resets_counters_when_the_cluster_is_balanced():
    conf = ShedderConfig(max_unload_percentage=0.5)
    shedder = AvgShedder()
    shedder.find_bundles_for_unloading(_avg_test_cluster(60, 40, 50), conf)
    assert shedder.hit_count_low == {"broker1": 1, "broker2": 1}
    shedder.find_bundles_for_unloading(_avg_test_cluster(50, 45, 48), conf)
    assert shedder.hit_count_low == {} and shedder.hit_count_high == {}


def test_avg_shedder_hash_placement_is_seeded_and_stays_within_candidates():
    view = _avg_test_cluster(50, 50, 50)
    conf = ShedderConfig()
    picks = [
        AvgShedder(seed=7).select_broker({"broker2", "broker3"}, "bundle-0", view, conf) for _ in range(3)
    ]
    assert len(set(picks)) == 1 and picks[0] in {"broker2", "broker3"}
    many = AvgShedder(seed=7)
    spread = {many.select_broker(set(view.brokers), f"bundle-{i}", view, conf) for i in range(11)}
    assert len(spread) >= 2, "hashing a random number spreads bundles"


# --- ThresholdShedder --------------------------------------------------------------------------


def test_threshold_shedder_ignores_an_idle_broker_unless_lower_boundary_is_enabled():
    usages = {f"b{i:02d}": 80.0 for i in range(10)} | {"idle": 0.0}
    view = loaded_cluster(usages, throughput_per_point=4 * MB)
    assert ThresholdShedder().find_bundles_for_unloading(view, ShedderConfig()) == {}, "apache/pulsar#17456"
    result = ThresholdShedder().find_bundles_for_unloading(
        view, ShedderConfig(lower_boundary_shedding_enabled=True)
    )
    assert len(result) == 1
    ((source, bundles),) = result.items()
    assert source != "idle" and len(bundles) == 1


def test_threshold_shedder_offloads_enough_throughput_and_leaves_a_sole_bundle():
    view = loaded_cluster({"hot": 90, "b": 30, "c": 30}, bundles_per_broker=10, throughput_per_point=2 * MB)
    result = ThresholdShedder().find_bundles_for_unloading(view, ShedderConfig())
    # avg 50: 0.9 - 0.5 - 0.1 + 0.05 = 35% of 180 MB/s = 63 MB/s; bundles of 18 MB/s -> 4.
    assert {k: len(v) for k, v in result.items()} == {"hot": 4}
    sole = cluster(
        {"hot": broker(90, 1000, 200 * MB, ["only"]), "cold": broker(10, 10, 0)},
        {"only": bundle(1000, 200 * MB)},
    )
    assert ThresholdShedder().find_bundles_for_unloading(sole, ShedderConfig()) == {}


def _threshold_test_cluster(recent: dict[str, float] | None = None) -> ClusterLoad:
    """Pulsar's ThresholdShedderTest: broker-1 at 99.9% bandwidth with bundles of 2i MB/s."""
    names = [f"bundle-{i}" for i in range(1, 11)]
    other = [f"broker2-bundle-{10 + i}" for i in range(1, 11)]
    data = {n: bundle(0, 2 * i * MB) for i, n in enumerate(names, start=1)}
    data.update({n: bundle(0, 2 * i * MB) for i, n in enumerate(other, start=1)})
    total = sum(2 * i * MB for i in range(1, 11))
    return cluster(
        {
            "broker-1": broker(10, 0, total, names, bandwidth_in=99.9, bandwidth_out=99.9),
            "broker2": broker(0, 0, 0, other),
        },
        data,
        recently_unloaded=recent,
    )


def test_threshold_shedder_mirrors_pulsar_multiple_bundles_and_recently_unloaded():
    assert ThresholdShedder().find_bundles_for_unloading(_threshold_test_cluster(), ShedderConfig()) == {
        "broker-1": ["bundle-10", "bundle-9", "bundle-8"]
    }
    recent = {"bundle-10": 1.0, "bundle-9": 1.0}
    assert ThresholdShedder().find_bundles_for_unloading(
        _threshold_test_cluster(recent), ShedderConfig()
    ) == {"broker-1": ["bundle-8", "bundle-7", "bundle-6", "bundle-5"]}


def test_threshold_shedder_without_bundles_or_brokers_does_nothing():
    assert ThresholdShedder().find_bundles_for_unloading(cluster({}), ShedderConfig()) == {}
    idle = cluster({"broker-1": broker(99, 0, 0)})
    assert ThresholdShedder().find_bundles_for_unloading(idle, ShedderConfig()) == {}


# --- OverloadShedder ---------------------------------------------------------------------------


def test_overload_shedder_sheds_only_above_85_percent():
    names = ["a", "b", "c"]
    data = {"a": bundle(10, 30 * MB), "b": bundle(10, 50 * MB), "c": bundle(10, 20 * MB)}
    hot = cluster({"x": broker(90, 30, 100 * MB, names), "y": broker(10)}, data)
    # 0.90 - 0.85 + 0.05 = 10% of 100 MB/s: the largest bundle covers it.
    assert OverloadShedder().find_bundles_for_unloading(hot, ShedderConfig()) == {"x": ["b"]}
    warm = cluster({"x": broker(84, 30, 100 * MB, names), "y": broker(10)}, data)
    assert OverloadShedder().find_bundles_for_unloading(warm, ShedderConfig()) == {}


# --- UniformLoadShedder ------------------------------------------------------------------------


def test_uniform_load_shedder_moves_a_share_of_the_msg_rate_difference():
    names = {"u3000": 3000, "u2000": 2000, "u1000": 1000, "u44000": 44000}
    view = cluster(
        {"big": broker(50, 50000, 0, list(names)), "small": broker(30, 30000, 0, ["s0"])},
        {**{n: bundle(r) for n, r in names.items()}, "s0": bundle(30000)},
    )
    # (50000 - 30000) / 30000 = 66% > 50%; int(20000 * 0.2) = 4000 to move.
    assert UniformLoadShedder().find_bundles_for_unloading(view, ShedderConfig()) == {
        "big": ["u3000", "u1000"]
    }
    assert UniformLoadShedder().find_bundles_for_unloading(
        view, ShedderConfig(max_unload_bundle_num_per_shedding=1)
    ) == {"big": ["u3000"]}
    # 4000 < min_unload_message: nothing moves.
    assert UniformLoadShedder().find_bundles_for_unloading(view, ShedderConfig(min_unload_message=5000)) == {}


def test_uniform_load_shedder_uses_the_throughput_multiplier():
    names = ["t0", "t1"]
    view = cluster(
        {"big": broker(50, 1000, 450 * MB, names), "small": broker(30, 1000, 100 * MB, ["s0"])},
        {"t0": bundle(500, 300 * MB), "t1": bundle(500, 150 * MB), "s0": bundle(1000, 100 * MB)},
    )
    # 4.5x > 4; int(350 MB * 0.2) = 70 MB: neither bundle fits.
    assert UniformLoadShedder().find_bundles_for_unloading(view, ShedderConfig()) == {}
    assert UniformLoadShedder().find_bundles_for_unloading(
        view, ShedderConfig(max_unload_percentage=0.5)
    ) == {"big": ["t1"]}


# --- LeastLongTermMessageRate ------------------------------------------------------------------


def test_least_long_term_message_rate_counts_preallocated_bundles():
    view = cluster(
        {"broker1": broker(30, 100, 0, ["a"]), "broker2": broker(30, 110, 0, ["b"])},
        {"a": bundle(100), "b": bundle(110), "new1": bundle(20), "new2": bundle(20)},
    )
    placement, conf = LeastLongTermMessageRate(seed=1), ShedderConfig()
    assert placement.select_broker({"broker1", "broker2"}, "new1", view, conf) == "broker1"
    assert placement.select_broker({"broker1", "broker2"}, "new2", view, conf) == "broker2"
    assert placement.score("broker1", view, conf) == 120


def test_least_long_term_message_rate_scores_overloaded_brokers_infinite():
    view = cluster({"hot": broker(90, 10), "warm": broker(60, 1000)}, {"new": bundle(5)})
    placement, conf = LeastLongTermMessageRate(seed=1), ShedderConfig()
    assert placement.score("hot", view, conf) == math.inf
    assert placement.select_broker({"hot", "warm"}, "new", view, conf) == "warm"
    all_hot = cluster({"h1": broker(90), "h2": broker(95)}, {"new": bundle(5)})
    assert {placement.select_broker({"h1", "h2"}, "new", all_hot, conf) for _ in range(30)} == {"h1", "h2"}


def test_least_resource_usage_with_weight_keeps_an_ema_and_resets_idle_brokers():
    placement, conf = LeastResourceUsageWithWeight(seed=1), ShedderConfig()
    view = cluster({"a": broker(90, 100, 0, ["x"]), "b": broker(10)}, {"x": bundle(100)})
    placement.best_brokers({"a", "b"}, view, conf)
    view2 = cluster({"a": broker(50, 100, 0, ["x"]), "b": broker(50)}, {"x": bundle(100)})
    placement.best_brokers({"a", "b"}, view2, conf)
    usage = placement.broker_avg_resource_usage_with_weight
    assert usage["a"] == pytest.approx(0.86)
    assert usage["b"] == pytest.approx(0.50), "no bundles: the history is dropped"


# --- TransferShedder ---------------------------------------------------------------------------


def test_transfer_shedder_needs_more_than_three_hits_then_transfers_and_cools_down():
    conf = ShedderConfig()
    shedder = TransferShedder(seed=1)
    names = [f"h{i}" for i in range(6)]

    def view(ts: float) -> ClusterLoad:
        return cluster(
            {
                "hot": broker(90, 6000, 60 * MB, names),
                "mid": broker(50, 3000, 30 * MB, ["m0"]),
                "cold": broker(10, 600, 6 * MB, ["c0"]),
            },
            {
                **{n: bundle(1000, 10 * MB) for n in names},
                "m0": bundle(3000, 30 * MB),
                "c0": bundle(600, 6 * MB),
            },
            timestamp=ts,
        )

    for minute in range(3):
        assert shedder.find_bundles_for_unloading(view(60.0 * minute), conf) == {}
    result = shedder.find_bundles_for_unloading(view(180.0), conf)
    # Offload (0.9 - 0.1) / 2 = 40% of hot: 24 MB/s. Two 10 MB/s bundles fit; the third overshoots, so
    # Pulsar swaps cold's bundle back to hot (transfer mode) and sends the third as well. Which three of
    # the six equal bundles: those Pulsar's TopKBundles lists first (checked against Pulsar 4.2.4).
    assert {b: sorted(names) for b, names in result.items()} == {"hot": ["h3", "h4", "h5"], "cold": ["c0"]}
    candidates = {"hot", "mid", "cold"}
    assert {shedder.select_broker(candidates, n, view(180.0), conf) for n in result["hot"]} == {"cold"}
    assert shedder.select_broker(candidates, "c0", view(180.0), conf) == "hot"
    assert shedder.find_bundles_for_unloading(view(240.0), conf) == {}, "cool-down after a transfer"


def test_transfer_shedder_without_transfer_mode_does_not_swap():
    conf = ShedderConfig(transfer_enabled=False, shedding_condition_hit_count_threshold=0)
    names = [f"h{i}" for i in range(6)]
    view = cluster(
        {
            "hot": broker(90, 6000, 60 * MB, names),
            "mid": broker(50, 3000, 30 * MB, ["m0"]),
            "cold": broker(10, 600, 6 * MB, ["c0"]),
        },
        {**{n: bundle(1000, 10 * MB) for n in names}, "m0": bundle(3000, 30 * MB), "c0": bundle(600, 6 * MB)},
    )
    result = TransferShedder().find_bundles_for_unloading(view, conf)
    assert {b: sorted(names) for b, names in result.items()} == {"hot": ["h4", "h5"]}


def _transfer_view(recent: dict[str, float] | None = None, hot_bundles: dict | None = None) -> ClusterLoad:
    hot = hot_bundles or {f"h{i}": bundle(1000, 10 * MB) for i in range(6)}
    return cluster(
        {
            "hot": broker(90, 6000, 60 * MB, list(hot)),
            "mid": broker(50, 3000, 30 * MB, ["m0"]),
            "cold": broker(10, 600, 6 * MB, ["c0"]),
        },
        {**hot, "m0": bundle(3000, 30 * MB), "c0": bundle(600, 6 * MB)},
        recently_unloaded=recent,
    )


def test_transfer_shedder_swaps_in_even_a_recently_unloaded_bundle():
    conf = ShedderConfig(shedding_condition_hit_count_threshold=0)
    # As Pulsar 4.2.4: a recently unloaded bundle is never unloaded from the max broker, but the min
    # broker's may still be swapped back to it (TransferShedder checks only the former).
    expected = {"hot": ["h3", "h4", "h5"], "cold": ["c0"]}
    for recent in ({"c0": 0.0}, None):
        result = TransferShedder().find_bundles_for_unloading(_transfer_view(recent), conf)
        assert {b: sorted(names) for b, names in result.items()} == expected
    result = TransferShedder().find_bundles_for_unloading(_transfer_view({"h3": 0.0, "h4": 0.0}), conf)
    assert "h3" not in result.get("hot", []) and "h4" not in result.get("hot", [])


def test_transfer_shedder_leaves_bundles_without_throughput_out_of_the_top_bundles():
    conf = ShedderConfig(transfer_enabled=False, shedding_condition_hit_count_threshold=0)
    # TopKBundles drops bundles without throughput: hot publishes one top bundle, its sole bundle.
    hot = {"h0": bundle(1000, 10 * MB), "z0": bundle(0, 0), "z1": bundle(0, 0), "z2": bundle(0, 0)}
    assert TransferShedder().find_bundles_for_unloading(_transfer_view(hot_bundles=hot), conf) == {}
    hot = {"h0": bundle(1000, 10 * MB), "h1": bundle(1000, 10 * MB), "z0": bundle(0, 0), "z1": bundle(0, 0)}
    assert TransferShedder().find_bundles_for_unloading(_transfer_view(hot_bundles=hot), conf) == {"hot": ["h1"]}


# --- validation ---------------------------------------------------------------------------------


def test_bad_load_data_raises_naming_the_item():
    with pytest.raises(ValueError, match=r"broker 'b1': cpu must be a finite percentage >= 0, got -1"):
        cluster({"b1": broker(-1)})
    assert cluster({"b1": broker(120)}).brokers["b1"].cpu == 120  # a CPU beyond its limit, as Pulsar allows
    with pytest.raises(ValueError, match=r"bundle.msg_rate_in must be a finite rate >= 0, got -1"):
        BundleLoad(-1, 0, 0, 0)
    with pytest.raises(ValueError, match=r"broker 'b1': msg_rate_out must be a finite rate >= 0"):
        cluster({"b1": BrokerLoad(10, 0, 0, 0, 0, 1, -5, 0, 0)})
    with pytest.raises(ValueError, match=r"bundle 'x' is owned by both 'a' and 'b'"):
        cluster({"a": broker(1, bundles=["x"]), "b": broker(1, bundles=["x"])})
    view = cluster({"a": broker(10, 10, 0, ["x"])}, {"x": bundle(10)})
    for strategy in (
        AvgShedder(),
        LeastLongTermMessageRate(),
        LeastResourceUsageWithWeight(),
        TransferShedder(),
        BalancedShedder(),
    ):
        with pytest.raises(ValueError, match=r"unknown broker 'ghost'"):
            strategy.select_broker({"a", "ghost"}, "x", view, ShedderConfig())
        with pytest.raises(ValueError, match=r"unknown bundle 'nope'"):
            strategy.select_broker({"a"}, "nope", view, ShedderConfig())


def test_config_defaults_are_pulsars_and_bad_values_raise():
    conf = ShedderConfig()
    assert (conf.max_unload_percentage, conf.min_unload_message, conf.min_unload_message_throughput) == (
        0.2,
        1000,
        MB,
    )
    assert (conf.avg_shedder_low_threshold, conf.avg_shedder_high_threshold) == (15, 40)
    assert (conf.avg_shedder_hit_count_low_threshold, conf.avg_shedder_hit_count_high_threshold) == (8, 2)
    assert (conf.history_resource_percentage, conf.broker_threshold_shedder_percentage) == (0.9, 10)
    assert (
        conf.broker_overloaded_threshold_percentage,
        conf.average_resource_usage_difference_threshold_percentage,
    ) == (85, 10)
    assert (
        conf.msg_rate_difference_shedder_threshold,
        conf.msg_throughput_multiplier_difference_shedder_threshold,
    ) == (50, 4)
    assert (conf.broker_load_target_std, conf.shedding_condition_hit_count_threshold) == (0.25, 3)
    with pytest.raises(ValueError, match=r"max_unload_percentage must be within \(0, 1\], got 1.5"):
        ShedderConfig(max_unload_percentage=1.5)
    with pytest.raises(ValueError, match=r"avg_shedder_low_threshold must be >= 0, got -1"):
        ShedderConfig(avg_shedder_low_threshold=-1)


# --- ours ----------------------------------------------------------------------------------------


def _hetero(b1: float, b2: float, names1: list[str], names2: list[str]) -> ClusterLoad:
    return cluster(
        {
            "fast": broker(b1, len(names1) * 4000, 0, names1),
            "slow": broker(b2, len(names2) * 5000, 0, names2),
            "shared": broker(70, 0),
        },
        {**{n: bundle(4000) for n in names1}, **{n: bundle(5000) for n in names2}},
    )


def test_balanced_shedder_balances_the_bundle_brokers_and_never_feeds_the_shared_host():
    conf = ShedderConfig(max_unload_percentage=0.5)
    shedder = BalancedShedder()
    names1, names2 = [f"f{i}" for i in range(5)], [f"s{i}" for i in range(10)]
    view = _hetero(10, 50, names1, names2)
    assert shedder.find_bundles_for_unloading(view, conf) == {}
    result = shedder.find_bundles_for_unloading(view, conf)  # gap 40: two hits
    assert list(result) == ["slow"] and 3 <= len(result["slow"]) <= 5
    assert {shedder.select_broker(set(view.brokers), n, view, conf) for n in result["slow"]} == {"fast"}
    # The next report is stale (still 10/50): in-flight moves keep counting, nothing more is unloaded.
    assert shedder.find_bundles_for_unloading(view, conf) == {}


def test_balanced_shedder_ignores_a_short_spike_and_never_moves_a_bundle_back():
    conf = ShedderConfig()
    shedder = BalancedShedder(low_hits=3)
    calm = loaded_cluster({"a": 50, "b": 50, "c": 50}, bundles_per_broker=10)
    spike = loaded_cluster({"a": 75, "b": 50, "c": 50}, bundles_per_broker=10)
    for view in (calm, spike, spike, calm, spike, spike, calm):
        assert shedder.find_bundles_for_unloading(view, conf) == {}
    for _ in range(3):
        result = shedder.find_bundles_for_unloading(spike, conf)
    assert result and list(result) == ["a"]
    moved = result["a"][0]
    assert shedder.departures[moved] == {"a": shedder.cycle}
    # Back on a hot "b" with "a" the coolest, the bundle still may not return to "a"; another one may.
    per_rate, predicted = {"a": 0.02, "b": 0.02}, {"a": 10.0, "b": 60.0}
    assert (
        shedder._plan_pair("b", "a", {"b": [(moved, 500.0)], "a": []}, per_rate, predicted, 35.0, None) == []
    )
    other = [("other", 500.0)]
    assert shedder._plan_pair("b", "a", {"b": other, "a": []}, per_rate, predicted, 35.0, None) == [
        ("other", 500.0, "b", "a")
    ]
