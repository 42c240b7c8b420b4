"""What an append may add to: a run's batches beside the previous run's, never over them.

A batch run keys its metrics by date (metrics/date=…/), a stream and a Kafka `?group=` run by batch
(metrics/batch_id=N/), each numbering its batches from its own source: a group run from the sum of
its group's offsets (0 for a new group), a stream from its checkpoint. So an append never mixes the
two layouts, and never adds a group's or a stream's batches to another source's: the second group
started at batch_id=0 too, and replaced the first group's batch. For the same reason a group run
never appends the same group's batches from another Kafka cluster, nor from offsets that went back
(the group reset, expired or recreated): each would number a batch over an earlier one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rebalancer.pipeline.kafka.telemetry import group_source
from rebalancer.pipeline.outputs.fs import RunFS, at, location_key
from rebalancer.pipeline.outputs.manifest import CHECKPOINT, GroupRange, holds_checkpoint
from rebalancer.pipeline.paths import join

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from rebalancer.pipeline.outputs.mode import DirState, RunDirs

# How a run keys its metrics: each kind of run, and the folders it writes under OUTPUT/metrics/.
BY_BATCH = "a stream's (or a Kafka group run's) outputs, metrics/batch_id=N/"
BY_DATE = "a batch run's outputs, metrics/date=…/"


def _layout(fs: RunFS, output: str | Path) -> str | None:
    """How the run already in `output` keyed its metrics: by batch, by date, or None (no metrics)."""
    names = fs.names(join(output, "metrics"))
    if any(name.startswith("batch_id=") for name in names):
        return BY_BATCH
    if any(name.startswith("date=") for name in names):
        return BY_DATE
    return None


def _numbering(summary: object) -> str | None:
    """Who numbered the batch_id=N/ of the run a summary describes: a group on a topic, a stream."""
    if not isinstance(summary, dict):
        return None
    group = summary.get("kafka_group")
    if isinstance(group, dict):
        topic = group.get("topic")
        return f"group {group.get('group')!r}" + (f" on topic {topic!r}" if isinstance(topic, str) else "")
    return ANY_STREAM if "batches" in summary else None


# What older manifests and summaries name a stream's batches by: any stream's, of any checkpoint.
ANY_STREAM = "a stream"
OWN_CHECKPOINT = "the stream checkpointed in OUTPUT/_checkpoint"


def batch_source(request: RunDirs) -> str:
    """Who numbers the batch_id=N/ of a run keyed by batch: its group on its topic, or its stream,
    by its checkpoint (a stream with another checkpoint numbers its batches from 0 again). The
    output's manifest records it, so the next append knows whose batches are there."""
    read = group_source(request.input)
    if read is not None:
        return f"group {read[0]!r} on topic {read[1]!r}"
    checkpoint = request.checkpoint
    if checkpoint is None or location_key(checkpoint) == location_key(join(request.output, CHECKPOINT)):
        return OWN_CHECKPOINT  # named relative to the output: an output moved with it keeps it
    return f"the stream checkpointed in {location_key(checkpoint)}"


def _same_source(theirs: str, ours: str) -> bool:
    """An older record names less (a group without its topic, a stream without its checkpoint)."""
    return theirs == ours or ours.startswith(f"{theirs} on topic ") or (theirs == ANY_STREAM and ours.startswith("the stream "))


def refuse_fresh_checkpoint(request: RunDirs, spark: SparkSession | None) -> None:
    """A stream appending to an output that holds a stream's batches resumes from its checkpoint; one
    whose checkpoint holds no state (new, or removed) starts again at batch_id=0 and would replace
    the batches there. A remote checkpoint is looked at once `spark` can reach it."""
    checkpoint = request.checkpoint_location
    assert checkpoint is not None  # a stream's
    fs = RunFS.reach(checkpoint, spark)
    if fs is None or holds_checkpoint(fs, [checkpoint]):
        return
    raise ValueError(
        f"output {request.output} holds a stream's batches, and checkpoint {checkpoint} holds no stream's "
        "state (no query/metadata, no rebalancer/state.json): this stream would start again at batch_id=0 "
        "and --mode append would write over them: give the checkpoint the stream wrote, another --output, "
        "or --mode overwrite"
    )


def _previous_summary(states: list[DirState], spark: SparkSession | None) -> object:
    """The previous run's summary.json among this run's directories (the output, or the report-dir
    the request names); None if there is none or it cannot be read (the run's own load says so)."""
    for state in states:
        if "summary.json" in state.owned:
            try:
                return RunFS(state.dir.location, spark).read_json(at(state.dir.location, "summary.json"))
            except (FileNotFoundError, ValueError):
                return None
    return None


def _summary_source(request: RunDirs, states: list[DirState | None], spark: SparkSession | None) -> str | None:
    """Whose batches the previous run's summary.json names (an output from before manifests said so)."""
    key = location_key(request.report_dir if request.report_dir is not None else request.output)
    return _numbering(_previous_summary([s for s in states if s is not None and s.dir.key == key], spark))


def previous_group(states: list[DirState], spark: SparkSession | None) -> GroupRange | None:
    """The range of the group run whose batches the output holds: its manifest's record, else (an
    output from before manifests kept it) the previous summary's `kafka_group`, without a cluster."""
    output = states[0]  # run_dirs lists the output first
    if output.manifest is not None and output.manifest.group is not None:
        return output.manifest.group
    summary = _previous_summary(states, spark)
    return GroupRange.from_json(summary.get("kafka_group")) if isinstance(summary, dict) else None


def _offsets(offsets: Mapping[int, int]) -> str:
    return "{" + ", ".join(f"{p}: {o}" for p, o in sorted(offsets.items())) + "}"


def refuse_group_rewind(states: list[DirState], previous: GroupRange | None, ours: GroupRange) -> None:
    """An append of a group run after the last one in the output: from the same cluster, and from
    where that run ended (or again from where it started: a run stopped before its offset commit is
    rewritten). Another cluster's group counts its batch ids from its own offsets, and a group whose
    offsets went back (reset, expired, deleted and recreated) from lower ones: either would number
    a batch over an earlier one, and replace it."""
    if previous is None:
        return
    output = states[0]
    whose = f"output {output.dir.location} holds the batches of {output.dir.batches or 'a group'}"
    how = "give another --output, or --mode overwrite"
    if previous.cluster is not None and ours.cluster is not None and previous.cluster != ours.cluster:
        raise ValueError(
            f"{whose} from Kafka cluster {previous.cluster!r}, and this run reads cluster {ours.cluster!r}: "
            f"its batch ids count from that cluster's offsets, and --mode append would number its batches "
            f"over them: {how}"
        )
    rerun = dict(ours.start) == dict(previous.start)
    behind = {p: o for p, o in sorted(ours.start.items()) if o < previous.end.get(p, 0)}
    if behind and not rerun:
        again = ", ".join(f"partition {p} from {o}" for p, o in behind.items())
        raise ValueError(
            f"{whose} up to offsets {_offsets(previous.end)}, and the group now starts at "
            f"{_offsets(ours.start)}: its offsets went back (the group was reset, expired or recreated), "
            f"so --mode append would count again records the output holds ({again}), and could write "
            f"batch_id={ours.batch_id} over an earlier batch: {how}"
        )


def refuse_other_batches(request: RunDirs, states: list[DirState | None], spark: SparkSession | None) -> None:
    """An append numbers its batches as its own source does (a group run: from the sum of its group's
    offsets, 0 for a new group; a stream: from its checkpoint), so another group's, topic's or
    stream's batch_id=N/ would be replaced. The output's manifest names the source of its batches
    (wherever the previous run put its report); an older output's summary.json does."""
    output = states[0]  # run_dirs lists the output first
    recorded = output.manifest.batches if output is not None and output.manifest is not None else None
    theirs = recorded if recorded is not None else _summary_source(request, states, spark)
    ours = batch_source(request)
    if theirs is None or _same_source(theirs, ours):
        return  # nothing recorded, or the same source
    raise ValueError(
        f"output {request.output} holds the batches of {theirs}; --mode append would number this run's "
        f"({ours}) over them: give another --output, or --mode overwrite"
    )


def refuse_mixed_append(request: RunDirs, states: list[DirState | None], spark: SparkSession | None) -> None:
    """An append's refusals: another layout of metrics, or another source's batches."""
    output = states[0]  # run_dirs lists the output first
    if request.keyed_by_batch:
        refuse_other_batches(request, states, spark)
    if output is None:
        return
    fs = RunFS(output.dir.location, spark)
    ours = BY_BATCH if request.keyed_by_batch else BY_DATE
    theirs = _layout(fs, output.dir.location)
    if theirs is not None and theirs != ours:
        raise ValueError(
            f"output {request.output} holds {theirs}; --mode append would mix in {ours}: give another "
            "--output or --mode overwrite"
        )
    if theirs == BY_BATCH and request.stream:
        refuse_fresh_checkpoint(request, spark)
