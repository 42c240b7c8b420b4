"""The one place `rebalancer.consumers` reaches below aiokafka's public `__all__`.

aiokafka takes assignor instances in `partition_assignment_strategy`, but the interface an assignor
implements (its base class, the member metadata and assignment structs, the cluster metadata it is
handed) and its own assignors live under `aiokafka.coordinator`, outside `aiokafka.__all__`. Named
here once, an aiokafka that moves them breaks one import, not the assignor.
"""

from __future__ import annotations

from typing import Any

from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata

__all__ = [
    "AbstractPartitionAssignor",
    "ClusterMetadata",
    "ConsumerProtocolMemberAssignment",
    "ConsumerProtocolMemberMetadata",
    "RangePartitionAssignor",
    "RoundRobinPartitionAssignor",
    "StickyPartitionAssignor",
    "group_generation",
]


def group_generation(consumer: Any) -> int:
    """The consumer's group generation (-1 before it joined): aiokafka keeps it on its coordinator
    and has no public accessor. The live group harness uses it to tell one rebalance from the next."""
    return int(getattr(getattr(consumer, "_coordinator", None), "generation", -1))
