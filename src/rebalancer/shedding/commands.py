"""``rebalancer shedding simulate|compare|replay|record|watch``.

rich (the 'cli' extra) loads when a command runs: `--help` works without it.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from rebalancer._args import finite_float, integer, local_path
from rebalancer._secrets import masked_url
from rebalancer.shedding.compare import (
    PIP_COLUMNS,
    Comparison,
    plot_result,
    run_comparison,
    write_plots,
)
from rebalancer.shedding.model import ShedderConfig
from rebalancer.shedding.reports import load_reports, record, replay, write_reports
from rebalancer.shedding.sim import (
    COMBINATIONS,
    Combination,
    Scenario,
    SimConfig,
    all_scenarios,
    combination,
    configured,
    scenario,
    simulate,
    with_minutes,
)

if TYPE_CHECKING:
    from rich.console import Console

    from rebalancer.shedding.live import Cycle

_positive = integer(minimum=1)
_non_negative = integer(minimum=0)
_positive_float = finite_float(minimum=0, exclusive=True)
_seconds = finite_float(minimum=0, exclusive=True, maximum=86_400)
# The admin token, when no --token-file names one (a command line is visible to every user of the host).
TOKEN_ENV = "REBALANCER_PULSAR_TOKEN"


def _replay_inputs(p: argparse.ArgumentParser, required: bool) -> None:
    """--reports, --converge-target and --broker-conf: your load and your settings."""
    p.add_argument(
        "--reports",
        type=local_path,
        required=required,
        default=None,
        help="a directory of load-report snapshots (JSON), replayed instead of the synthetic scenarios",
    )
    p.add_argument(
        "--converge-target", type=_positive_float, default=10.0, help="with --reports: max-min usage spread"
    )
    p.add_argument(
        "--broker-conf",
        type=local_path,
        default=None,
        help="your Pulsar broker.conf: every strategy runs with its loadBalancer* settings, and the "
        "pair it configures is added as '(configured)'",
    )


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=_non_negative, default=0, help="random seed; runs are reproducible")
    p.add_argument(
        "--report-delay", type=_non_negative, default=1, help="minutes the leader's load data lags"
    )
    p.add_argument("--interval", type=_positive, default=1, help="shedding interval in simulated minutes")
    p.add_argument(
        "--small", action="store_true", help="slow balancing with 20+20 brokers instead of 100+100"
    )


# --help lists the valid names; a strategy is also accepted as its full pair (A+B) or full name.
_STRATEGY_NAMES = ", ".join(c.name.split(" ")[0].split("+")[0] for c in COMBINATIONS)


def register(parser: argparse.ArgumentParser) -> None:
    scenario_names = ", ".join(s.name for s in all_scenarios(small=True))
    sub = parser.add_subparsers(dest="shedding_command", metavar="COMMAND", parser_class=type(parser))
    sub.required = True

    sim = sub.add_parser(
        "simulate",
        help="run one scenario with one strategy",
        description="Simulate a broker cluster minute by minute under one scenario (listed under "
        "--scenario) with one shedding strategy and its placement strategy, and print what it did: "
        "bundles moved, cycles until the load converged, the final spread between brokers, "
        "oscillations and over-placement. --plot writes broker usage over time (needs the 'plots' "
        "extra).",
    )
    sim.add_argument("--scenario", default="over-placement", help=f"scenario: {scenario_names}")
    sim.add_argument("--strategy", default="AvgShedder", help=f"strategy: {_STRATEGY_NAMES}")
    sim.add_argument("--minutes", type=_positive, default=None, help="override the scenario's length")
    sim.add_argument("--plot", type=local_path, default=None, help="write the usage plot to this PNG")
    _common(sim)
    sim.set_defaults(func=simulate_command)

    cmp = sub.add_parser(
        "compare",
        help="every strategy on every scenario: the PIP-364 table, measured",
        description="Run every strategy on every scenario with the same seed and print the table of "
        "Pulsar's PIP-364 (which strategy handles heterogeneous brokers, jitter, over-placement, "
        "over-unloading and slow balancing), measured instead of rated, then every scenario's numbers "
        "and the totals. --out writes one plot per scenario and strategy (needs the 'plots' extra).",
    )
    cmp.add_argument(
        "--scenario", action="append", default=None, help=f"only these scenarios (repeatable): {scenario_names}"
    )
    cmp.add_argument(
        "--strategy",
        action="append",
        default=None,
        help=f"only these strategies (repeatable): {_STRATEGY_NAMES}; 'configured' with --broker-conf",
    )
    cmp.add_argument("--out", type=local_path, default=None, help="directory for one PNG per scenario x strategy")
    _replay_inputs(cmp, required=False)
    _common(cmp)
    cmp.set_defaults(func=compare_command)

    rep = sub.add_parser(
        "replay",
        help="one strategy over your load reports (a directory of JSON snapshots)",
        description="Replay recorded load reports (one JSON file per snapshot: each broker's "
        "LocalBrokerData and each bundle's BundleData, as Pulsar stores them) through one strategy: "
        "its decisions move bundles in every later snapshot. Prints the simulator's metrics.",
    )
    rep.add_argument(
        "--strategy", default="AvgShedder", help=f"strategy: {_STRATEGY_NAMES}, or 'configured'"
    )
    rep.add_argument("--plot", type=local_path, default=None, help="write the usage plot to this PNG")
    _replay_inputs(rep, required=True)
    _common(rep)
    rep.set_defaults(func=replay_command)

    rec = sub.add_parser(
        "record",
        help="write a scenario's per-minute load reports, without shedding",
        description="Write a synthetic scenario's per-minute load reports in Pulsar's shapes, with no "
        "load manager acting: example input for `replay` and `compare --reports`.",
    )
    rec.add_argument("--scenario", default="heterogeneous", help=f"scenario: {scenario_names}")
    rec.add_argument("--minutes", type=_positive, default=20, help="snapshots to write, at least 2")
    rec.add_argument("--seed", type=_non_negative, default=0, help="random seed; runs are reproducible")
    rec.add_argument("--out", type=local_path, required=True, help="directory for the snapshot JSON files")
    rec.set_defaults(func=record_command)

    _register_watch(sub)


def _register_watch(sub: argparse._SubParsersAction) -> None:
    watch = sub.add_parser(
        "watch",
        help="watch a running Pulsar cluster: what each strategy would unload, cycle by cycle",
        description="Poll a running Apache Pulsar cluster (brokers on the modular load manager) through its "
        "admin REST API every --interval seconds: the brokers, each broker's load report and its bundles' "
        "rates. Each strategy decides on every cycle, keeping its state from cycle to cycle as on a leader "
        "broker, and each cycle prints what it would unload (bundle: from -> to). --record keeps every "
        "snapshot for `shedding replay` and `shedding compare --reports`. --apply carries out one strategy's "
        "unloads, on a cluster whose own shedding is off (loadBalancerSheddingEnabled=false). Ctrl-C ends "
        "the watch; the recording stays readable. The admin token is read from --token-file, else from $"
        + TOKEN_ENV + ".\n\n"
        "examples:\n"
        "  rebalancer shedding watch --admin-url http://broker-1:8080 --interval 60 --record history/\n"
        "  rebalancer shedding replay --reports history/ --strategy BalancedShedder\n"
        "  rebalancer shedding watch --admin-url http://broker-1:8080 --apply BalancedShedder",
    )
    watch.add_argument("--admin-url", required=True, help="a broker's admin URL, e.g. http://broker-1:8080")
    watch.add_argument(
        "--strategy", default="AvgShedder,BalancedShedder", help=f"comma-separated strategies: {_STRATEGY_NAMES}"
    )
    watch.add_argument("--interval", type=_seconds, default=60.0, help="seconds from one cycle to the next")
    watch.add_argument("--cycles", type=_positive, default=None, help="stop after this many cycles (default: Ctrl-C)")
    watch.add_argument(
        "--record", type=local_path, default=None, help="directory for one snapshot (JSON) per cycle"
    )
    watch.add_argument(
        "--apply",
        default=None,
        metavar="STRATEGY",
        help="unload this strategy's bundles to the brokers it planned (refused while the cluster sheds by itself)",
    )
    watch.add_argument("--cluster", default=None, help="the cluster's name (default: the one the admin API lists)")
    settings = watch.add_mutually_exclusive_group()
    settings.add_argument(
        "--broker-conf", type=local_path, default=None, metavar="FILE", help="run every strategy with this broker.conf's settings"
    )
    settings.add_argument(
        "--cluster-settings",
        action="store_true",
        help="run every strategy with the cluster's own loadBalancer* settings (its runtime configuration)",
    )
    watch.add_argument(
        "--bandwidth-from-throughput",
        action="store_true",
        help="take each broker's own throughput as its bandwidth usage: for brokers that share one host, "
        "whose CPU and NIC readings are the host's",
    )
    watch.add_argument("--token-file", type=local_path, default=None, help="a file holding the admin token")
    watch.add_argument("--tls-ca", type=local_path, default=None, help="CA certificates to verify the brokers with")
    watch.add_argument("--tls-cert", type=local_path, default=None, help="client certificate (mutual TLS)")
    watch.add_argument("--tls-key", type=local_path, default=None, help="the client certificate's key")
    watch.add_argument("--tls-insecure", action="store_true", help="do not verify the brokers' certificates")
    watch.add_argument(
        "--timeout", type=_seconds, default=10.0, help="seconds to wait for one admin API answer"
    )
    watch.add_argument("--seed", type=_non_negative, default=0, help="random seed of the placements")
    watch.set_defaults(func=watch_command)


def _config(args: argparse.Namespace) -> SimConfig:
    return SimConfig(report_delay=args.report_delay, interval=args.interval)


def _check_plot(plot: Path | None) -> None:
    """Before the simulation: matplotlib would write DIR.png for a directory, not what was asked."""
    if plot is not None and plot.is_dir():
        raise ValueError(f"--plot must be a PNG file to write, got the directory {str(plot)!r}")


def simulate_command(args: argparse.Namespace) -> int:
    _check_plot(args.plot)
    sc = scenario(args.scenario, small=args.small)
    if args.minutes is not None:
        sc = with_minutes(sc, args.minutes)
    combo = combination(args.strategy)
    result = simulate(sc, combo, seed=args.seed, config=_config(args))
    from rebalancer._console import console as make_console
    from rebalancer._console import print_wrapped

    console = make_console()
    _print_summary(console, result.summary(), f"{sc.title} — {combo.name} (seed {args.seed})", "minutes")
    if args.plot is not None:
        path = plot_result(result, args.plot, combo.conf.broker_overloaded_threshold_percentage)
        print_wrapped(console, f"plot: {path}")
    return 0


def metric_labels(step: str = "minutes") -> dict[str, str]:
    """SimResult.summary()'s keys as people read them, each with its unit; `step` is what one
    simulated step is (a minute, or a recorded snapshot in a replay)."""
    return {
        "moves": "moved (bundles)",
        "unloaded": "unloaded (bundles)",
        "oscillations": "oscillations (moves back)",
        "over_placement": "over-placement (brokers)",
        "over_unloading": "over-unloading (brokers)",
        "overloaded_minutes": f"overloaded (broker-{step})",
        "final_spread": "final spread (% points)",
        "converge_cycles": "converged after (cycles)",
        "stale_skips": "stale decisions skipped (bundles)",
        "failover_placements": "failover placements (bundles)",
    }


def _print_summary(console: Console, summary: dict, title: str, step: str) -> None:
    from rebalancer._console import print_table

    labels = metric_labels(step)
    rows = [[labels.get(key, key), "never" if value is None else str(value)] for key, value in summary.items()]
    print_table(console, title, ["metric", "value"], rows, right=["value"])


def short_name(name: str) -> str:
    """A combination's name as a narrow table's column: its shedder without `Shedder` (or
    `LoadShedder`), and its note: `ThresholdShedder+LeastResourceUsageWithWeight` is `Threshold`,
    `BalancedShedder (ours)` is `Balanced (ours)`."""
    head, _, note = name.partition(" ")
    shedder = head.split("+")[0]
    for suffix in ("LoadShedder", "Shedder"):
        if shedder.endswith(suffix) and len(shedder) > len(suffix):
            shedder = shedder.removesuffix(suffix)
            break
    return f"{shedder} {note}".strip()


# SimResult.summary()'s keys in "every scenario", in its columns' order (Comparison.detail_rows').
DETAIL_KEYS = ("moves", "converge_cycles", "final_spread", "oscillations", "over_placement", "over_unloading",
               "overloaded_minutes")


def print_comparison(comparison: Comparison, console: Console, pip: bool = True) -> None:
    """The PIP-364 table, every scenario's numbers and the totals, each side by side where the
    terminal is wide enough (about 170 columns for the first). Where it is not, the strategies go
    across by short names (a legend first): the PIP-364 table with its ratings, and one table per
    metric with a row per scenario, which fit 80 columns; a table that still does not fit is
    printed vertically."""
    from rebalancer._console import build_table, fits, print_table, print_wrapped

    names = [combo.name for combo in comparison.combos]
    short = [short_name(name) for name in names]
    if len(set(short)) < len(short):  # two pairs of one shedder: only their full names tell them apart
        short = names
    labels = metric_labels()
    pip_title = "PIP-364 table, measured (rating and the numbers it rests on)"
    pip_wide = build_table(["combination", *PIP_COLUMNS], comparison.pip_rows(), wrap=PIP_COLUMNS, show_lines=True)
    detail_headers = ["scenario", "combination", *(labels[k] for k in DETAIL_KEYS)]
    detail_wide = build_table(detail_headers, comparison.detail_rows(), right=detail_headers[2:])
    if (pip and not fits(console, pip_wide)) or not fits(console, detail_wide):
        print_wrapped(console, "strategies (by short name in the narrow tables below):", style="bold")
        width = max(len(name) for name in short)
        for brief, name in zip(short, names):
            print_wrapped(console, f"{brief:<{width}}  {name}", indent="  ", hang=" " * (width + 4))
    if pip and fits(console, pip_wide):
        print_table(console, pip_title, ["combination", *PIP_COLUMNS], comparison.pip_rows(), wrap=PIP_COLUMNS,
                    show_lines=True)  # fmt: skip
    elif pip:
        ratings = comparison.pip_rows(numbers=False)
        rows = [[column, *(row[1 + i] for row in ratings)] for i, column in enumerate(PIP_COLUMNS)]
        print_table(console, "PIP-364 table, measured: the ratings (the numbers they rest on follow)",
                    ["column", *short], rows, compact=True)  # fmt: skip
    if fits(console, detail_wide):
        print_table(console, "every scenario", detail_headers, comparison.detail_rows(), right=detail_headers[2:],
                    keys=2)  # fmt: skip
    else:
        cells = {(row[0], row[1]): row[2:] for row in comparison.detail_rows()}
        for i, key in enumerate(DETAIL_KEYS):
            rows = [[sc.name, *(cells[(sc.name, name)][i] for name in names)] for sc in comparison.scenarios]
            print_table(console, labels[key], ["scenario", *short], rows, right=short, compact=True)
    headers = ["combination", "moved (bundles)", "cycles to converge", "oscillations (moves back)"]
    rows = []
    for combo in comparison.combos:
        t = comparison.totals(combo.name)
        rows.append([combo.name, str(t["moves"]), str(t["converge_cycles"]), str(t["oscillations"])])
    if not fits(console, build_table(headers, rows, right=headers[1:])):
        rows = [[brief, *row[1:]] for brief, row in zip(short, rows)]
    print_table(
        console,
        "totals over the scenarios (a run that never converged counts the whole horizon)",
        headers,
        rows,
        right=headers[1:],
    )


def _combos(args: argparse.Namespace, names: list[str] | None) -> list[Combination]:
    """The chosen combinations; with --broker-conf all run with its settings, plus the configured pair."""
    conf = ShedderConfig.from_broker_conf(args.broker_conf) if args.broker_conf is not None else None
    chosen = []
    for name in names or [c.name for c in COMBINATIONS]:
        if name == "configured":
            if conf is None:
                raise ValueError("--strategy configured needs --broker-conf")
            chosen.append(configured(conf))
        else:
            chosen.append(combination(name) if conf is None else replace(combination(name), conf=conf))
    if conf is not None and names is None:
        chosen.append(configured(conf))
    return chosen


def compare_command(args: argparse.Namespace) -> int:
    from rebalancer._console import console as make_console
    from rebalancer._console import print_wrapped

    combos = _combos(args, args.strategy)
    console = make_console()
    if args.reports is not None:
        snapshots = load_reports(args.reports)
        name = f"reports in {args.reports}"
        sc = Scenario(name, name, (), (), None, len(snapshots), args.converge_target)
        config = _config(args)
        print_wrapped(console, f"replaying {len(snapshots)} snapshots through {_count(combos, 'strategy')}...")
        results = {
            (name, c.name): replay(snapshots, c, args.seed, config, args.converge_target, name)
            for c in combos
        }
        comparison = Comparison([sc], combos, results, config)
        print_comparison(comparison, console, pip=False)
        return _write_plots(comparison, args, console)
    scenarios = all_scenarios(small=args.small)
    if args.scenario:
        scenarios = [scenario(name, small=args.small) for name in args.scenario]
    print_wrapped(
        console, f"simulating {_count(combos, 'strategy')} on {_count(scenarios, 'scenario')} (seed {args.seed})..."
    )
    comparison = run_comparison(scenarios, combos, seed=args.seed, config=_config(args))
    print_comparison(comparison, console)
    return _write_plots(comparison, args, console)


def _count(items: Sequence[object], noun: str) -> str:
    """`1 strategy`, `6 strategies`, `5 scenarios`."""
    plural = noun[:-1] + "ies" if noun.endswith("y") else noun + "s"
    return f"{len(items)} {noun if len(items) == 1 else plural}"


def _write_plots(comparison: Comparison, args: argparse.Namespace, console: Console) -> int:
    from rebalancer._console import print_wrapped

    if args.out is not None:
        if args.out.exists() and not args.out.is_dir():
            raise ValueError(f"--out must be a directory, got file {str(args.out)!r}")
        paths = write_plots(comparison, args.out)
        print_wrapped(console, f"wrote {len(paths)} plots to {args.out}/ (e.g. {paths[0].name})")
    return 0


def replay_command(args: argparse.Namespace) -> int:
    _check_plot(args.plot)
    (combo,) = _combos(args, [args.strategy])
    snapshots = load_reports(args.reports)
    result = replay(snapshots, combo, args.seed, _config(args), args.converge_target, "reports")
    from rebalancer._console import console as make_console
    from rebalancer._console import print_wrapped

    console = make_console()
    title = f"{len(snapshots)} snapshots in {args.reports} — {combo.name}"
    _print_summary(console, result.summary(), title, "snapshots")
    if args.plot is not None:
        path = plot_result(result, args.plot, combo.conf.broker_overloaded_threshold_percentage)
        print_wrapped(console, f"plot: {path}")
    return 0


def record_command(args: argparse.Namespace) -> int:
    if args.minutes < 2:
        raise ValueError(f"--minutes must be >= 2 (a replay needs two snapshots), got {args.minutes}")
    sc = with_minutes(scenario(args.scenario), args.minutes)
    paths = write_reports(record(sc, seed=args.seed), args.out)
    from rebalancer._console import console as make_console
    from rebalancer._console import print_wrapped

    print_wrapped(make_console(), f"wrote {len(paths)} snapshots of {sc.name!r} to {args.out}/")
    return 0


def _admin_token(path: Path | None) -> str | None:
    """The token from --token-file (its first line), else from $REBALANCER_PULSAR_TOKEN; never shown."""
    if path is None:
        token = os.environ.get(TOKEN_ENV, "").strip()
        return token or None
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ValueError(f"--token-file {str(path)!r}: cannot read: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise ValueError(f"--token-file {str(path)!r}: not UTF-8 text") from None
    token = text.strip()
    if not token or "\n" in token:
        raise ValueError(f"--token-file {str(path)!r} must hold the token on one line")
    return token


def watch_command(args: argparse.Namespace) -> int:
    from rebalancer._console import console as make_console
    from rebalancer._console import print_wrapped
    from rebalancer.shedding.live import CLUSTER_SETTINGS, AdminOptions, SheddingWatch

    options = AdminOptions(
        token=_admin_token(args.token_file),
        ca_file=args.tls_ca,
        cert_file=args.tls_cert,
        key_file=args.tls_key,
        verify=not args.tls_insecure,
        timeout_s=args.timeout,
    )
    config: ShedderConfig | str | None = None
    if args.broker_conf is not None:
        config = ShedderConfig.from_broker_conf(args.broker_conf)
    elif args.cluster_settings:
        config = CLUSTER_SETTINGS
    watch = SheddingWatch(
        args.admin_url, args.strategy, config, interval_s=args.interval, record=args.record, apply=args.apply,
        cluster=args.cluster, admin=options, seed=args.seed, bandwidth_from_throughput=args.bandwidth_from_throughput,
    )
    console = make_console()
    cycles = 0
    try:
        cluster = watch.connect()
        what = f"applying {watch.apply}" if watch.apply else "watching only"
        record = f", recording to {args.record}/" if args.record is not None else ""
        print_wrapped(
            console,
            f"cluster {cluster!r} at {masked_url(args.admin_url)}: every {args.interval:g} s, "
            f"{', '.join(watch.strategies)}; {what}{record}",
            hang="  ",
        )
        for cycle in watch.run(args.cycles):
            cycles += 1  # polled and recorded, printed or not
            print_cycle(console, cycle)
    except KeyboardInterrupt:
        recorded = f"; the recording in {args.record}/ is complete" if args.record is not None else ""
        print(f"rebalancer: interrupted after {cycles} cycle{'s' * (cycles != 1)}{recorded}", file=sys.stderr)
        return 130
    finally:
        watch.close()
    return 0


def print_cycle(console: Console, cycle: Cycle) -> None:
    """One cycle in lines that fit the console: the cluster, each strategy's moves, what was applied."""
    from rebalancer._console import print_items, print_wrapped

    when = time.strftime("%H:%M:%S", time.localtime(cycle.timestamp))
    head = f"cycle {cycle.index + 1} at {when}"
    if cycle.snapshot is None:
        print_wrapped(console, f"{head}: no broker's load report could be read", hang="  ")
        return
    print_wrapped(
        console,
        f"{head}: {len(cycle.brokers)} brokers, {len(cycle.snapshot.bundles)} bundles with load, "
        f"usage spread {cycle.spread:.1f} points",
        hang="  ",
    )
    print_items(console, "usage: ", [f"{b} {u:.1f}%" for b, u in cycle.usage.items()], indent="  ")
    for name, moves in cycle.decisions.items():
        if not moves:
            print_wrapped(console, f"{name}: nothing to unload", indent="  ", hang="    ")
            continue
        print_wrapped(console, f"{name}: {len(moves)} to unload", indent="  ", hang="    ")
        for move in moves:
            _print_move(console, move.bundle, f"{move.source} -> {move.destination}")
    if cycle.applied:
        print_wrapped(console, "applied:", indent="  ")
    for action in cycle.applied:
        move = action.move
        reason = f" ({action.reason})" if action.reason else ""
        _print_move(console, f"{action.outcome} {move.bundle}", f"{move.source} -> {move.destination}{reason}")


def _print_move(console: Console, bundle: str, route: str) -> None:
    """`bundle: route` on one line when it fits, else the bundle (broken after a '/' if it must be)
    and the route below it: a bundle name has no space to wrap at."""
    from rebalancer._console import print_wrapped

    line = f"    {bundle}: {route}"
    if len(line) <= console.width:
        print_wrapped(console, line)
        return
    width = max(console.width, 20)
    current = "    "
    for piece in re.split(r"(?<=/)", f"{bundle}:"):
        if len(current) + len(piece) > width and current.strip():
            print_wrapped(console, current)
            current = "      "
        current += piece
    print_wrapped(console, current, hang="      ")
    print_wrapped(console, route, indent="      ", hang="        ")
