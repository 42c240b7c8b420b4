"""Issue 17: Pulsar's own settings, recorded load reports and replay, and validation at the boundary."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest
from shedding_helpers import broker, bundle, cluster

from rebalancer.cli import main
from rebalancer.shedding import BalancedShedder, BrokerLoad, BundleLoad, ClusterLoad, ShedderConfig, sim
from rebalancer.shedding.base import LoadSheddingStrategy
from rebalancer.shedding.model import PROPERTY_NAMES
from rebalancer.shedding.pulsar import LeastLongTermMessageRate, UniformLoadShedder
from rebalancer.shedding.reports import AS_RECORDED, load_report, load_reports, record, replay, write_reports

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "shedding-reports"
BROKER_CONF = ROOT / "examples" / "broker.conf"

# Pulsar's ServiceConfiguration defaults (Pulsar 4.2.4, the version conformance/pulsar pins), by Pulsar's names.
PULSAR_DEFAULTS = {
    "loadBalancerBrokerThresholdShedderPercentage": "10",
    "loadBalancerHistoryResourcePercentage": "0.9",
    "loadBalancerCPUResourceWeight": "1.0",
    "loadBalancerDirectMemoryResourceWeight": "0",
    "loadBalancerBandwidthInResourceWeight": "1.0",
    "loadBalancerBandwidthOutResourceWeight": "1.0",
    "loadBalancerBandwithInResourceWeight": "1.0",
    "loadBalancerBandwithOutResourceWeight": "1.0",
    "loadBalancerAvgShedderHighThreshold": "40",
    "loadBalancerAvgShedderLowThreshold": "15",
    "loadBalancerAvgShedderHitCountHighThreshold": "2",
    "loadBalancerAvgShedderHitCountLowThreshold": "8",
    "loadBalancerMsgRateDifferenceShedderThreshold": "50",
    "loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold": "4",
    "maxUnloadPercentage": "0.2",
    "minUnloadMessage": "1000",
    "minUnloadMessageThroughput": "1048576",
    "loadBalancerBrokerOverloadedThresholdPercentage": "85",
    "loadBalancerLoadSheddingStrategy": "org.apache.pulsar.broker.loadbalance.impl.ThresholdShedder",
    "loadBalancerLoadPlacementStrategy": "org.apache.pulsar.broker.loadbalance.impl.LeastLongTermMessageRate",
    "maxUnloadBundleNumPerShedding": "-1",
    "lowerBoundarySheddingEnabled": "false",
    "loadBalancerSheddingGracePeriodMinutes": "30",
    "loadBalancerMemoryResourceWeight": "0",
}


# --- settings -------------------------------------------------------------------------------------


def test_pulsars_defaults_by_pulsars_names_are_our_defaults():
    assert ShedderConfig.from_properties(PULSAR_DEFAULTS) == ShedderConfig()
    assert ShedderConfig().direct_memory_resource_weight == 0.0  # 1.0 was Pulsar 3.0's default
    assert set(PROPERTY_NAMES.values()) <= set(ShedderConfig.__dataclass_fields__)


def test_memory_weights_count_as_pulsar_counts_them():
    report = BrokerLoad(10, 95, 90, 5, 5, 1, 1, 1, 1)
    # Pulsar 4.2.4 weighs neither heap nor direct memory by default.
    assert report.max_resource_usage_with_weight(ShedderConfig()) == pytest.approx(0.1)
    direct = ShedderConfig.from_properties({"loadBalancerDirectMemoryResourceWeight": "1"})
    assert report.max_resource_usage_with_weight(direct) == pytest.approx(0.9)
    # Heap memory counts only in the extensible manager's weighted max (TransferShedder), by its weight.
    heap = ShedderConfig.from_properties({"loadBalancerMemoryResourceWeight": "1"})
    assert report.max_resource_usage_with_weight(heap) == pytest.approx(0.95)


def test_both_spellings_of_the_bandwidth_weights_as_pulsar_reads_them():
    def weight(**props: str) -> float:
        return ShedderConfig.from_properties(props).bandwidth_in_resource_weight

    assert weight(loadBalancerBandwithInResourceWeight="0.5") == 0.5  # the deprecated spelling alone
    assert weight(loadBalancerBandwidthInResourceWeight="0.3", loadBalancerBandwithInResourceWeight="0.5") == 0.3
    # the current spelling left at 1.0 gives way to the deprecated one, as in Pulsar's getter
    assert weight(loadBalancerBandwidthInResourceWeight="1.0", loadBalancerBandwithInResourceWeight="0.5") == 0.5


def test_properties_set_fields_and_unknown_load_balancer_keys_warn(caplog):
    props = {
        "loadBalancerAvgShedderHighThreshold": " 30 ",
        "loadBalancerTransferEnabled": "false",
        "maxUnloadPercentage": 0.5,
        "loadBalancerNamespaceBundleMaxTopics": "1000",
        "loadBalancerFrobnicate": "1",
        "clusterName": "prod",
        "minUnloadMessage": "",  # empty: not set, as in Pulsar
    }
    with caplog.at_level(logging.WARNING, logger="rebalancer.shedding.model"):
        conf = ShedderConfig.from_properties(props)
    assert (conf.avg_shedder_high_threshold, conf.transfer_enabled, conf.max_unload_percentage) == (
        30,
        False,
        0.5,
    )
    assert conf.min_unload_message == 1000
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.endswith("loadBalancerFrobnicate, loadBalancerNamespaceBundleMaxTopics")


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"loadBalancerAvgShedderHitCountHighThreshold": "two"}, "loadBalancerAvgShedderHitCountHighThreshold must be an integer, got 'two'"),
        ({"loadBalancerAvgShedderHitCountLowThreshold": "8.5"}, "loadBalancerAvgShedderHitCountLowThreshold must be an integer, got '8.5'"),
        ({"loadBalancerHistoryResourcePercentage": "NaN"}, "loadBalancerHistoryResourcePercentage must be finite, got 'NaN'"),
        ({"loadBalancerHistoryResourcePercentage": "nan"}, "loadBalancerHistoryResourcePercentage must be a number, got 'nan'"),  # Java reads only NaN
        ({"loadBalancerTransferEnabled": "yes"}, "loadBalancerTransferEnabled must be true or false, got 'yes'"),
        ({"maxUnloadPercentage": "1.5"}, "maxUnloadPercentage: max_unload_percentage must be within (0, 1], got 1.5"),
        ({"loadBalancerAvgShedderLowThreshold": "-1"}, "loadBalancerAvgShedderLowThreshold: avg_shedder_low_threshold must be >= 0, got -1.0"),
        ({"loadBalancerMemoryResourceWeight": "heavy"}, "loadBalancerMemoryResourceWeight must be a number, got 'heavy'"),
        ({"loadBalancerLoadSheddingStrategy": "com.example.Mine"}, "loadBalancerLoadSheddingStrategy: load_shedding_strategy must be one of ThresholdShedder, OverloadShedder, UniformLoadShedder, AvgShedder, got 'com.example.Mine'"),
    ],
)  # fmt: skip
def test_bad_property_values_raise_naming_the_pulsar_key(props, message):
    with pytest.raises(ValueError) as err:
        ShedderConfig.from_properties(props)
    assert str(err.value) == message


def test_broker_conf_is_read_as_java_properties(tmp_path):
    conf_file = tmp_path / "broker.conf"
    conf_file.write_text(
        "# comment\n! also a comment\nloadBalancerAvgShedderLowThreshold = 20\n"
        "loadBalancerLoadSheddingStrategy=org.apache.pulsar.broker.loadbalance.impl.\\\n    AvgShedder\n"
    )
    conf = ShedderConfig.from_broker_conf(conf_file)
    assert conf.avg_shedder_low_threshold == 20 and conf.shedding_strategy_name == "AvgShedder"
    with pytest.raises(FileNotFoundError, match=r"broker\.conf not found"):
        ShedderConfig.from_broker_conf(tmp_path / "missing.conf")
    example = ShedderConfig.from_broker_conf(BROKER_CONF)
    assert sim.configured(example).name == "AvgShedder (configured)"
    assert example.max_unload_percentage == 0.5


# --- reports --------------------------------------------------------------------------------------


def test_the_shipped_example_reports_are_generated_and_round_trip(tmp_path):
    shipped = sorted(EXAMPLES.glob("*.json"))
    assert len(shipped) == 20
    generated = write_reports(record(sim.with_minutes(sim.heterogeneous(), 20), seed=0), tmp_path / "gen")
    assert [p.read_bytes() for p in generated] == [p.read_bytes() for p in shipped]
    again = write_reports(load_reports(EXAMPLES), tmp_path / "again")
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in shipped]
    first = load_report(shipped[0])
    assert first.timestamp == 1_700_000_000.0 and first.brokers["broker-2"].cpu == pytest.approx(50, abs=2)


def test_replay_without_shedding_reproduces_the_recorded_usage():
    snapshots = load_reports(EXAMPLES)
    result = replay(snapshots, AS_RECORDED)
    conf = ShedderConfig()
    for t, snap in enumerate(snapshots):
        for name, report in snap.brokers.items():
            assert result.usage[name][t] == pytest.approx(report.max_resource_usage_with_weight(conf) * 100)
    assert result.moves == 0


class _UnloadOnce(LoadSheddingStrategy):
    """Unloads one named bundle at the first cycle, to a named broker."""

    def __init__(self, bundle: str, source: str) -> None:
        self.bundle, self.source, self.done = bundle, source, False

    def find_bundles_for_unloading(self, cluster: ClusterLoad, conf: ShedderConfig) -> dict[str, list[str]]:
        if self.done:
            return {}
        self.done = True
        return {self.source: [self.bundle]}


class _To(LeastLongTermMessageRate):
    def __init__(self, target: str) -> None:
        super().__init__(0)
        self.target = target

    def select_broker(self, candidates, bundle, cluster, conf):
        return self.target


def test_a_move_shifts_every_later_snapshot_by_the_bundles_load():
    snapshots = load_reports(EXAMPLES)
    moved = snapshots[0].brokers["broker-2"].bundles[0]
    combo = sim.Combination("scripted", lambda s: (_UnloadOnce(moved, "broker-2"), _To("broker-1")))
    result = replay(snapshots, combo, config=sim.SimConfig(report_delay=0))
    assert result.moves == 1 and int(result.moved[1]) == 1
    for t in range(2, len(snapshots)):
        snap = snapshots[t]
        rate = snap.bundles[moved].msg_rate
        cost2 = snap.brokers["broker-2"].cpu / sum(
            snap.bundles[b].msg_rate for b in snap.brokers["broker-2"].bundles
        )
        cost1 = snap.brokers["broker-1"].cpu / sum(
            snap.bundles[b].msg_rate for b in snap.brokers["broker-1"].bundles
        )
        assert result.usage["broker-2"][t] == pytest.approx(snap.brokers["broker-2"].cpu - cost2 * rate)
        assert result.usage["broker-1"][t] == pytest.approx(snap.brokers["broker-1"].cpu + cost1 * rate)
        assert result.usage["broker-3"][t] == pytest.approx(snap.brokers["broker-3"].cpu)


def test_replay_ranks_the_strategies_as_the_simulator_does():
    snapshots = load_reports(EXAMPLES)
    ours = replay(snapshots, sim.combination("BalancedShedder"), converge_target=50.0)
    avg = replay(snapshots, sim.combination("AvgShedder"), converge_target=50.0)
    assert avg.moves == 0 and avg.converge_cycles is None  # its 10/70 pair has nothing to give
    assert ours.moves == 5 and ours.converge_cycles is not None and int(ours.oscillations.sum()) == 0
    assert ours.spread[-1] < avg.spread[-1] - 10


def test_bad_reports_raise_naming_the_file_and_field(tmp_path):
    (tmp_path / "a.json").write_text('{"timestamp": 1, "brokers": {"b": {"cpu": {"usage": -1, "limit": 4}}}}')
    (tmp_path / "b.json").write_text("{}")
    with pytest.raises(ValueError, match=r"a.json: brokers\['b'\].cpu must have usage and limit >= 0"):
        load_report(tmp_path / "a.json")
    with pytest.raises(ValueError, match=r"b.json: expected an object with 'brokers'"):
        load_report(tmp_path / "b.json")
    with pytest.raises(FileNotFoundError, match="--reports must be a directory"):
        load_reports(tmp_path / "nope")


# --- the CLI --------------------------------------------------------------------------------------


def test_cli_compare_with_your_broker_conf_and_reports(tmp_path, capsys):
    argv = ["shedding", "compare", "--broker-conf", str(BROKER_CONF), "--reports", str(EXAMPLES)]
    assert main([*argv, "--converge-target", "50"]) == 0
    text = capsys.readouterr().out
    assert "AvgShedder (configured)" in text and "BalancedShedder (ours)" in text
    out = tmp_path / "plots"
    assert main([*argv, "--strategy", "configured", "--out", str(out)]) == 0
    assert [p.name.split("__")[1] for p in out.glob("*.png")] == ["avgshedder-configured.png"]
    argv = ["shedding", "replay", "--reports", str(EXAMPLES), "--broker-conf", str(BROKER_CONF)]
    assert main([*argv, "--strategy", "configured"]) == 0
    assert "AvgShedder (configured)" in capsys.readouterr().out


def test_cli_record_and_bad_input_exit_2_with_one_line(tmp_path, capsys):
    assert (
        main(
            [
                "shedding",
                "record",
                "--scenario",
                "over-unloading",
                "--minutes",
                "3",
                "--out",
                str(tmp_path / "r"),
            ]
        )
        == 0
    )
    assert len(list((tmp_path / "r").glob("*.json"))) == 3
    bad = tmp_path / "bad.conf"
    bad.write_text("maxUnloadPercentage=lots\n")
    for argv, message in [
        (["shedding", "replay", "--reports", str(tmp_path / "nope")], "--reports must be a directory"),
        (
            ["shedding", "compare", "--broker-conf", str(bad)],
            "maxUnloadPercentage must be a number, got 'lots'",
        ),
        (
            ["shedding", "replay", "--reports", str(EXAMPLES), "--strategy", "configured"],
            "needs --broker-conf",
        ),
        (["shedding", "record", "--minutes", "1", "--out", str(tmp_path / "x")], "--minutes must be >= 2"),
    ]:
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err


# --- validation at the boundary -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: sim.BrokerSpec("b", capacity=math.nan), "broker 'b': capacity must be a finite number, got nan"),
        (lambda: sim.BrokerSpec("b", nic_bytes_per_second=math.inf), "broker 'b': nic_bytes_per_second must be a finite number, got inf"),
        (lambda: sim.BrokerSpec("b", background=math.nan), "broker 'b': background must be a finite number, got nan"),
        (lambda: sim.BundleSpec("x", math.inf), "bundle 'x': rate must be a finite number, got inf"),
        (lambda: sim.BundleSpec("x", 1.0, amplitude=math.nan), "bundle 'x': amplitude must be a finite number, got nan"),
        (lambda: BundleLoad(math.inf, 0, 0, 0), "bundle.msg_rate_in must be a finite rate >= 0, got inf"),
        (lambda: BundleLoad(1, 0, 0, 0, long_term_msg_rate_in=math.inf), "bundle.long_term_msg_rate_in must be a finite rate >= 0, got inf"),
        (lambda: cluster({"b": broker(True)}), "broker 'b': cpu must be a finite percentage >= 0, got True"),
        (lambda: cluster({"b": BrokerLoad(1, 0, 0, 0, 0, math.inf, 0, 0, 0)}), "broker 'b': msg_rate_in must be a finite rate >= 0, got inf"),
        (lambda: cluster({"b": broker(1)}, timestamp=math.nan), "timestamp must be a finite time in seconds, got nan"),
        (lambda: cluster({"b": broker(1)}, recently_unloaded={"x": math.nan}), "recently_unloaded['x'] must be a finite time in seconds, got nan"),
        (lambda: ShedderConfig(cpu_resource_weight=math.inf), "cpu_resource_weight must be a finite number, got inf"),
        (lambda: ShedderConfig(avg_shedder_hit_count_low_threshold=2.5), "avg_shedder_hit_count_low_threshold must be an int, got 2.5"),
        (lambda: ShedderConfig(transfer_enabled=1), "transfer_enabled must be a bool, got 1"),
    ],
)  # fmt: skip
def test_non_finite_and_bool_inputs_are_refused_where_they_enter(make, message):
    with pytest.raises(ValueError) as err:
        make()
    assert str(err.value) == message


def test_strategies_never_see_an_infinite_rate():
    # Before, +inf passed validation and crashed UniformLoadShedder (OverflowError) and BalancedShedder.
    with pytest.raises(ValueError, match="finite rate"):
        cluster(
            {"a": broker(50, math.inf, 0, ["x", "y"]), "b": broker(10, 100)}, {"x": bundle(1), "y": bundle(1)}
        )
    view = cluster(
        {"a": broker(90, 9000, 0, ["x", "y"]), "b": broker(10, 100)}, {"x": bundle(1000), "y": bundle(8000)}
    )
    assert UniformLoadShedder().find_bundles_for_unloading(view, ShedderConfig()) == {"a": ["x"]}
    assert set(BalancedShedder(high_hits=1).find_bundles_for_unloading(view, ShedderConfig())) == {"a"}
