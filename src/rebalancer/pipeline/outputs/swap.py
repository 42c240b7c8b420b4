"""A run written beside the previous one, then swapped in: an interrupted run never loses the
previous run, and never leaves half a run in its place.

In error and overwrite modes, every directory the run writes in (the output, a --report-dir, a
--checkpoint) gets DIR/.rebalancer-staging-TOKEN/, where the run writes what it would write in DIR.
Once the run is complete (every output written, its summary too), the swap, in each directory:
records in the staging's _staging.json what moves; moves the entries the previous run's manifest
lists to DIR/.rebalancer-old-TOKEN/; moves the new entries in. Then the output's _manifest.json,
naming this run, replaces the previous one: that one rename is the commit point. The other
directories' manifests follow, and the set-aside and staging directories are removed last.

A run stopped before the commit point is undone (on Ctrl-C at once, after a SIGKILL by the next
run): every entry it had moved in is moved back out, the previous run's are moved back, and its
staging is removed. One stopped after it is finished: only the two hidden directories are left to
remove. The next run, in any mode, does this before anything else and logs what it found; a staging
directory that a live run on this host is writing is never touched (the next run refuses instead).

In append mode nothing is staged (a stream resumes from its checkpoint, a group run adds a batch):
the manifests are written first, naming what the run may add, so a stopped append leaves nothing
that a later run takes for someone else's. Its staging directory holds only its _staging.json, the
mark that refuses other runs while it lives, removed when it ends (by the next run, if killed).
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rebalancer._secrets import masked_text, shown_location
from rebalancer.pipeline.outputs.append import previous_group, refuse_group_rewind
from rebalancer.pipeline.outputs.fs import INFO, MANIFEST, RunFS, aside_name, at, location_key, staging_name
from rebalancer.pipeline.outputs.manifest import SPARK_LOG, GroupRange, Manifest
from rebalancer.pipeline.outputs.mode import (
    DirState,
    collision,
    inspect_dir,
    refuse_busy,
    refuse_role,
)
from rebalancer.pipeline.outputs.recover import recover, roll_back
from rebalancer.pipeline.session.quiet import sigint

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# Tests stop a run at a named point with it: "stage:NAME" (each stage of a batch run), "staged" (the
# run complete, before the swap), "swap" (the previous run set aside, the new one not yet moved in),
# "committed" (the manifest written, the set-aside run not yet removed). None outside tests.
hold: Callable[[str], None] | None = None


def held(point: str) -> None:
    if hold is not None:
        hold(point)


def _token() -> str:
    """Sorts by time; unique among runs (pid, and random bits for runs on other hosts)."""
    return f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{os.getpid()}-{secrets.token_hex(3)}"


def _our_log(fs: RunFS, location: str | Path) -> bool:
    """This process's Spark log (a quiet CLI run's) is DIR/spark.log."""
    from rebalancer.pipeline.session.quiet import jvm_log_file

    log_file = jvm_log_file()
    return log_file is not None and location_key(log_file) == location_key(at(location, SPARK_LOG))


def _kept_log(state: DirState, fs: RunFS) -> set[str]:
    """spark.log stays where it is (it is being written): listed when a run wrote it."""
    location = state.dir.location
    if not fs.exists(at(location, SPARK_LOG)):
        return set()
    return {SPARK_LOG} if SPARK_LOG in state.owned or _our_log(fs, location) else set()


def _sigint_ignored() -> AbstractContextManager[None]:
    return sigint(signal.SIG_IGN)  # a second Ctrl-C must not cut putting the previous run back


class _Swap:
    """One directory's part of a publish: what moves in, what moves aside."""

    def __init__(self, state: DirState, fs: RunFS, token: str) -> None:
        self.state, self.fs = state, fs
        self.location = state.dir.location
        self.stage = at(self.location, staging_name(token))
        self.aside = at(self.location, aside_name(token))
        self.entries: list[str] = []
        self.old: list[str] = []
        self.manifest: set[str] = set()


class Outputs:
    """Where one run writes: each directory's staging (error and overwrite modes) or the directory
    itself (append), and `publish`, which swaps the staged run in."""

    def __init__(self, states: list[DirState], mode: str, spark: SparkSession | None) -> None:
        self.states = states
        self.spark = spark
        self.staged = mode != "append"
        self.token = _token()
        self.fs = {state.dir.key: RunFS(state.dir.location, spark) for state in states}
        self.created: list[str | Path] = []
        self.committed = False
        self._published = False
        # The output's group record: the previous run's, carried by an append until this run's
        # group range is planned (take_group); a staged run records only its own.
        output = states[0].manifest if states else None
        self.group: GroupRange | None = output.group if output is not None and not self.staged else None
        self._entries: dict[str, frozenset[str]] = {}  # an append's manifest entries, by directory

    def _manifest(self, state: DirState, entries: set[str] | frozenset[str]) -> dict[str, Any]:
        """DIR's manifest as this run writes it (the group record is the output's)."""
        group = self.group if state is self.states[0] else None
        return Manifest(self.token, frozenset(entries), state.dir.role, state.dir.batches, group).to_json()

    def at(self, location: str | Path) -> str | Path:
        """Where this run writes what belongs in `location` (one of the run's directories)."""
        if not self.staged:
            return location
        for state in self.states:
            if state.dir.key == location_key(location):
                return at(state.dir.location, staging_name(self.token))
        raise ValueError(f"{location} is none of this run's directories")

    def open(self) -> None:
        """Each directory's staging (an append's holds only its mark) and, for an append, its manifest,
        before the run writes. A directory that cannot be made (a checkpoint under /sys) is refused
        naming its flag."""
        for state in self.states:
            try:
                self._open(state)
            except OSError as exc:
                raise ValueError(
                    f"{state.dir.field} {shown_location(state.dir.location)}: cannot write there: "
                    f"{masked_text(exc.strerror or str(exc))}"
                ) from None

    def _open(self, state: DirState) -> None:
        fs, location = self.fs[state.dir.key], state.dir.location
        if not fs.exists(location):
            self.created.append(location)
        # Every mode makes DIR/.rebalancer-staging-TOKEN/ with its _staging.json (pid, host): while
        # the run lives, it is the mark other runs are refused by (refuse_busy). An append writes in
        # place, so its staging holds that mark only, and is removed when the run ends.
        stage = at(location, staging_name(self.token))
        fs.mkdir(stage)
        # The output's manifest is the commit point; named absolutely, for a next run from elsewhere.
        info = {"token": self.token, "commit": self.states[0].dir.key, "pid": os.getpid(),
                "host": socket.gethostname(), "role": state.dir.role, "batches": state.dir.batches, "started_at": datetime.now(UTC).isoformat(timespec="seconds")}
        if not self.staged:
            info["mode"] = "append"
        fs.write_json(at(stage, INFO), info)
        if not self.staged:
            self._entries[state.dir.key] = state.owned | state.dir.writes | _kept_log(state, fs)
            fs.write_json(at(location, MANIFEST), self._manifest(state, self._entries[state.dir.key]))

    def refuse_earlier_appends(self) -> None:
        """Two appends started at once both passed the checks (neither's mark was there yet): once
        both marks are made, the later run (by token: time, then pid) yields to the earlier one, in
        one line, before it writes anything. A staged run yields at its swap (`_plan`)."""
        for state in self.states:
            now = inspect_dir(state.dir, self.spark)
            if now is None:
                continue
            earlier = [lo for lo in now.leftovers if lo.writer is not None and lo.token < self.token]
            if earlier:
                refuse_busy(replace(now, leftovers=tuple(earlier)))

    def take_group(self, ours: GroupRange) -> None:
        """A Kafka `?group=` run's range, once planned (under the output's claim), before it reads:
        an append refuses a range from another cluster or from offsets that went back, which would
        number a batch over an earlier one, and records it in the output's manifest at once; a
        staged run records it at its swap."""
        if self.staged:
            self.group = ours
            return
        output = self.states[0]
        refuse_group_rewind(self.states, previous_group(self.states, self.spark), ours)
        self.group = ours
        self.fs[output.dir.key].write_json(at(output.dir.location, MANIFEST), self._manifest(output, self._entries[output.dir.key]))

    def discard(self) -> None:
        """Remove this run's staging (Ctrl-C, a failure, an append's mark at its end): the previous
        run was never touched."""
        for state in self.states:
            fs = self.fs[state.dir.key]
            stage = at(state.dir.location, staging_name(self.token))
            try:
                fs.remove(stage)
                if state.dir.location in self.created and not fs.names(state.dir.location):
                    fs.remove(state.dir.location)
            except (OSError, ValueError) as exc:  # a cancelled Spark task may still be writing there
                log.warning("could not remove %s (%s); the next run removes it", shown_location(stage), masked_text(str(exc)))

    def publish(self) -> None:
        """Swap the staged run in, once (a group run calls it before committing its offsets)."""
        if not self.staged or self._published:
            return
        self._published = True
        held("staged")
        swaps = [self._plan(state) for state in self.states]
        for swap in swaps:
            info = swap.fs.read_json(at(swap.stage, INFO))
            swap.fs.write_json(
                at(swap.stage, INFO),
                {**info, "entries": swap.entries, "aside": swap.old, "manifest": sorted(swap.manifest),
                 "group": self.group.to_json() if self.group is not None and swap is swaps[0] else None},
            )  # fmt: skip
        try:
            for swap in reversed(swaps):  # the output last: its manifest is the commit point
                if swap.old:
                    swap.fs.mkdir(swap.aside)
                for name in swap.old:
                    swap.fs.move(at(swap.location, name), at(swap.aside, name))
            held("swap")
            for swap in reversed(swaps):
                for name in swap.entries:
                    swap.fs.move(at(swap.stage, name), at(swap.location, name))
            output = swaps[0]
            output.fs.write_json(at(output.location, MANIFEST), self._manifest(output.state, output.manifest))
            self.committed = True
        except BaseException:
            with _sigint_ignored():
                for swap in swaps:
                    roll_back(swap.fs, swap.location, swap)
            raise
        held("committed")
        self._finish(swaps)

    def _plan(self, state: DirState) -> _Swap:
        """What moves in one directory, looked at again now: refused if what the run wrote collides
        with something that appeared there meanwhile."""
        fs = self.fs[state.dir.key]
        swap = _Swap(state, fs, self.token)
        now = inspect_dir(state.dir, self.spark)
        assert now is not None  # the run reached it to stage there
        refuse_busy(now)  # two runs started at once, neither seeing the other: the second to publish yields
        refuse_role(now)  # another run made it its output (or checkpoint) meanwhile
        swap.entries = [n for n in fs.names(swap.stage) if not n.startswith(".") and n not in (INFO, MANIFEST)]
        clashes = sorted(set(swap.entries) & now.foreign)
        if clashes:
            raise collision(now, clashes)
        swap.old = sorted(now.owned - {SPARK_LOG})
        swap.manifest = set(swap.entries) | _kept_log(now, fs)
        return swap

    def _finish(self, swaps: list[_Swap]) -> None:
        """After the commit point: the other manifests, then the previous run and the staging removed.
        A failure here leaves the new run in place; the next run removes what is left."""
        try:
            for swap in swaps[1:]:
                swap.fs.write_json(at(swap.location, MANIFEST), self._manifest(swap.state, swap.manifest))
            for swap in swaps:
                swap.fs.remove(swap.aside)
                swap.fs.remove(swap.stage)
        except (OSError, ValueError) as exc:
            log.warning(
                "the run is in place, but removing what it replaced failed (%s); the next run finishes it",
                masked_text(str(exc)),
            )


@contextmanager
def run_outputs(states: list[DirState], mode: str, spark: SparkSession | None) -> Iterator[Outputs]:
    """The run's directories for the block: what stopped runs left is dealt with first; the staged
    run is swapped in when the block ends (if the block has not published it), or removed if it fails."""
    recover(states, spark)
    outputs = Outputs(states, mode, spark)
    try:
        outputs.open()  # inside: a directory that cannot be made leaves none of the others' staging
        if not outputs.staged:
            outputs.refuse_earlier_appends()
        yield outputs
        outputs.publish()
    except BaseException:
        if outputs.staged and not outputs.committed:
            with _sigint_ignored():
                outputs.discard()
        raise
    finally:
        if not outputs.staged:
            with _sigint_ignored():
                outputs.discard()  # the append's mark: it wrote in place
