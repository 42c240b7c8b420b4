"""What a run does with a directory that already holds a run (Spark's SaveMode words), and what in
such a directory is a run's to replace.

- error (the default): refuse a directory holding a previous run, before any work, naming the flag;
- overwrite: replace the previous run (data, report, plan, plan stores, checkpoint);
- append: add this run to it (a stream resuming from its checkpoint, a Kafka `?group=` run), but
  never a stream's batch_id=N/ outputs next to a batch run's date=…/ ones, nor the reverse.

Each directory a run writes in (the output, a --report-dir, a --checkpoint) gets DIR/_manifest.json,
listing the entries the run wrote there, and only what a manifest lists is ever replaced. Anything
else (`out/shedding/` from `rebalancer shedding compare`, a user's notes) is left alone, and refused
in one line when this run would write the same name. A directory written before manifests (by an
older rebalancer) counts as a run's only the names a run writes (metrics/, quarantine/,
summary.json, …, the handler folders its summary.json names, a `_checkpoint/` that holds a
checkpoint), never any other name. A manifest also records the directory's role (output,
report-dir, checkpoint), and no run writes it in another role: a report-dir over an older run's
output replaced its metrics/ and quarantine/. error and overwrite runs are written beside the previous run and
swapped in at the end (`outputs.swap`), so an interrupted run never loses the previous one.

Without this, `--mode overwrite` deleted `out/shedding/` and its plots, an input inside the output
before refusing it, and a `--checkpoint` directory that held no checkpoint, only a thesis.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rebalancer._secrets import masks_errors
from rebalancer.pipeline.outputs.append import batch_source, refuse_mixed_append
from rebalancer.pipeline.outputs.fs import (
    INFO,
    MANIFEST,
    RunFS,
    aside_name,
    at,
    leftover_tokens,
    location_key,
    staging_name,
)
from rebalancer.pipeline.outputs.manifest import (
    CHECKPOINT,
    CHECKPOINT_ENTRIES,
    COMPARE_SCRATCH,
    GROUP_LOCK,
    KNOWN,
    PLANS,
    SPARK_LOG,
    GroupRange,
    Manifest,
    holds_checkpoint,
    read_manifest,
)
from rebalancer.pipeline.outputs.places import refuse_inside_a_run, refuse_nesting
from rebalancer.pipeline.outputs.recover import recover
from rebalancer.pipeline.paths import join

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

OUTPUT_MODES = ("error", "overwrite", "append")


@dataclass(frozen=True)
class RunDirs:
    """Where a run writes and what kind of run it is, as the output checks need it (a `RunRequest`'s
    `dirs()`): its input (a group run's batches are numbered by it), output, report dir, a stream's
    --checkpoint, the output mode, and the names it writes (handlers, report, compare-hash scratch)."""

    input: object  # a path, a URI, a kafka:// URL or an inspected input
    output: str | Path
    report_dir: str | Path | None = None
    checkpoint: str | Path | None = None  # a stream's --checkpoint as given (None: OUTPUT/_checkpoint)
    mode: str = "error"
    stream: bool = False
    keyed_by_batch: bool = False
    handlers: frozenset[str] = frozenset()
    report: bool = True
    compare_hash: bool = False

    @property
    def checkpoint_location(self) -> str | Path | None:
        if not self.stream:
            return None
        return self.checkpoint or join(self.output, CHECKPOINT)

    def dirs(self) -> RunDirs:
        return self


class WritesDirs(Protocol):
    """A run's request (`RunRequest`), or its `RunDirs` themselves."""

    def dirs(self) -> RunDirs: ...
@dataclass(frozen=True)
class RunDir:
    """A directory a run writes in, what it is to the run (output, report-dir, checkpoint: the
    first names it in errors), and the top-level names the run may write there."""

    location: str | Path
    roles: tuple[str, ...]
    writes: frozenset[str]
    batches: str | None = None  # the output's: who numbers its batch_id=N/ (batch_source), else None

    @property
    def field(self) -> str:
        return self.roles[0]

    @property
    def known(self) -> frozenset[str]:
        return frozenset().union(*(KNOWN[role] for role in self.roles))

    @property
    def key(self) -> str:
        return location_key(self.location)

    @property
    def role(self) -> str:
        """What the directory is, recorded in its manifest: a run's output (its report too, when the
        report is written there), else a report-dir or a checkpoint."""
        return "output" if "output" in self.roles else self.roles[0]


def external_checkpoint(request: RunDirs) -> str | Path | None:
    """A stream's --checkpoint when it is not OUTPUT/_checkpoint (which is one of the output's entries)."""
    if not request.stream or request.checkpoint is None:
        return None
    if location_key(request.checkpoint) == location_key(join(request.output, CHECKPOINT)):
        return None
    return request.checkpoint


def run_dirs(request: RunDirs) -> list[RunDir]:
    """The directories `request` writes in, each once (a --report-dir that is the output is the output)."""
    handlers = request.handlers
    data = {"metrics", "quarantine", *handlers}
    reports = {"summary.json", "plan.json"}
    if request.stream:
        if external_checkpoint(request) is None:
            data.add(CHECKPOINT)  # a stream's plan stores are under its checkpoint
    else:
        reports |= {"report.html"} if request.report else set()
        reports |= {PLANS} if handlers else set()
        data |= {COMPARE_SCRATCH} if request.compare_hash else set()
    batches = batch_source(request) if request.keyed_by_batch else None
    wanted: list[tuple[str | Path, str, set[str]]] = [(request.output, "output", data)]
    if request.report_dir is None:
        data |= reports
    else:
        wanted.append((request.report_dir, "report-dir", reports))
    checkpoint = external_checkpoint(request)
    if checkpoint is not None:
        wanted.append((checkpoint, "checkpoint", set(CHECKPOINT_ENTRIES)))
    dirs: dict[str, RunDir] = {}
    for location, role, names in wanted:
        key = location_key(location)
        seen = dirs.get(key)
        if seen is None:
            dirs[key] = RunDir(location, (role,), frozenset(names), batches if role == "output" else None)
        else:
            dirs[key] = RunDir(seen.location, (*seen.roles, role), seen.writes | names, seen.batches)
    return list(dirs.values())


@dataclass(frozen=True)
class Leftover:
    """A staging directory (and the set-aside one) that a run killed or stopped left in DIR."""

    token: str
    stage: str | Path
    aside: str | Path
    stage_names: tuple[str, ...]  # what is still in the staging directory (empty if it is gone)
    aside_names: tuple[str, ...]  # the previous run's entries set aside (empty if none)
    has_stage: bool
    has_aside: bool
    info: dict[str, Any] | None  # its _staging.json, None if absent or unreadable
    committed: bool | None  # the run swapped itself in (None: its output cannot be reached yet)

    @property
    def swapping(self) -> bool:
        """The swap had begun: `info` lists what moves."""
        return self.info is not None and isinstance(self.info.get("entries"), list)

    @property
    def entries(self) -> list[str]:
        return [str(n) for n in (self.info or {}).get("entries", [])]

    @property
    def manifest(self) -> list[str]:
        return [str(n) for n in (self.info or {}).get("manifest", self.entries)]

    @property
    def role(self) -> str | None:
        role = (self.info or {}).get("role")
        return role if role in KNOWN else None

    @property
    def batches(self) -> str | None:
        batches = (self.info or {}).get("batches")
        return batches if isinstance(batches, str) else None

    @property
    def record(self) -> Manifest:
        """The manifest its run writes at its commit point (recovery writes it if the run did not)."""
        group = GroupRange.from_json((self.info or {}).get("group"))
        return Manifest(self.token, frozenset(self.manifest), self.role, self.batches, group)

    def moved_in(self, names: set[str]) -> set[str]:
        """The new run's entries already moved into DIR: listed, present, no longer staged."""
        return {n for n in self.entries if n in names and n not in self.stage_names} if self.swapping else set()

    @property
    def writer(self) -> int | None:
        """The pid of a run on this host still writing it; None when that run has ended."""
        info = self.info or {}
        pid = info.get("pid")
        if self.committed or not isinstance(pid, int) or pid == os.getpid() or info.get("host") != socket.gethostname():
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:  # alive, another user's
            return pid
        return pid


def _read_info(fs: RunFS, stage: str | Path) -> dict[str, Any] | None:
    try:
        info = fs.read_json(at(stage, INFO))
    except (FileNotFoundError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def _committed(info: dict[str, Any] | None, token: str, has_stage: bool, spark: SparkSession | None) -> bool | None:
    """A leftover's run swapped itself in once its output's manifest names it (the commit point)."""
    if info is None:
        # No _staging.json: a staging directory never swapped, or half removed after its run's swap
        # (which removes the set-aside directory first): either way, nothing of it is DIR's now.
        return False if has_stage else None
    commit = info.get("commit")
    if not isinstance(commit, str) or info.get("mode") == "append":
        return False  # an append's staging is only its mark, while it writes in place: never swapped
    fs = RunFS.reach(commit, spark)
    if fs is None:
        return None
    try:
        manifest = read_manifest(fs, commit)
    except ValueError:
        return None
    return manifest is not None and manifest.run == token


def find_leftovers(fs: RunFS, location: str | Path, names: list[str], spark: SparkSession | None) -> list[Leftover]:
    found = []
    for token in leftover_tokens(names):
        stage, aside = at(location, staging_name(token)), at(location, aside_name(token))
        has_stage, has_aside = staging_name(token) in names, aside_name(token) in names
        info = _read_info(fs, stage) if has_stage else None
        found.append(
            Leftover(
                token,
                stage,
                aside,
                tuple(fs.names(stage)) if has_stage else (),
                tuple(fs.names(aside)) if has_aside else (),
                has_stage,
                has_aside,
                info,
                _committed(info, token, has_stage, spark),
            )
        )
    return found


@dataclass(frozen=True)
class DirState:
    """A directory as the next run finds it: what is in it (as it is once a killed run's half swap
    is undone), which of it a previous run wrote, and what a killed run left."""

    dir: RunDir
    names: frozenset[str]
    manifest: Manifest | None
    owned: frozenset[str]
    leftovers: tuple[Leftover, ...]
    holds_checkpoint: bool
    previous: str | None  # a previous run's RunDir.role there; None: no run, or only a report from before roles

    @property
    def foreign(self) -> frozenset[str]:
        return self.names - self.owned

    @property
    def collisions(self) -> list[str]:
        return sorted(self.dir.writes & self.foreign)


def _legacy_owned(fs: RunFS, run_dir: RunDir, names: set[str]) -> set[str]:
    """A directory without a manifest: the names a run writes, and the handler folders its summary
    names, if a run from before manifests is there (its summary.json, or a stream's checkpoint);
    else nothing: a user's own quarantine/ or report.html is no run's, never cleared."""
    location = run_dir.location
    if "summary.json" not in names and not holds_checkpoint(fs, [location, at(location, CHECKPOINT)]):
        return set()
    owned = names & run_dir.known
    if CHECKPOINT in owned and not holds_checkpoint(fs, [at(run_dir.location, CHECKPOINT)]):
        owned.discard(CHECKPOINT)
    if "output" in run_dir.roles and "summary.json" in names:
        try:
            summary = fs.read_json(at(run_dir.location, "summary.json"))
        except (FileNotFoundError, ValueError):
            summary = None
        handlers = summary.get("handlers") if isinstance(summary, dict) else None
        if isinstance(handlers, dict):
            owned |= {name for name in handlers if isinstance(name, str)} & names
    return owned


def inspect_dir(run_dir: RunDir, spark: SparkSession | None) -> DirState | None:
    """`run_dir` as it is; None for a remote one while no session is up to look."""
    fs = RunFS.reach(run_dir.location, spark)
    if fs is None:
        return None
    listed = fs.names(run_dir.location)
    leftovers = find_leftovers(fs, run_dir.location, listed, spark)
    names = {n for n in listed if not n.startswith(".") and n not in (MANIFEST, GROUP_LOCK)}
    manifest = read_manifest(fs, run_dir.location)
    for leftover in leftovers:
        if leftover.committed is False:
            names = (names - leftover.moved_in(names)) | set(leftover.aside_names)
        elif leftover.committed and (manifest is None or manifest.run != leftover.token) and leftover.swapping:
            manifest = leftover.record  # its swap's last step
    owned = names & manifest.entries if manifest is not None else _legacy_owned(fs, run_dir, names)
    asides = [lo.aside for lo in leftovers if lo.committed is False and lo.has_aside]
    holds = manifest is not None or holds_checkpoint(fs, [run_dir.location, *asides])
    previous = _previous_role(manifest, names, holds and manifest is None)
    return DirState(run_dir, frozenset(names), manifest, frozenset(owned), tuple(leftovers), holds, previous)


# What a run's directory holds that only one kind of directory does; report files are in both an
# output and a report-dir, so a directory holding only a report has no role that refuses another.
_ONLY = {"output": frozenset({"metrics", "quarantine", CHECKPOINT}), "checkpoint": frozenset(CHECKPOINT_ENTRIES)}


def _previous_role(manifest: Manifest | None, names: set[str], checkpoint: bool) -> str | None:
    """What a previous run wrote the directory as: its manifest's role, else what its entries are
    (a manifest from before roles, or a directory from before manifests: metrics/ beside a
    summary.json is an output, a stream's query/metadata a checkpoint)."""
    if manifest is not None:
        if manifest.role is not None:
            return manifest.role
        return next((role for role, only in _ONLY.items() if manifest.entries & only), None)
    if "summary.json" in names and names & {"metrics", "quarantine"}:
        return "output"
    return "checkpoint" if checkpoint else None


def _shown(names: list[str] | frozenset[str]) -> str:
    ordered = sorted(names)
    return ", ".join(ordered[:3]) + (", …" if len(ordered) > 3 else "")


def collision(state: DirState, names: list[str]) -> ValueError:
    """The refusal of a run that would write `names` in a directory where no run wrote them."""
    run_dir = state.dir
    why = f"not in its {MANIFEST}" if state.manifest is not None else f"it has no {MANIFEST} and the name is not a run's"
    return ValueError(
        f"{run_dir.field} {run_dir.location} holds {_shown(names)}, which this run writes but no run of this "
        f"pipeline wrote ({why}): move it away or give another --{run_dir.field}"
    )


def refuse_busy(state: DirState) -> None:
    """Two runs into one directory at once would swap over each other: the second is refused."""
    for leftover in state.leftovers:
        if leftover.writer is not None:
            raise ValueError(
                f"{state.dir.field} {state.dir.location} is being written by another run (pid {leftover.writer} "
                f"on this host, into {staging_name(leftover.token)}): wait for it to end, or remove that "
                "directory if no run is going on"
            )


def refuse_role(state: DirState) -> None:
    """A directory is written only as what it was: a report-dir never replaces an older run's
    metrics/ and quarantine/, an output never a stream's checkpoint (in any mode: append writes in
    place). Without this, `--report-dir OLD_OUTPUT --mode overwrite` deleted that run's data."""
    run_dir = state.dir
    if state.previous is None or state.previous == run_dir.role:
        return
    why = f"its {MANIFEST} says so" if state.manifest is not None else f"it holds {_shown(state.names)}"
    raise ValueError(
        f"{run_dir.field} {run_dir.location} is a run's {state.previous} directory ({why}), and only a run's "
        f"{state.previous} replaces it: give another --{run_dir.field}"
    )


def _refuse_dir(state: DirState, mode: str) -> None:
    run_dir = state.dir
    where = f"{run_dir.field} {run_dir.location}"
    refuse_busy(state)
    refuse_role(state)
    if run_dir.roles == ("checkpoint",) and state.names and not state.holds_checkpoint:
        raise ValueError(
            f"checkpoint {run_dir.location} holds no stream's checkpoint (no query/metadata, no "
            "rebalancer/state.json): --checkpoint takes a new or empty directory, or one a stream wrote"
        )
    if state.collisions:
        raise collision(state, state.collisions)
    held = [name for name in state.owned if name != SPARK_LOG]
    if mode == "error" and held:
        if run_dir.roles == ("checkpoint",):
            raise ValueError(
                f"checkpoint {run_dir.location} already holds a stream's state: --mode append resumes from it, "
                "--mode overwrite starts afresh"
            )
        raise ValueError(
            f"{where} already holds a run's outputs ({_shown(held)}): --mode overwrite replaces them, "
            "--mode append adds this run to them"
        )


@masks_errors  # its messages name the directories: a URI's password shows as ***
def check_run_outputs(run: WritesDirs, spark: SparkSession | None = None) -> list[DirState | None]:
    """The output mode's refusals for every directory `request` writes in, before anything of this run
    is written there or replaced; returns what was found (None for a remote directory without `spark`).

    What a killed run left (its staging, a half swap; its pid dead on this host) is this pipeline's
    own writing, and is put right first, in every mode: an error-mode run that refuses left it behind."""
    request = run.dirs()
    dirs = run_dirs(request)
    refuse_nesting(dirs)
    refuse_inside_a_run(dirs)
    states = [inspect_dir(run_dir, spark) for run_dir in dirs]
    if recover([state for state in states if state is not None], spark):
        states = [inspect_dir(run_dir, spark) for run_dir in dirs]
    for state in states:
        if state is not None:
            _refuse_dir(state, request.mode)
    if request.mode == "append":
        refuse_mixed_append(request, states, spark)
    return states


def claim_spark_log(log_file: Path) -> None:
    """A quiet CLI run writes Spark's log to DIR/spark.log from before the run starts, over what is
    there. One that no run wrote (DIR has a manifest that does not list it) is refused; a new one is
    listed in DIR's manifest first, so a run killed from then on leaves nothing the next one refuses."""
    fs = RunFS(log_file.parent, None)
    manifest = read_manifest(fs, log_file.parent)
    if manifest is None or SPARK_LOG in manifest.entries:
        return  # no manifest: spark.log is one of a run's names
    if log_file.exists() or log_file.is_symlink():
        raise ValueError(
            f"{log_file} is not a run's log (not in {log_file.parent / MANIFEST}), and a run without -v "
            "writes Spark's log there: move it away, or run with -v"
        )
    data = fs.read_json(at(log_file.parent, MANIFEST))
    fs.write_json(at(log_file.parent, MANIFEST), {**data, "entries": sorted({*manifest.entries, SPARK_LOG})})
