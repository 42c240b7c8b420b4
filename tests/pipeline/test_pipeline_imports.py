"""`rebalancer.pipeline` has no import circles, hidden or not.

Every import counts, a function-local one too (that is how the circles used to hide); only those
under `if TYPE_CHECKING:` do not, as they never run.
"""

from __future__ import annotations

from pathlib import Path

import rebalancer.pipeline
from import_graph import cycles, import_graph

PACKAGE = Path(rebalancer.pipeline.__file__).parent


def test_the_pipeline_package_has_no_import_cycles() -> None:
    graph = import_graph(PACKAGE, PACKAGE.parent.parent)
    assert "rebalancer.pipeline.batch" in graph and "rebalancer.pipeline.kafka.telemetry" in graph
    assert cycles(graph) == []


def test_the_walk_finds_a_circle_hidden_in_a_function_and_ignores_type_checking(tmp_path: Path) -> None:
    package = tmp_path / "src" / "demo"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from demo.b import f\n")
    (package / "b.py").write_text("def f():\n    from demo import c\n")
    (package / "c.py").write_text("def g():\n    from .a import x\n")
    (package / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from demo.e import y\n")
    (package / "e.py").write_text("from demo.d import z\n")
    graph = import_graph(package, package.parent)
    assert graph["demo.b"] == {"demo", "demo.c"}
    assert cycles(graph) == [["demo.a", "demo.b", "demo.c"]]
