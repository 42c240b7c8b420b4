"""The `rebalancer` command explains itself: version, descriptions, help and defaults, one-line errors."""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys

import pytest

import rebalancer
from cli_helpers import command_tree
from rebalancer import cli


def _commands() -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    return list(command_tree(cli.build_parser()))


def test_version_is_the_installed_distributions(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    installed = importlib.metadata.version(rebalancer.DISTRIBUTION)  # partition-rebalancer, not PyPI's rebalancer
    assert capsys.readouterr().out == f"rebalancer {installed}\n"
    assert rebalancer.__version__ == installed


def test_every_component_and_sub_command_is_registered():
    paths = {path for path, _ in _commands()}
    assert {("pipeline", "run"), ("pipeline", "generate"), ("queue", "demo"), ("shedding", "simulate"),
            ("shedding", "compare"), ("consumers", "demo"), ("produce", "demo")} <= paths
    assert {p[0] for p in paths if p} == {"pipeline", "queue", "shedding", "consumers", "produce", "stop"}


def test_every_command_has_a_paragraph_and_every_flag_help_and_its_default():
    for path, parser in _commands():
        name = " ".join(("rebalancer", *path))
        assert parser.description and len(parser.description.split()) >= 15, f"{name}: no description paragraph"
        assert isinstance(parser.formatter_class, type) and issubclass(parser.formatter_class, cli.HelpFormatter), name
        text = parser.format_help()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction | argparse._HelpAction | argparse._VersionAction):
                continue
            flag = action.option_strings[-1] if action.option_strings else action.dest
            assert action.help and action.help.strip(), f"{name} {flag}: no help text"
            shown = action.default not in (None, False, argparse.SUPPRESS)
            if shown and action.option_strings:
                # The default is in the help (argparse joins wrapped lines, so compare whitespace-free).
                help_text = "".join(parser._get_formatter()._expand_help(action).split())
                spellings = {"".join(str(action.default).split())}
                if isinstance(action.default, float):
                    spellings.add(f"{action.default:g}")
                assert "default" in help_text and any(s in help_text for s in spellings), (
                    f"{name} {flag}: default {action.default!r} not shown"
                )
        assert "--help" in text


def test_the_top_help_says_what_it_is_for():
    text = cli.build_parser().format_help()
    assert "Keep partitioned work balanced" in text
    assert "rebalancer pipeline run" in text and "rebalancer consumers demo" in text
    for name in ("pipeline", "queue", "shedding", "consumers", "produce", "stop"):
        assert f"    {name}" in text


def test_help_shows_defaults_once():
    text = cli.build_parser()._subparsers._group_actions[0].choices["queue"]  # type: ignore[union-attr]
    demo_help = text._subparsers._group_actions[0].choices["demo"].format_help()  # type: ignore[union-attr]
    assert demo_help.count("(default: 300)") == 1 and "(default 300)" not in demo_help
    assert "(default: 10)" in demo_help  # --top had no default in its help: the formatter adds it


@pytest.mark.parametrize(("argv", "err"), [
    (["queue", "demo", "--bogus"], "rebalancer: error: unrecognized arguments: --bogus\n"),
    ([], "rebalancer: error: the following arguments are required: COMPONENT\n"),
    (["nope"], "rebalancer: error: argument COMPONENT: invalid choice: 'nope' "
               "(choose from pipeline, queue, shedding, consumers, produce, stop)\n"),
    (["queue", "demo", "--types", "x"], "rebalancer queue demo: error: argument --types: expected an integer, got 'x'\n"),
    (["consumers"], "rebalancer consumers: error: the following arguments are required: COMMAND\n"),
])
def test_usage_errors_are_one_line_and_exit_2(capsys, argv, err):
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert captured.err.replace("'nope' (choose from 'pipeline', 'queue', 'shedding', 'consumers', 'produce', 'stop')",
                                "'nope' (choose from pipeline, queue, shedding, consumers, produce, stop)") == err
    assert captured.out == ""


@pytest.mark.parametrize(("argv", "err"), [
    (["queue", "demo", "--types", "0"], "rebalancer: error: --types must be >= 1, got 0\n"),
    (["produce", "demo", "--rate", "0"], "rebalancer: error: --rate must be > 0, got 0.0\n"),
    (["shedding", "simulate", "--scenario", "nope"], None),
    (["pipeline", "run", "--input", "/nonexistent/telemetry"], None),
])
def test_handler_errors_are_one_line_and_exit_2(capsys, argv, err):
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("rebalancer: error: ") and captured.err.count("\n") == 1
    assert "Traceback" not in captured.err
    if err is not None:
        assert captured.err == err


def test_a_component_that_fails_to_import_is_an_error_not_silence(monkeypatch):
    phantom = ("ghost", "rebalancer.ghost.commands", "a component that does not exist", "nothing")
    monkeypatch.setattr(cli, "_COMPONENTS", (*cli._COMPONENTS, phantom))
    with pytest.raises(ModuleNotFoundError, match=r"rebalancer\.ghost"):
        cli.build_parser()


def test_a_missing_extra_keeps_the_component_listed_and_names_the_extra(monkeypatch, capsys):
    for name in [m for m in sys.modules if m == "rebalancer.pipeline" or m.startswith("rebalancer.pipeline.")]:
        # The failed import below also removes the module from its parent package's attributes:
        # monkeypatch puts both back, or a later test in this process finds no `rebalancer.pipeline`.
        parent, _, child = name.rpartition(".")
        if hasattr(sys.modules.get(parent), child):
            monkeypatch.setattr(sys.modules[parent], child, getattr(sys.modules[parent], child))
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyspark", None)  # what an install without the 'spark' extra sees
    parser = cli.build_parser()
    assert "partition-rebalancer[spark]" in parser.format_help()
    assert cli.main(["pipeline", "run", "--input", "x"]) == 2
    assert capsys.readouterr().err == (
        "rebalancer: error: rebalancer pipeline needs pyspark, from the 'spark' extra: "
        "pip install 'partition-rebalancer[spark]'\n"
    )


def test_the_console_script_runs():
    exe = sys.executable.rsplit("/", 1)[0] + "/rebalancer"
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True)
    assert out.stdout == f"rebalancer {rebalancer.__version__}\n"


def test_help_and_version_import_only_the_component_asked_for():
    probe = (
        "import sys\n"
        "from rebalancer.cli import main\n"
        "for argv in (['--version'], ['--help'], ['consumers', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(sorted(m for m in ('pandas', 'pyspark', 'aiokafka', 'matplotlib', 'rebalancer.pipeline',\n"
        "                         'rebalancer.consumers.commands') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-1] == "['rebalancer.consumers.commands']"
