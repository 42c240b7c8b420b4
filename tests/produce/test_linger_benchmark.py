"""benchmarks/linger.py's sweep and transactional row, in a reduced form (seconds, not minutes).

The numbers are not checked here (speed is the benchmark's business); the machinery is: every cell
gets both clients' broker-counted requests, the latency budget is computed, and the RESULT line
says what the table says.
"""

from __future__ import annotations

import importlib.util
import pathlib
import re
import sys

import pytest

pytestmark = pytest.mark.kafka

BENCHMARK = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "linger.py"


@pytest.fixture(scope="module")
def linger():
    spec = importlib.util.spec_from_file_location("linger_benchmark", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def test_sweep_on_a_tiny_grid(linger, capsys):
    cells = linger.sweep_cells(partitions=(12,), rates=(400,), lingers=(5, 50), compressed=("lz4", 12, 400, 20))
    assert [c.label() for c in cells] == ["12p 0k 5ms", "12p 0k 50ms", "12p 0k 20ms lz4"]
    table, result = linger.sweep(  # in-process rows: no interpreter start-up
        cells, 0.6, runner=linger.run_row, ceiling_seconds=0.5, ceiling_cell=linger.Cell(12, 400, 5),
        sticky_cell=linger.Cell(24, 600, 5),
    )  # fmt: skip
    printed = capsys.readouterr().out.splitlines()
    assert len(table) == 3 and len(printed) == 3 + 3
    assert all(line.startswith("| 12 | 400 |") and line.count("|") == linger.TABLE_HEADER.splitlines()[1].count("|")
               for line in printed[:3])  # fmt: skip
    assert printed[3].startswith("ceiling, 12 partitions")
    assert printed[4].startswith("ours-sticky keyless @24p 0k 5ms:")
    assert printed[5].startswith("ours-random keyless @24p 0k 5ms:")
    for row in table:
        assert row["requests_confluent"] > 0 and row["requests_ours"] > 0 and row["failed"] == 0
        assert row["rtt_ms"] > 0
        assert row["budget_ms"] == pytest.approx(row["cell"].linger_ms + row["rtt_ms"] + linger.LATENCY_SLACK_MS)
        assert row["latency_ok"] == (row["p99"] <= row["budget_ms"])
        assert row["rate_ratio"] > 0
    match = re.fullmatch(
        r"RESULT sweep_cells=3 latency_held=(\d) reduction_ge_50pct=(\d) ceiling_ours=(\d+) ceiling_aiokafka=(\d+) "
        r"ceiling_confluent=(\d+) min_reduction_pct=(-?[\d.]+) max_reduction_pct=(-?[\d.]+) failed=0 "
        r"min_rate_ratio_vs_confluent=([\d.]+) latency_held_where_rate_kept=(\d) cells_where_rate_kept=(\d) "
        r"ceiling_ratio_vs_aiokafka=([\d.]+) ceiling_ratio_vs_confluent=([\d.]+) sticky_requests_ratio=([\d.]+)",
        result,
    )
    assert match, result
    assert int(match[1]) == sum(r["latency_ok"] for r in table)
    assert float(match[6]) == pytest.approx(min(r["reduction_pct"] for r in table), abs=0.05)
    assert float(match[8]) == pytest.approx(min(r["rate_ratio"] for r in table), abs=0.005)
    kept = [r for r in table if r["achieved_pct"] >= 99.0]
    assert (int(match[9]), int(match[10])) == (sum(r["latency_ok"] for r in kept), len(kept))
    assert float(match[11]) == pytest.approx(int(match[3]) / int(match[4]), abs=0.01)
    # Keyless on 24 partitions at 600 msg/s, 5 ms windows: sticky sends each window's messages to one
    # partition, so one broker gets a request where random placement reaches all three.
    assert 0 < float(match[13]) < 1


def test_transactional_row_commits_and_counts_requests(linger):
    row = linger.run_row(linger.TXN_CLIENT, linger.Cell(12, 400, 50), 1.2)
    assert row["client"] == "ours-txn" and row["sent"] > 0
    assert row["ours"]["failed_total"] == 0 and row["requests"] > 0
