"""Load data and settings shared by every shedding and placement strategy.

The shapes mirror what Pulsar's leader broker sees: a load report per broker (resource usages in
percent, message rates, the bundles it owns) and per-bundle rates. Settings keep Pulsar's names in
snake_case without the ``loadBalancer`` prefix, with Pulsar's defaults, so a scenario written for
Pulsar's own tests reads the same here.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

log = logging.getLogger(__name__)

MB = 1024 * 1024

_USAGE_FIELDS = ("cpu", "memory", "direct_memory", "bandwidth_in", "bandwidth_out")
_BROKER_RATE_FIELDS = ("msg_rate_in", "msg_rate_out", "msg_throughput_in", "msg_throughput_out")


def is_real(value: object) -> bool:
    """A finite int or float that is not a bool (True is not a CPU percentage)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_rate(owner: str, name: str, value: float) -> None:
    if not is_real(value) or value < 0:
        raise ValueError(f"{owner}.{name} must be a finite rate >= 0, got {value!r}")


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
            if not is_real(value) or not 0.0 <= value <= 100.0:
                raise ValueError(f"broker {name!r}: {usage} must be within 0..100 percent, got {value!r}")
        for rate in _BROKER_RATE_FIELDS:
            value = getattr(self, rate)
            if not is_real(value) or value < 0:
                raise ValueError(f"broker {name!r}: {rate} must be a finite rate >= 0, got {value!r}")
        if len(set(self.bundles)) != len(self.bundles):
            raise ValueError(f"broker {name!r}: lists a bundle twice in {list(self.bundles)!r}")

    @property
    def msg_rate(self) -> float:
        return self.msg_rate_in + self.msg_rate_out

    @property
    def msg_throughput(self) -> float:
        return self.msg_throughput_in + self.msg_throughput_out

    def max_resource_usage(self) -> float:
        """Pulsar's ``getMaxResourceUsage``: heap memory no longer counts (Pulsar 3.x); fraction 0..1."""
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
        for name, data in self.bundles.items():
            if not isinstance(data, BundleLoad):
                raise ValueError(f"bundle {name!r} must be a BundleLoad, got {type(data).__name__}")
        for name, when in self.recently_unloaded.items():
            if not is_real(when):
                raise ValueError(
                    f"recently_unloaded[{name!r}] must be a finite time in seconds, got {when!r}"
                )
        if not is_real(self.timestamp):
            raise ValueError(f"timestamp must be a finite time in seconds, got {self.timestamp!r}")
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


PULSAR_IMPL = "org.apache.pulsar.broker.loadbalance.impl."


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
    # resource weights. Heap memory is deprecated since Pulsar 3.0 and no longer a balancing signal
    # (weight 0 here; Pulsar ignores its setting); direct memory still is, with weight 1.0.
    cpu_resource_weight: float = 1.0
    memory_resource_weight: float = 0.0
    direct_memory_resource_weight: float = 1.0
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
    # which strategies the broker runs (fully qualified Java class names, as in broker.conf)
    load_shedding_strategy: str = PULSAR_IMPL + "ThresholdShedder"
    load_placement_strategy: str = PULSAR_IMPL + "LeastLongTermMessageRate"

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "bool" or f.type == "str":
                kind = bool if f.type == "bool" else str
                if not isinstance(value, kind):
                    raise ValueError(f"{f.name} must be a {kind.__name__}, got {value!r}")
                continue
            if not is_real(value) or (f.type == "int" and not isinstance(value, int)):
                what = "an int" if f.type == "int" else "a finite number"
                raise ValueError(f"{f.name} must be {what}, got {value!r}")
        nonneg = [f.name for f in fields(self) if f.type not in ("bool", "str")]
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

        for name in ("load_shedding_strategy", "load_placement_strategy"):
            short = getattr(self, name).removeprefix(PULSAR_IMPL)
            known = SHEDDING_STRATEGIES if name == "load_shedding_strategy" else PLACEMENT_STRATEGIES
            if short not in known:
                raise ValueError(f"{name} must be one of {', '.join(known)}, got {getattr(self, name)!r}")

    @property
    def shedding_strategy_name(self) -> str:
        """The configured shedding strategy's class name without its package."""
        return self.load_shedding_strategy.removeprefix(PULSAR_IMPL)

    @property
    def placement_strategy_name(self) -> str:
        return self.load_placement_strategy.removeprefix(PULSAR_IMPL)

    @classmethod
    def from_properties(
        cls, properties: Mapping[str, str | float | bool], **overrides: object
    ) -> ShedderConfig:
        """Settings from Pulsar's own property names (``ServiceConfiguration``), e.g. a parsed broker.conf.

        Values may be strings as in broker.conf (an empty one means "not set", as in Pulsar) or
        numbers. ``loadBalancer*`` keys this model does not use are logged in one warning; other
        keys are the rest of a broker's settings and are ignored. A bad value raises ValueError naming
        the Pulsar key. ``overrides`` are field values applied on top.
        """
        values: dict[str, object] = {}
        types = {f.name: f.type for f in fields(cls)}
        unused: list[str] = []
        for key, raw in properties.items():
            if not isinstance(key, str):
                raise ValueError(f"property names must be strings, got {key!r}")
            if isinstance(raw, str) and not raw.strip():
                continue
            if key in IGNORED_PROPERTIES:
                _parse(key, raw, "float")
                log.warning("%s: %s; ignored", key, IGNORED_PROPERTIES[key])
                continue
            name = PROPERTY_NAMES.get(key)
            if name is None:
                if key.startswith(("loadBalancer", "loadBalance")):
                    unused.append(key)
                continue
            values[name] = _parse(key, raw, str(types[name]))
        if unused:
            log.warning(
                "ignoring loadBalancer settings the simulator does not model: %s", ", ".join(sorted(unused))
            )
        values.update(overrides)
        try:
            return cls(**values)  # type: ignore[arg-type]
        except ValueError as err:
            keys = {v: k for k, v in PROPERTY_NAMES.items()}
            field_name = str(err).split(" ", 1)[0]
            raise ValueError(f"{keys.get(field_name, field_name)}: {err}") from None

    @classmethod
    def from_broker_conf(cls, path: str | Path, **overrides: object) -> ShedderConfig:
        """Settings from a Pulsar broker.conf (Java properties syntax); see ``from_properties``."""
        from rebalancer._extras import require_extra

        require_extra("ShedderConfig.from_broker_conf", "pulsar")
        import javaproperties

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"broker.conf not found: {str(path)!r}")
        with path.open(encoding="utf-8") as f:
            try:
                properties = javaproperties.load(f)
            except ValueError as err:
                raise ValueError(f"{path}: not a Java properties file: {err}") from None
        return cls.from_properties(properties, **overrides)


SHEDDING_STRATEGIES = ("ThresholdShedder", "OverloadShedder", "UniformLoadShedder", "AvgShedder")
PLACEMENT_STRATEGIES = ("LeastLongTermMessageRate", "LeastResourceUsageWithWeight", "AvgShedder")

# Pulsar's property names (ServiceConfiguration; note its own spelling "Bandwith") -> field names.
PROPERTY_NAMES: dict[str, str] = {
    "maxUnloadPercentage": "max_unload_percentage",
    "minUnloadMessage": "min_unload_message",
    "minUnloadMessageThroughput": "min_unload_message_throughput",
    "loadBalancerMsgRateDifferenceShedderThreshold": "msg_rate_difference_shedder_threshold",
    "loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold": (
        "msg_throughput_multiplier_difference_shedder_threshold"
    ),
    "maxUnloadBundleNumPerShedding": "max_unload_bundle_num_per_shedding",
    "loadBalancerAvgShedderLowThreshold": "avg_shedder_low_threshold",
    "loadBalancerAvgShedderHighThreshold": "avg_shedder_high_threshold",
    "loadBalancerAvgShedderHitCountLowThreshold": "avg_shedder_hit_count_low_threshold",
    "loadBalancerAvgShedderHitCountHighThreshold": "avg_shedder_hit_count_high_threshold",
    "loadBalancerHistoryResourcePercentage": "history_resource_percentage",
    "loadBalancerBrokerThresholdShedderPercentage": "broker_threshold_shedder_percentage",
    "loadBalancerBundleUnloadMinThroughputThreshold": "bundle_unload_min_throughput_threshold",
    "lowerBoundarySheddingEnabled": "lower_boundary_shedding_enabled",
    "loadBalancerAverageResourceUsageDifferenceThresholdPercentage": (
        "average_resource_usage_difference_threshold_percentage"
    ),
    "loadBalancerBrokerOverloadedThresholdPercentage": "broker_overloaded_threshold_percentage",
    "loadBalancerCPUResourceWeight": "cpu_resource_weight",
    "loadBalancerDirectMemoryResourceWeight": "direct_memory_resource_weight",
    "loadBalancerBandwithInResourceWeight": "bandwidth_in_resource_weight",
    "loadBalancerBandwithOutResourceWeight": "bandwidth_out_resource_weight",
    "loadBalancerSheddingIntervalMinutes": "shedding_interval_minutes",
    "loadBalancerSheddingGracePeriodMinutes": "shedding_grace_period_minutes",
    "loadBalancerBrokerLoadTargetStd": "broker_load_target_std",
    "loadBalancerSheddingConditionHitCountThreshold": "shedding_condition_hit_count_threshold",
    "loadBalancerTransferEnabled": "transfer_enabled",
    "loadBalancerMaxNumberOfBrokerSheddingPerCycle": "max_number_of_broker_shedding_per_cycle",
    "loadBalanceSheddingDelayInSeconds": "shedding_delay_in_seconds",
    "loadBalancerMaxNumberOfBundlesInBundleLoadReport": "max_number_of_bundles_in_bundle_load_report",
    "loadBalancerDebugModeEnabled": "debug_mode_enabled",
    "loadBalancerLoadSheddingStrategy": "load_shedding_strategy",
    "loadBalancerLoadPlacementStrategy": "load_placement_strategy",
}

# Known to Pulsar, read (and validated) here, but without effect, as in Pulsar 3.x.
IGNORED_PROPERTIES: dict[str, str] = {
    "loadBalancerMemoryResourceWeight": "heap memory is deprecated as a load signal since Pulsar 3.0",
}


def _parse(key: str, raw: object, kind: str) -> object:
    """One property value as the field's type; the error names the Pulsar key."""
    text = raw.strip() if isinstance(raw, str) else raw
    if kind == "str":
        if not isinstance(text, str):
            raise ValueError(f"{key} must be a class name, got {raw!r}")
        return text
    if kind == "bool":
        if isinstance(text, bool):
            return text
        if isinstance(text, str) and text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise ValueError(f"{key} must be true or false, got {raw!r}")
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise ValueError(f"{key} must be a number, got {raw!r}")
    try:
        value = int(text) if kind == "int" else float(text)
    except ValueError:
        what = "an integer" if kind == "int" else "a number"
        raise ValueError(f"{key} must be {what}, got {raw!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"{key} must be finite, got {raw!r}")
    return value
