"""The import graph of a package, read from its sources with `ast`, and its circles.

A module, not a conftest: test files in any package import it (`from import_graph import ...`).
Every import counts, a function-local one too (that is how circles hide); only those under
`if TYPE_CHECKING:` do not, as they never run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

__all__ = ["cycles", "function_level_imports", "import_graph", "package_graph"]


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.AST, in_function: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement under `tree` that runs, and whether it sits inside a function."""
    for child in ast.iter_child_nodes(tree):
        if _type_checking_only(child):
            continue
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child, in_function
        yield from _imports(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef))


def _targets(node: ast.Import | ast.ImportFrom, name: str, is_package: bool) -> set[str]:
    """The modules one import statement of module `name` names (`m` for `from m import x`, and `m.x`
    in case that is a module); a relative import resolved against `name`."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    base = node.module or ""
    if node.level:
        anchor = name.split(".") if is_package else name.split(".")[:-1]
        anchor = anchor[: len(anchor) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    return {base, *(f"{base}.{alias.name}" for alias in node.names)}


def _imported(tree: ast.AST, name: str, is_package: bool) -> set[str]:
    """Every module `tree` imports (the module for `from m import x`, or `m.x` when that is a module)."""
    return {target for node, _ in _imports(tree) for target in _targets(node, name, is_package)}


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


def package_graph(graph: dict[str, set[str]], depth: int = 2) -> dict[str, set[str]]:
    """`graph` with each module folded into its package `depth` names deep (2: `rebalancer.produce`)."""

    def package(name: str) -> str:
        return ".".join(name.split(".")[:depth])

    folded: dict[str, set[str]] = {}
    for name, imported in graph.items():
        folded.setdefault(package(name), set()).update(package(other) for other in imported)
    return {name: imported - {name} for name, imported in folded.items()}


def function_level_imports(package: Path, root: Path) -> list[tuple[str, int, str]]:
    """(module, line, imported module) of every import inside a function of `package`; for
    `from m import x`, `m` (relative imports resolved)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        name = _module_name(path, root)
        for node, in_function in _imports(ast.parse(path.read_text())):
            if not in_function:
                continue
            targets = _targets(node, name, path.name == "__init__.py")
            modules = sorted(targets) if isinstance(node, ast.Import) else [min(targets, key=len)]
            found += [(name, node.lineno, module) for module in modules]
    return found


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
