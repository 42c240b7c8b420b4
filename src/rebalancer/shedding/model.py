"""Load data and settings shared by every shedding and placement strategy.

The shapes mirror what Pulsar's leader broker sees: a load report per broker (resource usages in
percent, message rates, the bundles it owns) and per-bundle rates. Settings keep Pulsar's names in
snake_case without the ``loadBalancer`` prefix, with Pulsar's defaults, so a scenario written for
Pulsar's own tests reads the same here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields

MB = 1024 * 1024

_USAGE_FIELDS = ("cpu", "memory", "direct_memory", "bandwidth_in", "bandwidth_out")
_BROKER_RATE_FIELDS = ("msg_rate_in", "msg_rate_out", "msg_throughput_in", "msg_throughput_out")


def _check_rate(owner: str, name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
        raise ValueError(f"{owner}.{name} must be a rate >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class BundleLoad:
    """Short-term rates of one bundle; long-term rates default to the short-term ones."""

    msg_rate_in: float
    msg_rate_out: float
    msg_throughput_in: float
    msg_throughput_out: float
    long_term_msg_rate_in: float | None = None
    long_term_msg_rate_out: float | None = None
    long_term_msg_throughput_in: float | None = None
    long_term_msg_throughput_out: float | None = None

    def __post_init__(self) -> None:
        for name in ("msg_rate_in", "msg_rate_out", "msg_throughput_in", "msg_throughput_out"):
            _check_rate("bundle", name, getattr(self, name))
            long_name = f"long_term_{name}"
            if getattr(self, long_name) is None:
                object.__setattr__(self, long_name, float(getattr(self, name)))
            else:
                _check_rate("bundle", long_name, getattr(self, long_name))

    @property
    def msg_rate(self) -> float:
        return self.msg_rate_in + self.msg_rate_out

    @property
    def msg_throughput(self) -> float:
        return self.msg_throughput_in + self.msg_throughput_out

    @property
    def long_term_msg_rate(self) -> float:
        return float(self.long_term_msg_rate_in) + float(self.long_term_msg_rate_out)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class BrokerLoad:
    """One broker's load report: usages in percent (0..100), rates, and the bundles it owns."""

    cpu: float
    memory: float
    direct_memory: float
    bandwidth_in: float
    bandwidth_out: float
    msg_rate_in: float
    msg_rate_out: float
    msg_throughput_in: float
    msg_throughput_out: float
    bundles: Sequence[str] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "bundles", tuple(self.bundles))

    def validate(self, name: str) -> None:
        for usage in _USAGE_FIELDS:
            value = getattr(self, usage)
            if not isinstance(value, (int, float)) or math.isnan(value) or not 0.0 <= value <= 100.0:
                raise ValueError(f"broker {name!r}: {usage} must be within 0..100 percent, got {value!r}")
        for rate in _BROKER_RATE_FIELDS:
            value = getattr(self, rate)
            if not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
                raise ValueError(f"broker {name!r}: {rate} must be >= 0, got {value!r}")
        if len(set(self.bundles)) != len(self.bundles):
            raise ValueError(f"broker {name!r}: lists a bundle twice in {list(self.bundles)!r}")

    @property
    def msg_rate(self) -> float:
        return self.msg_rate_in + self.msg_rate_out

    @property
    def msg_throughput(self) -> float:
        return self.msg_throughput_in + self.msg_throughput_out

    def max_resource_usage(self) -> float:
        """Pulsar's ``getMaxResourceUsage``: memory no longer counts (Pulsar 3.x); fraction 0..1."""
        return max(self.cpu, self.direct_memory, self.bandwidth_in, self.bandwidth_out) / 100.0

    def _weighted(self, conf: ShedderConfig) -> tuple[float, ...]:
        return (
            self.cpu * conf.cpu_resource_weight,
            self.memory * conf.memory_resource_weight,
            self.direct_memory * conf.direct_memory_resource_weight,
            self.bandwidth_in * conf.bandwidth_in_resource_weight,
            self.bandwidth_out * conf.bandwidth_out_resource_weight,
        )

    def max_resource_usage_with_weight(self, conf: ShedderConfig) -> float:
        """Pulsar's ``getMaxResourceUsageWithWeight``; fraction (1.0 is 100%)."""
        return max(self._weighted(conf)) / 100.0

    def max_resource_usage_with_weight_within_limit(self, conf: ShedderConfig) -> float:
        """Ignores weighted signals above 100%, as ThresholdShedder does when weights are mis-set."""
        return max((v for v in self._weighted(conf) if v <= 100.0), default=0.0) / 100.0


@dataclass(frozen=True)
class ClusterLoad:
    """What the leader knows at one moment: reports per broker, data per bundle, recent unloads.

    ``recently_unloaded`` maps a bundle to the time (seconds) it was last unloaded; strategies skip
    those bundles, as Pulsar does during ``loadBalancerSheddingGracePeriodMinutes``. ``timestamp`` is
    the time of this load data in seconds (TransferShedder's cool-down uses it).
    """

    brokers: Mapping[str, BrokerLoad]
    bundles: Mapping[str, BundleLoad] = field(default_factory=dict)
    recently_unloaded: Mapping[str, float] = field(default_factory=dict)
    timestamp: float = 0.0
    _owner: dict[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        owner: dict[str, str] = {}
        for name, broker in self.brokers.items():
            if not isinstance(broker, BrokerLoad):
                raise ValueError(f"broker {name!r} must be a BrokerLoad, got {type(broker).__name__}")
            broker.validate(name)
            for bundle in broker.bundles:
                if bundle in owner:
                    raise ValueError(f"bundle {bundle!r} is owned by both {owner[bundle]!r} and {name!r}")
                owner[bundle] = name
        for name, bundle in self.bundles.items():
            if not isinstance(bundle, BundleLoad):
                raise ValueError(f"bundle {name!r} must be a BundleLoad, got {type(bundle).__name__}")
        object.__setattr__(self, "_owner", owner)

    def owner_of(self, bundle: str) -> str | None:
        return self._owner.get(bundle)

    def check_broker(self, broker: str) -> BrokerLoad:
        try:
            return self.brokers[broker]
        except KeyError:
            raise ValueError(f"unknown broker {broker!r}") from None

    def check_bundle(self, bundle: str) -> None:
        if bundle not in self.bundles and bundle not in self._owner:
            raise ValueError(f"unknown bundle {bundle!r}")

    def check_candidates(self, candidates: Iterable[str]) -> list[str]:
        out = list(candidates)
        for broker in out:
            self.check_broker(broker)
        return out

    def bundles_with_data(self, broker: str) -> list[tuple[str, BundleLoad]]:
        """Bundles a broker reports that have load data, in report order (Pulsar's bundle data map)."""
        data = self.bundles
        return [(b, data[b]) for b in self.brokers[broker].bundles if b in data]

    def long_term_msg_rate(self, broker: str) -> float:
        """Pulsar's TimeAverageBrokerData: the sum of the long-term rates of the broker's bundles."""
        return sum(load.long_term_msg_rate for _, load in self.bundles_with_data(broker))


@dataclass(frozen=True)
class ShedderConfig:
    """Pulsar's load-balancer settings (ServiceConfiguration defaults), snake_case, no prefix."""

    # UniformLoadShedder and AvgShedder
    max_unload_percentage: float = 0.2
    min_unload_message: float = 1000
    min_unload_message_throughput: float = 1 * MB
    msg_rate_difference_shedder_threshold: float = 50
    msg_throughput_multiplier_difference_shedder_threshold: float = 4
    max_unload_bundle_num_per_shedding: int = -1
    # AvgShedder
    avg_shedder_low_threshold: float = 15
    avg_shedder_high_threshold: float = 40
    avg_shedder_hit_count_low_threshold: int = 8
    avg_shedder_hit_count_high_threshold: int = 2
    # ThresholdShedder / LeastResourceUsageWithWeight
    history_resource_percentage: float = 0.9
    broker_threshold_shedder_percentage: float = 10
    bundle_unload_min_throughput_threshold: float = 10  # MB
    lower_boundary_shedding_enabled: bool = False
    average_resource_usage_difference_threshold_percentage: float = 10
    # OverloadShedder / LeastLongTermMessageRate
    broker_overloaded_threshold_percentage: float = 85
    # resource weights (memory is deprecated in Pulsar and weighs 0)
    cpu_resource_weight: float = 1.0
    memory_resource_weight: float = 0.0
    direct_memory_resource_weight: float = 0.0
    bandwidth_in_resource_weight: float = 1.0
    bandwidth_out_resource_weight: float = 1.0
    # cadence
    shedding_interval_minutes: float = 1
    shedding_grace_period_minutes: float = 30
    # TransferShedder (extensible load manager)
    broker_load_target_std: float = 0.25
    shedding_condition_hit_count_threshold: int = 3
    transfer_enabled: bool = True
    max_number_of_broker_shedding_per_cycle: int = 3
    shedding_delay_in_seconds: float = 180  # Pulsar: loadBalanceSheddingDelayInSeconds
    max_number_of_bundles_in_bundle_load_report: int = 10
    debug_mode_enabled: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool):
                continue
            if not isinstance(value, (int, float)) or math.isnan(value):
                raise ValueError(f"{f.name} must be a number, got {value!r}")
        nonneg = [f.name for f in fields(self) if not isinstance(getattr(self, f.name), bool)]
        for name in nonneg:
            if name == "max_unload_bundle_num_per_shedding":
                continue
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if not 0.0 <= self.history_resource_percentage <= 1.0:
            raise ValueError(
                f"history_resource_percentage must be within 0..1, got {self.history_resource_percentage!r}"
            )
        if not 0.0 < self.max_unload_percentage <= 1.0:
            raise ValueError(
                f"max_unload_percentage must be within (0, 1], got {self.max_unload_percentage!r}"
            )
        if self.max_unload_bundle_num_per_shedding < -1:
            raise ValueError(
                "max_unload_bundle_num_per_shedding must be -1 (no limit) or >= 0, "
                f"got {self.max_unload_bundle_num_per_shedding!r}"
            )
        if self.shedding_interval_minutes <= 0:
            raise ValueError(f"shedding_interval_minutes must be > 0, got {self.shedding_interval_minutes!r}")
