"""Shedding strategies over every scenario: the PIP-364 table, measured, and ours against AvgShedder.

Baseline: AvgShedder (PIP-364) in the same run. Targets: ours_moves < avg_moves,
ours_converge_cycles <= avg_converge_cycles, ours_oscillations == 0. Totals sum the scenarios; a run
that never converged counts its whole horizon.

    .venv/bin/python benchmarks/shedding.py [--seed N] [--small] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console

from rebalancer.shedding.commands import print_comparison
from rebalancer.shedding.compare import plot_side_by_side, run_comparison, write_plots
from rebalancer.shedding.sim import COMBINATIONS, all_scenarios

AVG = "AvgShedder"
OURS = next(c.name for c in COMBINATIONS if c.ours)


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
    print(
        f"RESULT avg_moves={avg['moves']} ours_moves={ours['moves']} "
        f"avg_converge_cycles={avg['converge_cycles']} ours_converge_cycles={ours['converge_cycles']} "
        f"ours_oscillations={ours['oscillations']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
