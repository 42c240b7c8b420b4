"""Putting right what a stopped run left in a directory: a swap finished or undone, a staging removed.

A run killed (SIGKILL, a crash) leaves its staging, and perhaps a half swap, in each of its
directories (see `outputs.swap`). The next run, in any mode, puts that right before it looks at
what the directory holds, so its refusals and its own swap see the directory whole: a staging a live
run on this host is writing is never touched. Its own module because both the checks
(`outputs.mode.check_run_outputs`) and the swap (`outputs.swap`) call it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from rebalancer._secrets import shown_location
from rebalancer.pipeline.outputs.fs import MANIFEST, RunFS, at

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from rebalancer.pipeline.outputs.mode import DirState, Leftover
    from rebalancer.pipeline.outputs.swap import _Swap

# The logger of the module these lines came from, so logging set up for it keeps working.
log = logging.getLogger("rebalancer.pipeline.outputs.swap")


def roll_back(fs: RunFS, location: str | Path, leftover: Leftover | _Swap) -> bool:
    """Undo a swap not committed: the new entries back out, the previous run's back in, the staging
    removed. The set-aside directory is removed only once empty. True if all of it was put back."""
    stage, aside = leftover.stage, leftover.aside
    for name in leftover.entries:
        if not fs.exists(at(stage, name)) and fs.exists(at(location, name)):
            fs.move(at(location, name), at(stage, name))
    whole = True
    for name in fs.names(aside) if fs.exists(aside) else []:
        if fs.exists(at(location, name)):
            whole = False  # something took its place meanwhile: the previous run's copy stays aside
            log.warning(
                "%s: %s is back in place already; the previous run's copy stays in %s",
                shown_location(location), name, shown_location(aside),
            )
        else:
            fs.move(at(aside, name), at(location, name))
    if whole:
        fs.remove(aside)
    fs.remove(stage)
    return whole


def recover(states: list[DirState], spark: SparkSession | None) -> int:
    """Finish or undo what stopped runs left in these directories; returns how many were found."""
    found = 0
    for state in states:
        fs = RunFS(state.dir.location, spark)
        location = state.dir.location
        shown = shown_location(location)  # what the log shows: a URI's user info as ***
        for leftover in state.leftovers:
            if leftover.writer is not None or leftover.committed is None:
                continue  # a live run's; or its output cannot be reached yet (the run looks again)
            found += 1
            if leftover.committed:
                if _manifest_stale(fs, location, leftover):
                    fs.write_json(at(location, MANIFEST), leftover.record.to_json())
                fs.remove(leftover.aside)
                fs.remove(leftover.stage)
                log.warning("%s: finished the swap of a run stopped after it was in place (%s)", shown, leftover.token)
            elif leftover.swapping or leftover.has_aside:
                whole = roll_back(fs, location, leftover)
                log.warning(
                    "%s: undid the swap of a run stopped midway (%s): %s", shown, leftover.token,
                    "the previous run is back"
                    if whole
                    else f"what could not be put back stays in {shown_location(leftover.aside)}",
                )
            else:
                fs.remove(leftover.stage)
                log.warning("%s: removed the staging directory of a run that was stopped (%s)", shown, leftover.token)
    return found


def _manifest_stale(fs: RunFS, location: str | Path, leftover: Leftover) -> bool:
    """The manifest on disk is not yet the committed run's (a directory other than the output)."""
    try:
        data = fs.read_json(at(location, MANIFEST))
    except (FileNotFoundError, ValueError):
        return True
    return not isinstance(data, dict) or data.get("run") != leftover.token
