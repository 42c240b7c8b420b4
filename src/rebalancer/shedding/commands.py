"""``rebalancer shedding simulate`` and ``rebalancer shedding compare``."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rebalancer.shedding.compare import (
    PIP_COLUMNS,
    Comparison,
    plot_result,
    run_comparison,
    slug,
    write_plots,
)
from rebalancer.shedding.sim import (
    COMBINATIONS,
    SimConfig,
    all_scenarios,
    combination,
    scenario,
    simulate,
    with_minutes,
)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=_non_negative, default=0, help="random seed (runs are reproducible)")
    p.add_argument(
        "--report-delay", type=_non_negative, default=1, help="minutes the leader's load data lags"
    )
    p.add_argument("--interval", type=_positive, default=1, help="shedding interval in simulated minutes")
    p.add_argument(
        "--small", action="store_true", help="slow balancing with 20+20 brokers instead of 100+100"
    )


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="shedding_command", metavar="COMMAND", parser_class=type(parser))
    sub.required = True

    sim = sub.add_parser("simulate", help="run one scenario with one strategy")
    sim.add_argument("--scenario", default="over-placement", help="scenario name (see compare)")
    sim.add_argument(
        "--strategy", default="AvgShedder", help="combination name, e.g. AvgShedder, BalancedShedder"
    )
    sim.add_argument("--minutes", type=_positive, default=None, help="override the scenario's length")
    sim.add_argument("--plot", type=Path, default=None, help="write the usage plot to this PNG")
    _common(sim)
    sim.set_defaults(func=simulate_command)

    cmp = sub.add_parser("compare", help="every strategy on every scenario: the PIP-364 table, measured")
    cmp.add_argument("--scenario", action="append", default=None, help="only these scenarios (repeatable)")
    cmp.add_argument("--strategy", action="append", default=None, help="only these strategies (repeatable)")
    cmp.add_argument("--out", type=Path, default=None, help="directory for one PNG per scenario x strategy")
    _common(cmp)
    cmp.set_defaults(func=compare_command)


def _config(args: argparse.Namespace) -> SimConfig:
    return SimConfig(report_delay=args.report_delay, interval=args.interval)


def simulate_command(args: argparse.Namespace) -> int:
    sc = scenario(args.scenario, small=args.small)
    if args.minutes is not None:
        sc = with_minutes(sc, args.minutes)
    combo = combination(args.strategy)
    result = simulate(sc, combo, seed=args.seed, config=_config(args))
    table = Table(title=f"{sc.title} — {combo.name} (seed {args.seed})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in result.summary().items():
        table.add_row(key, "never" if value is None else str(value))
    console = Console(width=120)
    console.print(table)
    if args.plot is not None:
        path = plot_result(result, args.plot, combo.conf.broker_overloaded_threshold_percentage)
        console.print(f"plot: {path}")
    return 0


def print_comparison(comparison: Comparison, console: Console) -> None:
    pip = Table(title="PIP-364 table, measured (rating: numbers)", show_lines=True)
    pip.add_column("combination", min_width=45)
    for column in PIP_COLUMNS:
        pip.add_column(column)
    for row in comparison.pip_rows():
        pip.add_row(*row)
    console.print(pip)

    detail = Table(title="every scenario (moves, cycles to converge, final spread, events)")
    for name in (
        "scenario",
        "combination",
        "moves",
        "converge",
        "spread",
        "osc",
        "over-pl",
        "over-unl",
        "ovl-min",
    ):
        detail.add_column(name, justify="left" if name in ("scenario", "combination") else "right")
    for row in comparison.detail_rows():
        detail.add_row(*row)
    console.print(detail)

    totals = Table(title="totals over the scenarios (never-converged runs count the whole horizon)")
    for name in ("combination", "moves", "converge cycles", "oscillations"):
        totals.add_column(name, justify="left" if name == "combination" else "right")
    for combo in comparison.combos:
        t = comparison.totals(combo.name)
        totals.add_row(combo.name, str(t["moves"]), str(t["converge_cycles"]), str(t["oscillations"]))
    console.print(totals)


def compare_command(args: argparse.Namespace) -> int:
    scenarios = all_scenarios(small=args.small)
    if args.scenario:
        scenarios = [scenario(name, small=args.small) for name in args.scenario]
    combos = list(COMBINATIONS)
    if args.strategy:
        combos = [combination(name) for name in args.strategy]
    comparison = run_comparison(scenarios, combos, seed=args.seed, config=_config(args))
    console = Console(width=250)
    print_comparison(comparison, console)
    if args.out is not None:
        if args.out.exists() and not args.out.is_dir():
            raise ValueError(f"--out must be a directory, got file {str(args.out)!r}")
        paths = write_plots(comparison, args.out)
        console.print(f"wrote {len(paths)} plots to {args.out}/ (e.g. {slug(scenarios[0].name)}__*.png)")
    return 0
