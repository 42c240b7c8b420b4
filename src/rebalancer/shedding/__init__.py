"""Broker load shedding and placement: Pulsar's strategies, ours, and a cluster simulator.

``find_bundles_for_unloading`` picks bundles to unload; ``select_broker`` places one bundle. Each
strategy keeps its state between calls, as Pulsar's do. See docs/shedding.md.
"""

from rebalancer.shedding.balanced import BalancedShedder
from rebalancer.shedding.base import LoadSheddingStrategy, PlacementStrategy
from rebalancer.shedding.model import BrokerLoad, BundleLoad, ClusterLoad, ShedderConfig
from rebalancer.shedding.pulsar import (
    AvgShedder,
    LeastLongTermMessageRate,
    LeastResourceUsageWithWeight,
    OverloadShedder,
    ThresholdShedder,
    TransferShedder,
    UniformLoadShedder,
)

__all__ = [
    "AvgShedder",
    "BalancedShedder",
    "BrokerLoad",
    "BundleLoad",
    "ClusterLoad",
    "LeastLongTermMessageRate",
    "LeastResourceUsageWithWeight",
    "LoadSheddingStrategy",
    "OverloadShedder",
    "PlacementStrategy",
    "ShedderConfig",
    "ThresholdShedder",
    "TransferShedder",
    "UniformLoadShedder",
]
