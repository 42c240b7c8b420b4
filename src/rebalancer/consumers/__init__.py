"""Partitioned-queue consumer flows: holddown, graceful one-at-a-time handoff, and statuses."""

from rebalancer.consumers.events import (
    AccessTypeChanged,
    Event,
    FlowChangeUpdate,
    FlowStandby,
    FlowUnbound,
    HandoffAborted,
    HandoffCompleted,
    HandoffStarted,
    PartitionsAssigned,
    PartitionsReleased,
    PartitionsRemoved,
    PartitionsResumed,
    RebalancePlanned,
    ScaleStatusChanged,
    StatusChanged,
)
from rebalancer.consumers.partitioned import Handoff, PartitionedQueue

__all__ = [
    "AccessTypeChanged",
    "Event",
    "FlowChangeUpdate",
    "FlowStandby",
    "FlowUnbound",
    "Handoff",
    "HandoffAborted",
    "HandoffCompleted",
    "HandoffStarted",
    "PartitionedQueue",
    "PartitionsAssigned",
    "PartitionsReleased",
    "PartitionsRemoved",
    "PartitionsResumed",
    "RebalancePlanned",
    "ScaleStatusChanged",
    "StatusChanged",
]
