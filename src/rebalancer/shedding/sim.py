"""A minute-by-minute cluster simulator that measures shedding and placement strategies.

The world: brokers with a message-rate capacity (the rate that saturates their CPU), optionally a
share of the CPU used by another process on the same machine; bundles whose load follows a series
(steady, diurnal, periodic spikes, random jitter). A broker's CPU usage is the background plus its
bundles' rate over its capacity; bandwidth usage is its throughput over its NIC. Each minute every
broker publishes a load report; the leader sees reports ``report_delay`` minutes old. Every shedding
interval the shedding strategy picks bundles, each is unloaded and placed through the placement
strategy, and the move shows in the usage of the next minute. Brokers can join and leave.

Everything random comes from one seed, so a seeded run is reproducible.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from rebalancer.balance.checks import is_int, is_real
from rebalancer.balance.metrics import spread
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

log = logging.getLogger(__name__)

PATTERNS = ("steady", "diurnal", "spike", "jitter")


@dataclass(frozen=True)
class BrokerSpec:
    """A broker: ``capacity`` msg/s (in+out) saturate its CPU; ``background`` % CPU is another process."""

    name: str
    capacity: float = 100_000.0
    background: float = 0.0
    nic_bytes_per_second: float = 1.25e9
    join_at: int = 0
    leave_at: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise ValueError(f"broker {self.name!r}: name must be a str, got {self.name!r}")
        for name in ("capacity", "background", "nic_bytes_per_second"):
            if not is_real(getattr(self, name)):
                raise ValueError(
                    f"broker {self.name!r}: {name} must be a finite number, got {getattr(self, name)!r}"
                )
        for name in ("join_at", "leave_at"):
            value = getattr(self, name)
            if not (value is None and name == "leave_at") and not is_int(value):
                raise ValueError(f"broker {self.name!r}: {name} must be a minute (int), got {value!r}")
        if self.capacity <= 0:
            raise ValueError(f"broker {self.name!r}: capacity must be > 0, got {self.capacity}")
        if not 0 <= self.background <= 100:
            raise ValueError(f"broker {self.name!r}: background must be within 0..100, got {self.background}")
        if self.nic_bytes_per_second <= 0:
            raise ValueError(
                f"broker {self.name!r}: nic_bytes_per_second must be > 0, got {self.nic_bytes_per_second}"
            )
        if self.join_at < 0 or (self.leave_at is not None and self.leave_at <= self.join_at):
            raise ValueError(
                f"broker {self.name!r}: needs 0 <= join_at < leave_at, got {self.join_at}, {self.leave_at}"
            )


@dataclass(frozen=True)
class BundleSpec:
    """A bundle's load series: mean ``rate`` msg/s (in+out) shaped by ``pattern``.

    diurnal: rate * (1 + amplitude * sin(2 pi (t + phase) / period));
    spike: rate * (1 + amplitude) for ``duration`` minutes every ``period`` minutes from ``phase``;
    jitter: rate * (1 + amplitude * N(0, 1)), never below zero.
    """

    name: str
    rate: float
    pattern: str = "steady"
    amplitude: float = 0.0
    period: int = 1440
    duration: int = 0
    phase: int = 0
    message_bytes: float = 2048.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise ValueError(f"bundle {self.name!r}: name must be a str, got {self.name!r}")
        for name in ("rate", "amplitude", "message_bytes"):
            if not is_real(getattr(self, name)):
                raise ValueError(
                    f"bundle {self.name!r}: {name} must be a finite number, got {getattr(self, name)!r}"
                )
        for name in ("period", "duration", "phase"):
            value = getattr(self, name)
            if not is_int(value):
                raise ValueError(f"bundle {self.name!r}: {name} must be minutes (int), got {value!r}")
        if self.message_bytes < 0:
            raise ValueError(f"bundle {self.name!r}: message_bytes must be >= 0, got {self.message_bytes}")
        if self.rate < 0:
            raise ValueError(f"bundle {self.name!r}: rate must be >= 0, got {self.rate}")
        if self.pattern not in PATTERNS:
            raise ValueError(f"bundle {self.name!r}: pattern must be one of {PATTERNS}, got {self.pattern!r}")
        if self.period <= 0 or self.duration < 0 or self.amplitude < 0:
            raise ValueError(f"bundle {self.name!r}: needs period > 0, duration >= 0, amplitude >= 0")


@dataclass(frozen=True)
class Scenario:
    """A cluster, its bundles, where they start, and what converged means for it."""

    name: str
    title: str
    brokers: tuple[BrokerSpec, ...]
    bundles: tuple[BundleSpec, ...]
    initial: Mapping[str, str] | None = None  # bundle -> broker; None places through the strategy
    minutes: int = 90
    converge_target: float = 10.0  # max-min usage spread, percentage points
    converge_from: int = 0
    noise: float = 0.02  # relative per-minute noise on every bundle
    column: str = ""  # the PIP-364 table column this scenario measures

    def __post_init__(self) -> None:
        """Refuse a bad field here, naming it, rather than deep inside ``simulate`` (a NaN noise used
        to surface as a bundle's NaN ``msg_rate_in``, a string noise as a numpy UFuncTypeError)."""
        where = f"scenario {self.name!r}"
        for name in ("name", "title", "column"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{where}: {name} must be a str, got {getattr(self, name)!r}")
        # noise is the relative std of a per-minute factor 1 + noise * N(0, 1) (clipped at zero load)
        if not is_real(self.noise) or self.noise < 0:
            raise ValueError(f"{where}: noise must be a finite number >= 0, got {self.noise!r}")
        if not is_real(self.converge_target) or self.converge_target <= 0:
            raise ValueError(
                f"{where}: converge_target must be a finite number > 0, got {self.converge_target!r}"
            )
        for name in ("minutes", "converge_from"):
            if not is_int(getattr(self, name)):
                raise ValueError(f"{where}: {name} must be an int, got {getattr(self, name)!r}")
        if self.minutes < 2:
            raise ValueError(f"{where}: minutes must be >= 2, got {self.minutes}")
        if self.converge_from < 0:
            raise ValueError(f"{where}: converge_from must be a minute >= 0, got {self.converge_from}")
        for name, kind in (("brokers", BrokerSpec), ("bundles", BundleSpec)):
            items = getattr(self, name)
            if isinstance(items, str | bytes) or not isinstance(items, Sequence):
                raise ValueError(f"{where}: {name} must be a sequence of {kind.__name__}, got {items!r}")
            for i, item in enumerate(items):
                if not isinstance(item, kind):
                    raise ValueError(f"{where}: {name}[{i}] must be a {kind.__name__}, got {item!r}")
            object.__setattr__(self, name, tuple(items))
        names = [b.name for b in self.brokers]
        if len(set(names)) != len(names):
            raise ValueError(f"{where}: duplicate broker names")
        bundle_names = {b.name for b in self.bundles}
        if len(bundle_names) != len(self.bundles):
            raise ValueError(f"{where}: duplicate bundle names")
        if self.initial is not None:
            if not isinstance(self.initial, Mapping):
                raise ValueError(
                    f"{where}: initial must map bundle names to broker names, got {self.initial!r}"
                )
            for bundle, broker in self.initial.items():
                if bundle not in bundle_names:
                    raise ValueError(f"{where}: initial placement names unknown bundle {bundle!r}")
                if broker not in names:
                    raise ValueError(f"{where}: initial placement names unknown broker {broker!r}")


@dataclass(frozen=True)
class SimConfig:
    """How the leader works: report delay and shedding interval in minutes, and metric windows."""

    report_delay: int = 1
    interval: int = 1
    oscillation_window: int = 60  # cycles; twice the 30-minute grace period
    converge_cycles: int = 5  # K: the spread must stay under target this many cycles
    over_unload_margin: float = 5.0  # points below the average that count as over-unloading
    grace_period_minutes: float | None = None  # None: conf.shedding_grace_period_minutes

    def __post_init__(self) -> None:
        for name in ("report_delay", "interval", "oscillation_window", "converge_cycles"):
            if not is_int(getattr(self, name)):  # a NaN passed every `< 1` check
                raise ValueError(f"{name} must be an int, got {getattr(self, name)!r}")
        for name in ("interval", "oscillation_window", "converge_cycles"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.report_delay < 0:
            raise ValueError(f"report_delay must be >= 0, got {self.report_delay}")
        if not is_real(self.over_unload_margin) or self.over_unload_margin < 0:
            raise ValueError(
                f"over_unload_margin must be a finite number >= 0, got {self.over_unload_margin!r}"
            )
        grace = self.grace_period_minutes
        if grace is not None and (not is_real(grace) or grace < 0):
            raise ValueError(f"grace_period_minutes must be None or a finite number >= 0, got {grace!r}")


@dataclass(frozen=True)
class Combination:
    """A shedding strategy with a placement strategy and the settings they run with."""

    name: str
    make: Callable[[int], tuple[LoadSheddingStrategy, PlacementStrategy]]
    conf: ShedderConfig = field(default_factory=ShedderConfig)
    ours: bool = False

    def __post_init__(self) -> None:
        if not callable(self.make):
            raise ValueError(f"combination {self.name!r}: make must be callable, got {self.make!r}")
        if not isinstance(self.conf, ShedderConfig):
            raise ValueError(f"combination {self.name!r}: conf must be a ShedderConfig, got {self.conf!r}")


def _pair(shedder: type, placement: type) -> Callable[[int], tuple[LoadSheddingStrategy, PlacementStrategy]]:
    def make(seed: int) -> tuple[LoadSheddingStrategy, PlacementStrategy]:
        return shedder(), placement(seed)

    return make


def _single(cls: type) -> Callable[[int], tuple[LoadSheddingStrategy, PlacementStrategy]]:
    def make(seed: int) -> tuple[LoadSheddingStrategy, PlacementStrategy]:
        strategy = cls(seed)
        return strategy, strategy

    return make


# AvgShedder and ours run with max_unload_percentage=0.5, as Pulsar's docs recommend for AvgShedder.
COMBINATIONS: tuple[Combination, ...] = (
    Combination(
        "ThresholdShedder+LeastResourceUsageWithWeight", _pair(ThresholdShedder, LeastResourceUsageWithWeight)
    ),
    Combination(
        "UniformLoadShedder+LeastLongTermMessageRate", _pair(UniformLoadShedder, LeastLongTermMessageRate)
    ),
    Combination("OverloadShedder+LeastLongTermMessageRate", _pair(OverloadShedder, LeastLongTermMessageRate)),
    Combination("AvgShedder", _single(AvgShedder), ShedderConfig(max_unload_percentage=0.5)),
    Combination("TransferShedder", _single(TransferShedder)),
    Combination(
        "BalancedShedder (ours)",
        _single(BalancedShedder),
        ShedderConfig(max_unload_percentage=0.5),
        ours=True,
    ),
)


SHEDDERS: dict[str, type] = {
    "ThresholdShedder": ThresholdShedder,
    "OverloadShedder": OverloadShedder,
    "UniformLoadShedder": UniformLoadShedder,
    "AvgShedder": AvgShedder,
}
PLACEMENTS: dict[str, type] = {
    "LeastLongTermMessageRate": LeastLongTermMessageRate,
    "LeastResourceUsageWithWeight": LeastResourceUsageWithWeight,
    "AvgShedder": AvgShedder,
}


def configured(conf: ShedderConfig) -> Combination:
    """The pair a broker.conf selects (``loadBalancerLoadSheddingStrategy`` and ``...PlacementStrategy``),
    run with that conf. AvgShedder as both is one object, as in Pulsar, so its plan binds placement."""
    shed, place = conf.shedding_strategy_name, conf.placement_strategy_name
    if shed == place == "AvgShedder":
        return Combination("AvgShedder (configured)", _single(AvgShedder), conf)
    return Combination(f"{shed}+{place} (configured)", _pair(SHEDDERS[shed], PLACEMENTS[place]), conf)


def combination(name: str) -> Combination:
    for combo in COMBINATIONS:
        if combo.name == name or combo.name.split(" ")[0] == name or combo.name.split("+")[0] == name:
            return combo
    names = ", ".join(c.name for c in COMBINATIONS)
    raise ValueError(f"unknown strategy {name!r}; choose one of: {names}")


@dataclass
class SimResult:
    """Per-minute series and totals of one run."""

    scenario: str
    strategy: str
    minutes: np.ndarray
    usage: dict[str, np.ndarray]  # broker -> % per minute (NaN while absent)
    spread: np.ndarray
    std: np.ndarray
    unloaded: np.ndarray
    moved: np.ndarray
    oscillations: np.ndarray
    over_placement: np.ndarray
    over_unloading: np.ndarray
    overloaded: np.ndarray  # brokers above the overload threshold, per minute
    converge_cycles: int | None
    stale_skips: int = 0
    failover_placements: int = 0
    converge_target: float = 0.0

    @property
    def moves(self) -> int:
        return int(self.moved.sum())

    def summary(self) -> dict[str, float | int | None]:
        """The run's totals, what `simulate` prints and `compare` rates. Keys:

        - ``moves``: bundles moved to another broker;
        - ``unloaded``: bundles unloaded (a move, or a placement back on the same broker);
        - ``oscillations``: moves back to a broker the bundle left within the oscillation window;
        - ``over_placement``: destination brokers a move pushed over the overload threshold, or past
          the mean by more than the threshold shedder's margin;
        - ``over_unloading``: source brokers a move left below the mean by more than the margin;
        - ``overloaded_minutes``: broker-steps (broker-minutes in a simulation) above the overload
          threshold;
        - ``final_spread``: the last step's max - min broker usage, in percentage points;
        - ``converge_cycles``: shedding cycles until the spread stayed under the target, None if never;
        - ``stale_skips``: unload decisions skipped because the bundle had moved or its broker had gone;
        - ``failover_placements``: bundles placed again because their broker went away.
        """
        return {
            "moves": self.moves,
            "unloaded": int(self.unloaded.sum()),
            "oscillations": int(self.oscillations.sum()),
            "over_placement": int(self.over_placement.sum()),
            "over_unloading": int(self.over_unloading.sum()),
            "overloaded_minutes": int(self.overloaded.sum()),
            "final_spread": round(float(self.spread[-1]), 2),
            "converge_cycles": self.converge_cycles,
            "stale_skips": self.stale_skips,
            "failover_placements": self.failover_placements,
        }


def load_series(scenario: Scenario, rng: np.random.Generator) -> np.ndarray:
    """bundles x minutes matrix of msg/s (in+out)."""
    t = np.arange(scenario.minutes)
    out = np.empty((len(scenario.bundles), scenario.minutes))
    for i, spec in enumerate(scenario.bundles):
        if spec.pattern == "steady":
            shape = np.ones_like(t, dtype=float)
        elif spec.pattern == "diurnal":
            shape = 1 + spec.amplitude * np.sin(2 * math.pi * (t + spec.phase) / spec.period)
        elif spec.pattern == "spike":
            in_spike = ((t - spec.phase) % spec.period < spec.duration) & (t >= spec.phase)
            shape = np.where(in_spike, 1 + spec.amplitude, 1.0)
        else:
            shape = 1 + spec.amplitude * rng.standard_normal(len(t))
        noise = 1 + scenario.noise * rng.standard_normal(len(t)) if scenario.noise else 1.0
        out[i] = np.maximum(0.0, spec.rate * shape * noise)
    return out


class Judge:
    """What every run measures, and how decisions are carried out: shared by the simulator and replay.

    Strategy-neutral by construction: usage spread and std, moves, oscillations, over-placement and
    over-unloading against the plain mean of the live brokers, and time to converge.
    """

    def __init__(
        self,
        brokers: Sequence[str],
        n: int,
        config: SimConfig,
        conf: ShedderConfig,
        times: Sequence[float] | None = None,
    ) -> None:
        self.config, self.conf, self.n = config, conf, n
        grace = config.grace_period_minutes
        self.grace_s = (conf.shedding_grace_period_minutes if grace is None else grace) * 60
        self.usage = {b: np.full(n, np.nan) for b in brokers}
        self.spread, self.std = np.zeros(n), np.zeros(n)
        self.unloaded, self.moved, self.osc = np.zeros(n, int), np.zeros(n, int), np.zeros(n, int)
        self.over_place, self.over_unload = np.zeros(n, int), np.zeros(n, int)
        self.overloaded = np.zeros(n, int)
        self.stale_skips = self.failovers = self.cycle = 0
        self.recent: dict[str, float] = {}
        self.departures: dict[str, list[tuple[int, str]]] = {}
        self.pending: tuple[dict[str, float], float, set[str], set[str]] | None = None
        self.now_usage: dict[str, float] = {}
        # Seconds since the start, per step: one minute apart unless the steps are recorded snapshots.
        self.times = np.arange(n) * 60.0 if times is None else np.asarray(times, dtype=np.float64)

    def view(
        self,
        t: int,
        reports: Sequence[Mapping[str, BrokerLoad]],
        bundle_data: Sequence[Mapping[str, BundleLoad]],
        alive: set[str],
    ) -> ClusterLoad:
        """The leader's view at step `t`: reports `report_delay` steps old, of the brokers alive now."""
        idx = max(0, t - self.config.report_delay)
        now = float(self.times[t])
        return ClusterLoad(
            brokers={b: reports[idx][b] for b in sorted(alive) if b in reports[idx]},
            bundles=bundle_data[idx],
            recently_unloaded={k: v for k, v in self.recent.items() if now - v < self.grace_s},
            timestamp=float(self.times[idx]),
        )

    def place(
        self, strategy: PlacementStrategy, bundle: str, view: ClusterLoad, alive: set[str], load: BundleLoad
    ) -> str:
        candidates = set(view.brokers) or set(alive)
        if not candidates:
            raise ValueError(f"no broker alive to place bundle {bundle!r}")
        if bundle not in view.bundles and view.owner_of(bundle) is None:
            view = ClusterLoad(
                brokers=view.brokers,
                bundles={**view.bundles, bundle: load},
                recently_unloaded=view.recently_unloaded,
                timestamp=view.timestamp,
            )
        chosen = strategy.select_broker(candidates, bundle, view, self.conf)
        return chosen if chosen is not None else sorted(candidates)[0]

    def observe(self, t: int, now_usage: dict[str, float]) -> None:
        """Record step `t`'s usage, and judge the previous cycle's moves by what they did."""
        for broker, value in now_usage.items():
            self.usage.setdefault(broker, np.full(self.n, np.nan))[t] = value
        values = np.array(list(now_usage.values()))
        self.spread[t] = spread(values)
        self.std[t] = float(values.std())
        overload = self.conf.broker_overloaded_threshold_percentage
        threshold = self.conf.broker_threshold_shedder_percentage
        self.overloaded[t] = int((values > overload).sum())
        avg_now = _mean(now_usage)
        if self.pending is not None:
            before, avg_before, sources, destinations = self.pending
            for broker in destinations & set(now_usage):
                u0, u1 = before[broker], now_usage[broker]
                if (u1 > overload >= u0) or (u1 > avg_now + threshold and u0 <= avg_before + threshold):
                    self.over_place[t] += 1
            for broker in sources & set(now_usage):
                if (
                    before[broker] > avg_before
                    and now_usage[broker] < avg_now - self.config.over_unload_margin
                ):
                    self.over_unload[t] += 1
            self.pending = None
        self.now_usage = now_usage

    def shed(
        self,
        t: int,
        shedder: LoadSheddingStrategy,
        placer: PlacementStrategy,
        placement: dict[str, str],
        alive: set[str],
        reports: Sequence[Mapping[str, BrokerLoad]],
        bundle_data: Sequence[Mapping[str, BundleLoad]],
    ) -> None:
        """One shedding cycle at step `t`: decide on the leader's view, unload, place, count."""
        self.cycle += 1
        view = self.view(t, reports, bundle_data, alive)
        decisions = shedder.find_bundles_for_unloading(view, self.conf)
        sources: set[str] = set()
        destinations: set[str] = set()
        for broker, chosen in decisions.items():
            for bundle in chosen:
                if placement.get(bundle) != broker or broker not in alive:
                    self.stale_skips += 1
                    continue
                self.unloaded[t] += 1
                self.recent[bundle] = float(self.times[t])
                destination = self.place(placer, bundle, view, alive, view.bundles.get(bundle, _IDLE))
                if destination == broker:
                    continue
                self.moved[t] += 1
                for left_cycle, left in self.departures.get(bundle, []):
                    if left == destination and self.cycle - left_cycle <= self.config.oscillation_window:
                        self.osc[t] += 1
                        break
                self.departures.setdefault(bundle, []).append((self.cycle, broker))
                placement[bundle] = destination
                sources.add(broker)
                destinations.add(destination)
        if sources:
            self.pending = (dict(self.now_usage), _mean(self.now_usage), sources, destinations)

    def converge(self, target: float, start: int) -> int | None:
        k = self.config.converge_cycles * self.config.interval
        under = self.spread < target
        for t in range(start, len(self.spread) - k + 1):
            if under[t : t + k].all():
                return (t - start) // self.config.interval
        return None

    def result(self, scenario: str, strategy: str, converge_target: float, converge_from: int) -> SimResult:
        return SimResult(
            scenario=scenario,
            strategy=strategy,
            minutes=np.arange(self.n),
            usage=self.usage,
            spread=self.spread,
            std=self.std,
            unloaded=self.unloaded,
            moved=self.moved,
            oscillations=self.osc,
            over_placement=self.over_place,
            over_unloading=self.over_unload,
            overloaded=self.overloaded,
            converge_cycles=self.converge(converge_target, converge_from),
            stale_skips=self.stale_skips,
            failover_placements=self.failovers,
            converge_target=converge_target,
        )


_IDLE = BundleLoad(0.0, 0.0, 0.0, 0.0)


class Simulator:
    """Runs one scenario with one combination; see the module docstring for the model."""

    def __init__(
        self, scenario: Scenario, combo: Combination, seed: int = 0, config: SimConfig | None = None
    ) -> None:
        if not isinstance(scenario, Scenario):  # its fields were checked when it was built
            raise ValueError(f"scenario must be a Scenario, got {scenario!r}")
        if not isinstance(combo, Combination):
            raise ValueError(f"combo must be a Combination, got {combo!r}")
        self.scenario = scenario
        self.combo = combo
        self.seed = seed
        self.config = config or SimConfig()
        self.conf = combo.conf
        self.shedder, self.placement = combo.make(seed)
        self.rng = np.random.default_rng(seed)
        self.series = load_series(scenario, self.rng)
        self._index = {b.name: i for i, b in enumerate(scenario.bundles)}
        self._background = {b.name: b.background for b in scenario.brokers}

    def _strategies(self) -> list[LoadSheddingStrategy | PlacementStrategy]:
        same = id(self.shedder) == id(self.placement)  # one object playing both roles (AvgShedder)
        return [self.shedder] if same else [self.shedder, self.placement]

    def run(self) -> SimResult:
        sc, cfg, conf = self.scenario, self.config, self.conf
        specs = {b.name: b for b in sc.brokers}
        bundles = {b.name: b for b in sc.bundles}
        bundle_index = {b.name: i for i, b in enumerate(sc.bundles)}
        n = sc.minutes
        judge = Judge(list(specs), n, cfg, conf)
        alive: set[str] = set()
        placement: dict[str, str] = {}
        reports: list[dict[str, BrokerLoad]] = []
        bundle_data: list[dict[str, BundleLoad]] = []
        self.reports, self.bundle_data = reports, bundle_data  # kept for recording (shedding.reports)

        for t in range(n):
            changed = False
            for name, spec in specs.items():
                if spec.join_at == t and name not in alive:
                    alive.add(name)
                    changed = True
                if spec.leave_at == t and name in alive:
                    alive.discard(name)
                    changed = True
            if changed:
                for strategy in self._strategies():
                    strategy.on_active_brokers_change(set(alive))
            if not alive:
                raise ValueError(f"scenario {sc.name!r}: no broker alive at minute {t}")
            if t == 0 and sc.initial is not None:
                placement.update(sc.initial)
            orphans = [b for b, owner in placement.items() if owner not in alive]
            unplaced = [b for b in bundles if b not in placement]
            if orphans or unplaced:
                if reports:
                    view = judge.view(t, reports, bundle_data, alive)
                else:
                    view = self._empty_view(alive, bundle_index, t)
                for bundle in sorted(orphans) + unplaced:
                    placement[bundle] = judge.place(
                        self.placement, bundle, view, alive, self._bundle_load(bundle, 0)
                    )
                judge.failovers += len(orphans)

            # actual usage this minute
            rates = self.series[:, t]
            per_broker: dict[str, list[str]] = {b: [] for b in alive}
            for bundle, owner in placement.items():
                per_broker[owner].append(bundle)
            report: dict[str, BrokerLoad] = {}
            for name in sorted(alive):
                spec = specs[name]
                owned = sorted(per_broker[name], key=bundle_index.__getitem__)
                rate = float(sum(rates[bundle_index[b]] for b in owned))
                tp = float(sum(rates[bundle_index[b]] * bundles[b].message_bytes for b in owned))
                cpu = min(100.0, spec.background + 100.0 * rate / spec.capacity)
                bw = min(100.0, 100.0 * (tp / 2) / spec.nic_bytes_per_second)
                report[name] = BrokerLoad(
                    cpu=cpu,
                    memory=min(100.0, 20.0 + cpu / 4),
                    direct_memory=min(100.0, cpu / 2),
                    bandwidth_in=bw,
                    bandwidth_out=bw,
                    msg_rate_in=rate / 2,
                    msg_rate_out=rate / 2,
                    msg_throughput_in=tp / 2,
                    msg_throughput_out=tp / 2,
                    bundles=owned,
                )
            reports.append(report)
            bundle_data.append({b: self._bundle_load(b, t) for b in placement})
            judge.observe(t, {b: report[b].cpu for b in alive})
            if t and t % cfg.interval == 0:
                judge.shed(t, self.shedder, self.placement, placement, alive, reports, bundle_data)

        return judge.result(sc.name, self.combo.name, sc.converge_target, sc.converge_from)

    def _bundle_load(self, bundle: str, t: int) -> BundleLoad:
        i = self._index[bundle]
        rate = float(self.series[i, t])
        size = self.scenario.bundles[i].message_bytes
        return BundleLoad(rate / 2, rate / 2, rate * size / 2, rate * size / 2)

    def _empty_view(self, alive: set[str], bundle_index: dict[str, int], t: int) -> ClusterLoad:
        zero = {
            b: BrokerLoad(
                cpu=self._background[b],
                memory=0.0,
                direct_memory=0.0,
                bandwidth_in=0.0,
                bandwidth_out=0.0,
                msg_rate_in=0.0,
                msg_rate_out=0.0,
                msg_throughput_in=0.0,
                msg_throughput_out=0.0,
            )
            for b in sorted(alive)
        }
        return ClusterLoad(
            brokers=zero, bundles={b: self._bundle_load(b, t) for b in bundle_index}, timestamp=t * 60.0
        )


def _mean(usage: Mapping[str, float]) -> float:
    """The judge's average: every live broker counts the same, whatever any strategy thinks of it."""
    return sum(usage.values()) / len(usage)


def simulate(
    scenario: Scenario, combo: Combination, seed: int = 0, config: SimConfig | None = None
) -> SimResult:
    return Simulator(scenario, combo, seed, config).run()


# --- scenarios -------------------------------------------------------------------------------------


def _fill(broker: str, count: int, rate: float, prefix: str | None = None, **kw: object) -> list[BundleSpec]:
    p = prefix or broker
    return [BundleSpec(f"{p}-b{i}", rate, **kw) for i in range(count)]  # type: ignore[arg-type]


def _scenario(
    name: str, title: str, brokers: Sequence[BrokerSpec], groups: Mapping[str, list[BundleSpec]], **kw: object
) -> Scenario:
    bundles = tuple(b for group in groups.values() for b in group)
    initial = {b.name: broker for broker, group in groups.items() for b in group}
    return Scenario(name=name, title=title, brokers=tuple(brokers), bundles=bundles, initial=initial, **kw)  # type: ignore[arg-type]


def heterogeneous() -> Scenario:
    """PIP-364: usages 10/50/70; broker-1 is a machine twice as fast, broker-3's 70 is another process."""
    brokers = [
        BrokerSpec("broker-1", capacity=200_000),
        BrokerSpec("broker-2"),
        BrokerSpec("broker-3", background=70),
    ]
    groups = {"broker-1": _fill("broker-1", 5, 4_000), "broker-2": _fill("broker-2", 10, 5_000)}
    return _scenario(
        "heterogeneous",
        "heterogeneous 10/50/70 (70 from another process)",
        brokers,
        groups,
        minutes=90,
        converge_target=50.0,
        column="heterogeneous",
    )


def jitter() -> Scenario:
    """PIP-364: a balanced cluster where one bundle spikes +30 points for 3 minutes every 15."""
    brokers = [BrokerSpec(f"broker-{i}") for i in range(1, 5)]
    groups = {f"broker-{i}": _fill(f"broker-{i}", 10, 5_000) for i in range(1, 5)}
    groups["broker-1"][0] = BundleSpec(
        "broker-1-b0", 5_000, pattern="spike", amplitude=6.0, period=15, duration=3, phase=5
    )
    return _scenario(
        "jitter",
        "load jitter: periodic spikes on one broker",
        brokers,
        groups,
        minutes=120,
        converge_target=12.0,
        column="jitter",
    )


def over_placement() -> Scenario:
    """PIP-364: usages 40, 40, 40, 40, 69, 70."""
    brokers = [BrokerSpec(f"broker-{i}") for i in range(1, 7)]
    groups = {f"broker-{i}": _fill(f"broker-{i}", 8, 5_000) for i in range(1, 5)}
    groups["broker-5"] = [*_fill("broker-5", 10, 6_000), BundleSpec("broker-5-b10", 9_000)]
    groups["broker-6"] = _fill("broker-6", 10, 7_000)
    return _scenario(
        "over-placement",
        "over-placement: 40, 40, 40, 40, 69, 70",
        brokers,
        groups,
        minutes=90,
        converge_target=12.0,
        column="over-placement",
    )


def over_unloading() -> Scenario:
    """PIP-364: one broker at 90%, a newly added broker at 10%."""
    brokers = [BrokerSpec("broker-1"), BrokerSpec("broker-2")]
    groups = {"broker-1": _fill("broker-1", 18, 5_000), "broker-2": _fill("broker-2", 2, 5_000)}
    return _scenario(
        "over-unloading",
        "over-unloading: 90/10 after adding a broker",
        brokers,
        groups,
        minutes=90,
        converge_target=12.0,
        column="over-unloading",
    )


def slow_balancing(loaded: int = 100, added: int = 100) -> Scenario:
    """PIP-364: ``loaded`` brokers at 80% and ``added`` new brokers joining at minute 5."""
    brokers = [BrokerSpec(f"old-{i:03d}") for i in range(loaded)]
    brokers += [BrokerSpec(f"new-{i:03d}", join_at=5) for i in range(added)]
    groups = {f"old-{i:03d}": _fill(f"old-{i:03d}", 8, 10_000) for i in range(loaded)}
    return _scenario(
        "slow-balancing",
        f"slow balancing: {loaded} loaded + {added} new brokers",
        brokers,
        groups,
        minutes=60,
        converge_target=25.0,
        converge_from=5,
        noise=0.01,
        column="slow balancing",
    )


def issue_17456() -> Scenario:
    """apache/pulsar#17456: ten brokers at 80% and one idle; ThresholdShedder never triggers."""
    brokers = [BrokerSpec(f"broker-{i:02d}") for i in range(1, 12)]
    groups = {f"broker-{i:02d}": _fill(f"broker-{i:02d}", 8, 10_000) for i in range(1, 11)}
    return _scenario(
        "pulsar-17456",
        "#17456: 10 brokers at 80% + 1 idle",
        brokers,
        groups,
        minutes=60,
        converge_target=25.0,
    )


def issue_18215_low() -> Scenario:
    """apache/pulsar#18215, first case: usages 12, 2, 1, 1."""
    brokers = [BrokerSpec(f"broker-{i}") for i in range(1, 5)]
    groups = {
        "broker-1": _fill("broker-1", 12, 1_000),
        "broker-2": _fill("broker-2", 2, 1_000),
        "broker-3": _fill("broker-3", 1, 1_000),
        "broker-4": _fill("broker-4", 1, 1_000),
    }
    return _scenario(
        "pulsar-18215-low", "#18215: usages 12, 2, 1, 1", brokers, groups, minutes=60, converge_target=12.0
    )


def issue_18215_idle() -> Scenario:
    """apache/pulsar#18215, second case: five brokers at 50% and one at 0%."""
    brokers = [BrokerSpec(f"broker-{i}") for i in range(1, 7)]
    groups = {f"broker-{i}": _fill(f"broker-{i}", 10, 5_000) for i in range(1, 6)}
    return _scenario(
        "pulsar-18215-idle", "#18215: usages 50 x5 and 0", brokers, groups, minutes=60, converge_target=20.0
    )


def cold_start() -> Scenario:
    """Initial placement through the strategy, a broker leaving at 30 and one joining at 45."""
    brokers = [
        BrokerSpec("broker-1"),
        BrokerSpec("broker-2", capacity=150_000),
        BrokerSpec("broker-3"),
        BrokerSpec("broker-4", leave_at=30),
        BrokerSpec("broker-5", join_at=45),
    ]
    sizes = [2_000, 3_000, 5_000, 8_000]
    bundles = tuple(
        BundleSpec(f"bundle-{i:02d}", sizes[i % 4], pattern="diurnal", amplitude=0.1, period=240, phase=i * 7)
        for i in range(40)
    )
    return Scenario(
        "cold-start",
        "cold start, broker leaves at 30, joins at 45",
        tuple(brokers),
        bundles,
        initial=None,
        minutes=90,
        converge_target=20.0,
    )


PIP_SCENARIOS: tuple[Callable[[], Scenario], ...] = (
    heterogeneous,
    jitter,
    over_placement,
    over_unloading,
    slow_balancing,
)
EXTRA_SCENARIOS: tuple[Callable[[], Scenario], ...] = (
    issue_17456,
    issue_18215_low,
    issue_18215_idle,
    cold_start,
)


def all_scenarios(small: bool = False) -> list[Scenario]:
    """Every scenario; ``small`` shrinks slow balancing to 20 + 20 brokers for quick runs."""
    out = [f() for f in PIP_SCENARIOS + EXTRA_SCENARIOS]
    if small:
        out = [slow_balancing(20, 20) if s.name == "slow-balancing" else s for s in out]
    return out


def scenario(name: str, small: bool = False) -> Scenario:
    for sc in all_scenarios(small):
        if sc.name == name:
            return sc
    names = ", ".join(s.name for s in all_scenarios())
    raise ValueError(f"unknown scenario {name!r}; choose one of: {names}")


def with_minutes(sc: Scenario, minutes: int) -> Scenario:
    if minutes < 2:
        raise ValueError(f"minutes must be >= 2, got {minutes}")
    return replace(sc, minutes=minutes)
