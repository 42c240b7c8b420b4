"""Load data and settings shared by every shedding and placement strategy.

The shapes mirror what Pulsar's leader broker sees: a load report per broker (resource usages in
percent, message rates, the bundles it owns) and per-bundle rates. Settings keep Pulsar's names in
snake_case without the ``loadBalancer`` prefix, with the defaults of Pulsar 4.2.4 (the version the
conformance harness in conformance/pulsar pins), so a scenario written for Pulsar's own tests reads the
same here.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TypeVar

from rebalancer._extras import require_extra
from rebalancer.balance.checks import is_int, is_real
from rebalancer.shedding.java import (
    INTEGER_BITS,
    JAVA_TRIM,
    JavaRangeError,
    java_blank,
    parse_java_boolean,
    parse_java_double,
    parse_java_int,
)

log = logging.getLogger(__name__)

MB = 1024 * 1024

_USAGE_FIELDS = ("cpu", "memory", "direct_memory", "bandwidth_in", "bandwidth_out")
_BROKER_RATE_FIELDS = ("msg_rate_in", "msg_rate_out", "msg_throughput_in", "msg_throughput_out")


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
    """One broker's load report: usages in percent of their limits, rates, and the bundles it owns.

    A usage may exceed 100 (a CPU used beyond its limit): Pulsar takes ``usage / limit`` as it is, and
    so do the ports.
    """

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
        bundles = self.bundles
        if isinstance(bundles, str | bytes) or not isinstance(bundles, Iterable):  # "xy" is not 2 bundles
            raise ValueError(f"BrokerLoad.bundles must be a sequence of bundle names, got {bundles!r}")
        object.__setattr__(self, "bundles", tuple(bundles))

    def validate(self, name: str) -> None:
        for i, bundle in enumerate(self.bundles):
            if not isinstance(bundle, str):
                raise ValueError(f"broker {name!r}: bundles[{i}] must be a bundle name (str), got {bundle!r}")
        for usage in _USAGE_FIELDS:
            value = getattr(self, usage)
            if not is_real(value) or value < 0.0:
                raise ValueError(f"broker {name!r}: {usage} must be a finite percentage >= 0, got {value!r}")
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
        """Pulsar's ``getMaxResourceUsage``: heap memory no longer counts (Pulsar 4.2.4); a fraction."""
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
        """The extensible manager's ``BrokerLoadData`` weighted max, heap memory included; a fraction.

        The modular manager's strategies leave heap memory out (``pulsar.shared.local_usage``).
        """
        return max(self._weighted(conf)) / 100.0


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
        for field_name, what in (
            ("brokers", "broker names to BrokerLoad"),
            ("bundles", "bundle names to BundleLoad"),
            ("recently_unloaded", "bundle names to times"),
        ):
            if not isinstance(getattr(self, field_name), Mapping):
                raise ValueError(f"{field_name} must map {what}, got {getattr(self, field_name)!r}")
        owner: dict[str, str] = {}
        for name, broker in self.brokers.items():
            if not isinstance(name, str):
                raise ValueError(f"broker names must be str, got {name!r}")
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


PULSAR_IMPL = "org.apache.pulsar.broker.loadbalance.impl."

_T = TypeVar("_T")


def _setting(java_name: str, java_type: str, default: _T, *, also: tuple[str, ...] = ()) -> _T:
    """One row of the settings table: Pulsar's property name and its Java type (which decides how
    Pulsar parses it), then the default. ``also``: other spellings Pulsar reads for the same field."""
    return field(default=default, metadata={"java_name": java_name, "java_type": java_type, "also": also})


@dataclass(frozen=True)
class ShedderConfig:
    """Pulsar's load-balancer settings (ServiceConfiguration defaults), snake_case, no prefix.

    The fields are the one settings table: each names its Pulsar property and that property's Java
    type; ``PROPERTY_NAMES`` and ``PROPERTY_TYPES`` are read off them. Some thresholds are Java ints
    where the field is a float (they are compared with float usages).
    """

    # UniformLoadShedder and AvgShedder
    max_unload_percentage: float = _setting("maxUnloadPercentage", "double", 0.2)
    min_unload_message: float = _setting("minUnloadMessage", "int", 1000)
    min_unload_message_throughput: float = _setting("minUnloadMessageThroughput", "int", 1 * MB)
    msg_rate_difference_shedder_threshold: float = _setting(
        "loadBalancerMsgRateDifferenceShedderThreshold", "double", 50
    )
    msg_throughput_multiplier_difference_shedder_threshold: float = _setting(
        "loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold", "double", 4
    )
    max_unload_bundle_num_per_shedding: int = _setting("maxUnloadBundleNumPerShedding", "int", -1)
    # AvgShedder
    avg_shedder_low_threshold: float = _setting("loadBalancerAvgShedderLowThreshold", "int", 15)
    avg_shedder_high_threshold: float = _setting("loadBalancerAvgShedderHighThreshold", "int", 40)
    avg_shedder_hit_count_low_threshold: int = _setting(
        "loadBalancerAvgShedderHitCountLowThreshold", "int", 8
    )
    avg_shedder_hit_count_high_threshold: int = _setting(
        "loadBalancerAvgShedderHitCountHighThreshold", "int", 2
    )
    # ThresholdShedder / LeastResourceUsageWithWeight
    history_resource_percentage: float = _setting("loadBalancerHistoryResourcePercentage", "double", 0.9)
    broker_threshold_shedder_percentage: float = _setting(
        "loadBalancerBrokerThresholdShedderPercentage", "int", 10
    )
    bundle_unload_min_throughput_threshold: float = _setting(  # MB
        "loadBalancerBundleUnloadMinThroughputThreshold", "double", 10
    )
    lower_boundary_shedding_enabled: bool = _setting("lowerBoundarySheddingEnabled", "boolean", False)
    average_resource_usage_difference_threshold_percentage: float = _setting(
        "loadBalancerAverageResourceUsageDifferenceThresholdPercentage", "int", 10
    )
    # OverloadShedder / LeastLongTermMessageRate
    broker_overloaded_threshold_percentage: float = _setting(
        "loadBalancerBrokerOverloadedThresholdPercentage", "int", 85
    )
    # resource weights, Pulsar 4.2.4's defaults: heap and direct memory 0. The modular manager never
    # counts heap memory; the extensible one (TransferShedder) weighs it by memory_resource_weight.
    # Pulsar reads the bandwidth weights under its old spelling "Bandwith" too (_BANDWIDTH_SPELLINGS).
    cpu_resource_weight: float = _setting("loadBalancerCPUResourceWeight", "double", 1.0)
    memory_resource_weight: float = _setting("loadBalancerMemoryResourceWeight", "double", 0.0)
    direct_memory_resource_weight: float = _setting("loadBalancerDirectMemoryResourceWeight", "double", 0.0)
    bandwidth_in_resource_weight: float = _setting(
        "loadBalancerBandwidthInResourceWeight", "double", 1.0, also=("loadBalancerBandwithInResourceWeight",)
    )
    bandwidth_out_resource_weight: float = _setting(
        "loadBalancerBandwidthOutResourceWeight",
        "double",
        1.0,
        also=("loadBalancerBandwithOutResourceWeight",),
    )
    # cadence
    shedding_interval_minutes: float = _setting("loadBalancerSheddingIntervalMinutes", "int", 1)
    shedding_grace_period_minutes: float = _setting("loadBalancerSheddingGracePeriodMinutes", "long", 30)
    # TransferShedder (extensible load manager)
    broker_load_target_std: float = _setting("loadBalancerBrokerLoadTargetStd", "double", 0.25)
    shedding_condition_hit_count_threshold: int = _setting(
        "loadBalancerSheddingConditionHitCountThreshold", "int", 3
    )
    transfer_enabled: bool = _setting("loadBalancerTransferEnabled", "boolean", True)
    max_number_of_broker_shedding_per_cycle: int = _setting(
        "loadBalancerMaxNumberOfBrokerSheddingPerCycle", "int", 3
    )
    shedding_delay_in_seconds: float = _setting("loadBalanceSheddingDelayInSeconds", "long", 180)
    max_number_of_bundles_in_bundle_load_report: int = _setting(
        "loadBalancerMaxNumberOfBundlesInBundleLoadReport", "int", 10
    )
    debug_mode_enabled: bool = _setting("loadBalancerDebugModeEnabled", "boolean", False)
    # which strategies the broker runs (fully qualified Java class names, as in broker.conf)
    load_shedding_strategy: str = _setting(
        "loadBalancerLoadSheddingStrategy", "String", PULSAR_IMPL + "ThresholdShedder"
    )
    load_placement_strategy: str = _setting(
        "loadBalancerLoadPlacementStrategy", "String", PULSAR_IMPL + "LeastLongTermMessageRate"
    )

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "bool" or f.type == "str":
                kind = bool if f.type == "bool" else str
                if not isinstance(value, kind):
                    raise ValueError(f"{f.name} must be a {kind.__name__}, got {value!r}")
                continue
            if not is_real(value) or (f.type == "int" and not is_int(value)):
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

        Values may be strings as in broker.conf (a blank one means "not set", as in Pulsar) or
        Python values. Strings are parsed as Pulsar's FieldParser does, by the property's Java type
        (``PROPERTY_TYPES``): trimmed as ``String.trim`` does, then ``Integer.valueOf``,
        ``Long.valueOf`` or ``Double.valueOf``, so ``"1_0"``, ``"8.5"`` for an int or ``"inf"`` are
        refused as Pulsar refuses them; booleans must read true or false (Pulsar would silently read
        anything else as false). A Python value must have the property's type: no float for an int
        property, no bool for a number. ``loadBalancer*`` keys this model does not use are logged in
        one warning; other keys are the rest of a broker's settings and are ignored. A bad value
        raises ValueError naming the Pulsar key. ``overrides`` are field values applied on top.
        """
        values: dict[str, object] = {}
        parsed: dict[str, object] = {}
        types = {f.name: f.type for f in fields(cls)}
        unused: list[str] = []
        for key, raw in properties.items():
            if not isinstance(key, str):
                raise ValueError(f"property names must be strings, got {key!r}")
            if isinstance(raw, str) and java_blank(raw):
                continue
            if key in IGNORED_PROPERTIES:
                _parse(key, raw, PROPERTY_TYPES[key])
                log.warning("%s: %s; ignored", key, IGNORED_PROPERTIES[key])
                continue
            name = PROPERTY_NAMES.get(key)
            if name is None:
                if key.startswith(("loadBalancer", "loadBalance")):
                    unused.append(key)
                continue
            value = _parse(key, raw, PROPERTY_TYPES[key])
            # Pulsar keeps some thresholds as Java ints where our field is a float (they are compared
            # with float usages): parse as Pulsar's type, store as ours.
            values[name] = parsed[key] = float(value) if types[name] == "float" else value  # type: ignore[arg-type]
        for current, deprecated in _BANDWIDTH_SPELLINGS:
            if current in parsed and deprecated in parsed:
                chosen = parsed[current] if parsed[current] != 1.0 else parsed[deprecated]
                values[PROPERTY_NAMES[current]] = chosen
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
        require_extra("ShedderConfig.from_broker_conf", "pulsar")
        import javaproperties

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"broker.conf not found: {str(path)!r}")
        # Binary, as Pulsar's Properties.load(InputStream) reads it: ISO-8859-1, with \uXXXX escapes
        # for anything else, so no byte sequence fails to decode.
        try:
            with path.open("rb") as f:
                properties = javaproperties.load(f)
        except OSError as err:
            raise ValueError(f"{path}: cannot read: {err.strerror or err}") from None
        except ValueError as err:
            raise ValueError(f"{path}: not a Java properties file: {err}") from None
        return cls.from_properties(properties, **overrides)


SHEDDING_STRATEGIES = ("ThresholdShedder", "OverloadShedder", "UniformLoadShedder", "AvgShedder")
PLACEMENT_STRATEGIES = ("LeastLongTermMessageRate", "LeastResourceUsageWithWeight", "AvgShedder")

# Read off the settings table (ShedderConfig's fields): Pulsar's property name -> field name, every
# spelling Pulsar reads (an old spelling first, so that an error names the current one) ...
PROPERTY_NAMES: dict[str, str] = {
    name: f.name for f in fields(ShedderConfig) for name in (*f.metadata["also"], f.metadata["java_name"])
}
# ... and the Java type of each, which decides how Pulsar parses it.
PROPERTY_TYPES: dict[str, str] = {
    name: f.metadata["java_type"]
    for f in fields(ShedderConfig)
    for name in (*f.metadata["also"], f.metadata["java_name"])
}

# Known to Pulsar, read (and validated) here, but without effect: none in Pulsar 4.2.4 (heap memory
# still counts in TransferShedder, by its weight).
IGNORED_PROPERTIES: dict[str, str] = {}

# Pulsar 4.2.4 reads both spellings of the bandwidth weights: the current one, unless it is left at 1.0.
_BANDWIDTH_SPELLINGS = tuple(
    (f.metadata["java_name"], old) for f in fields(ShedderConfig) for old in f.metadata["also"]
)


def _parse_integer(key: str, raw: object, java_type: str) -> int:
    """An int or long property: Java's grammar for strings, a Python int (not bool, not float) else."""
    bits = INTEGER_BITS[java_type]
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    if isinstance(raw, str):
        try:
            return parse_java_int(raw, bits)
        except JavaRangeError:
            raise ValueError(
                f"{key} must be an integer within Java's {java_type} range {low}..{high}, got {raw!r}"
            ) from None
        except ValueError:
            raise ValueError(f"{key} must be an integer, got {raw!r}") from None
    if not is_int(raw):
        raise ValueError(f"{key} must be an integer, got {raw!r}")
    if not low <= raw <= high:
        raise ValueError(
            f"{key} must be an integer within Java's {java_type} range {low}..{high}, got {raw!r}"
        )
    return int(raw)


def _parse(key: str, raw: object, java_type: str) -> object:
    """One property value as its Java type parses it; the error names the Pulsar key and the value."""
    if java_type == "String":
        if not isinstance(raw, str):
            raise ValueError(f"{key} must be a class name, got {raw!r}")
        return raw.strip(JAVA_TRIM)
    if java_type == "boolean":
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str):
            try:
                return parse_java_boolean(raw)
            except ValueError:
                pass
        raise ValueError(f"{key} must be true or false, got {raw!r}")
    if java_type in INTEGER_BITS:
        return _parse_integer(key, raw, java_type)
    if isinstance(raw, str):
        try:
            value = parse_java_double(raw)
        except ValueError:
            raise ValueError(f"{key} must be a number, got {raw!r}") from None
    elif isinstance(raw, int | float) and not isinstance(raw, bool):
        try:
            value = float(raw)
        except OverflowError:  # an int beyond float's range
            value = math.inf
    else:
        raise ValueError(f"{key} must be a number, got {raw!r}")
    if not math.isfinite(value):
        raise ValueError(f"{key} must be finite, got {raw!r}")
    return value
