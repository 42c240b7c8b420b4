"""`rebalancer.pipeline` has no import circles, hidden or not.

Every import counts, a function-local one too (that is how the circles used to hide); only those
under `if TYPE_CHECKING:` do not, as they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import rebalancer.pipeline

PACKAGE = Path(rebalancer.pipeline.__file__).parent


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imported(tree: ast.AST, name: str, is_package: bool) -> set[str]:
    """Every module `tree` imports (the module for `from m import x`, or `m.x` when that is a module)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking_only(child):
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - child.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in child.names)
            visit(child)

    visit(tree)
    return found


def import_graph(package: Path, root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports; `root` is the directory module names start from."""
    sources = {_module_name(path, root): path for path in package.rglob("*.py")}
    return {
        name: {
            other
            for other in _imported(ast.parse(path.read_text()), name, path.name == "__init__.py")
            if other in sources and other != name
        }
        for name, path in sources.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(found)


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
