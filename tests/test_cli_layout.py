"""Issue 43, item 3: `cli` imports the components and no component imports `cli`. The parser and
the error ladder are `rebalancer._command`, a leaf every entry point shares; the Spark and Kafka
errors are explained by modules it imports by name, only once their library is imported.

Imports are read from the sources (tests/import_graph.py), function-level ones included.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import rebalancer
from import_graph import function_level_imports, import_graph
from rebalancer import _command

SRC = Path(rebalancer.__file__).parent.parent
PACKAGE = SRC / "rebalancer"
PIPELINE_MAIN = PACKAGE / "pipeline" / "__main__.py"
# What the parser and the ladder may import of ours: nothing that imports a component.
COMMAND_IMPORTS = {"rebalancer", "rebalancer._extras", "rebalancer._secrets"}
LIBRARIES = ("pyspark", "py4j", "aiokafka", "confluent_kafka")


def _ours(graph: dict[str, set[str]], module: str) -> set[str]:
    return {other for other in graph[module] if other == "rebalancer" or other.startswith("rebalancer.")}


def test_no_module_but_cli_imports_cli() -> None:
    graph = import_graph(PACKAGE, SRC)
    assert "rebalancer.cli" in graph and "rebalancer.pipeline.__main__" in graph
    assert sorted(name for name, imported in graph.items() if "rebalancer.cli" in imported) == []
    assert [entry for entry in function_level_imports(PACKAGE, SRC) if entry[2] == "rebalancer.cli"] == []


def test_the_command_machinery_is_a_leaf_and_its_explainers_import_it_not_the_reverse() -> None:
    graph = import_graph(PACKAGE, SRC)
    assert _ours(graph, "rebalancer._command") == COMMAND_IMPORTS
    assert _ours(graph, "rebalancer.cli") == {"rebalancer._command"}
    for explainer, _libraries in _command.EXPLAINERS:
        assert "rebalancer._command" in graph[explainer], explainer
    assert _ours(graph, "rebalancer._kafka_errors") == {"rebalancer._command", "rebalancer._secrets"}  # no pipeline
    assert [e for e in function_level_imports(PACKAGE, SRC) if e[0] in {"rebalancer._command", "rebalancer.cli"}] == []


def _probe(body: str) -> list[str]:
    """What a fresh interpreter that runs `body` has imported, of the libraries and explainers."""
    watched = [*LIBRARIES, *(explainer for explainer, _libraries in _command.EXPLAINERS)]
    probe = f"import sys\n{body}\nprint(sorted(m for m in {watched!r} if m in sys.modules))\n"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [done.stdout.splitlines()[-1], done.stderr]


def test_help_and_an_error_line_import_no_spark_no_kafka_client_and_no_explainer() -> None:
    help_ = (
        "from rebalancer.cli import main\n"
        "for argv in (['--help'], ['--version'], ['queue', '--help'], ['shedding', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
    )
    assert _probe(help_)[0] == "[]"
    value_error = (
        "from rebalancer.cli import main\n"
        "assert main(['queue', 'demo', '--types', '0']) == 2\n"
    )
    imported, stderr = _probe(value_error)
    assert (imported, stderr) == ("[]", "rebalancer: error: --types must be >= 1, got 0\n")


def test_the_pipeline_file_run_as_a_script_is_the_pipeline_command() -> None:
    """spark-submit runs pipeline/__main__.py as a script: the same lines and exit codes as
    `rebalancer pipeline ...`, with nothing of `cli` imported."""
    for argv in (["run", "--bogus"], [], ["--help"]):
        script = subprocess.run([sys.executable, str(PIPELINE_MAIN), *argv], capture_output=True, text=True, timeout=120)
        command = subprocess.run(
            [sys.executable, "-m", "rebalancer.cli", "pipeline", *argv], capture_output=True, text=True, timeout=120
        )
        assert (script.returncode, script.stdout, script.stderr) == (
            command.returncode, command.stdout, command.stderr
        ), argv
    assert script.returncode == 0 and script.stdout.startswith("usage: rebalancer pipeline")
