"""`rebalancer stop`: stop what this project started and left running, found by its pid files
(`rebalancer._pidfiles`), never by a name pattern: `pkill -f pyspark` would stop every user's Spark.

Plain text, no rich: it must work on any install, and a user reaches for it when things went wrong.
"""

from __future__ import annotations

import argparse
import os
import sys

from rebalancer._args import finite_float
from rebalancer._command import fitted
from rebalancer._pidfiles import STOP_GRACE_S, pid_dir, running, stop_recorded

__all__ = ["cmd_stop", "register"]

GRACE_MAX_S = 3600.0


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--list", action="store_true", help="only list what runs; stop nothing")
    parser.add_argument(
        "--grace",
        type=finite_float(minimum=0, maximum=GRACE_MAX_S),
        default=STOP_GRACE_S,
        metavar="SECONDS",
        help="how long each process may take to stop before it is killed with SIGKILL",
    )
    parser.set_defaults(func=cmd_stop)


def _say(line: str) -> None:
    print(fitted(line, sys.stdout))


def cmd_stop(args: argparse.Namespace) -> int:
    try:
        return _stop(args)
    except OSError as exc:  # a pid file or their directory unreadable: what runs is unknown
        what = "the pid directory" if exc.filename == str(pid_dir()) else "the pid file"
        print(f"rebalancer stop: cannot read {what} {exc.filename}: {exc.strerror}; nothing was stopped",
              file=sys.stderr)  # fmt: skip
        return 1


def _stop(args: argparse.Namespace) -> int:
    where = str(pid_dir())
    home = os.path.expanduser("~")
    if where.startswith(home + os.sep):
        where = "~" + where.removeprefix(home)
    if args.list:
        found = running()
        for entry in found:
            _say(f"running: {entry.shown()}")
        if not found:
            _say(f"nothing this project started is running (its pid files are in {where})")
        return 0
    results = stop_recorded(args.grace)
    words = {"stopped": "stopped", "killed": f"killed (still running after {args.grace:g} s)", "gone": ""}
    refused = False
    for entry, outcome in results:
        if outcome.startswith("refused"):
            refused = True
            _say(f"not stopped: {entry.shown()}: {outcome.removeprefix('refused: ')}")
        elif words[outcome]:
            _say(f"{words[outcome]}: {entry.shown()}")
    stale = sum(outcome == "gone" for _, outcome in results)
    if stale:
        _say(f"removed {stale} pid file{'s' * (stale != 1)} of processes that had ended")
    if all(outcome == "gone" for _, outcome in results):
        _say(f"nothing this project started was running (its pid files are in {where})")
    return 1 if refused else 0
