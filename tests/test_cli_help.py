"""Issue 46, items 3 and 4: every sub-command's `--help` works without its extra and says which
extra it needs; defaults are written one way, `(default: X)`; help and error lines wrap at spaces
to the terminal's width.

An install without an extra is a subprocess whose import of the extra's packages fails (a meta-path
finder that refuses them), as on a machine where pip never installed them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from cli_helpers import blocker, command_tree
from rebalancer import cli
from rebalancer._command import COMMAND_EXTRAS, COMPONENT_EXTRAS

DEADLINE_S = 120

# Runs `rebalancer ARGV...` with the top-level packages in argv[1] (comma-separated) unimportable.
BLOCKED = blocker('set(sys.argv[1].split(","))')
WITHOUT = BLOCKED + "from rebalancer.cli import main\n\nsys.exit(main(sys.argv[2:]))\n"
KAFKA = "aiokafka,confluent_kafka"
SPARK = "pyspark,pandas,pyarrow,matplotlib"
RICH = "rich"


def _env(columns: int | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return env


def without(blocked: str, *argv: str, columns: int | None = 100) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT, blocked, *argv],
        capture_output=True, text=True, timeout=DEADLINE_S, env=_env(columns),
    )  # fmt: skip


def flat(text: str) -> str:
    return " ".join(text.split())


# -- item 4: help without the extra -----------------------------------------------------------------
def test_produce_help_lists_demo_and_names_the_kafka_extra_without_it():
    done = without(KAFKA, "produce", "--help")
    assert (done.returncode, done.stderr) == (0, "")
    assert re.search(r"^    demo +send messages through BatchingProducer", done.stdout, re.M), done.stdout
    assert flat(done.stdout).endswith(
        "Needs the 'cli' and 'kafka' extras: pip install 'partition-rebalancer[cli,kafka]' "
        "(not installed here: aiokafka, confluent_kafka)"
    )


def test_produce_demo_help_exits_0_with_its_flags_and_the_extra():
    done = without(KAFKA, "produce", "demo", "--help")
    assert (done.returncode, done.stderr) == (0, "")
    text = flat(done.stdout)
    assert text.startswith("usage: rebalancer produce demo [-h] [--brokers BROKERS]")
    assert "--messages MESSAGES messages to send, round-robin over the partitions (default: 50000)" in text
    assert "--linger-ms LINGER_MS broker.linger.ms: how long a broker's batch waits (default: 500)" in text
    assert text.endswith("(not installed here: aiokafka, confluent_kafka)")


def test_produce_demo_without_the_extra_is_one_line_and_exit_2():
    done = without(KAFKA, "produce", "demo", "--messages", "10", columns=None)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", (
        "rebalancer: error: rebalancer produce needs aiokafka, confluent_kafka, from the 'kafka' extra: "
        "pip install 'partition-rebalancer[kafka]'\n"
    ))
    bad_flag = without(KAFKA, "produce", "demo", "--messages", "x", columns=None)  # argparse still checks
    assert (bad_flag.returncode, bad_flag.stderr) == (
        2, "rebalancer produce demo: error: argument --messages: expected an integer, got 'x'\n"
    )


def test_the_top_help_marks_the_component_whose_extra_is_missing():
    done = without(KAFKA, "--help", columns=200)
    assert done.returncode == 0
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("    produce")]
    assert line.endswith("[needs: pip install 'partition-rebalancer[kafka]']")
    assert "[needs" not in "".join(line for line in done.stdout.splitlines() if line.startswith("    queue"))


@pytest.mark.parametrize(("argv", "flag"), [
    (["queue", "demo"], "--rebalance-ms REBALANCE_MS throughput rebalancing interval; 0 turns it off (default: 0)"),
    (["shedding", "compare"], "--seed SEED random seed; runs are reproducible (default: 0)"),
    (["consumers", "demo"], "--partitions PARTITIONS"),
])
def test_without_rich_the_help_lists_every_flag_and_a_run_names_the_cli_extra(argv, flag):
    shown = without(RICH, *argv, "--help")
    assert (shown.returncode, shown.stderr) == (0, "")
    text = flat(shown.stdout)
    assert flag in text
    assert text.endswith(
        "Needs the 'cli' extra: pip install 'partition-rebalancer[cli]' (not installed here: rich)"
    )
    used = without(RICH, *argv, columns=None)
    assert (used.returncode, used.stderr) == (2, (
        f"rebalancer: error: rebalancer {argv[0]} needs rich, from the 'cli' extra: "
        "pip install 'partition-rebalancer[cli]'\n"
    ))


def test_without_spark_the_pipelines_help_works_and_names_the_extra():
    needs = (
        "Needs the 'cli' and 'spark' extras: pip install 'partition-rebalancer[cli,spark]' "
        "(not installed here: pyspark, pandas, pyarrow, matplotlib)"
    )
    for argv in (["pipeline", "--help"], ["pipeline", "run", "--help"], ["pipeline", "generate", "-h"]):
        done = without(SPARK, *argv)
        assert (done.returncode, done.stderr) == (0, ""), argv
        assert flat(done.stdout).endswith(needs), (argv, done.stdout)
    used = without(SPARK, "pipeline", "run", columns=None)
    assert (used.returncode, used.stderr) == (2, (
        "rebalancer: error: rebalancer pipeline needs pyspark, pandas, pyarrow, matplotlib, from the 'spark' "
        "extra: pip install 'partition-rebalancer[spark]'\n"
    ))


def test_a_package_read_for_its_help_still_refuses_to_import_without_its_extra():
    """The produce package's commands load with its extra check deferred; a later import of the
    package in that process raises as before, the package's attribute included."""
    probe = BLOCKED + (
        "from rebalancer.cli import build_parser\n"
        "build_parser(['produce'])\n"
        "from rebalancer._extras import MissingExtraError\n"
        "import rebalancer\n"
        "assert getattr(rebalancer, 'produce', None) is None\n"
        "try:\n"
        "    import rebalancer.produce\n"
        "except MissingExtraError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, KAFKA], capture_output=True, text=True, timeout=DEADLINE_S)
    assert (done.returncode, done.stdout) == (0, (
        "rebalancer.produce needs aiokafka, from the 'kafka' extra: pip install 'partition-rebalancer[kafka]'\n"
    )), done.stderr


def test_every_sub_command_of_an_extras_component_names_its_extras():
    for path, parser in command_tree(cli.build_parser()):
        if not path:
            continue
        extras = COMMAND_EXTRAS.get(" ".join(path), COMPONENT_EXTRAS.get(path[0], ("cli",)))
        text = flat(parser.format_help())
        if extras:
            wanted = f"pip install 'partition-rebalancer[{','.join(extras)}]'"
            assert text.endswith(wanted), (path, text[-200:])
        else:
            assert "Needs the" not in text, path


# -- item 4: defaults, one way ------------------------------------------------------------------------
def test_every_help_page_writes_each_default_as_default_colon(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    pages = 0
    for path, parser in command_tree(cli.build_parser()):
        pages += 1
        text = flat(parser.format_help())
        for match in re.finditer("default", text, re.I):
            assert text[match.start() - 1 : match.end() + 2] == "(default: ", (path, text[match.start() - 80 : match.end() + 20])
        # no second parenthesis before it, as in "(0 = off) (default: 0)"
        assert not re.search(r"\) \(default: ", text), (path, re.search(r".{60}\) \(default: .{20}", text))
        assert not re.search(r"\(default: [^)]*\) \(default", text), path
    assert pages >= 17


def test_a_float_default_is_written_as_typed():
    text = flat(cli.build_parser().format_help())  # the top page: no flag with a default
    assert "(default" not in text
    demo = dict(command_tree(cli.build_parser()))[("queue", "demo")]
    shown = flat(demo.format_help())
    assert "how long producers run (default: 3)" in shown and "(default: 3.0)" not in shown
    assert "Zipf exponent of per-type volume (default: 1.1)" in shown


# -- item 3: wrapping -----------------------------------------------------------------------------------
def test_every_help_page_fits_80_columns_and_keeps_words_whole(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    for path, parser in command_tree(cli.build_parser()):
        lines = parser.format_help().splitlines()
        assert max(len(line) for line in lines) <= 80, (path, max(lines, key=len))
    text = cli.build_parser().format_help()
    assert "  rebalancer queue demo --rebalance-ms 500  # a skewed load on the BatchQueue" in text.splitlines()


def test_the_top_examples_wrap_as_comments_on_a_narrow_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "52")
    lines = cli.build_parser().format_help().splitlines()
    assert max(len(line) for line in lines) <= 52
    start = lines.index("examples:") + 1
    examples = lines[start : lines.index("", start)]
    # Each command is whole on its line, under its comment; every comment line starts with "#".
    assert examples[:3] == ["  # the Spark job, results in out/", "  rebalancer pipeline run", "  # a 4th flow joins 7 partitions"]
    assert "  rebalancer queue demo --rebalance-ms 500" in examples
    assert all(line.lstrip().startswith(("#", "rebalancer ")) for line in examples if line.strip())


def _message(done: subprocess.CompletedProcess[str]) -> str:
    return " ".join(done.stderr.split())


@pytest.mark.parametrize("argv", [
    ["shedding", "simulate", "--small", "--scenario", "no-such-scenario"],  # a handler's ValueError
    ["queue", "demo", "--types", "many"],  # argparse's
])
def test_a_long_error_line_wraps_at_spaces_to_the_width(argv):
    exe = [sys.executable, "-m", "rebalancer.cli", *argv]
    whole = subprocess.run(exe, capture_output=True, text=True, timeout=DEADLINE_S, env=_env(None))
    assert whole.returncode == 2 and whole.stderr.count("\n") == 1  # a pipe, no COLUMNS: one line, for grep
    assert len(whole.stderr) > 40
    narrow = subprocess.run(exe, capture_output=True, text=True, timeout=DEADLINE_S, env=_env(40))
    lines = narrow.stderr.splitlines()
    assert narrow.returncode == 2 and len(lines) > 1
    assert all(len(line) <= 40 for line in lines), lines
    assert all(line.startswith("  ") for line in lines[1:])
    # Joined again, the words are the one line's: none was cut.
    assert _message(narrow) == _message(whole)
    assert narrow.stderr.split() == whole.stderr.split()
