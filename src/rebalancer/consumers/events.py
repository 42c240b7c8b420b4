"""Events a PartitionedQueue reports through `poll()`; together they are a complete log of ownership.

Replaying `PartitionsAssigned`, `HandoffCompleted`, `FlowUnbound` and `PartitionsRemoved` in order
reproduces `assignment`, so a consumer of the events never has to diff snapshots.
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


@dataclass(frozen=True, slots=True)
class HandoffCompleted:
    """`forced`: max_handoff_time_s expired with `unacked` messages still outstanding on the old flow."""

    partition: int
    from_flow: FlowId
    to_flow: FlowId
    at: float
    forced: bool
    unacked: int = 0


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
    | RebalancePlanned
)
