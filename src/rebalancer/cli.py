"""The `rebalancer` command.

Each component registers its own sub-commands through a ``register(subparsers)`` function in its
``commands`` module, so this file stays a thin dispatcher. Errors a user can fix (bad flags, bad
input) print one line on stderr and exit with code 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

EXIT_USAGE = 2

# (sub-command, module with register(subparsers), help)
_COMPONENTS: tuple[tuple[str, str, str], ...] = (
    ("pipeline", "rebalancer.pipeline.commands", "the PySpark telemetry pipeline (the main job)"),
    ("queue", "rebalancer.queue.commands", "the in-process BatchQueue (demo)"),
    ("shedding", "rebalancer.shedding.commands", "broker load shedding: simulate and compare strategies"),
    ("consumers", "rebalancer.consumers.commands", "partitioned-queue consumer flows"),
    ("produce", "rebalancer.produce.commands", "broker-level batching Kafka producer"),
)


class UsageError(Exception):
    """A mistake the user can fix; reported in one line with exit code 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus the error; we print one line and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="rebalancer", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="component", metavar="COMPONENT", parser_class=OneLineParser)
    sub.required = True
    for name, module_name, help_text in _COMPONENTS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        component = sub.add_parser(name, help=help_text, description=help_text)
        module.register(component)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    handler = getattr(args, "func", None)
    if handler is None:
        parser.exit(EXIT_USAGE, f"rebalancer {args.component}: error: a sub-command is required\n")
    try:
        return int(handler(args) or 0)
    except (UsageError, ValueError, FileNotFoundError) as exc:
        print(f"rebalancer: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("rebalancer: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
