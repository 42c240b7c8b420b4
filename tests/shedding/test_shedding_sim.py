"""The simulator: determinism, the world model, metrics, and the CLI."""

from __future__ import annotations

import numpy as np
import pytest

from rebalancer.cli import main
from rebalancer.shedding import sim
from rebalancer.shedding.compare import rate, run_comparison


def _combo(name: str) -> sim.Combination:
    return sim.combination(name)


def test_seeded_runs_are_reproducible():
    sc = sim.cold_start()
    for name in ("ThresholdShedder", "AvgShedder", "UniformLoadShedder", "BalancedShedder"):
        a = sim.simulate(sc, _combo(name), seed=11)
        b = sim.simulate(sc, _combo(name), seed=11)
        assert a.summary() == b.summary()
        for broker in a.usage:
            np.testing.assert_array_equal(a.usage[broker], b.usage[broker])
    c = sim.simulate(sc, _combo("AvgShedder"), seed=12)
    assert not np.array_equal(np.nan_to_num(c.usage["broker-1"]), np.nan_to_num(a.usage["broker-1"]))


def test_usage_follows_capacity_and_the_other_process():
    result = sim.simulate(sim.heterogeneous(), _combo("OverloadShedder"), seed=0)
    # broker-1: 20k msg/s on a 200k machine = 10%; broker-2: 50k on 100k = 50%; broker-3: 70% background.
    assert result.usage["broker-1"][0] == pytest.approx(10, abs=1.5)
    assert result.usage["broker-2"][0] == pytest.approx(50, abs=3)
    assert result.usage["broker-3"][0] == pytest.approx(70)


def test_spike_series_and_membership_changes():
    series = sim.load_series(sim.jitter(), np.random.default_rng(0))
    spiking = series[0]
    assert spiking[5:8].min() > 5 * spiking[:5].max(), "minutes 5..7 spike 7x"
    assert spiking[8:20].max() < 2 * 5_000
    result = sim.simulate(sim.cold_start(), _combo("AvgShedder"), seed=3)
    assert np.isnan(result.usage["broker-4"][30:]).all(), "broker-4 left at minute 30"
    assert np.isnan(result.usage["broker-5"][:45]).all() and not np.isnan(result.usage["broker-5"][45:]).any()
    assert result.failover_placements > 0


def test_metrics_catch_the_pip_problems():
    over_unload = sim.simulate(sim.over_unloading(), _combo("ThresholdShedder"), seed=0)
    assert over_unload.over_unloading.sum() >= 1, "the EMA keeps unloading a broker already at the average"
    assert over_unload.oscillations.sum() >= 1, "after the grace period the load swings back"
    hetero = sim.simulate(sim.heterogeneous(), _combo("UniformLoadShedder"), seed=0)
    assert rate("heterogeneous", hetero) == "bad", "msg-rate placement fills the shared host past 85%"
    avg = sim.simulate(sim.heterogeneous(), _combo("AvgShedder"), seed=0)
    assert avg.moves == 0 and avg.converge_cycles is None, "the 10/70 pair has nothing to give: stuck"
    slow = sim.simulate(sim.slow_balancing(20, 20), _combo("UniformLoadShedder"), seed=0)
    assert rate("slow balancing", slow) == "bad"
    fast = sim.simulate(sim.slow_balancing(20, 20), _combo("AvgShedder"), seed=0)
    assert rate("slow balancing", fast) == "good"


def test_ours_never_oscillates_and_beats_avg_shedder_on_the_small_suite():
    comparison = run_comparison(
        sim.all_scenarios(small=True), [_combo("AvgShedder"), _combo("BalancedShedder")], seed=0
    )
    ours, avg = comparison.totals("BalancedShedder (ours)"), comparison.totals("AvgShedder")
    assert ours["oscillations"] == 0
    assert ours["moves"] < avg["moves"]
    assert ours["converge_cycles"] <= avg["converge_cycles"]
    for sc in comparison.scenarios:
        assert comparison.result(sc.name, "BalancedShedder (ours)").over_placement.sum() == 0


def test_bad_scenarios_raise():
    with pytest.raises(ValueError, match=r"unknown scenario 'nope'"):
        sim.scenario("nope")
    with pytest.raises(ValueError, match=r"unknown strategy 'Nope'"):
        sim.combination("Nope")
    with pytest.raises(ValueError, match=r"broker 'x': capacity must be > 0, got 0"):
        sim.BrokerSpec("x", capacity=0)
    with pytest.raises(ValueError, match=r"pattern must be one of"):
        sim.BundleSpec("b", 1.0, pattern="sawtooth")


def test_cli_bad_flags_exit_2_with_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["shedding", "compare", "--bogus"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unrecognized arguments: --bogus" in err
    with pytest.raises(SystemExit) as exc:
        main(["shedding", "simulate", "--interval", "0"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert main(["shedding", "simulate", "--scenario", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown scenario 'nope'" in err


def test_cli_simulate_and_compare_write_plots(tmp_path, capsys):
    plot = tmp_path / "one.png"
    assert (
        main(
            [
                "shedding",
                "simulate",
                "--scenario",
                "over-unloading",
                "--strategy",
                "AvgShedder",
                "--seed",
                "1",
                "--plot",
                str(plot),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "moves" in out and plot.stat().st_size > 1000
    out_dir = tmp_path / "plots"
    assert (
        main(
            [
                "shedding",
                "compare",
                "--scenario",
                "over-unloading",
                "--strategy",
                "AvgShedder",
                "--strategy",
                "BalancedShedder",
                "--out",
                str(out_dir),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "PIP-364 table" in out and "BalancedShedder (ours)" in out
    assert sorted(p.name for p in out_dir.iterdir()) == [
        "over-unloading__avgshedder.png",
        "over-unloading__balancedshedder-ours.png",
    ]
