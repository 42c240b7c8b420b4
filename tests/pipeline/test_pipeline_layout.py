"""Issue 43: the pipeline's house keeps its rules, which CONTRIBUTING.md ("The pipeline's house") explains.

The rules, each a test below:
1. `pipeline/` holds the rooms in `ORDER` and nothing else: a room is a subpackage or a root module.
2. An import between two rooms points down `ORDER` (function-level imports count; `if TYPE_CHECKING`
   does not), so no circle is possible and no lazy import is needed to dodge one.
3. An import from another room names no underscore module and no underscore name.
4. No module but a package `__init__` only re-exports another's names.
5. No module of ours but `cli.py` imports `rebalancer.cli`.
6. No function of the pipeline takes or returns `dict[str, Any]` outside the JSON boundary.
7. `partitions` and `partitioning` are each checked by one function (`checks`, `run_fields`).
8. Every `rebalancer.pipeline.…` name the docs give imports.
9. `tests/pipeline/` mirrors the rooms, and test file names are unique across `tests/`.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import rebalancer.pipeline
from import_graph import cycles, function_level_imports, import_graph

PIPELINE = Path(rebalancer.pipeline.__file__).parent
SRC = PIPELINE.parent.parent
REPO = SRC.parent
TESTS = REPO / "tests"
P = "rebalancer.pipeline"

# Low to high: a room may import only the rooms before it. Subpackages have no ".py".
ORDER = (
    "checks.py",
    "paths.py",
    "clock.py",
    "ship.py",
    "session",
    "ingest",
    "plan",
    "handler",
    "apply",
    "routing",
    "generate.py",
    "kafka",
    "sinks",
    "outputs",
    "core.py",
    "compare_hash.py",
    "plan_from.py",
    "run_fields.py",
    "resolved.py",
    "batch.py",
    "stream",
    "runner.py",
    "terminal.py",
    "commands.py",
    "__main__.py",
)
RANK = {room.removesuffix(".py"): rank for rank, room in enumerate(ORDER)}
# Files read or written as JSON: the only functions that may pass `dict[str, Any]` along.
JSON_BOUNDARY = {
    "outputs/summary.py",
    "outputs/summary_files.py",
    "outputs/manifest.py",
    "stream/state.py",
    "apply/_store.py",
    "kafka/_options.py",
    "paths.py",
}
# Functions elsewhere whose dict is not ours to type: a file read or written as JSON, or another library's.
DICT_FUNCTIONS = {
    "outputs/claim.py:one_group_run_per_output",  # a decorator: the call's bound arguments
    "outputs/mode.py:_read_info",  # _staging.json
    "outputs/mode.py:_committed",  # _staging.json
    "outputs/swap.py:_manifest",  # _manifest.json
    "plan_from.py:_store_items",  # a PlanStore file
    "plan_from.py:load_previous_summary",  # a previous run's summary.json
    "sinks/_pg_url.py:_display_url",  # psycopg's connection parameters
    "sinks/postgres.py:_recorded",  # a database row, as psycopg returns it
    "kafka/datasource.py:_offset_dict",  # Spark's offsets, parsed from their JSON
}
JSON_NAMES = re.compile(r"(^|_)json$|^__(get|set)state__$")  # to_json, from_json, pickling


def room(module: str) -> str:
    """`rebalancer.pipeline.outputs.swap` -> `outputs`; the package itself -> `__init__`."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else "__init__"


def test_the_pipeline_holds_the_rooms_and_nothing_else() -> None:
    present = {
        path.name
        for path in PIPELINE.iterdir()
        if path.suffix == ".py" or (path.is_dir() and (path / "__init__.py").exists())
    }
    assert present == {*ORDER, "__init__.py"}
    strays = [path.name for path in PIPELINE.iterdir() if path.is_dir() and not (path / "__init__.py").exists()]
    assert [name for name in strays if name != "__pycache__"] == []


def test_imports_between_rooms_point_down() -> None:
    graph = import_graph(PIPELINE, SRC)
    assert f"{P}.batch" in graph and f"{P}.outputs.swap" in graph  # the walk found the rooms
    upward = sorted(
        f"{module} -> {other}"
        for module, imported in graph.items()
        for other in imported
        if room(module) != "__init__" and room(other) != room(module) and RANK[room(other)] > RANK[room(module)]
    )
    assert upward == []
    assert cycles(graph) == []


def test_a_function_level_import_of_another_room_points_down_too() -> None:
    """Rule 2 counts them already; this names them for the reader: each loads a heavy room late."""
    found = function_level_imports(PIPELINE, SRC)
    assert len(found) > 10
    upward = [
        (module, line, other)
        for module, line, other in found
        if other.startswith(P + ".") and room(module) != "__init__" and room(other) != room(module)
        and RANK[room(other)] > RANK[room(module)]
    ]
    assert upward == []


def test_no_comment_says_an_import_dodges_a_circle() -> None:
    sign = re.compile(r"#.*\b(circular|import cycle|import loop|avoid (a|the) (cycle|loop|circle))", re.IGNORECASE)
    hits = [
        f"{path.relative_to(PIPELINE)}:{number}"
        for path in PIPELINE.rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if sign.search(line)
    ]
    assert hits == []


def _cross_room_imports() -> list[tuple[str, int, str, str]]:
    """(module, line, imported module, imported name or "") of every import between two rooms."""
    found = []
    for path in sorted(PIPELINE.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        module = ".".join(parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(P + "."):
                if room(node.module) != room(module):
                    found += [(module, node.lineno, node.module, alias.name) for alias in node.names]
            elif isinstance(node, ast.Import):
                found += [
                    (module, node.lineno, alias.name, "")
                    for alias in node.names
                    if alias.name.startswith(P + ".") and room(alias.name) != room(module)
                ]
    return found


def test_no_underscore_name_crosses_rooms() -> None:
    found = _cross_room_imports()
    assert len(found) > 50
    private = [
        f"{module}:{line} imports {target} {name}".rstrip()
        for module, line, target, name in found
        if room(module) != "__init__"
        and (any(part.startswith("_") for part in target.split(".")) or name.startswith("_"))
    ]
    assert private == []


def test_no_module_only_re_exports() -> None:
    facades = []
    for path in sorted(PIPELINE.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        body = ast.parse(path.read_text()).body
        rest = [
            node
            for node in body
            if not isinstance(node, ast.Import | ast.ImportFrom)
            and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))  # the docstring
            and not (isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets))
            and not (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test))
        ]
        if not rest or "re-exported" in path.read_text():
            facades.append(str(path.relative_to(PIPELINE)))
    assert facades == []


def _top_level_definitions(path: Path) -> set[str]:
    """The names a module defines itself: functions, classes and assignments at its top level."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {target.id for target in targets if isinstance(target, ast.Name)}
    return names


def test_a_name_from_another_room_comes_from_the_module_that_defines_it() -> None:
    """Between rooms a name is imported from its home (or a package's lazy table), never passed on
    by a module that imported it itself."""
    passed_on = []
    for module, line, target, name in _cross_room_imports():
        path = SRC / (target.replace(".", "/") + ".py")
        if not name or not path.exists() or (SRC / target.replace(".", "/") / f"{name}.py").exists():
            continue  # a package (its __init__ exports lazily, checked below) or a submodule
        if name not in _top_level_definitions(path):
            passed_on.append(f"{module}:{line} takes {name} from {target}")
    assert passed_on == []


def test_a_package_exports_lazily_and_no_export_is_named_like_a_module() -> None:
    """A lazy export named like one of the package's modules is hidden once that module is imported."""
    found = []
    for init in sorted(PIPELINE.rglob("__init__.py")):
        package = init.parent
        module = importlib.import_module(".".join(package.relative_to(SRC).parts))
        eager = [node for node in ast.parse(init.read_text()).body if isinstance(node, ast.ImportFrom)
                 and node.module and node.module.startswith(P)]
        if eager:
            found.append(f"{init.relative_to(PIPELINE)} imports {eager[0].module} on load")
        submodules = {path.stem for path in package.glob("*.py")} | {path.name for path in package.iterdir() if path.is_dir()}
        found += [f"{init.relative_to(PIPELINE)} exports {name}, a module's name" for name in getattr(module, "__all__", []) if name in submodules]
        for name in getattr(module, "__all__", []):
            if not hasattr(module, name):
                found.append(f"{init.relative_to(PIPELINE)}: {name} does not load")
    assert found == []


# The loggers the docs name: users filter on them, so they keep their names wherever the code moves.
DOCUMENTED_LOGGERS = {
    "rebalancer.pipeline.stream": "stream/driver.py",
    "rebalancer.pipeline.kafka.source": "kafka/datasource.py",
}


@pytest.mark.parametrize("logger", sorted(DOCUMENTED_LOGGERS))
def test_a_documented_logger_keeps_its_name(logger: str) -> None:
    assert f'logging.getLogger("{logger}")' in (PIPELINE / DOCUMENTED_LOGGERS[logger]).read_text()


def test_only_cli_imports_cli() -> None:
    package = SRC / "rebalancer"
    graph = import_graph(package, SRC)
    assert "rebalancer.cli" in graph
    importers = sorted(module for module, imported in graph.items() if "rebalancer.cli" in imported)
    assert importers == []


def _annotations(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.expr]:
    args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg, node.args.kwarg]
    return [arg.annotation for arg in args if arg is not None and arg.annotation is not None] + (
        [node.returns] if node.returns is not None else []
    )


def test_no_function_passes_a_dict_of_any_outside_the_json_boundary() -> None:
    loose = re.compile(r"\b(dict|Mapping|MutableMapping)\[str, Any\]")
    found = []
    for path in sorted(PIPELINE.rglob("*.py")):
        name = str(path.relative_to(PIPELINE))
        if name in JSON_BOUNDARY:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if JSON_NAMES.search(node.name) or f"{name}:{node.name}" in DICT_FUNCTIONS:
                    continue
                if any(loose.search(ast.unparse(annotation)) for annotation in _annotations(node)):
                    found.append(f"{name}:{node.lineno} {node.name}")
    assert found == []


def _lines_matching(pattern: str) -> list[str]:
    found = re.compile(pattern)
    return [
        f"{path.relative_to(PIPELINE)}:{number}"
        for path in sorted(PIPELINE.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if found.search(line)
    ]


def test_partitions_is_checked_in_one_place() -> None:
    """One function checks a task count (`checks.check_partitions`): the run's field rule, a
    `StreamConfig` and `balanced_apply` call it. The other bounds are not the caller's value: a plan
    store file's field (read from disk) and `slots.partition_keys`'s guard on its own argument."""
    assert [line.split(":")[0] for line in _lines_matching(r"def check_partitions\b")] == ["checks.py"]
    assert sorted(line.split(":")[0] for line in _lines_matching(r"\bpartitions\s*(<|<=)\s*[01]\b")) == [
        "apply/_store.py",
        "plan/slots.py",
    ]
    callers = sorted({line.split(":")[0] for line in _lines_matching(r"\bcheck_partitions\(")} - {"checks.py"})
    assert callers == ["apply/_call.py", "run_fields.py", "stream/state.py"]


def test_partitioning_is_checked_in_one_place() -> None:
    """`handler.dispatch.PARTITIONINGS` names the choices; only the run's field rule checks a value."""
    uses = _lines_matching(r"\bPARTITIONINGS\b|\bpartitioning\s+(not\s+)?in\b")
    assert sorted({line.split(":")[0] for line in uses}) == ["handler/dispatch.py", "run_fields.py"]
    assert len(_lines_matching(r"OneOf\(PARTITIONINGS\)")) == 1


def _documented_names() -> list[str]:
    pages = [*(REPO / "docs").rglob("*.md"), REPO / "README.md", REPO / "CONTRIBUTING.md"]
    return sorted({m.group(0) for page in pages for m in re.finditer(r"rebalancer\.pipeline(?:\.\w+)+", page.read_text())})


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 1, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


LOGGERS = {"rebalancer.pipeline.kafka.source"}  # a logger's name the docs give, not a module


def test_every_name_the_docs_give_imports() -> None:
    names = [name for name in _documented_names() if name not in LOGGERS]
    assert "rebalancer.pipeline.session" in names and len(names) > 10
    assert [name for name in names if not _resolves(name)] == []


def test_the_tests_mirror_the_rooms() -> None:
    here = TESTS / "pipeline"
    rooms = {name for name in ORDER if not name.endswith(".py")}
    folders = {path.name for path in here.iterdir() if path.is_dir() and path.name != "__pycache__"}
    assert folders == rooms
    deeper = [str(path.relative_to(here)) for path in here.rglob("test_*.py") if len(path.relative_to(here).parts) > 2]
    assert deeper == []
    for folder in rooms:
        assert list((here / folder).glob("test_*.py")), folder
    names = [path.name for path in TESTS.rglob("test_*.py")]
    assert sorted({name for name in names if names.count(name) > 1}) == []
