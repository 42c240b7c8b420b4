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
import sys
import textwrap
import traceback
from collections.abc import Callable, Collection, Sequence
from types import ModuleType
from typing import NamedTuple

from rebalancer import DISTRIBUTION, __version__
from rebalancer._extras import MissingExtraError, require_extra
from rebalancer._secrets import MaskedFormatter, masked_text

EXIT_USAGE = 2
EXIT_FAILURE = 1  # what Python exits with on an uncaught exception
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

DESCRIPTION = """\
Keep partitioned work balanced, at every level: the Spark tasks of a job, the drain threads of an
in-process queue, the consumer flows of a partitioned queue, the requests of a Kafka producer, and
the brokers of a cluster. Each command below is one of those components; run `rebalancer COMPONENT
--help` for its sub-commands. The main job is `rebalancer pipeline run` (what `make run` does).

examples:
  rebalancer pipeline run                   # the Spark pipeline on a generated sample, results in out/
  rebalancer consumers demo                 # a 4th consumer joins a 7-partition queue, step by step
  rebalancer queue demo --rebalance-ms 500  # a skewed workload through the BatchQueue
  rebalancer shedding compare --small       # Pulsar's load-shedding strategies against ours
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
)


Component = tuple[str, str, str, str]


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
    """Shows every flag's default, and keeps indented blocks (examples) of a description as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help_text = action.help or ""
        default = action.default
        if (
            default is None
            or isinstance(default, bool)
            or default is argparse.SUPPRESS
            or "default" in help_text
        ):
            return help_text
        return super()._get_help_string(action)

    def _split_lines(self, text: str, width: int) -> list[str]:
        """Never at a hyphen: `pip install 'partition-rebalancer[spark]'` must stay copyable."""
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        blocks = []
        for block in text.strip("\n").split("\n\n"):
            lines = block.splitlines()
            if len(lines) > 1 and all(line.startswith("  ") for line in lines[1:]):
                blocks.append("\n".join(indent + line for line in lines))
            else:
                blocks.append(super()._fill_text(block, width, indent))
        return "\n\n".join(blocks)


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus the error; we print one line and exit 2. Every parser in the tree
    (sub-parsers inherit the class) shows flag defaults."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _missing_extra(exc: MissingExtraError) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        raise UsageError(str(exc))

    return handler


def build_parser(components: Sequence[Component], load: Collection[str] | None = None) -> argparse.ArgumentParser:
    """Every component's commands. A module that fails to import is an error, except for a missing
    optional extra: that component stays listed and says which extra to install when used.

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
        if load is not None and name not in load:
            sub.add_parser(name, help=help_text, description=description)
            continue
        try:
            require_extra(f"rebalancer {name}", "cli")  # every sub-command prints with rich
            module = importlib.import_module(module_name)
        except MissingExtraError as exc:
            component = sub.add_parser(
                name,
                help=f"{help_text} [needs: pip install '{DISTRIBUTION}[{exc.extra}]']",
                description=description,
            )
            component.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
            component.set_defaults(func=_missing_extra(exc))
            continue
        component = sub.add_parser(name, help=help_text, description=description)
        module.register(component)
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
        parser.exit(EXIT_USAGE, f"rebalancer {args.component}: error: a sub-command is required\n")
    try:
        return int(handler(args) or 0)
    except (UsageError, ValueError, MissingExtraError) as exc:
        # masked_text: the last guard for a URI's password in a message that quotes one whole
        print(f"rebalancer: error: {masked_text(str(exc))}{_log_note()}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:  # FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError...
        print(f"rebalancer: error: {masked_text(_os_error(exc))}{_log_note()}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"rebalancer: interrupted{_log_note()}", file=sys.stderr)
        return 130
    except Exception as exc:
        for explainer in _explainers():
            explained = explainer.explain(exc, args.verbose)
            if explained is not None:
                if explained.traceback:
                    print_traceback(exc)
                print(f"rebalancer: error: {explained.line}", file=sys.stderr)
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
