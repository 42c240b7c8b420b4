"""Shedding strategies over every scenario: the PIP-364 table, measured, and ours against AvgShedder.

Baseline: AvgShedder (PIP-364) in the same run. Targets: ours_moves < avg_moves,
ours_converge_cycles <= avg_converge_cycles, ours_oscillations == 0. Totals sum the scenarios; a run
that never converged counts its whole horizon.

Also: replay_ok=1 when the shipped example load reports (examples/shedding-reports) round-trip
byte for byte, replay without shedding reproduces their recorded usage, and every strategy replays
them; capacity_excess_pct is the worst excess of plan_rebalance(capacity=...) over the generalised
lower bound on heterogeneous Zipf inputs (1,000 items on 16 workers, capacities 0.5-2, 20 seeds),
target <= 1.0.

    .venv/bin/python benchmarks/shedding.py [--seed N] [--small] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console

from rebalancer.balance import lower_bound, plan_rebalance
from rebalancer.shedding.commands import print_comparison
from rebalancer.shedding.compare import plot_side_by_side, run_comparison, write_plots
from rebalancer.shedding.model import ShedderConfig
from rebalancer.shedding.reports import AS_RECORDED, load_reports, replay, write_reports
from rebalancer.shedding.sim import COMBINATIONS, all_scenarios

AVG = "AvgShedder"
OURS = next(c.name for c in COMBINATIONS if c.ours)
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "shedding-reports"


def replay_ok() -> int:
    """1 if the example reports round-trip, replay faithfully without shedding, and replay for all."""
    shipped = sorted(EXAMPLES.glob("*.json"))
    snapshots = load_reports(EXAMPLES)
    with tempfile.TemporaryDirectory() as tmp:
        written = write_reports(snapshots, tmp)
        if [p.read_bytes() for p in written] != [p.read_bytes() for p in shipped]:
            return 0
    still = replay(snapshots, AS_RECORDED)
    conf = ShedderConfig()
    for t, snap in enumerate(snapshots):
        for name, report in snap.brokers.items():
            if abs(still.usage[name][t] - report.max_resource_usage_with_weight(conf) * 100) > 1e-9:
                return 0
    results = [replay(snapshots, combo) for combo in COMBINATIONS]
    return int(all(len(r.spread) == len(snapshots) for r in results))


def capacity_excess_pct(seeds: int = 20, items: int = 1000, workers: int = 16) -> float:
    """Worst % by which the heterogeneous planner's max finish time exceeds the generalised bound."""
    worst = 0.0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        weights = 1.0 / np.arange(1, items + 1) ** rng.uniform(0.6, 1.2)
        throughput = rng.multinomial(10_000_000, weights / weights.sum())
        rng.shuffle(throughput)
        capacity = rng.uniform(0.5, 2.0, workers)
        plan = plan_rebalance(
            throughput, np.arange(items) % workers, workers, capacity=capacity, skip_ratio=1.0
        )
        finish = max(load / c for load, c in zip(plan.load_after, capacity, strict=True))
        worst = max(worst, 100.0 * (finish / lower_bound(throughput, workers, capacity=capacity) - 1.0))
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--small", action="store_true", help="slow balancing with 20+20 brokers")
    parser.add_argument("--out", type=Path, default=None, help="also write every usage plot here")
    parser.add_argument("--readme-plot", type=Path, default=None, help="write the docs figure here")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    comparison = run_comparison(all_scenarios(small=args.small), COMBINATIONS, seed=args.seed)
    elapsed = time.perf_counter() - started
    print_comparison(comparison, Console(width=250))
    if args.out is not None:
        write_plots(comparison, args.out)
    if args.readme_plot is not None:
        results = [
            comparison.result("over-placement", name)
            for name in ("ThresholdShedder+LeastResourceUsageWithWeight", AVG, OURS)
        ]
        plot_side_by_side(results, args.readme_plot)
    avg, ours = comparison.totals(AVG), comparison.totals(OURS)
    print(f"simulated {len(comparison.results)} runs in {elapsed:.1f}s (seed {args.seed})")
    ok, excess = replay_ok(), capacity_excess_pct()
    print(
        f"RESULT avg_moves={avg['moves']} ours_moves={ours['moves']} "
        f"avg_converge_cycles={avg['converge_cycles']} ours_converge_cycles={ours['converge_cycles']} "
        f"ours_oscillations={ours['oscillations']} replay_ok={ok} capacity_excess_pct={excess:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
