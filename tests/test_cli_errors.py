"""Bad input to any `rebalancer` command ends in one line on stderr and exit 2: no traceback, no hang.

Non-finite numbers are refused by argparse, for every numeric flag of every command; file-system
errors name the path; an unreachable Kafka names the servers; a handlers module that exits while
being imported names the file. Every case fails before Spark or a client starts, so all are cheap.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import command_tree
from rebalancer import cli

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "examples" / "shedding-reports"
# A regression here used to hang (`queue demo --seconds inf`): every subprocess has a deadline.
DEADLINE_S = 120
EXE = str(Path(sys.executable).with_name("rebalancer"))  # the console script, as a user runs it

# Every numeric flag, by command: (flag, "f" for a float, "i" for an integer).
NUMERIC_FLAGS: dict[tuple[str, ...], tuple[tuple[str, str], ...]] = {
    ("pipeline", "generate"): (
        ("--events", "i"), ("--types", "i"), ("--skew", "f"), ("--entities", "i"), ("--bad-rate", "f"),
        ("--seed", "i"), ("--minutes", "i"), ("--files", "i"),
    ),
    # The flags of RunRequest's fields are checked by RunRequest, in the library's words (issue 42,
    # item 18): tests/pipeline/test_pipeline_run_request_cli.py. Only the command's own are here.
    ("pipeline", "run"): (("--connect-timeout", "f"),),
    ("pipeline", "produce"): (
        ("--events", "i"), ("--types", "i"), ("--skew", "f"), ("--entities", "i"), ("--bad-rate", "f"),
        ("--seed", "i"), ("--rate", "f"), ("--linger-ms", "f"), ("--kafka-timeout", "f"),
    ),
    ("queue", "demo"): (
        ("--types", "i"), ("--seconds", "f"), ("--threads", "i"), ("--producers", "i"), ("--skew", "f"),
        ("--rebalance-ms", "f"), ("--top", "i"),
    ),
    ("pipeline", "postgres"): (("--port", "i"),),
    ("shedding", "simulate"): (("--minutes", "i"), ("--seed", "i"), ("--report-delay", "i"), ("--interval", "i")),
    ("shedding", "compare"): (
        ("--converge-target", "f"), ("--seed", "i"), ("--report-delay", "i"), ("--interval", "i"),
    ),
    ("shedding", "replay"): (
        ("--converge-target", "f"), ("--seed", "i"), ("--report-delay", "i"), ("--interval", "i"),
    ),
    ("shedding", "record"): (("--minutes", "i"), ("--seed", "i")),
    ("shedding", "watch"): (("--interval", "f"), ("--cycles", "i"), ("--timeout", "f"), ("--seed", "i")),
    ("consumers", "demo"): (
        ("--partitions", "i"), ("--flows", "i"), ("--rebalance-delay", "f"), ("--max-handoff-time", "f"),
        ("--unacked", "i"), ("--ack-after", "f"),
    ),
    ("produce", "demo"): (
        ("--brokers", "i"), ("--partitions", "i"), ("--messages", "i"), ("--rate", "f"), ("--linger-ms", "f"),
        ("--value-bytes", "i"),
    ),
    ("stop",): (("--grace", "f"),),
}
# What a command needs besides the flag under test, to get as far as checking it.
REQUIRED: dict[tuple[str, ...], list[str]] = {
    ("pipeline", "generate"): ["--out", "unused"],
    ("pipeline", "produce"): ["--bootstrap", "127.0.0.1:1", "--topic", "t"],
    ("shedding", "replay"): ["--reports", "unused"],
    ("shedding", "record"): ["--out", "unused"],
    ("shedding", "watch"): ["--admin-url", "http://127.0.0.1:1"],
}
CASES = [(command, flag, kind) for command, flags in NUMERIC_FLAGS.items() for flag, kind in flags]


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    return cli.build_parser()


def _rebalancer(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [EXE, *argv], capture_output=True, text=True, timeout=DEADLINE_S, cwd=cwd
    )


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The run's only stderr line, once it is known to have exited 2 without a traceback."""
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def _parse_error(parser: argparse.ArgumentParser, capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.rstrip("\n")


# -- 6 and 18: every numeric flag is a finite number ---------------------------------------------
def test_the_numeric_flags_listed_here_are_every_numeric_flag(parser):
    from rebalancer.pipeline.run_fields import SETTINGS

    found: dict[tuple[str, ...], set[str]] = {}
    for path, sub in command_tree(parser):
        for action in sub._actions:
            if not action.option_strings or action.type is None:
                continue
            if path == ("pipeline", "run") and action.dest in SETTINGS:
                continue  # RunRequest's: checked by it, not by argparse
            try:
                probe = action.type("1")  # type: ignore[operator]
            except (argparse.ArgumentTypeError, ValueError, TypeError):
                continue
            if isinstance(probe, int | float):
                found.setdefault(path, set()).add(action.option_strings[0])
    assert found == {command: {flag for flag, _ in flags} for command, flags in NUMERIC_FLAGS.items()}


@pytest.mark.parametrize("value", ["inf", "nan", "-inf", "1e999", "NaN"])
@pytest.mark.parametrize(("command", "flag", "kind"), CASES, ids=[f"{' '.join(c)} {f}" for c, f, _ in CASES])
def test_every_numeric_flag_refuses_what_is_not_a_finite_number(parser, capsys, command, flag, kind, value):
    err = _parse_error(parser, capsys, [*command, *REQUIRED.get(command, []), f"{flag}={value}"])
    wanted = r"must be a finite number( >=? [\d.]+)?( and <= \d+)?" if kind == "f" else r"expected an integer( >= \d+)?"
    assert re.fullmatch(rf"rebalancer {' '.join(command)}: error: argument {flag}: {wanted}, got '{value}'", err), err


@pytest.mark.parametrize(("argv", "message"), [
    (["pipeline", "generate", "--out", "x", "--seed=-1"], "argument --seed: must be an integer >= 0, got '-1'"),
    (["pipeline", "produce", "--bootstrap", "h:1", "--topic", "t", "--seed=-2"],
     "argument --seed: must be an integer >= 0, got '-2'"),
    (["shedding", "simulate", "--interval", "0"], "argument --interval: must be an integer >= 1, got '0'"),
    (["shedding", "compare", "--converge-target", "0"], "argument --converge-target: must be a finite number > 0, got '0'"),
    (["queue", "demo", "--seconds", "x"], "argument --seconds: expected a number, got 'x'"),
    (["queue", "demo", "--types", "1.5"], "argument --types: expected an integer, got '1.5'"),
])
def test_flags_without_a_later_check_are_checked_when_parsed(parser, capsys, argv, message):
    """Out-of-range values that would otherwise surface only once Spark runs, or not at all."""
    command = " ".join(argv[:2])
    assert _parse_error(parser, capsys, argv) == f"rebalancer {command}: error: {message}"


@pytest.mark.parametrize(("argv", "flag", "value"), [
    (["queue", "demo", "--seconds", "inf"], "--seconds", "inf"),  # used to run forever
    (["queue", "demo", "--seconds", "nan"], "--seconds", "nan"),  # used to exit 0 at once
    (["produce", "demo", "--messages", "10", "--rate", "nan"], "--rate", "nan"),  # used to exit 0
    (["queue", "demo", "--skew", "nan"], "--skew", "nan"),  # "Probabilities contain NaN"
])
def test_non_finite_flags_end_the_command_with_one_line_naming_the_flag(argv, flag, value):
    line = _one_line(_rebalancer(*argv))
    assert line == f"rebalancer {' '.join(argv[:2])}: error: argument {flag}: must be a finite number, got '{value}'"


def test_generate_with_a_nan_skew_names_the_flag_and_writes_nothing(tmp_path):
    out = tmp_path / "g"
    line = _one_line(_rebalancer("pipeline", "generate", "--out", str(out), "--events", "10", "--skew", "nan"))
    assert line == "rebalancer pipeline generate: error: argument --skew: must be a finite number, got 'nan'"
    assert not out.exists()


# -- 11: file-system and client errors name the path or the servers ------------------------------
def test_generate_into_a_file_names_it(tmp_path):
    file = tmp_path / "taken"
    file.write_text("not a directory\n")
    line = _one_line(_rebalancer("pipeline", "generate", "--out", str(file), "--events", "10"))
    assert line == f"rebalancer: error: out must be a directory, got a file: {file}"
    assert file.read_text() == "not a directory\n"


def test_generate_under_a_file_names_the_path(tmp_path):
    file = tmp_path / "taken"
    file.write_text("x")
    line = _one_line(_rebalancer("pipeline", "generate", "--out", str(file / "sub"), "--events", "10"))
    assert line == f"rebalancer: error: {file / 'sub'}: Not a directory"


def test_replay_plot_under_a_file_names_the_path(tmp_path):
    file = tmp_path / "taken"
    file.write_text("x")
    line = _one_line(_rebalancer("shedding", "replay", "--reports", str(REPORTS), "--plot", str(file / "x.png")))
    assert line == f"rebalancer: error: {file}: File exists"


def test_replay_of_reports_holding_a_directory_named_json_names_it(tmp_path):
    reports = tmp_path / "reports"
    shutil.copytree(REPORTS, reports)
    (reports / "x.json").mkdir()
    line = _one_line(_rebalancer("shedding", "replay", "--reports", str(reports)))
    assert line.startswith(f"rebalancer: error: {reports / 'x.json'}: ") and line.endswith("Is a directory"), line


def test_shedding_broker_conf_that_is_a_directory_names_it(tmp_path):
    line = _one_line(_rebalancer("shedding", "compare", "--broker-conf", str(tmp_path), "--small"))
    assert line.startswith("rebalancer: error: ") and str(tmp_path) in line, line


def test_produce_to_unreachable_brokers_names_them():
    done = _rebalancer("pipeline", "produce", "--bootstrap", "127.0.0.1:1", "--topic", "t", "--events", "10")
    assert _one_line(done) == (
        "rebalancer: error: bootstrap: cannot connect to any Kafka broker at 127.0.0.1:1 "
        "(127.0.0.1:1: Connection refused) (-v shows each attempt)"
    )


_RAISING_HANDLER = """\
import sys
import rebalancer.queue.commands as commands
from rebalancer import cli

def run_demo(args):
    {raise_}

commands.run_demo = run_demo
sys.exit(cli.main(["queue", "demo"]))
"""


@pytest.mark.parametrize(("imports", "raise_", "line"), [
    ("from aiokafka.errors import KafkaConnectionError",
     "raise KafkaConnectionError('Unable to bootstrap from [h:1]')",
     "rebalancer: error: Kafka: KafkaConnectionError: Unable to bootstrap from [h:1]"),
    ("from confluent_kafka import KafkaException",
     "raise KafkaException('Broker transport failure')",
     "rebalancer: error: Kafka: KafkaException: Broker transport failure"),
    ("", "raise PermissionError(13, 'Permission denied', '/srv/out')", "rebalancer: error: /srv/out: Permission denied"),
    ("", "raise OSError(18, 'Invalid cross-device link', '/a', None, '/b')",
     "rebalancer: error: /a -> /b: Invalid cross-device link"),
    ("", "raise OSError('the disk went away')", "rebalancer: error: the disk went away"),
])
def test_any_command_reports_client_and_os_errors_in_one_line(tmp_path, imports, raise_, line):
    """The safety net in `cli.main`, for a path that does not wrap the error itself."""
    probe = tmp_path / "probe.py"
    probe.write_text(imports + "\n" + _RAISING_HANDLER.format(raise_=raise_))
    done = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, timeout=DEADLINE_S)
    assert _one_line(done) == line


# -- 13: a handlers module that exits while being imported ---------------------------------------
@pytest.mark.parametrize(("source", "what"), [
    ("import sys\nsys.exit(3)\n", "the module called sys.exit(3) while being imported"),
    ("import sys\nsys.exit('no config')\n", "the module called sys.exit('no config') while being imported"),
    ("raise SystemExit\n", "the module called sys.exit() while being imported"),
    ("class Halt(BaseException):\n    pass\n\nraise Halt('stop here')\n", "failed to import: Halt: stop here"),
])
def test_a_handlers_module_that_exits_at_import_is_one_line_naming_the_file(tmp_path, source, what):
    handlers = tmp_path / "handlers.py"
    handlers.write_text(source)
    line = _one_line(_rebalancer("pipeline", "run", "--handlers", str(handlers), cwd=tmp_path))
    separator = " " if what.startswith("failed") else ": "
    assert line == f"rebalancer: error: handlers: {handlers}{separator}{what}"
    assert not (tmp_path / "data").exists()  # stopped before generating the sample input


def test_a_handlers_module_interrupted_at_import_is_still_an_interrupt(tmp_path):
    handlers = tmp_path / "handlers.py"
    handlers.write_text("raise KeyboardInterrupt\n")
    done = _rebalancer("pipeline", "run", "--handlers", str(handlers), cwd=tmp_path)
    assert (done.returncode, done.stderr) == (130, "rebalancer: interrupted\n")


def test_handlers_that_is_a_directory_says_so(tmp_path):
    line = _one_line(_rebalancer("pipeline", "run", "--handlers", str(tmp_path), cwd=tmp_path))
    assert line == f"rebalancer: error: handlers: {tmp_path} is a directory, not a Python file"


def test_produce_to_unreachable_brokers_with_v_shows_each_attempt_then_the_line():
    """Without -v aiokafka's own ERROR lines are kept off stderr; -v shows them, as the error says."""
    done = _rebalancer("-v", "pipeline", "produce", "--bootstrap", "127.0.0.1:1", "--topic", "t", "--events", "10")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert any('ERROR aiokafka: Unable connect to "127.0.0.1:1"' in line for line in lines[:-1]), done.stderr
    assert lines[-1] == (
        "rebalancer: error: bootstrap: cannot connect to any Kafka broker at 127.0.0.1:1 "
        "(127.0.0.1:1: Connection refused) (-v shows each attempt)"
    )


# -- issue 33 follow-ups: one number grammar; flags checked before the work ------------------------
@pytest.mark.parametrize(("argv", "message"), [
    # int() took these: '_' between digits, non-ASCII digits, Unicode spaces
    (["pipeline", "generate", "--out", "x", "--events", "1_0"], "argument --events: expected an integer, got '1_0'"),
    (["queue", "demo", "--types", "\u20034"], "argument --types: expected an integer, got '\\u20034'"),
    (["pipeline", "generate", "--out", "x", "--seed", "٣"], "argument --seed: expected an integer >= 0, got '٣'"),
    # and float() these
    (["pipeline", "generate", "--out", "x", "--skew", "1_5"], "argument --skew: expected a number, got '1_5'"),
    (["queue", "demo", "--seconds", "٣"], "argument --seconds: expected a number, got '٣'"),
    (["shedding", "compare", "--converge-target", "１"], "argument --converge-target: expected a number, got '１'"),
])
def test_numeric_flags_take_the_strict_grammar_of_the_library(parser, capsys, argv, message):
    command = " ".join(argv[:2])
    assert _parse_error(parser, capsys, argv) == f"rebalancer {command}: error: {message}"


def test_numeric_flags_still_take_surrounding_ascii_whitespace_and_a_sign(parser):
    args = parser.parse_args(["pipeline", "generate", "--out", "x", "--events", " 12\t", "--skew", "+1.5e0 "])
    assert (args.events, args.skew) == (12, 1.5)


def test_simulate_plot_into_a_directory_is_refused_naming_the_flag(tmp_path):
    """matplotlib would write DIR.png while the command printed `plot: DIR`, and exited 0."""
    line = _one_line(_rebalancer("shedding", "simulate", "--small", "--plot", str(tmp_path)))
    assert line == f"rebalancer: error: --plot must be a PNG file to write, got the directory {str(tmp_path)!r}"
    assert list(tmp_path.parent.glob(f"{tmp_path.name}.png")) == []


def test_replay_plot_into_a_directory_is_refused_naming_the_flag(tmp_path):
    line = _one_line(_rebalancer("shedding", "replay", "--reports", str(REPORTS), "--plot", str(tmp_path)))
    assert line == f"rebalancer: error: --plot must be a PNG file to write, got the directory {str(tmp_path)!r}"


def test_simulate_plot_without_a_suffix_prints_the_file_written(tmp_path):
    """The path is wider than the 80 columns of a pipe: it stays whole on a line of its own, to be
    copied (it was cut in two at the 80th column)."""
    where = tmp_path / ("plots-" * 12)
    where.mkdir()
    done = _rebalancer("shedding", "simulate", "--small", "--plot", str(where / "usage"))
    assert done.returncode == 0, done.stderr
    assert (where / "usage.png").stat().st_size > 1000 and not (where / "usage").exists()
    assert done.stdout.splitlines()[-2:] == ["plot:", str(where / "usage.png")]


@pytest.mark.parametrize("under", [False, True])
def test_run_with_a_report_dir_that_is_a_file_is_refused_before_any_work(tmp_path, under):
    """It used to fail at the very end, after the run, with `FILE: File exists`."""
    file = tmp_path / "taken"
    file.write_text("x")
    report_dir = file / "sub" if under else file
    missing = tmp_path / "missing.csv"  # checked after --report-dir: this run does no work either way
    line = _one_line(_rebalancer("pipeline", "run", "--input", str(missing), "--output", str(tmp_path / "out"),
                                 "--report-dir", str(report_dir), cwd=tmp_path))
    shown = f"report-dir must be a directory, got a file: {file}" if not under else (
        f"report-dir: cannot create {report_dir}: {file} is not a directory"
    )
    assert line == f"rebalancer: error: {shown}"
    assert file.read_text() == "x" and not (tmp_path / "out").exists()


@pytest.mark.kafka
def test_produce_whose_deliveries_fail_names_the_servers_the_topic_and_the_count():
    """The cluster refuses every produce request (INVALID_RECORD, not retriable)."""
    from rebalancer.testing import MockKafkaCluster

    with MockKafkaCluster(brokers=1) as cluster:
        cluster.create_topic("refused", 1)
        cluster.push_request_errors(0, [87] * 1000)  # api key 0: Produce
        done = _rebalancer("pipeline", "produce", "--bootstrap", cluster.bootstrap_servers, "--topic", "refused",
                           "--events", "10")
        line = _one_line(done)
    assert line.startswith(
        f"rebalancer: error: Kafka at {cluster.bootstrap_servers}, topic 'refused': 10 of 10 message(s) failed: "
    ), line


@pytest.mark.parametrize(
    ("argv", "flag", "wanted", "value"),
    [
        (["pipeline", "produce", *REQUIRED[("pipeline", "produce")]], "--kafka-timeout", "> 0 and <= 900", "1e12"),
        (["pipeline", "produce", *REQUIRED[("pipeline", "produce")]], "--linger-ms", ">= 0 and <= 900000", "1e12"),
        (["pipeline", "produce", *REQUIRED[("pipeline", "produce")]], "--linger-ms", ">= 0 and <= 900000", "-1"),
        (["produce", "demo"], "--linger-ms", ">= 0 and <= 900000", "1e7"),
    ],
)
def test_a_flag_out_of_the_producers_range_is_refused_by_the_flags_name(argv, flag, wanted, value):
    """Finding: `--kafka-timeout 1e12` was refused by librdkafka's key and its unit (`request.timeout.ms
    ... 1..900000`), `--linger-ms` by `broker.linger.ms`, after the events were made."""
    pytest.importorskip("aiokafka")
    line = _one_line(_rebalancer(*argv, flag, value))
    prog = f"rebalancer {argv[0]} {argv[1]}"
    assert line == f"{prog}: error: argument {flag}: must be a finite number {wanted}, got {value!r}"


def test_the_produce_flags_bounds_are_the_producers_ranges():
    pytest.importorskip("aiokafka")
    from rebalancer.pipeline.kafka.commands import LINGER_MAX_MS, REQUEST_TIMEOUT_MAX_S
    from rebalancer.produce.config import NUMBER_RANGES

    assert REQUEST_TIMEOUT_MAX_S * 1000 == NUMBER_RANGES["request.timeout.ms"].high
    assert NUMBER_RANGES["request.timeout.ms"].low == 1  # the flag's smallest value is sent as 1 ms
    assert LINGER_MAX_MS == NUMBER_RANGES["broker.linger.ms"].high and NUMBER_RANGES["broker.linger.ms"].low == 0
