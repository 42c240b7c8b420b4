"""The `rebalancer` command.

Each component registers its own sub-commands through a ``register(subparsers)`` function in its
``commands`` module, so this file stays a thin dispatcher; the parser, logging and the one-line
error ladder are `rebalancer._command`'s, shared with the pipeline's own entry points. Errors a user
can fix (bad flags, bad input, a missing extra) print one line on stderr and exit with code 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Collection, Sequence

from rebalancer._command import (
    COMPONENTS,
    EXIT_FAILURE,
    EXIT_USAGE,
    LOG_FORMAT,
    HelpFormatter,
    OneLineParser,
    UsageError,
    configure_logging,
    run_command,
)
from rebalancer._command import build_parser as build_components_parser

__all__ = [
    "EXIT_FAILURE",
    "EXIT_USAGE",
    "LOG_FORMAT",
    "HelpFormatter",
    "OneLineParser",
    "UsageError",
    "build_parser",
    "configure_logging",
    "main",
]

# (sub-command, module with register(parser), help, one-paragraph description)
_COMPONENTS = COMPONENTS


def build_parser(load: Collection[str] | None = None) -> argparse.ArgumentParser:
    """Every component's commands (see `rebalancer._command.build_parser`). `load` names the
    components whose commands are imported (None: all of them); the others are listed with their help
    only, so `rebalancer --help` and `--version` import no Spark or pandas."""
    return build_components_parser(_COMPONENTS, load)


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(sys.argv[1:] if argv is None else argv, build_parser)


if __name__ == "__main__":
    sys.exit(main())
