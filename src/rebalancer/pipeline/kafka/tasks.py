"""Input tasks: offset ranges resolved, checked against the watermarks, cut and packed."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from rebalancer.balance import plan_rebalance
from rebalancer.pipeline.kafka._options import DEFAULT_MAX_RECORDS_PER_TASK, EARLIEST, LATEST, KafkaOptions

# The logger of the module these lines came from, so logging set up for it keeps working.
log = logging.getLogger("rebalancer.pipeline.kafka.source")


# -- planning input tasks -------------------------------------------------------------------------
@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets `[start, end)` of one partition. Sizes count offsets: markers included, so an upper bound."""

    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


class KafkaTask(InputPartition):
    """One Spark input task: the ranges it reads, in order. Picklable."""

    def __init__(self, topic: str, ranges: Sequence[OffsetRange]) -> None:
        super().__init__(None)
        self.topic = topic
        self.ranges = tuple(ranges)

    @property
    def records(self) -> int:
        return sum(r.size for r in self.ranges)

    def __repr__(self) -> str:
        spans = ", ".join(f"{r.partition}:[{r.start},{r.end})" for r in self.ranges)
        return f"KafkaTask({self.topic!r}, {spans})"


def _cut(ranges: Sequence[OffsetRange], piece: int) -> list[OffsetRange]:
    """Each range larger than `piece` cut into ceil(size / piece) near-equal contiguous pieces."""
    pieces = []
    for r in ranges:
        count = max(1, -(-r.size // piece))
        base, extra = divmod(r.size, count)
        start = r.start
        for index in range(count):
            end = start + base + (1 if index < extra else 0)
            pieces.append(OffsetRange(r.partition, start, end))
            start = end
    return pieces


def _merge(pieces: Sequence[OffsetRange]) -> list[OffsetRange]:
    """Adjacent pieces of one partition as one range; partition then offset order."""
    merged: list[OffsetRange] = []
    for piece in sorted(pieces):
        last = merged[-1] if merged else None
        if last is not None and last.partition == piece.partition and last.end == piece.start:
            merged[-1] = OffsetRange(last.partition, last.start, piece.end)
        else:
            merged.append(piece)
    return merged


def _level(groups: list[list[OffsetRange]], cap: int) -> None:
    """Trim every task to `cap` records and hand the offcuts to the tasks below it (in place).

    The packing leaves tasks within a piece of the mean; cutting the excess off the last range of a
    full task and filling the emptiest tasks with it makes them near-equal (none over `cap`) at the
    cost of a few more ranges. Possible whenever tasks x cap >= total.
    """
    offcuts: list[OffsetRange] = []
    for group in groups:
        excess = sum(r.size for r in group) - cap
        while excess > 0:
            last = group.pop()
            if last.size <= excess:
                offcuts.append(last)
                excess -= last.size
            else:
                group.append(OffsetRange(last.partition, last.start, last.end - excess))
                offcuts.append(OffsetRange(last.partition, last.end - excess, last.end))
                excess = 0
    for group in sorted(groups, key=lambda g: sum(r.size for r in g)):
        room = cap - sum(r.size for r in group)
        while room > 0 and offcuts:
            piece = offcuts.pop()
            if piece.size > room:
                offcuts.append(OffsetRange(piece.partition, piece.start + room, piece.end))
                piece = OffsetRange(piece.partition, piece.start, piece.start + room)
            group.append(piece)
            room -= piece.size
    assert not offcuts, "tasks x cap must cover every record"


def plan_input_tasks(
    ranges: Sequence[OffsetRange],
    max_records_per_task: int = DEFAULT_MAX_RECORDS_PER_TASK,
    min_partitions: int | None = None,
    plan_tasks: bool = True,
) -> list[list[OffsetRange]]:
    """The ranges of each input task.

    Planned: about `total / max_records_per_task` tasks (never fewer than `min_partitions`, never
    more than there are records), each within ceil(total / tasks) records. Ranges longer than that
    are cut into near-equal pieces; `plan_rebalance` packs the pieces into tasks, and `_level` evens
    out what packing whole pieces cannot. Unplanned: one task per partition range, Spark's way.
    """
    ranges = [r for r in ranges if r.size > 0]
    if not plan_tasks:
        return [[r] for r in sorted(ranges)]
    total = sum(r.size for r in ranges)
    if total == 0:
        return []
    tasks = min(max(-(-total // max_records_per_task), min_partitions or 1), total)
    cap = -(-total // tasks)  # <= max_records_per_task
    pieces = _cut(ranges, cap)
    plan = plan_rebalance([p.size for p in pieces], [-1] * len(pieces), tasks, skip_ratio=1.0)
    groups: list[list[OffsetRange]] = [[] for _ in range(tasks)]
    for piece, owner in zip(pieces, plan.owner):
        groups[owner].append(piece)
    _level(groups, cap)
    return [_merge(group) for group in groups if group]


class DataLossError(RuntimeError):
    """Offsets to read are gone from the topic (retention, deletion) and failOnDataLoss is true."""


def _data_loss(topic: str, partition: int, start: int, available: int) -> str:
    return (
        f"topic {topic!r} partition {partition}: offsets {start}..{available - 1} were deleted before they "
        f"were read (the earliest available offset is {available}); set failOnDataLoss=false to skip them"
    )


def _resolve(
    spec: str | dict[int, int], marks: Mapping[int, tuple[int, int]], default: int
) -> dict[int, int]:
    """earliest/latest/JSON as concrete offsets per partition; unlisted partitions get `default`."""
    if isinstance(spec, str):
        pick = EARLIEST if spec == "earliest" else LATEST
        return {p: marks[p][0] if pick == EARLIEST else marks[p][1] for p in marks}
    resolved = {}
    for p, (low, high) in marks.items():
        offset = spec.get(p, default)
        resolved[p] = low if offset == EARLIEST else high if offset == LATEST else offset
    return resolved


def _check_listed(name: str, spec: str | dict[int, int], topic: str, partitions: Sequence[int]) -> None:
    if isinstance(spec, dict):
        unknown = sorted(set(spec) - set(partitions))
        if unknown:
            raise ValueError(
                f"{name}: topic {topic!r} has no partition {unknown[0]} (it has {len(partitions)})"
            )


def _check_readable(options: KafkaOptions, marks: Mapping[int, tuple[int, int]], batch: bool = True) -> None:
    """Refuse given offsets the driver already knows cannot be read, at planning, whatever
    failOnDataLoss says: they are the user's mistake, not data lost. A task would otherwise wait
    pollTimeoutMs for records that never come (an end past the high watermark), or the range would
    be reported as data loss, or skipped. Spark's own Kafka source refuses a start after the end too.

    Streaming checks startingOffsets only: its ends come from the watermarks.
    """
    topic = options.topic
    given = {"startingOffsets": options.starting}
    if batch:
        given = {"endingOffsets": options.ending, **given}
    for name, spec in given.items():
        if not isinstance(spec, dict):
            continue
        for partition, offset in sorted(spec.items()):
            high = marks[partition][1]
            if offset > high:
                raise ValueError(
                    f"{name}: topic {topic!r} partition {partition}: offset {offset} is past the end of the "
                    f"partition (high watermark {high})"
                )
    if batch and isinstance(options.starting, dict) and isinstance(options.ending, dict):
        for partition, begin in sorted(options.starting.items()):
            stop = options.ending.get(partition, LATEST)
            if begin >= 0 and stop >= 0 and begin > stop:
                raise ValueError(
                    f"startingOffsets: topic {topic!r} partition {partition}: offset {begin} is after its "
                    f"endingOffsets offset {stop}"
                )


def _ranges(
    options: KafkaOptions,
    start: Mapping[int, int],
    end: Mapping[int, int],
    marks: Mapping[int, tuple[int, int]],
) -> list[OffsetRange]:
    """[start, end) per partition, with deleted offsets, or offsets past the end of the log, failing the
    read (or skipped and counted)."""
    ranges = []
    lost = 0
    for partition, stop in sorted(end.items()):
        begin = start.get(partition, marks.get(partition, (0, 0))[0])
        low = marks.get(partition, (0, 0))[0]
        if begin < low:
            if options.fail_on_data_loss:
                raise DataLossError(_data_loss(options.topic, partition, begin, low))
            lost += min(low, stop) - begin
            log.warning("skipping deleted offsets: %s", _data_loss(options.topic, partition, begin, low))
            begin = min(low, stop)
        if stop < begin:
            message = f"topic {options.topic!r} partition {partition}: end offset {stop} is before start offset {begin}"
            if options.fail_on_data_loss:
                raise DataLossError(
                    message + " (was the topic recreated?); set failOnDataLoss=false to skip it"
                )
            log.warning("%s; skipped", message)
            continue
        high = marks[partition][1] if partition in marks else stop
        if stop > high:
            # A stream replaying a batch planned before the log was cut (recreated topic, unclean
            # leader election): those offsets will never come, so a task would wait pollTimeoutMs.
            gone = max(begin, high)
            message = (
                f"topic {options.topic!r} partition {partition}: offsets {gone}..{stop - 1} are past the end "
                f"of the partition (high watermark {high}; was the topic recreated?)"
            )
            if options.fail_on_data_loss:
                raise DataLossError(message + "; set failOnDataLoss=false to skip them")
            lost += stop - gone
            log.warning("skipping offsets that are gone: %s", message)
            stop = gone
        ranges.append(OffsetRange(partition, begin, stop))
    if lost:
        log.warning("topic %r: %d deleted offset(s) skipped (failOnDataLoss=false)", options.topic, lost)
    return ranges


def _tasks(options: KafkaOptions, ranges: Sequence[OffsetRange]) -> list[KafkaTask]:
    groups = plan_input_tasks(
        ranges, options.max_records_per_task, options.min_partitions, options.plan_tasks
    )
    return [KafkaTask(options.topic, group) for group in groups]
