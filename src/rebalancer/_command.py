"""The `rebalancer` command's machinery: the parser, logging, and the one-line error ladder.

`rebalancer.cli` is the command; this module is what it and the other entry points
(`python -m rebalancer.pipeline`, the file spark-submit runs, `python -m rebalancer.pipeline.ship`)
share, so that no component imports `rebalancer.cli` (which imports every component). The
components and the error explainers are named here as data and imported by name: a component's
commands when the command line names it, an explainer only once its library is loaded (an error of
a library never imported cannot have been raised, and `--help` must import no PySpark).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import shutil
import sys
import textwrap
import traceback
from collections.abc import Callable, Collection, Iterator, Sequence
from types import ModuleType
from typing import NamedTuple, TextIO

from rebalancer import DISTRIBUTION, __version__
from rebalancer._extras import MissingExtraError, deferred_extras, require_extra
from rebalancer._secrets import MaskedFormatter, masked_text

EXIT_USAGE = 2
EXIT_FAILURE = 1  # what Python exits with on an uncaught exception
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# The examples are kept as written (wrapped only where the terminal is narrower than 80 columns).
DESCRIPTION = """\
Keep partitioned work balanced, at every level: the Spark tasks of a job, the drain threads of an
in-process queue, the consumer flows of a partitioned queue, the requests of a Kafka producer, and
the brokers of a cluster. Each command below but `stop` is one of those components; run `rebalancer
COMPONENT --help` for its sub-commands. The main job is `rebalancer pipeline run` (what `make run`
does).

examples:
  rebalancer pipeline run                   # the Spark job, results in out/
  rebalancer consumers demo                 # a 4th flow joins 7 partitions
  rebalancer queue demo --rebalance-ms 500  # a skewed load on the BatchQueue
  rebalancer shedding compare --small       # Pulsar's shedders against ours
  rebalancer stop                           # stop what this project started
"""

# (sub-command, module with register(parser), help, one-paragraph description)
COMPONENTS: tuple[tuple[str, str, str, str], ...] = (
    (
        "pipeline",
        "rebalancer.pipeline.commands",
        "the Spark telemetry pipeline, with tasks balanced by measured load (the main job)",
        "A PySpark job that validates telemetry rows and computes per-type metrics with one pandas "
        "handler per type. Spark's hash partitioning puts hot types together and leaves a few "
        "straggler tasks; here types are assigned to tasks by their measured row counts instead, "
        "and hot types are split. `generate` writes a skewed sample; `run` processes it and writes "
        "metrics, a summary and an HTML report. Needs the 'spark' extra.",
    ),
    (
        "queue",
        "rebalancer.queue.commands",
        "the in-process BatchQueue: typed handlers drained by a few threads",
        "BatchQueue buffers items in partitions that a few drain threads empty in batches, calling "
        "one handler per item type, never concurrently. With throughput rebalancing on, partitions "
        "move between drain threads so that every thread carries a similar load. `demo` pushes a "
        "skewed workload through one and prints its statistics.",
    ),
    (
        "shedding",
        "rebalancer.shedding.commands",
        "broker load shedding: watch a Pulsar cluster, simulate one, compare strategies",
        "Apache Pulsar's load-shedding and placement strategies and ours. `watch` runs them on a live "
        "cluster's load reports through its admin API, records them and (with --apply) acts; a "
        "cluster simulator runs them on scenarios such as a hot broker, over-placement and uneven "
        "bundles: `simulate` runs one strategy on one scenario, `compare` runs them all and prints the "
        "measured table, `replay` runs one on recorded reports. Plots need the 'plots' extra, `watch` "
        "the 'pulsar' extra.",
    ),
    (
        "consumers",
        "rebalancer.consumers.commands",
        "consumer flows on a partitioned queue: holddown, graceful handoff, statuses",
        "Which consumer flow owns which partition of a partitioned queue, and how that changes when "
        "flows bind and unbind: a holddown lets the membership settle, then partitions move one at "
        "a time, each paused until its old owner has acked what it holds. `demo` replays the "
        "seven-partition example of Solace's documentation, event by event.",
    ),
    (
        "produce",
        "rebalancer.produce.commands",
        "a Kafka producer that sends one request per broker, not one per partition",
        "BatchingProducer lingers at the broker level: everything bound for one broker leaves in "
        "one ProduceRequest, so a producer writing to many partitions sends far fewer requests. "
        "`demo` runs it against a local mock Kafka cluster and prints the requests the brokers "
        "counted. Needs the 'kafka' extra.",
    ),
    (
        "stop",
        "rebalancer._stop",
        "stop what this project started and left running: Kafka brokers, PostgreSQL, Spark's JVMs",
        "Stop the processes this project started that still run (a test's Kafka brokers, a private "
        "PostgreSQL server, the JVM of a stuck Spark run, a stream run), found by the pid files their "
        "starters write, and nothing else: never another user's Spark or Kafka. Each is checked to be "
        "the process that was recorded (a pid is reused), asked to stop, and killed if it has not "
        "stopped within --grace seconds.",
    ),
)


Component = tuple[str, str, str, str]

# The extras a component's sub-commands need to run: each prints with rich ('cli'), and the pipeline
# and the producer need their own. Their `--help` needs none, and names them.
COMPONENT_EXTRAS: dict[str, tuple[str, ...]] = {
    "pipeline": ("cli", "spark"),
    "produce": ("cli", "kafka"),
    "stop": (),
}
# Sub-commands that always need more than their component: the producer's Kafka client, the watch's
# HTTP client. (Extras a flag brings in, such as a kafka:// input, are named by the flag's error.)
COMMAND_EXTRAS: dict[str, tuple[str, ...]] = {
    "pipeline produce": ("cli", "spark", "kafka"),
    "shedding watch": ("cli", "pulsar"),
}


class Explained(NamedTuple):
    """An explainer's account of an error: the line after `rebalancer: error: `, and whether the
    traceback goes above it."""

    line: str
    traceback: bool = False


# (module that explains an error, the modules whose loading makes it needed). An explainer has
# `explain(exc, verbose) -> Explained | None` and `log_note(exc) -> str`.
EXPLAINERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("rebalancer.pipeline.session.errors", ("pyspark.errors", "py4j.protocol", "rebalancer.pipeline.session.quiet")),
    ("rebalancer._kafka_errors", ("aiokafka.errors", "confluent_kafka")),
)


class UsageError(Exception):
    """A mistake the user can fix; reported in one line with exit code 2."""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows every flag's default, one way: `(default: X)`, a float as `%g` writes it (`10`, not
    `10.0`); a help text that says its default itself says it so. Keeps indented blocks (examples)
    of a description as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help_text = action.help or ""
        default = action.default
        if (
            default is None
            or isinstance(default, bool)
            or default is argparse.SUPPRESS
            or isinstance(action, argparse._CountAction)  # -v's 0 says nothing
            or "default" in help_text
            or not (action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE))
        ):
            return help_text
        shown = f"{default:g}" if isinstance(default, float) else str(default)
        return f"{help_text} (default: {shown.replace('%', '%%')})"

    def _split_lines(self, text: str, width: int) -> list[str]:
        """At spaces only: `pip install 'partition-rebalancer[spark]'` or a URL must stay copyable."""
        return _wrap(" ".join(text.split()), width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        """Paragraphs filled; a block whose lines after the first are indented (examples) kept as
        written, except that a line wider than the terminal wraps at spaces under its own indent (a
        `# comment` continues as a comment)."""
        blocks = []
        for block in text.strip("\n").split("\n\n"):
            lines = block.splitlines()
            if len(lines) > 1 and all(line.startswith("  ") for line in lines[1:]):
                blocks.append("\n".join(kept for line in lines for kept in _kept_line(indent + line, width)))
            else:
                blocks.append("\n".join(indent + line for line in _wrap(" ".join(block.split()), width - len(indent))))
        return "\n\n".join(blocks)


def _wrap(text: str, width: int, hang: str = "") -> list[str]:
    """`text` in lines of at most `width`, broken at spaces only: never inside a word, a flag, a path
    or a URL (a word wider than the line stays whole, on its own line)."""
    return textwrap.wrap(
        text, max(width, len(hang) + 20), subsequent_indent=hang, break_long_words=False, break_on_hyphens=False
    ) or [""]


def _kept_line(line: str, width: int) -> list[str]:
    """An example line as written if it fits, else wrapped at spaces: a shell comment's tail after
    `# ` under its `#`, a command's under its indent plus four."""
    if len(line) <= width:
        return [line]
    command, mark, comment = line.partition("  # ")
    if mark and len(command.rstrip()) <= width:
        at = len(command) + 2
        if width - at >= 20:  # the comment's column leaves room: continue it there
            first, *rest = _wrap(comment, width - at - 2)
            return [f"{command}  # {first}", *(" " * at + "# " + more for more in rest)]
        indent = " " * (len(line) - len(line.lstrip()))
        return [*(f"{indent}# {part}" for part in _wrap(comment, width - len(indent) - 2)), command.rstrip()]
    indent = " " * (len(line) - len(line.lstrip()))
    return _wrap(line, width, hang=indent + "    ")


def terminal_width(stream: TextIO) -> int | None:
    """The width lines written to `stream` must fit: COLUMNS when set (what rich's console and argparse
    read too), else the terminal's if `stream` is one; None for a pipe or a file, where a line is
    left whole for whatever reads it."""
    columns = os.environ.get("COLUMNS", "")
    if columns.strip().isdigit() and int(columns) > 0:
        return int(columns)
    try:
        if stream.isatty():
            return shutil.get_terminal_size().columns
    except (AttributeError, ValueError, OSError):  # a replaced or closed stream
        pass
    return None


def fitted(text: str, stream: TextIO = sys.stderr) -> str:
    """`text` wrapped at spaces to `stream`'s width (see terminal_width), continuation lines indented
    by two: an error line wider than the terminal wraps where a reader expects, never mid-word."""
    width = terminal_width(stream)
    if width is None:
        return text
    return "\n".join(part for line in text.split("\n") for part in _wrap(line, width, hang="  "))


def print_error(text: str) -> None:
    """One error on stderr, fitted to the terminal."""
    print(fitted(text, sys.stderr), file=sys.stderr)


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus the error; we print one line and exit 2. Every parser in the tree
    (sub-parsers inherit the class) shows flag defaults."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, fitted(f"{self.prog}: error: {message}") + "\n")


def _raises(exc: MissingExtraError) -> Callable[[argparse.Namespace], int]:
    """The handler of a sub-command whose extra is missing: the error that names it, and no work."""

    def handler(args: argparse.Namespace) -> int:
        raise exc

    return handler


def _missing(name: str, extras: Sequence[str]) -> list[MissingExtraError]:
    """For each of `extras` not installed, the error naming it and what it lacks (nothing is imported)."""
    found = []
    for extra in extras:
        try:
            require_extra(f"rebalancer {name}", extra)
        except MissingExtraError as exc:
            found.append(exc)
    return found


def _needs_line(extras: Sequence[str], missing: Sequence[MissingExtraError]) -> str:
    """What a component's help says it needs: `needs the 'cli' and 'kafka' extras: pip install ...`."""
    quoted = [f"'{extra}'" for extra in extras]
    names = " and ".join([", ".join(quoted[:-1]), quoted[-1]] if len(quoted) > 2 else quoted)
    line = f"Needs the {names} extra{'s' * (len(extras) > 1)}: pip install '{DISTRIBUTION}[{','.join(extras)}]'"
    if missing:
        line += f" (not installed here: {', '.join(m for exc in missing for m in exc.missing)})"
    return line


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """`parser` and every sub-command's parser below it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # an alias maps to its parser again
                yield from _parsers(sub)


def _register_without(component: argparse.ArgumentParser, module_name: str, missing: MissingExtraError) -> None:
    """The component's sub-commands and flags for `--help` on an install without its extra: its
    commands module loaded with the extra's checks deferred (`deferred_extras`), every handler
    replaced by the error naming the extra, and the modules loaded that way forgotten (an import
    of the package later raises as before). A commands module that needs the extra's packages to
    load at all leaves the component taking any arguments, its `--help` naming the extra."""
    before = set(sys.modules)
    try:
        with deferred_extras() as deferred:
            importlib.import_module(module_name).register(component)
    except ImportError:
        deferred = [missing]
        component.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        component.set_defaults(func=_raises(missing), help_of=component)
    finally:
        if deferred:
            for name in set(sys.modules) - before:
                if name.startswith("rebalancer."):
                    del sys.modules[name]
                    parent, _, child = name.rpartition(".")  # `from rebalancer import produce` reads it
                    if parent in sys.modules and getattr(sys.modules[parent], child, None) is not None:
                        delattr(sys.modules[parent], child)
    for parser in _parsers(component):
        if parser.get_default("func") is not None:
            parser.set_defaults(func=_raises(missing))


def build_parser(components: Sequence[Component], load: Collection[str] | None = None) -> argparse.ArgumentParser:
    """Every component's commands. A module that fails to import is an error, except for a missing
    optional extra: the component stays listed, marked, its sub-commands' `--help` works and names
    the extra (see `_register_without`), and running one is one line saying what to install. Every
    page of a component says the extras it needs (COMPONENT_EXTRAS).

    `load` names the components whose commands are imported (None: all of them); the others are
    listed with their help only, so `rebalancer --help` and `--version` import no Spark or pandas,
    and work on a core install (numpy only, without the 'cli' extra).
    """
    parser = OneLineParser(prog="rebalancer", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="-v: the project's INFO logs (stages, plans, moves); -vv: its debug logs, other libraries' "
        "INFO and Spark's and the JVM's startup output; -vvv: Py4J's debug output too (a line per JVM call, "
        "its text arguments as ***)",
    )
    sub = parser.add_subparsers(dest="component", metavar="COMPONENT", parser_class=OneLineParser)
    sub.required = True
    for name, module_name, help_text, description in components:
        extras = COMPONENT_EXTRAS.get(name, ("cli",))
        missing = _missing(name, extras)
        if missing:
            help_text += f" [needs: pip install '{DISTRIBUTION}[{','.join(exc.extra for exc in missing)}]']"
        component = sub.add_parser(name, help=help_text, description=description)
        if load is not None and name not in load:
            continue
        if missing:
            _register_without(component, module_name, missing[0])
        else:
            importlib.import_module(module_name).register(component)
        for command in _parsers(component):
            own = COMMAND_EXTRAS.get(command.prog.removeprefix("rebalancer "))
            if own is None and not extras:
                continue
            epilog = _needs_line(own, _missing(name, own)) if own is not None else _needs_line(extras, missing)
            command.epilog = f"{command.epilog}\n\n{epilog}" if command.epilog else epilog
    return parser


def configure_logging(verbose: int) -> None:
    """0: warnings; -v: our INFO (stages, plans, moves); -vv: our DEBUG and the INFO of the libraries
    (and Spark's startup output); -vvv: everything, Py4J's line-per-call DEBUG included (its string and
    bytes arguments as ***: rebalancer.pipeline.session.py4j_log).

    aiokafka logs each failed connection at ERROR before it raises; the command reports that error
    itself in one line, so without -v aiokafka's own lines are kept off stderr."""
    root = logging.DEBUG if verbose >= 3 else logging.INFO if verbose == 2 else logging.WARNING
    console = logging.StreamHandler()
    console.setFormatter(MaskedFormatter(LOG_FORMAT))  # a library's record may quote a URI whole
    logging.basicConfig(level=root, handlers=[console])
    logging.getLogger().setLevel(root)  # also when a handler was there already (basicConfig skips)
    ours = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.getLogger("rebalancer").setLevel(ours)
    logging.getLogger("py4j").setLevel(logging.DEBUG if verbose >= 3 else logging.WARNING)
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL if verbose <= 0 else logging.NOTSET)


def run_command(argv: Sequence[str], build: Callable[[Collection[str]], argparse.ArgumentParser]) -> int:
    """Parse `argv` with the parser `build(components to load)` makes, run its handler, and turn what
    a user can fix into one line on stderr and exit code 2 (a traceback only for what no one foresaw)."""
    argv = list(argv)
    # The top-level options take no values, so the first other word names the component.
    component = next((word for word in argv if not word.startswith("-")), None)
    parser = build([component] if component else [])
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    handler = getattr(args, "func", None)
    if handler is None:
        parser.exit(EXIT_USAGE, fitted(f"rebalancer {args.component}: error: a sub-command is required") + "\n")
    help_of = getattr(args, "help_of", None)
    if help_of is not None and {"-h", "--help"} & set(args.rest):  # a component whose extra is missing
        help_of.print_help()
        return 0
    try:
        return int(handler(args) or 0)
    except (UsageError, ValueError, MissingExtraError) as exc:
        # masked_text: the last guard for a URI's password in a message that quotes one whole
        print_error(f"rebalancer: error: {masked_text(str(exc))}{_log_note()}")
        return EXIT_USAGE
    except OSError as exc:  # FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError...
        print_error(f"rebalancer: error: {masked_text(_os_error(exc))}{_log_note()}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        print_error(f"rebalancer: interrupted{_log_note()}")
        return 130
    except Exception as exc:
        for explainer in _explainers():
            explained = explainer.explain(exc, args.verbose)
            if explained is not None:
                if explained.traceback:
                    print_traceback(exc)
                print_error(f"rebalancer: error: {explained.line}")
                return EXIT_USAGE
        print_traceback(exc)  # a failure no command foresaw, verbose or not
        return EXIT_FAILURE


def main(argv: Sequence[str] | None = None) -> int:
    """The whole command, for the entry points that are not `rebalancer.cli`."""
    return run_command(sys.argv[1:] if argv is None else argv, lambda load: build_parser(COMPONENTS, load))


def _explainers() -> list[ModuleType]:
    """The explainers whose library this process has loaded (see EXPLAINERS). One that cannot load
    (PySpark without the rest of the 'spark' extra) explains nothing: the error keeps its traceback."""
    found = []
    for module, triggers in EXPLAINERS:
        if any(trigger in sys.modules for trigger in triggers):
            try:
                found.append(importlib.import_module(module))
            except ImportError:  # MissingExtraError is one
                continue
    return found


def _log_note() -> str:
    """What an explainer adds to every error line (the pipeline: where Spark's log is), or ""."""
    return "".join(explainer.log_note(None) for explainer in _explainers())


def imported_errors(*bases: tuple[str, str]) -> tuple[type[BaseException], ...]:
    """The error classes `(module, name)` of the modules already imported: an error of a library that
    was never imported cannot have been raised, and `--help` must not import one."""
    found: list[type[BaseException]] = []
    for module_name, class_name in bases:
        module = sys.modules.get(module_name)
        if module is not None:
            found.append(getattr(module, class_name))
    return tuple(found)


def print_traceback(exc: BaseException) -> None:
    """The traceback Python would print, each URL in it masked (a Java error quotes the input's URI
    whole): nothing printed is unmasked, verbose or not."""
    print(masked_text("".join(traceback.format_exception(exc))), end="", file=sys.stderr)


def _os_error(exc: OSError) -> str:
    """`PATH: reason` (`PATH -> OTHER: reason` for a rename), or the text of an error without a path."""
    if exc.filename is None or not exc.strerror:
        return str(exc) or type(exc).__name__  # asyncio's TimeoutError has no text
    path = os.fsdecode(exc.filename)
    if exc.filename2 is not None:
        path += f" -> {os.fsdecode(exc.filename2)}"
    return f"{path}: {exc.strerror}"
