"""Faithful ports of Pulsar's load managers' strategies (apache/pulsar 4.2.4), one class per module as in
Pulsar: the modular manager's (broker/loadbalance/impl) and the extensible one's TransferShedder.

Behaviour follows the Java sources of Pulsar 4.2.4, quirks included (EMA advanced on every call,
integer truncation of UniformLoadShedder's remaining budget), and is checked against those very classes
by the conformance harness (conformance/pulsar, tests/conformance, docs/shedding.md). Ties are broken as
Pulsar breaks them: brokers and bundles are visited in the order Pulsar's hash maps iterate
(``rebalancer.shedding.java``), not in report order. Usages are Pulsar's ``percentUsage()``
values; the modular manager weighs cpu, direct memory and bandwidth, never heap memory.

One known bug is left out, and listed as a deviation in docs/shedding.md: AvgShedder keyed its
bundle -> broker plan by a mutable bundle-stats object, so entries became unreachable and bundles with
equal stats shared one entry (apache/pulsar#26246). Here the plan is keyed by bundle name and an entry
is dropped once the bundle has been placed.
"""

from rebalancer.shedding.pulsar.avg_shedder import AvgShedder
from rebalancer.shedding.pulsar.least_long_term_message_rate import LeastLongTermMessageRate
from rebalancer.shedding.pulsar.least_resource_usage_with_weight import LeastResourceUsageWithWeight
from rebalancer.shedding.pulsar.overload_shedder import OverloadShedder
from rebalancer.shedding.pulsar.threshold_shedder import ThresholdShedder
from rebalancer.shedding.pulsar.transfer_shedder import TransferShedder
from rebalancer.shedding.pulsar.uniform_load_shedder import UniformLoadShedder

__all__ = [
    "AvgShedder",
    "LeastLongTermMessageRate",
    "LeastResourceUsageWithWeight",
    "OverloadShedder",
    "ThresholdShedder",
    "TransferShedder",
    "UniformLoadShedder",
]
