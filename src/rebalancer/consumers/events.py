"""Events a PartitionedQueue reports through `poll()`; together they are a complete log of ownership.

Replaying `PartitionsAssigned`, `HandoffCompleted`, `FlowUnbound` and `PartitionsRemoved` in order
reproduces `assignment`, so a consumer of the events never has to diff snapshots.

On Kafka (`rebalancer.consumers.kafka`) the same events carry `topic`, since a group plans each topic
apart; the in-process queue leaves it None. `PartitionsReleased` and `PartitionsResumed` are what one
Kafka member's `GracefulHandoff` reports about the partitions it gives up and gets back.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

FlowId = Hashable


@dataclass(frozen=True, slots=True)
class HandoffStarted:
    """`partition` is paused: its old flow gets nothing new until it has acked what it holds."""

    partition: int
    from_flow: FlowId
    to_flow: FlowId
    at: float
    topic: str | None = None


@dataclass(frozen=True, slots=True)
class HandoffCompleted:
    """`forced`: max_handoff_time_s expired with `unacked` messages still outstanding on the old flow."""

    partition: int
    from_flow: FlowId
    to_flow: FlowId
    at: float
    forced: bool
    unacked: int = 0
    topic: str | None = None


@dataclass(frozen=True, slots=True)
class HandoffAborted:
    """The handoff stopped before completing; the partition stays with `from_flow` and is unpaused."""

    partition: int
    from_flow: FlowId
    to_flow: FlowId
    at: float
    reason: str


@dataclass(frozen=True, slots=True)
class FlowChangeUpdate:
    """A bound flow gained its first partition (`active=True`) or lost its last one (`active=False`)."""

    flow: FlowId
    active: bool
    at: float


@dataclass(frozen=True, slots=True)
class StatusChanged:
    """Rebalancing status: "ready" | "holddown" | "rebalancing"."""

    old: str
    new: str
    at: float


@dataclass(frozen=True, slots=True)
class AccessTypeChanged:
    """The queue's access type changed ("exclusive" <-> "non-exclusive"): a rebalance follows at once."""

    old: str
    new: str
    at: float


@dataclass(frozen=True, slots=True)
class ScaleStatusChanged:
    """Scaling status: "ready" | "scaling-up" | "scaling-down"."""

    old: str
    new: str
    at: float


@dataclass(frozen=True, slots=True)
class PartitionsAssigned:
    """Ownerless partitions (new, or their flow left) mapped to `flow` directly: no handoff needed."""

    flow: FlowId
    partitions: tuple[int, ...]
    at: float
    topic: str | None = None


@dataclass(frozen=True, slots=True)
class FlowUnbound:
    """`flow` left (unbind or disconnect). Its unacked messages go back for redelivery, counted here."""

    flow: FlowId
    partitions: tuple[int, ...]
    redelivered: dict[int, int]
    at: float


@dataclass(frozen=True, slots=True)
class FlowStandby:
    """`flow` joined the standby list (`standby=True`) or left it to become a member (`standby=False`)."""

    flow: FlowId
    standby: bool
    at: float


@dataclass(frozen=True, slots=True)
class PartitionsRemoved:
    """A scale-down removed `partitions`; `unacked` lists the messages still unacked on them (never lost)."""

    partitions: tuple[int, ...]
    unacked: dict[int, int]
    at: float


@dataclass(frozen=True, slots=True)
class RebalancePlanned:
    """A rebalance began: `handoffs` is the plan's length, equal to the lower bound for these counts."""

    flows: tuple[FlowId, ...]
    partition_count: int
    handoffs: int
    assigned: int
    at: float
    topic: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionsReleased:
    """A Kafka member gave up `partitions` on revoke, after its in-flight work on them finished.

    `committed` holds the next offset committed per partition. `cut_short`: max_handoff_s passed with
    `in_flight` records still running; their offsets were not committed, so the next owner gets them
    again. `commit_error` names a failed commit (the records since the last commit are redelivered).
    """

    partitions: tuple[tuple[str, int], ...]
    committed: dict[tuple[str, int], int]
    in_flight: int
    cut_short: bool
    waited_s: float
    at: float
    commit_error: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionsResumed:
    """A Kafka member was given `partitions`; each resumes from its committed offset."""

    partitions: tuple[tuple[str, int], ...]
    at: float


Event = (
    AccessTypeChanged
    | HandoffStarted
    | HandoffCompleted
    | HandoffAborted
    | FlowChangeUpdate
    | StatusChanged
    | ScaleStatusChanged
    | PartitionsAssigned
    | FlowUnbound
    | FlowStandby
    | PartitionsRemoved
    | PartitionsReleased
    | PartitionsResumed
    | RebalancePlanned
)


def describe_event(event: Event) -> str:
    """One line per event, in the seed's words (the demos print these)."""
    match event:
        case StatusChanged(old, new, _):
            return f"status {old} -> {new}"
        case ScaleStatusChanged(old, new, _):
            return f"scale status {old} -> {new}"
        case AccessTypeChanged(old, new, _):
            return f"access type {old} -> {new}"
        case RebalancePlanned(flows, count, handoffs, assigned, _):
            return (
                f"rebalance of {count} partitions over {len(flows)} flows: {handoffs} "
                f"handoff{'s' if handoffs != 1 else ''} (the fewest possible), {assigned} mapped directly"
            )
        case PartitionsAssigned(flow, partitions, _):
            return f"partitions {list(partitions)} mapped to {flow} (no handoff)"
        case HandoffStarted(partition, from_flow, to_flow, _, topic) if topic is not None:
            return f"partition {partition} moves {from_flow} -> {to_flow}: {from_flow} finishes and commits it first"
        case HandoffStarted(partition, from_flow, to_flow, _):
            return f"handoff starts: partition {partition} {from_flow} -> {to_flow}, paused until {from_flow} acks"
        case HandoffCompleted(partition, from_flow, to_flow, _, forced, unacked):
            how = f"forced after max-handoff-time, {unacked} still unacked" if forced else "all acked"
            return f"handoff done: partition {partition} {from_flow} -> {to_flow} ({how})"
        case HandoffAborted(partition, from_flow, to_flow, _, reason):
            return f"handoff aborted: partition {partition} stays with {from_flow} ({reason})"
        case FlowChangeUpdate(flow, active, _):
            return f"FlowChangeUpdate: {flow} {'active' if active else 'no longer active'}"
        case FlowStandby(flow, standby, _):
            return f"{flow} {'waits on standby' if standby else 'leaves standby'}"
        case FlowUnbound(flow, partitions, redelivered, _):
            return f"{flow} unbound from {list(partitions)}; redelivered {sum(redelivered.values())}"
        case PartitionsRemoved(partitions, unacked, _):
            return f"partitions {list(partitions)} removed; {sum(unacked.values())} still unacked"
        case PartitionsReleased(partitions, committed, in_flight, cut_short, waited_s, _, error):
            how = f"cut short after {waited_s:.1f} s, {in_flight} still in flight" if cut_short else "all done"
            commit = f"commit failed: {error}" if error else f"{len(committed)} committed"
            return f"released {_count(len(partitions), 'partition')} ({how}; {commit})"
        case PartitionsResumed(partitions, _):
            return f"resumed {_count(len(partitions), 'partition')} from the committed offsets"
    raise TypeError(f"unknown event {event!r}")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
