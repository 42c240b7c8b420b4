"""Real load as input: Pulsar's load reports, one JSON file per snapshot, and replaying strategies on them.

A snapshot file holds what Pulsar's leader reads, in the shapes Pulsar stores and its admin API
returns::

    {"timestamp": 1700000000000,                      # ms; default: the newest lastUpdate
     "brokers": {"broker-1:8080": {LocalBrokerData}},  # cpu/memory/directMemory/bandwidthIn/Out
                                                       #   as {"usage", "limit"}, msgRate*, msgThroughput*,
                                                       #   bundles, lastUpdate
     "bundles": {"tenant/ns/0x00000000_0x40000000": {BundleData}}}   # shortTermData, longTermData

``replay`` runs a strategy over the series: its decisions move bundles, and every later snapshot is
re-read under that placement. A broker's usage then shifts from the recorded one by the load moved,
at the broker's own recorded cost per msg/s (per byte/s for bandwidth); what no bundle explains
(another process) stays where it was.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rebalancer._json import DuplicateKeyError, loads_unique
from rebalancer.balance.checks import is_real
from rebalancer.shedding.base import LoadSheddingStrategy, PlacementStrategy
from rebalancer.shedding.model import BrokerLoad, BundleLoad, ClusterLoad, ShedderConfig
from rebalancer.shedding.pulsar import LeastLongTermMessageRate
from rebalancer.shedding.sim import Combination, Judge, Scenario, SimConfig, SimResult, Simulator

log = logging.getLogger(__name__)

# Pulsar's ResourceUsage fields of LocalBrokerData, and ours.
_RESOURCES = (
    ("cpu", "cpu"),
    ("memory", "memory"),
    ("directMemory", "direct_memory"),
    ("bandwidthIn", "bandwidth_in"),
    ("bandwidthOut", "bandwidth_out"),
)
_RATES = (
    ("msgRateIn", "msg_rate_in"),
    ("msgRateOut", "msg_rate_out"),
    ("msgThroughputIn", "msg_throughput_in"),
    ("msgThroughputOut", "msg_throughput_out"),
)
# Limits written for generated reports: 8 cores, 8 GiB heap, 4 GiB direct memory (MB), NIC in KB/s.
_LIMITS = {"cpu": 800.0, "memory": 8192.0, "directMemory": 4096.0}


@dataclass(frozen=True)
class Snapshot:
    """One moment of a real cluster: broker reports and bundle data (``timestamp`` in seconds)."""

    timestamp: float
    brokers: Mapping[str, BrokerLoad]
    bundles: Mapping[str, BundleLoad]
    limits: Mapping[str, Mapping[str, float]]  # broker -> resource -> limit, as reported

    def cluster(self) -> ClusterLoad:
        return ClusterLoad(brokers=self.brokers, bundles=self.bundles, timestamp=self.timestamp)


def _number(where: str, value: object) -> float:
    if not is_real(value):
        raise ValueError(f"{where} must be a finite number, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def _field(where: str, data: Mapping, key: str) -> object:
    """A field Pulsar always writes: a missing one is an error, not a silent zero."""
    if key not in data:
        raise ValueError(f"{where}.{key} is missing")
    return data[key]


def _rates(where: str, data: Mapping) -> dict[str, float]:
    out = {}
    for pulsar, ours in _RATES:
        value = _number(f"{where}.{pulsar}", _field(where, data, pulsar))
        if value < 0:
            raise ValueError(f"{where}.{pulsar} must be >= 0, got {value}")
        out[ours] = value
    return out


def parse_broker(where: str, data: object) -> tuple[BrokerLoad, dict[str, float], float | None]:
    """A LocalBrokerData as (BrokerLoad, limits, lastUpdate in s). Usage over its limit counts as it is,
    as in Pulsar (a CPU used beyond its limit reads above 100%)."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where} must be a LocalBrokerData object, got {type(data).__name__}")
    usages, limits = {}, {}
    for pulsar, ours in _RESOURCES:
        resource = _field(where, data, pulsar)
        if not isinstance(resource, Mapping):
            raise ValueError(f"{where}.{pulsar} must be {{'usage', 'limit'}}, got {resource!r}")
        usage = _number(f"{where}.{pulsar}.usage", _field(f"{where}.{pulsar}", resource, "usage"))
        limit = _number(f"{where}.{pulsar}.limit", _field(f"{where}.{pulsar}", resource, "limit"))
        if usage < 0 or limit < 0:
            raise ValueError(f"{where}.{pulsar} must have usage and limit >= 0, got {usage}, {limit}")
        # Pulsar's ResourceUsage.percentUsage(): 0 without a limit, and not capped at 100. (Pulsar
        # divides in float32; this double differs from it by less than one float32 step.)
        percent = 100.0 * usage / limit if limit > 0 else 0.0
        if not math.isfinite(percent):  # a limit so small that the percentage overflows
            raise ValueError(f"{where}.{pulsar}: usage {usage!r} of limit {limit!r} is beyond any percentage")
        usages[ours], limits[pulsar] = percent, limit
    bundles = _field(where, data, "bundles")
    if not isinstance(bundles, list) or not all(isinstance(b, str) for b in bundles):
        raise ValueError(f"{where}.bundles must be a list of bundle names, got {bundles!r}")
    last = data.get("lastUpdate")
    last_s = None if last is None else _number(f"{where}.lastUpdate", last) / 1000.0
    return BrokerLoad(**usages, **_rates(where, data), bundles=bundles), limits, last_s


def parse_bundle(where: str, data: object) -> BundleLoad:
    """A BundleData: short-term rates, and the long-term ones Pulsar keeps beside them."""
    if not isinstance(data, Mapping) or not isinstance(data.get("shortTermData"), Mapping):
        raise ValueError(f"{where} must be a BundleData object with shortTermData, got {data!r}")
    short = _rates(f"{where}.shortTermData", data["shortTermData"])
    long_data = data.get("longTermData")
    if long_data is not None and not isinstance(long_data, Mapping):
        raise ValueError(f"{where}.longTermData must be an object of rates, got {long_data!r}")
    long = short if long_data is None else _rates(f"{where}.longTermData", long_data)
    return BundleLoad(**short, **{f"long_term_{k}": v for k, v in long.items()})


def _read_json(path: Path) -> object:
    """The file's JSON; every way it can fail is a ValueError naming the file (the CLI's one line)."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ValueError(f"{path}: cannot read: {err.strerror or err}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{path}: not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start})"
        ) from None
    try:
        return loads_unique(text)
    except DuplicateKeyError as err:
        # json gives no position for the hook's error; name where the key sits by searching the text
        where = _duplicate_where(text, err.key)
        raise ValueError(f"{path}: {where}the key {err.key!r} appears twice") from None
    except RecursionError:
        raise ValueError(f"{path}: not JSON: nested too deeply") from None
    except ValueError as err:  # JSONDecodeError, and int() refusing a number of over 4300 digits
        raise ValueError(f"{path}: not JSON: {err}") from None


def _duplicate_where(text: str, key: str) -> str:
    """ "brokers: " when the twice-given key is a broker's name, else "" (the key itself is named)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return ""
    if isinstance(data, Mapping) and isinstance(data.get("brokers"), Mapping) and key in data["brokers"]:
        return "brokers: "
    if isinstance(data, Mapping) and isinstance(data.get("bundles"), Mapping) and key in data["bundles"]:
        return "bundles: "
    return ""


def load_report(path: str | Path) -> Snapshot:
    """One snapshot file; a malformed one raises ValueError naming the file and the field."""
    path = Path(path)
    data = _read_json(path)
    if not isinstance(data, Mapping) or "brokers" not in data:
        raise ValueError(f"{path}: expected an object with 'brokers' (and 'bundles'), got {str(data)[:80]!r}")
    if not isinstance(data["brokers"], Mapping):
        raise ValueError(
            f'{path}: "brokers" must map broker names to LocalBrokerData, got {type(data["brokers"]).__name__}'
        )
    if not data["brokers"]:
        raise ValueError(f'{path}: "brokers" is empty; a snapshot needs at least one broker')
    brokers, limits, updates = {}, {}, []
    for name, raw in data["brokers"].items():
        brokers[name], limits[name], last = parse_broker(f"{path}: brokers[{name!r}]", raw)
        if last is not None:
            updates.append(last)
    raw_bundles = data.get("bundles", {})
    if not isinstance(raw_bundles, Mapping):
        raise ValueError(
            f"{path}: bundles must map bundle names to BundleData, got {type(raw_bundles).__name__}"
        )
    bundles = {name: parse_bundle(f"{path}: bundles[{name!r}]", raw) for name, raw in raw_bundles.items()}
    if "timestamp" in data:
        timestamp = _number(f"{path}: timestamp", data["timestamp"]) / 1000.0
    elif updates:
        timestamp = max(updates)
    else:
        raise ValueError(f"{path}: needs a timestamp (ms) or brokers' lastUpdate")
    snapshot = Snapshot(timestamp, brokers, bundles, limits)
    try:
        snapshot.cluster()  # the same checks the strategies rely on (usages, ownership)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    return snapshot


def load_reports(directory: str | Path) -> list[Snapshot]:
    """Every ``*.json`` in `directory`, oldest first (ties: file name)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"--reports must be a directory of JSON snapshots, got {str(directory)!r}")
    files = sorted(directory.glob("*.json"))
    if len(files) < 2:
        raise ValueError(f"{directory}: a replay needs at least 2 snapshots (*.json), found {len(files)}")
    snapshots = [(load_report(f), f.name) for f in files]
    snapshots.sort(key=lambda sf: (sf[0].timestamp, sf[1]))
    return [s for s, _ in snapshots]


def _rates_json(load: BundleLoad | BrokerLoad, long_term: bool = False) -> dict[str, float]:
    prefix = "long_term_" if long_term else ""
    return {pulsar: float(getattr(load, prefix + ours)) for pulsar, ours in _RATES}


def snapshot_json(snapshot: Snapshot) -> dict:
    """The snapshot in Pulsar's shapes (the inverse of ``load_report``)."""
    brokers = {}
    for name, b in snapshot.brokers.items():
        limits = snapshot.limits.get(name, {})
        entry: dict[str, object] = {}
        for pulsar, ours in _RESOURCES:
            limit = limits.get(pulsar, _LIMITS.get(pulsar, 100.0))
            entry[pulsar] = {"usage": getattr(b, ours) * limit / 100.0, "limit": limit}
        entry.update(_rates_json(b))
        entry["bundles"] = list(b.bundles)
        entry["lastUpdate"] = round(snapshot.timestamp * 1000)
        brokers[name] = entry
    bundles = {
        name: {
            "shortTermData": {"maxSamples": 10, "numSamples": 10, **_rates_json(d)},
            "longTermData": {"maxSamples": 1000, "numSamples": 1000, **_rates_json(d, long_term=True)},
            "topics": 1,
        }
        for name, d in snapshot.bundles.items()
    }
    return {"timestamp": round(snapshot.timestamp * 1000), "brokers": brokers, "bundles": bundles}


def write_reports(snapshots: Sequence[Snapshot], directory: str | Path) -> list[Path]:
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"--out must be a directory, got file {str(directory)!r}")
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, snapshot in enumerate(snapshots):
        path = directory / f"snapshot-{i:04d}.json"
        path.write_text(json.dumps(snapshot_json(snapshot), sort_keys=True) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


class NoShedding(LoadSheddingStrategy):
    """Sheds nothing: the cluster as it runs without a load manager (used to record reports)."""

    name = "none"

    def find_bundles_for_unloading(self, cluster: ClusterLoad, conf: ShedderConfig) -> dict[str, list[str]]:
        return {}


# The cluster as recorded: nothing shed, so a replay reproduces the recorded usage.
AS_RECORDED = Combination("as recorded", lambda seed: (NoShedding(), LeastLongTermMessageRate(seed)))


def record(scenario: Scenario, seed: int = 0, start: float = 1_700_000_000.0) -> list[Snapshot]:
    """A synthetic scenario's per-minute reports, without any shedding: example input for replay."""
    sim = Simulator(scenario, AS_RECORDED, seed=seed, config=SimConfig(report_delay=0))
    sim.run()
    nic = {b.name: b.nic_bytes_per_second / 1024 for b in scenario.brokers}
    out = []
    for t, (reports, bundles) in enumerate(zip(sim.reports, sim.bundle_data, strict=True)):
        limits = {b: {**_LIMITS, "bandwidthIn": nic[b], "bandwidthOut": nic[b]} for b in reports}
        out.append(Snapshot(start + 60.0 * t, dict(reports), dict(bundles), limits))
    return out


# --- replay -----------------------------------------------------------------------------------------


def _per_unit(values: dict[str, tuple[float, float]]) -> dict[str, float]:
    """Usage points per unit of load on each broker (recorded usage / recorded load); the median of
    the brokers that have both where a broker has none."""
    raw = {b: u / x for b, (u, x) in values.items() if x > 0 and u > 0}
    median = statistics.median(raw.values()) if raw else 0.0
    return {b: raw.get(b, median) for b in values}


def _shifted(
    recorded: BrokerLoad,
    owned: list[str],
    bundles: Mapping[str, BundleLoad],
    cost: Mapping[str, float],
) -> BrokerLoad:
    """The broker's report had it owned `owned` instead of what it reported."""
    had = [bundles[b] for b in recorded.bundles if b in bundles]
    has = [bundles[b] for b in owned if b in bundles]

    def delta(attr: str) -> float:
        return sum(getattr(x, attr) for x in has) - sum(getattr(x, attr) for x in had)

    rate = delta("msg_rate_in") + delta("msg_rate_out")
    tp_in, tp_out = delta("msg_throughput_in"), delta("msg_throughput_out")

    def pct(value: float) -> float:
        return min(100.0, _valid_rate(value))

    return BrokerLoad(
        cpu=pct(recorded.cpu + cost["cpu"] * rate),
        memory=recorded.memory,
        direct_memory=pct(recorded.direct_memory + cost["direct_memory"] * rate),
        bandwidth_in=pct(recorded.bandwidth_in + cost["bandwidth_in"] * tp_in),
        bandwidth_out=pct(recorded.bandwidth_out + cost["bandwidth_out"] * tp_out),
        msg_rate_in=_valid_rate(recorded.msg_rate_in + delta("msg_rate_in")),
        msg_rate_out=_valid_rate(recorded.msg_rate_out + delta("msg_rate_out")),
        msg_throughput_in=_valid_rate(recorded.msg_throughput_in + tp_in),
        msg_throughput_out=_valid_rate(recorded.msg_throughput_out + tp_out),
        bundles=owned,
    )


def _valid_rate(value: float) -> float:
    """A shifted rate or usage as a report may hold it: never below 0 (a broker's own rate and its
    bundles' are sampled apart, so taking a bundle off can overshoot), never past a float's range,
    and 0.0 for the NaN of `inf - inf` (rates so large their sums overflow)."""
    if not value > 0.0:
        return 0.0
    return min(value, sys.float_info.max)


def _costs(snapshot: Snapshot) -> dict[str, dict[str, float]]:
    """Per broker: usage points per msg/s (cpu, direct memory) and per byte/s (bandwidth)."""
    data = snapshot.bundles

    def load_of(broker: str, attr: str) -> float:
        return sum(getattr(data[b], attr) for b in snapshot.brokers[broker].bundles if b in data)

    out: dict[str, dict[str, float]] = {b: {} for b in snapshot.brokers}
    for usage, attrs in (
        ("cpu", ("msg_rate_in", "msg_rate_out")),
        ("direct_memory", ("msg_rate_in", "msg_rate_out")),
        ("bandwidth_in", ("msg_throughput_in",)),
        ("bandwidth_out", ("msg_throughput_out",)),
    ):
        per = _per_unit(
            {b: (getattr(d, usage), sum(load_of(b, a) for a in attrs)) for b, d in snapshot.brokers.items()}
        )
        for b, value in per.items():
            out[b][usage] = value
    return out


def replay(
    snapshots: Sequence[Snapshot],
    combo: Combination,
    seed: int = 0,
    config: SimConfig | None = None,
    converge_target: float = 10.0,
    name: str = "reports",
) -> SimResult:
    """Run `combo` over recorded snapshots; metrics as ``simulate`` (usage: weighted max, percent).

    The first snapshot's placement is the starting point. A bundle that first appears later goes
    where it was recorded; one whose broker left is placed through the strategy (a failover).
    """
    if len(snapshots) < 2:
        raise ValueError(f"a replay needs at least 2 snapshots, got {len(snapshots)}")
    for i, snap in enumerate(snapshots):  # load_report checks files; these may be built by hand
        if not isinstance(snap, Snapshot):
            raise ValueError(f"snapshot {i} must be a Snapshot, got {type(snap).__name__}")
        if not snap.brokers:
            raise ValueError(
                f"snapshot {i} (timestamp {snap.timestamp}): brokers is empty; a snapshot needs at least one broker"
            )
    if not is_real(converge_target) or converge_target <= 0:
        raise ValueError(f"converge_target must be a finite number > 0, got {converge_target!r}")
    config = config or SimConfig()
    conf = combo.conf
    shedder, placer = combo.make(seed)
    strategies: list[LoadSheddingStrategy | PlacementStrategy] = (
        [shedder] if id(shedder) == id(placer) else [shedder, placer]
    )
    brokers = sorted({b for s in snapshots for b in s.brokers})
    times = [s.timestamp - snapshots[0].timestamp for s in snapshots]
    judge = Judge(brokers, len(snapshots), config, conf, times)
    placement: dict[str, str] = {}
    reports: list[dict[str, BrokerLoad]] = []
    bundle_data: list[dict[str, BundleLoad]] = []
    alive: set[str] = set()
    for t, snap in enumerate(snapshots):
        now_alive = set(snap.brokers)
        if now_alive != alive:
            alive = now_alive
            for strategy in strategies:
                strategy.on_active_brokers_change(set(alive))
        recorded = snap.cluster()
        present = {b for d in snap.brokers.values() for b in d.bundles} | set(snap.bundles)
        for bundle in [b for b in placement if b not in present]:
            del placement[bundle]
        for bundle in sorted(present - set(placement)):
            owner = recorded.owner_of(bundle)
            if owner is not None:
                placement[bundle] = owner
        orphans = sorted(b for b in present if placement.get(b) not in alive)
        if orphans:
            view = judge.view(t, reports, bundle_data, alive) if reports else recorded
            for bundle in orphans:
                load = snap.bundles.get(bundle, BundleLoad(0.0, 0.0, 0.0, 0.0))
                placement[bundle] = judge.place(placer, bundle, view, alive, load)
            judge.failovers += sum(1 for b in orphans if recorded.owner_of(b) is not None)
        order = {b: i for i, b in enumerate(b for d in snap.brokers.values() for b in d.bundles)}
        owned: dict[str, list[str]] = {b: [] for b in snap.brokers}
        for bundle, owner in placement.items():
            owned[owner].append(bundle)
        costs = _costs(snap)
        report = {
            b: _shifted(
                d, sorted(owned[b], key=lambda x: (order.get(x, len(order)), x)), snap.bundles, costs[b]
            )
            for b, d in snap.brokers.items()
        }
        reports.append(report)
        bundle_data.append(dict(snap.bundles))
        judge.observe(
            t, {b: min(100.0, d.max_resource_usage_with_weight(conf) * 100) for b, d in report.items()}
        )
        if t and t % config.interval == 0:
            judge.shed(t, shedder, placer, placement, alive, reports, bundle_data)
    return judge.result(name, combo.name, converge_target, 0)
