"""Issue 43: no import circle anywhere in `rebalancer`, between modules or between packages, with
function-level imports counted (only `if TYPE_CHECKING:` blocks, which never run, are not)."""

from __future__ import annotations

from pathlib import Path

import rebalancer
from import_graph import cycles, import_graph, package_graph

SRC = Path(rebalancer.__file__).parent.parent


def test_no_module_of_rebalancer_is_in_an_import_circle() -> None:
    graph = import_graph(SRC / "rebalancer", SRC)
    assert len(graph) > 100 and "rebalancer.pipeline.batch" in graph
    assert cycles(graph) == []


def test_no_package_of_rebalancer_is_in_an_import_circle() -> None:
    packages = package_graph(import_graph(SRC / "rebalancer", SRC))
    assert packages["rebalancer.balance"] == set()  # the floor: it imports nothing of ours
    assert cycles(packages) == []


def test_the_command_and_its_explainers_import_no_component() -> None:
    """`rebalancer._command` is shared by every entry point; it names the components as data."""
    graph = import_graph(SRC / "rebalancer", SRC)
    for module in ("rebalancer._command", "rebalancer._kafka_errors", "rebalancer._lazy"):
        assert {name for name in graph[module] if name.count(".") >= 1 and not name.split(".")[1].startswith("_")} == set()
