"""Human output fits the terminal: `COLUMNS` (rich's console width) bounds every line, tables turn
vertical when too narrow, metric names carry units, reports read as sentences, --help lists choices."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rebalancer._console import console, print_items, print_table
from rebalancer.cli import main
from rebalancer.queue.stats import RebalanceReport
from rebalancer.shedding.sim import COMBINATIONS, all_scenarios


def run(capsys, monkeypatch, columns: int, *argv: str) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(list(argv)) == 0
    return capsys.readouterr().out.splitlines()


def widest(lines: list[str]) -> int:
    return max(len(line) for line in lines)


def test_shedding_compare_fits_100_columns_in_tables_across_the_strategies(capsys, monkeypatch):
    lines = run(capsys, monkeypatch, 100, "shedding", "compare", "--small")
    assert widest(lines) <= 100
    # The PIP-364 table (about 170 columns side by side) gives its ratings, the strategies across.
    ratings = lines.index("PIP-364 table, measured: the ratings (the numbers they rest on follow)")
    assert [line.split() for line in lines[ratings + 1 : ratings + 5]] == [
        ["Balanced"],
        ["column", "Threshold", "Uniform", "Overload", "Avg", "Transfer", "(ours)"],
        ["─" * 72],
        ["heterogeneous", "normal", "bad", "normal", "normal", "normal", "good"],
    ]
    # Every scenario's numbers: one table per metric, a row per scenario.
    moved = lines.index("moved (bundles)")
    assert [line.split() for line in lines[moved + 2 : moved + 5]] == [
        ["scenario", "Threshold", "Uniform", "Overload", "Avg", "Transfer", "(ours)"],
        ["─" * 72],
        ["heterogeneous", "0", "5", "0", "0", "0", "5"],
    ]
    assert not any(line.startswith("combination: ") for line in lines)
    # The totals fit side by side at 100 columns with the full names: a table, its headers wrapped at spaces.
    totals = lines.index("totals over the scenarios (a run that never converged counts the whole horizon)")
    assert lines[totals + 1].startswith("┏") and lines[totals + 3] == (
        "┃                                               ┃     moved ┃       to ┃ oscillations ┃"
    )


def test_shedding_compare_is_a_table_when_the_terminal_is_wide(capsys, monkeypatch):
    lines = run(capsys, monkeypatch, 200, "shedding", "compare", "--small", "--scenario", "jitter")
    assert widest(lines) <= 200
    assert lines[0] == "simulating 6 strategies on 1 scenario (seed 0)..."
    assert lines[2].startswith("┏") and "┃ combination " in lines[4]
    assert not any(line.startswith(("combination: ", "strategies (")) for line in lines)


SIMULATE_80 = """\
over-placement: 40, 40, 40, 40, 69, 70 — AvgShedder (seed 0)
┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━┓
┃ metric                            ┃ value ┃
┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━┩
│ moved (bundles)                   │     5 │
│ unloaded (bundles)                │     5 │
│ oscillations (moves back)         │     0 │
│ over-placement (brokers)          │     0 │
│ over-unloading (brokers)          │     0 │
│ overloaded (broker-minutes)       │     0 │
│ final spread (% points)           │  8.09 │
│ converged after (cycles)          │    17 │
│ stale decisions skipped (bundles) │     0 │
│ failover placements (bundles)     │     0 │
└───────────────────────────────────┴───────┘"""

SIMULATE_30 = """\
over-placement: 40, 40, 40,
40, 69, 70 — AvgShedder (seed
0)
moved (bundles): 5
unloaded (bundles): 5
oscillations (moves back): 0
over-placement (brokers): 0
over-unloading (brokers): 0
overloaded (broker-minutes): 0
final spread (% points): 8.09
converged after (cycles): 17
stale decisions skipped
  (bundles): 0
failover placements (bundles):
  0"""


@pytest.mark.parametrize(("columns", "expected"), [(80, SIMULATE_80), (30, SIMULATE_30)])
def test_shedding_simulate_names_each_metric_with_its_unit(capsys, monkeypatch, columns, expected):
    lines = run(capsys, monkeypatch, columns, "shedding", "simulate", "--small")
    assert lines == expected.splitlines()
    assert widest(lines) <= columns


@pytest.mark.parametrize("command", ["simulate", "compare"])
def test_shedding_help_lists_the_scenarios_and_strategies(capsys, monkeypatch, command):
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit):
        main(["shedding", command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    scenarios = ", ".join(s.name for s in all_scenarios())
    assert f"{scenarios} (default: over-placement)" in text if command == "simulate" else scenarios in text
    assert "ThresholdShedder, UniformLoadShedder, OverloadShedder, AvgShedder, TransferShedder, BalancedShedder" in text
    assert len(COMBINATIONS) == 6


def test_a_rebalance_report_reads_as_a_sentence():
    moved = RebalanceReport(3, 1.842, 1.117, 0.43, None, 1795681421.75)
    assert str(moved) == (
        "at 08:23:41 UTC, moved 3 partitions: worker load ratio (max/mean) 1.84 -> 1.12, "
        "0.4 ms waiting for fences"
    )
    skipped = RebalanceReport(0, 1.0, 1.0, 0.0, "a membership change is in progress", 1795681421.75)
    assert str(skipped) == "at 08:23:41 UTC, nothing moved: a membership change is in progress"
    partly = RebalanceReport(1, 1.5, 1.2, 3.0, None, 0.0, "fence timed out")
    assert str(partly).endswith("moved 1 partition: worker load ratio (max/mean) 1.50 -> 1.20, "
                                "3.0 ms waiting for fences; some moves given back: fence timed out")
    assert repr(moved).startswith("RebalanceReport(moved=3")  # repr keeps the fields


def test_queue_demo_fits_and_prints_the_last_rebalance_as_a_sentence(capsys, monkeypatch):
    lines = run(capsys, monkeypatch, 60, "queue", "demo", "--seconds", "0.3", "--rebalance-ms", "50",
                "--types", "50", "--top", "3")
    assert widest(lines) <= 60
    text = "\n".join(lines)
    assert "RebalanceReport(" not in text
    assert re.search(r"^last rebalance: at \d\d:\d\d:\d\d UTC, (moved|nothing moved)", text, re.M)
    assert "throughput (items/s)" in text and lines[-1] == "reconciled: produced == dispatched + unhandled == handled"


def test_consumers_demo_wraps_under_its_own_indent(capsys, monkeypatch):
    lines = run(capsys, monkeypatch, 60, "consumers", "demo", "--partitions", "20")
    assert widest(lines) <= 60
    i = lines.index("          rebalance of 20 partitions over 3 flows: 0")
    assert lines[i + 1] == "            handoffs (the fewest possible), 20 mapped"
    # An owner and its partitions stay on one line; the next owner continues under the indent.
    now = next(j for j, line in enumerate(lines) if line.startswith("          now ready: c1 [0, 3, 6"))
    assert lines[now : now + 3] == [
        "          now ready: c1 [0, 3, 6, 9, 12, 15, 18]",
        "            c2 [1, 4, 7, 10, 13, 16, 19]",
        "            c3 [2, 5, 8, 11, 14, 17]",
    ]


def test_print_table_is_vertical_exactly_when_the_columns_do_not_fit(capsys, monkeypatch):
    headers, rows = ["name", "load (msg/s)"], [["alpha", "1,200"], ["beta", "30"]]
    monkeypatch.setenv("COLUMNS", "19")  # 5 + 7 (the longest word of each column) + 2 x 2 padding + 3 rules
    print_table(console(), "brokers", headers, rows, right=["load (msg/s)"])
    assert capsys.readouterr().out.splitlines() == [
        "brokers",
        "┏━━━━━━━┳━━━━━━━━━┓",
        "┃       ┃    load ┃",
        "┃ name  ┃ (msg/s) ┃",
        "┡━━━━━━━╇━━━━━━━━━┩",
        "│ alpha │   1,200 │",
        "│ beta  │      30 │",
        "└───────┴─────────┘",
    ]
    monkeypatch.setenv("COLUMNS", "18")  # one column short: a name-value table becomes name: value lines
    print_table(console(), "brokers", headers, rows, right=["load (msg/s)"])
    assert capsys.readouterr().out.splitlines() == ["brokers", "alpha: 1,200", "beta: 30"]
    monkeypatch.setenv("COLUMNS", "17")
    print_table(console(), "brokers", [*headers, "zone"], [[*r, "eu-west-1"] for r in rows])
    assert capsys.readouterr().out.splitlines() == [
        "brokers",
        "name: alpha",
        "  load (msg/s): 1,200",
        "  zone:         eu-west-1",
        "name: beta",
        "  load (msg/s): 30",
        "  zone:         eu-west-1",
    ]


def test_print_items_breaks_only_between_items(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "20")
    print_items(console(), "now: ", ["c1 [0, 1]", "c2 [2, 3]", "c3 [4]"], "  ")
    assert capsys.readouterr().out.splitlines() == ["  now: c1 [0, 1]", "    c2 [2, 3]", "    c3 [4]"]


# -- issue 46, item 3: the commands the README shows, at 80 columns ---------------------------------
def _at_80(*argv: str, cwd: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    # XDG_CACHE_HOME: `rebalancer stop` sees this test's pid files only, never the session's brokers.
    env = {**os.environ, "COLUMNS": "80", "XDG_CACHE_HOME": str(cache)}
    return subprocess.run([sys.executable, "-m", "rebalancer.cli", *argv], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)  # fmt: skip


def test_the_readmes_commands_fit_80_columns(tmp_path):
    """Each run as a user runs it, in a subprocess with COLUMNS=80: no line of stdout or stderr is
    longer than 80 characters. (A pipeline run at 80 columns is tests/pipeline's.)"""
    (tmp_path / "data" / "telemetry").mkdir(parents=True)
    (tmp_path / "data" / "telemetry" / "old.parquet").write_bytes(b"")
    runs = {
        "top help": (["--help"], 0),
        "pipeline run help": (["pipeline", "run", "--help"], 0),
        "produce demo help": (["produce", "demo", "--help"], 0),
        "consumers demo": (["consumers", "demo"], 0),
        "queue demo": (["queue", "demo", "--seconds", "0.5"], 0),
        "shedding simulate": (["shedding", "simulate", "--scenario", "over-placement", "--strategy", "AvgShedder"], 0),
        "shedding compare": (["shedding", "compare", "--small"], 0),
        "shedding record": (["shedding", "record", "--out", "reports", "--minutes", "5"], 0),
        "shedding replay": (["shedding", "replay", "--reports", "reports"], 0),
        "stop": (["stop"], 0),  # nothing to stop: its own pid directory is empty
        # The README's first pipeline command, on a directory that holds files: one error line.
        "an error": (["pipeline", "generate", "--out", "data/telemetry", "--events", "2000000", "--types", "400",
                      "--skew", "1.1"], 2),
        # A README command with a typo: an error of 230 characters, wrapped at spaces.
        "a long error": (["shedding", "simulate", "--scenario", "over-placement", "--strategy", "Avg"], 2),
    }  # fmt: skip
    seen: dict[str, list[str]] = {}
    cache = Path(tempfile.mkdtemp(prefix="rb-"))  # a path as short as ~/.cache, which the output names
    try:
        for name, (argv, code) in runs.items():
            done = _at_80(*argv, cwd=tmp_path, cache=cache)
            assert done.returncode == code, (name, done.stderr)
            seen[name] = done.stdout.splitlines() + done.stderr.splitlines()
            assert "Traceback" not in done.stderr, (name, done.stderr)
    finally:
        shutil.rmtree(cache)
    too_long = {name: [line for line in lines if len(line) > 80] for name, lines in seen.items()}
    assert {name: lines for name, lines in too_long.items() if lines} == {}
    assert seen["an error"] == ["rebalancer: error: out: data/telemetry is not empty; --overwrite clears it first"]
    assert seen["a long error"] == [
        "rebalancer: error: unknown strategy 'Avg'; choose one of:",
        "  ThresholdShedder+LeastResourceUsageWithWeight,",
        "  UniformLoadShedder+LeastLongTermMessageRate,",
        "  OverloadShedder+LeastLongTermMessageRate, AvgShedder, TransferShedder,",
        "  BalancedShedder (ours)",
    ]
    assert len(seen["shedding compare"]) < 150  # tables, not a list of 509 lines


def test_shedding_compare_at_80_columns_says_what_it_runs_then_prints_tables(capsys, monkeypatch):
    lines = run(capsys, monkeypatch, 80, "shedding", "compare", "--small")
    assert widest(lines) <= 80
    assert lines[:8] == [
        "simulating 6 strategies on 9 scenarios (seed 0)...",  # before the first long step
        "strategies (by short name in the narrow tables below):",
        "  Threshold        ThresholdShedder+LeastResourceUsageWithWeight",
        "  Uniform          UniformLoadShedder+LeastLongTermMessageRate",
        "  Overload         OverloadShedder+LeastLongTermMessageRate",
        "  Avg              AvgShedder",
        "  Transfer         TransferShedder",
        "  Balanced (ours)  BalancedShedder (ours)",
    ]
    # Each table's title: the line above its header (the strategies' names wrap: "Balanced" first).
    titles = [line for line, below in itertools.pairwise(lines) if below.strip() == "Balanced" or below.startswith("┏")]
    assert titles == [
        "PIP-364 table, measured: the ratings (the numbers they rest on follow)",
        "moved (bundles)", "converged after (cycles)", "final spread (% points)", "oscillations (moves back)",
        "over-placement (brokers)", "over-unloading (brokers)", "overloaded (broker-minutes)",
        "totals over the scenarios (a run that never converged counts the whole horizon)",
    ]
    spread = lines.index("final spread (% points)")
    assert [line.split() for line in lines[spread + 4 : spread + 13]] == [
        ["heterogeneous", "59.9", "84.7", "59.9", "59.9", "59.9", "47.5"],
        ["jitter", "0.4", "20.3", "0.4", "0.4", "0.4", "0.4"],
        ["over-placement", "38.9", "30.6", "30.6", "8.1", "30.6", "7.0"],
        ["over-unloading", "80.3", "0.7", "40.3", "10.3", "19.7", "0.2"],
        ["slow-balancing", "100.0", "40.5", "80.5", "0.8", "0.8", "0.9"],
        ["pulsar-17456", "80.9", "30.2", "80.9", "11.1", "40.9", "11.0"],
        ["pulsar-18215-low", "11.0", "3.0", "11.0", "11.0", "3.9", "11.0"],
        ["pulsar-18215-idle", "50.3", "15.5", "50.3", "15.1", "25.4", "5.0"],
        ["cold-start", "37.2", "26.4", "61.0", "12.8", "31.4", "4.8"],
    ]
    assert lines[-7].split() == ["│", "Threshold", "│", "403", "│", "448", "│", "51", "│"]  # the totals, short names
    assert len(lines) == 121
