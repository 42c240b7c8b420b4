"""The `rebalancer` command.

Each component registers its own sub-commands through a ``register(subparsers)`` function in its
``commands`` module, so this file stays a thin dispatcher. Errors a user can fix (bad flags, bad
input, a missing extra) print one line on stderr and exit with code 2.
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

from rebalancer import DISTRIBUTION, __version__
from rebalancer._extras import MissingExtraError, require_extra
from rebalancer._secrets import MaskedFormatter, masked_text

EXIT_USAGE = 2
EXIT_FAILURE = 1  # what Python exits with on an uncaught exception
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_DESCRIPTION = """\
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
_COMPONENTS: tuple[tuple[str, str, str, str], ...] = (
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
        "broker load shedding: simulate a cluster and compare strategies",
        "A cluster simulator running Apache Pulsar's load-shedding and placement strategies and "
        "ours, on scenarios such as a hot broker, over-placement and uneven bundles. `simulate` runs "
        "one strategy on one scenario; `compare` runs them all and prints the measured table. Plots "
        "need the 'plots' extra.",
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


def build_parser(load: Collection[str] | None = None) -> argparse.ArgumentParser:
    """Every component's commands. A module that fails to import is an error, except for a missing
    optional extra: that component stays listed and says which extra to install when used.

    `load` names the components whose commands are imported (None: all of them); the others are
    listed with their help only, so `rebalancer --help` and `--version` import no Spark or pandas,
    and work on a core install (numpy only, without the 'cli' extra).
    """
    parser = OneLineParser(prog="rebalancer", description=_DESCRIPTION)
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
    for name, module_name, help_text, description in _COMPONENTS:
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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # The top-level options take no values, so the first other word names the component.
    component = next((word for word in argv if not word.startswith("-")), None)
    parser = build_parser(load=[component] if component else [])
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    handler = getattr(args, "func", None)
    if handler is None:
        parser.exit(EXIT_USAGE, f"rebalancer {args.component}: error: a sub-command is required\n")
    try:
        return int(handler(args) or 0)
    except (UsageError, ValueError, MissingExtraError) as exc:
        # masked_text: the last guard for a URI's password in a message that quotes one whole
        print(f"rebalancer: error: {masked_text(str(exc))}{_spark_log_note()}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:  # FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError...
        print(f"rebalancer: error: {masked_text(_os_error(exc))}{_spark_log_note()}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"rebalancer: interrupted{_spark_log_note()}", file=sys.stderr)
        return 130
    except Exception as exc:
        if isinstance(exc, _spark_errors()):
            # A Spark failure no command turned into its own words: the cause in one line, and the
            # traceback in Spark's log when there is one, or above that line at -v. -v adds the
            # traceback and changes nothing else: the same last line, the same exit code.
            from rebalancer.pipeline.session.build import spark_error_reason

            if args.verbose:
                _print_traceback(exc)
                note = ""
            else:
                note = _spark_log_note(exc) or " (-v shows the traceback)"
            print(f"rebalancer: error: Spark: {spark_error_reason(exc)}{note}", file=sys.stderr)
            return EXIT_USAGE
        if isinstance(exc, _client_errors()):
            # A command that knows its servers names them itself (a ValueError); this is the safety net.
            print(f"rebalancer: error: Kafka: {type(exc).__name__}: {masked_text(_kafka_text(exc))}", file=sys.stderr)
            return EXIT_USAGE
        _print_traceback(exc)  # a failure no command foresaw, verbose or not
        return EXIT_FAILURE


def _print_traceback(exc: BaseException) -> None:
    """The traceback Python would print, each URL in it masked (a Java error quotes the input's URI
    whole): nothing printed is unmasked, verbose or not."""
    print(masked_text("".join(traceback.format_exception(exc))), end="", file=sys.stderr)


def _spark_log_note(exc: BaseException | None = None) -> str:
    """" (Spark's log: PATH)" when this process started a JVM that logs to a file (a pipeline run
    without -v), else "". `exc`'s traceback is appended to that file: nothing is lost by the one line."""
    quiet = sys.modules.get("rebalancer.pipeline.session.quiet")
    path = quiet.jvm_log_file() if quiet is not None else None
    if path is None:
        return ""
    if exc is not None:
        try:
            with open(path, "a", encoding="utf-8") as log:
                log.write(masked_text("".join(traceback.format_exception(exc))))
        except OSError:
            pass  # the line still names the log, which has Spark's side of the failure
    return f" (Spark's log: {path})"


def _imported_errors(*bases: tuple[str, str]) -> tuple[type[BaseException], ...]:
    """The error classes `(module, name)` of the modules already imported: an error of a library that
    was never imported cannot have been raised, and `--help` must not import one."""
    found: list[type[BaseException]] = []
    for module_name, class_name in bases:
        module = sys.modules.get(module_name)
        if module is not None:
            found.append(getattr(module, class_name))
    return tuple(found)


def _spark_errors() -> tuple[type[BaseException], ...]:
    """PySpark's and Py4J's base errors, if they were imported."""
    return _imported_errors(("pyspark.errors", "PySparkException"), ("py4j.protocol", "Py4JError"))


def _os_error(exc: OSError) -> str:
    """`PATH: reason` (`PATH -> OTHER: reason` for a rename), or the text of an error without a path."""
    if exc.filename is None or not exc.strerror:
        return str(exc) or type(exc).__name__  # asyncio's TimeoutError has no text
    path = os.fsdecode(exc.filename)
    if exc.filename2 is not None:
        path += f" -> {os.fsdecode(exc.filename2)}"
    return f"{path}: {exc.strerror}"


def _client_errors() -> tuple[type[BaseException], ...]:
    """The Kafka clients' base errors, of those clients already imported."""
    return _imported_errors(("aiokafka.errors", "KafkaError"), ("confluent_kafka", "KafkaException"))


def _kafka_text(exc: Exception) -> str:
    """The error's own text without aiokafka's repeated `ClassName: ` prefix."""
    text = str(exc)
    prefix = f"{type(exc).__name__}: "
    return text[len(prefix):] if text.startswith(prefix) else text


if __name__ == "__main__":
    sys.exit(main())
