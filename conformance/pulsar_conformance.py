"""The Pulsar ports checked against Pulsar's own classes: snapshots, both runners, the comparison.

The Java side is the harness beside this file, ``conformance/pulsar`` (built by Maven against
``pulsar-broker`` ``PULSAR_VERSION``); this module runs the same snapshots through the ports, compares
decisions exactly, and generates the seeded random snapshots of the differential test. It is test
code, so it lives here, not in the installed package: ``tests/conformance`` import it as
``pulsar_conformance`` (pytest's ``pythonpath`` has ``conformance``), and
``benchmarks/shedding_conformance.py`` puts this directory on its path. It needs a source checkout,
a JDK 17 and Maven.

A case is one JSON object (one line of a ``.jsonl`` file)::

    {"id": "...", "strategy": "AvgShedder",            # one of STRATEGIES
     "conf": {"maxUnloadPercentage": 0.5, ...},       # Pulsar property names; unset ones keep Pulsar's defaults
     "state": {"plan": {bundle: broker}, "usage": {broker: ema}},   # optional seeding (see below)
     "cycles": [{                                      # run in order on one strategy object
        "timestamp": 1000,                             # seconds
        "conf": {...},                                 # optional overrides from this cycle on
        "brokers": [{"name": "b1", "cpu": [usage, limit], "memory": [u, l], "directMemory": [u, l],
                     "bandwidthIn": [u, l], "bandwidthOut": [u, l], "msgRateIn": 0, "msgRateOut": 0,
                     "msgThroughputIn": 0, "msgThroughputOut": 0, "bundles": ["t/ns/0x0_0x1", ...]}],
        "bundles": [{"name": ..., "shortTerm": [rateIn, rateOut, throughputIn, throughputOut],
                     "longTerm": [...], "numSamples": 0}],
        "recentlyUnloaded": {bundle: ms}, "recentlyUnloadedBrokers": {broker: ms},
        "preallocated": {broker: [bundle, ...]},       # LeastLongTermMessageRate
        "shed": true,                                  # shedders: run findBundlesForUnloading
        "placeUnloaded": false, "placeExclude": [],    # AvgShedder: place what was just unloaded
        "place": [{"bundle": ..., "candidates": [...]}]}],
     "expect": [{"cycle": 0, "empty": true}, ...],      # vectors: the assertions of Pulsar's own test
     "note": "..."}

Usages are Pulsar's ``ResourceUsage(usage, limit)``; both sides see ``percentUsage()``, which Pulsar
computes in float32 (``percent_usage``). The decision of a cycle is ``{"unloads": [[bundle, source,
destination or null], ...], "placements": [{"bundle": ..., "candidates": [...]}]}``; a placement that
draws at random is compared by the set it draws from. "state" seeds what Pulsar's own tests set by
reflection: AvgShedder's plan and LeastResourceUsageWithWeight's usage history.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from rebalancer._watchdog import Watchdog
from rebalancer.shedding.base import LoadSheddingStrategy, PlacementStrategy
from rebalancer.shedding.model import MB, BrokerLoad, BundleLoad, ClusterLoad, ShedderConfig
from rebalancer.shedding.pulsar import (
    AvgShedder,
    LeastLongTermMessageRate,
    LeastResourceUsageWithWeight,
    OverloadShedder,
    ThresholdShedder,
    TransferShedder,
    UniformLoadShedder,
)

PULSAR_VERSION = "4.2.4"  # conformance/pulsar/pom.xml pins the same pulsar-broker

SHEDDERS = ("ThresholdShedder", "OverloadShedder", "UniformLoadShedder", "AvgShedder", "TransferShedder")
PLACEMENTS = ("LeastLongTermMessageRate", "LeastResourceUsageWithWeight")
STRATEGIES = SHEDDERS + PLACEMENTS

REPO = Path(__file__).resolve().parents[1]
HARNESS_DIR = REPO / "conformance" / "pulsar"
VECTORS_DIR = REPO / "tests" / "conformance"
HARNESS_MAIN = "io.github.rebalancer.conformance.Harness"

# The deviations the ports keep on purpose, by key: (the case, Pulsar's reference).
DEVIATIONS = {
    "avg-plan-key": (
        "AvgShedder places a bundle by the plan entry of another bundle with equal stats, or by an entry "
        "it kept after the bundle was placed (its plan is keyed by the mutable BundleData)",
        "apache/pulsar#26246",
    ),
}


def percent_usage(usage: float, limit: float) -> float:
    """``ResourceUsage.percentUsage()``: ``usage / limit * 100`` in float32, 0 without a limit."""
    if not limit > 0:
        return 0.0
    proportion = np.float32(usage) / np.float32(limit)
    return float(np.float32(proportion * np.float32(100)))


def config_of(properties: Mapping[str, Any]) -> ShedderConfig:
    """A ShedderConfig from Pulsar property names, as a broker.conf is read. Unset ones keep the
    settings table's defaults, which must be Pulsar's: the harness's side keeps Pulsar's own."""
    return ShedderConfig.from_properties(properties)


def cluster_of(cycle: Mapping[str, Any]) -> ClusterLoad:
    """The ports' view of one snapshot cycle."""
    brokers = {}
    for b in cycle.get("brokers", []):
        brokers[b["name"]] = BrokerLoad(
            cpu=percent_usage(*b["cpu"]),
            memory=percent_usage(*b["memory"]),
            direct_memory=percent_usage(*b["directMemory"]),
            bandwidth_in=percent_usage(*b["bandwidthIn"]),
            bandwidth_out=percent_usage(*b["bandwidthOut"]),
            msg_rate_in=float(b["msgRateIn"]),
            msg_rate_out=float(b["msgRateOut"]),
            msg_throughput_in=float(b["msgThroughputIn"]),
            msg_throughput_out=float(b["msgThroughputOut"]),
            bundles=list(b["bundles"]),
        )
    bundles = {
        d["name"]: BundleLoad(*(float(v) for v in d["shortTerm"]), *(float(v) for v in d["longTerm"]))
        for d in cycle.get("bundles", [])
    }
    recent = {k: v / 1000 for k, v in cycle.get("recentlyUnloaded", {}).items()}
    return ClusterLoad(brokers, bundles, recent, float(cycle.get("timestamp", 0)))


def _strategy(name: str) -> tuple[LoadSheddingStrategy | None, PlacementStrategy | None]:
    if name == "AvgShedder":
        avg = AvgShedder(seed=0)
        return avg, avg
    if name == "TransferShedder":
        return TransferShedder(seed=0), None
    shedders: dict[str, type[LoadSheddingStrategy]] = {
        "ThresholdShedder": ThresholdShedder,
        "OverloadShedder": OverloadShedder,
        "UniformLoadShedder": UniformLoadShedder,
    }
    if name in shedders:
        return shedders[name](), None
    if name == "LeastLongTermMessageRate":
        return None, LeastLongTermMessageRate(seed=0)
    if name == "LeastResourceUsageWithWeight":
        return None, LeastResourceUsageWithWeight(seed=0)
    raise ValueError(f"unknown strategy {name!r}; expected one of {', '.join(STRATEGIES)}")


def run_python(case: Mapping[str, Any]) -> dict[str, Any]:
    """The ports' decisions for one case, in the harness's shape."""
    shedder, placement = _strategy(case["strategy"])
    properties = dict(case.get("conf", {}))
    previous: set[str] | None = None
    out_cycles = []
    for index, cycle in enumerate(case["cycles"]):
        properties.update(cycle.get("conf", {}))
        conf = config_of(properties)
        cluster = cluster_of(cycle)
        active = set(cluster.brokers)
        if isinstance(shedder, TransferShedder):
            shedder.on_active_brokers_change(active)  # the harness drops the reports of brokers that left
            for broker, when in cycle.get("recentlyUnloadedBrokers", {}).items():
                shedder.recently_unloaded_brokers[broker] = when / 1000
        elif previous is not None and previous != active:
            for strategy in {id(s): s for s in (shedder, placement) if s is not None}.values():
                strategy.on_active_brokers_change(active)
        previous = active
        if index == 0:
            _seed(case.get("state") or {}, placement)
        unloads: list[list[str | None]] = []
        if shedder is not None and cycle.get("shed", True):
            selected = shedder.find_bundles_for_unloading(cluster, conf)
            plan = getattr(shedder, "bundle_broker_plan", {})
            for source, names in selected.items():
                for bundle in names:
                    destination = plan.get(bundle) if isinstance(shedder, TransferShedder) and conf.transfer_enabled else None
                    unloads.append([bundle, source, destination])
            unloads.sort(key=lambda row: (str(row[0]), str(row[1])))
        placements = []
        for bundle, candidates in _placements(cycle, unloads):
            if placement is None:
                raise ValueError(f"{case['strategy']} places nothing")
            if isinstance(placement, LeastLongTermMessageRate):
                _preallocate(cycle, placement)
            chosen = placement.choices(set(candidates), bundle, cluster, conf)
            placements.append({"bundle": bundle, "candidates": sorted(chosen)})
        out_cycles.append({"unloads": unloads, "placements": placements})
    return {"id": case.get("id", ""), "cycles": out_cycles}


def _placements(cycle: Mapping[str, Any], unloads: Sequence[Sequence[str | None]]) -> list[tuple[str, list[str]]]:
    """The placement requests of a cycle: the bundles just unloaded (if asked), then the listed ones."""
    requests: list[tuple[str, list[str]]] = []
    if cycle.get("placeUnloaded"):
        exclude = set(cycle.get("placeExclude", []))
        brokers = [b["name"] for b in cycle["brokers"] if b["name"] not in exclude]
        requests += [(str(row[0]), brokers) for row in unloads]
    requests += [(p["bundle"], list(p["candidates"])) for p in cycle.get("place", [])]
    return requests


def _seed(state: Mapping[str, Any], placement: PlacementStrategy | None) -> None:
    if "plan" in state and isinstance(placement, AvgShedder):
        placement.bundle_broker_plan.update(state["plan"])
    if "usage" in state and isinstance(placement, LeastResourceUsageWithWeight):
        placement.broker_avg_resource_usage_with_weight.update(state["usage"])


def _preallocate(cycle: Mapping[str, Any], placement: LeastLongTermMessageRate) -> None:
    """A cycle's preallocations, as the harness puts them in each BrokerData (the manager's job)."""
    data = {d["name"]: d for d in cycle.get("bundles", [])}
    placement.preallocated = {
        broker: {b: _long_term_rate(data.get(b)) for b in bundles}
        for broker, bundles in cycle.get("preallocated", {}).items()
    }


def _long_term_rate(d: Mapping[str, Any] | None) -> float:
    return 0.0 if d is None else float(d["longTerm"][0]) + float(d["longTerm"][1])


# ---- comparison ----


@dataclass(frozen=True)
class Verdict:
    """One case compared: ``status`` is "match", "deviation" (documented, ``deviation`` names it) or
    "mismatch" (a bug in the port); ``detail`` says where they first differ."""

    case_id: str
    strategy: str
    status: str
    detail: str = ""
    deviation: str = ""


def _normal(cycle: Mapping[str, Any]) -> tuple[list[list[Any]], list[tuple[str, list[str]]]]:
    unloads = sorted([list(row) for row in cycle.get("unloads", [])], key=lambda r: (str(r[0]), str(r[1])))
    placements = [(p["bundle"], sorted(p["candidates"])) for p in cycle.get("placements", [])]
    return unloads, placements


def _data_key(d: Mapping[str, Any] | None) -> tuple[Any, ...]:
    """What BundleData's Lombok equals compares (the harness leaves the sample counts at numSamples)."""
    if d is None:
        return ("empty",)
    return (tuple(float(v) for v in d["shortTerm"]), tuple(float(v) for v in d["longTerm"]), d.get("numSamples", 0))


def compare(case: Mapping[str, Any], java: Mapping[str, Any], python: Mapping[str, Any]) -> Verdict:
    """Pulsar's decisions against the port's, cycle by cycle; a difference is a documented deviation
    only where the case meets that deviation's condition."""
    cid, strategy = str(case.get("id", "")), str(case["strategy"])
    if "error" in java:
        return Verdict(cid, strategy, "mismatch", "harness error: " + str(java["error"]).splitlines()[0])
    jcycles, pcycles = java.get("cycles", []), python.get("cycles", [])
    if len(jcycles) != len(pcycles):
        return Verdict(cid, strategy, "mismatch", f"{len(jcycles)} cycles from Pulsar, {len(pcycles)} from the port")
    # AvgShedder's plan as Pulsar keeps it: BundleData value -> the bundles that wrote the entry.
    writers: dict[tuple[Any, ...], set[str]] = {}
    kept: dict[tuple[Any, ...], set[str]] = {}  # entries Pulsar still holds for bundles the port has placed
    deviation = ""
    for index, (jc, pc) in enumerate(zip(jcycles, pcycles, strict=True)):
        ju, jp = _normal(jc)
        pu, pp = _normal(pc)
        if ju != pu:
            return Verdict(cid, strategy, "mismatch", f"cycle {index}: unloads {ju} from Pulsar, {pu} from the port")
        data = {d["name"]: d for d in case["cycles"][index].get("bundles", [])}
        if strategy == "AvgShedder":
            for row in ju:
                writers.setdefault(_data_key(data.get(row[0])), set()).add(str(row[0]))
        if len(jp) != len(pp):
            return Verdict(cid, strategy, "mismatch", f"cycle {index}: {len(jp)} placements from Pulsar, {len(pp)}")
        for (bundle, jset), (pbundle, pset) in zip(jp, pp, strict=True):
            if bundle != pbundle:
                return Verdict(cid, strategy, "mismatch", f"cycle {index}: placed {bundle} and {pbundle}")
            key = _data_key(data.get(bundle))
            if jset != pset:
                shared = writers.get(key, set()) - {bundle}
                if strategy == "AvgShedder" and (shared or bundle in kept.get(key, set())):
                    deviation = "avg-plan-key"
                else:
                    return Verdict(
                        cid, strategy, "mismatch",
                        f"cycle {index}: {bundle} placed among {jset} by Pulsar, {pset} by the port",
                    )
            if strategy == "AvgShedder":
                # Pulsar keeps the entry (and writes a random choice into it); the port drops it.
                writers.setdefault(key, set()).add(bundle)
                kept.setdefault(key, set()).add(bundle)
    if deviation:
        return Verdict(cid, strategy, "deviation", DEVIATIONS[deviation][0], deviation)
    return Verdict(cid, strategy, "match")


def check_expectations(case: Mapping[str, Any], result: Mapping[str, Any]) -> list[str]:
    """Which of a vector's assertions (those of Pulsar's own test) a result fails."""
    failures = []
    cycles = result.get("cycles", [])
    for expect in case.get("expect", []):
        index = expect.get("cycle", 0)
        if index >= len(cycles):
            failures.append(f"cycle {index}: no result")
            continue
        unloads, placements = _normal(cycles[index])
        rows = {(r[0], r[1], r[2]) for r in unloads}
        sources = {r[1] for r in unloads}
        where = f"cycle {index}"
        if "empty" in expect and (not unloads) != expect["empty"]:
            failures.append(f"{where}: expected {'no' if expect['empty'] else 'some'} unloads, got {unloads}")
        if "count" in expect and len(unloads) != expect["count"]:
            failures.append(f"{where}: expected {expect['count']} unloads, got {len(unloads)}")
        if "from" in expect and not sources <= set(expect["from"]):
            failures.append(f"{where}: unloads from {sorted(sources)}, expected only {expect['from']}")
        if "has_source" in expect and expect["has_source"] not in sources:
            failures.append(f"{where}: nothing unloaded from {expect['has_source']}")
        for broker, names in expect.get("bundles", {}).items():
            got = sorted(r[0] for r in unloads if r[1] == broker)
            if got != sorted(names):
                failures.append(f"{where}: {broker} unloads {got}, expected {sorted(names)}")
        if "unloads" in expect and rows != {tuple(r) for r in expect["unloads"]}:
            failures.append(f"{where}: unloads {sorted(rows, key=str)}, expected {expect['unloads']}")
        if "one_of" in expect and rows not in [{tuple(r) for r in option} for option in expect["one_of"]]:
            failures.append(f"{where}: unloads {sorted(rows, key=str)}, expected one of {expect['one_of']}")
        for broker, n in expect.get("bundles_count", {}).items():
            if sum(1 for r in unloads if r[1] == broker) != n:
                failures.append(f"{where}: expected {n} unloads from {broker}, got {unloads}")
        if "routes" in expect and {(r[1], r[2]) for r in unloads} != {tuple(r) for r in expect["routes"]}:
            failures.append(f"{where}: unloads {unloads}, expected source -> destination {expect['routes']}")
        if "all_placed" in expect and any(c != sorted(expect["all_placed"]) for _, c in placements):
            failures.append(f"{where}: placements {placements}, expected all among {expect['all_placed']}")
        for prefix, candidates in expect.get("placed_prefix", {}).items():
            bad = [(b, c) for b, c in placements if b.startswith(prefix) and c != sorted(candidates)]
            if bad:
                failures.append(f"{where}: {bad} placed, expected {prefix}* among {sorted(candidates)}")
        if "placements" in expect and [[b, c] for b, c in placements] != [
            [b, sorted(c)] for b, c in expect["placements"]
        ]:
            failures.append(f"{where}: placements {placements}, expected {expect['placements']}")
        for bundle, candidates in expect.get("placed", {}).items():
            got_sets = [c for b, c in placements if b == bundle]
            if not got_sets or any(c != sorted(candidates) for c in got_sets):
                failures.append(f"{where}: {bundle} placed among {got_sets}, expected {sorted(candidates)}")
    return failures


def load_cases(path: str | Path) -> list[dict[str, Any]]:
    """The cases of a JSON Lines file (blank lines skipped)."""
    with Path(path).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def vector_files() -> list[Path]:
    return sorted(VECTORS_DIR.glob("*.jsonl"))


# ---- the Java harness ----


class HarnessUnavailable(RuntimeError):
    """The harness cannot be built or started here (no JDK, no Maven, no network for the first build)."""


def _harness_paths() -> tuple[Path, Path]:
    target = HARNESS_DIR / "target"
    return target / "pulsar-conformance.jar", target / "classpath.txt"


def _stale(jar: Path, classpath: Path) -> bool:
    if not jar.is_file() or not classpath.is_file():
        return True
    built = jar.stat().st_mtime  # Maven rewrites the jar on a change; the classpath file only if it differs
    sources = [HARNESS_DIR / "pom.xml", *(HARNESS_DIR / "src").rglob("*")]
    return any(p.is_file() and p.stat().st_mtime > built for p in sources)


def build_harness(*, quiet: bool = True) -> tuple[Path, Path]:
    """Build the harness with Maven if its sources changed; the jars stay cached in ~/.m2."""
    jar, classpath = _harness_paths()
    if not _stale(jar, classpath):
        return jar, classpath
    mvn = shutil.which("mvn")
    if mvn is None:
        raise HarnessUnavailable("Maven (mvn) is not installed; `make pulsar-conformance` installs it")
    command = [mvn, "-B", "-f", str(HARNESS_DIR / "pom.xml"), "package"]
    if quiet:
        command.insert(1, "-q")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise HarnessUnavailable(f"mvn package failed:\n{done.stdout[-4000:]}{done.stderr[-4000:]}")
    return jar, classpath


class PulsarHarness:
    """One JVM running the harness; ``run`` sends cases and reads back one result per case.

    The JVM ends when its stdin closes (``close``). If this process dies without closing it, a
    watchdog kills the JVM: its stdin alone stayed open while a child this process had forked lived.
    """

    def __init__(self) -> None:
        jar, classpath = build_harness()
        java = shutil.which("java")
        if java is None:
            raise HarnessUnavailable("java is not installed; `make java` installs a JDK 17")
        self.log_path = HARNESS_DIR / "target" / "harness.log"
        self._log: TextIO = self.log_path.open("w", encoding="utf-8")
        cp = f"{jar}{os.pathsep}{classpath.read_text(encoding='utf-8').strip()}"
        self._process = subprocess.Popen(
            [java, "-Xss8m", "-cp", cp, HARNESS_MAIN],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            encoding="utf-8",
            bufsize=1,
            start_new_session=True,  # its own group, for the watchdog to kill
        )
        self._watchdog = Watchdog(kill_groups=[self._process.pid])
        self._lock = threading.Lock()

    def run(self, cases: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Pulsar's decisions for each case, in order."""
        process = self._process
        assert process.stdin is not None and process.stdout is not None
        stdin, stdout = process.stdin, process.stdout
        lines = [json.dumps(c, separators=(",", ":")) for c in cases]
        failure: list[BaseException] = []

        def feed() -> None:
            try:
                for line in lines:
                    stdin.write(line + "\n")
                stdin.flush()
            except BaseException as err:  # a dead JVM: reported by the reader below
                failure.append(err)

        with self._lock:
            writer = threading.Thread(target=feed, daemon=True)
            writer.start()
            results = []
            for case in cases:
                line = stdout.readline()
                if not line:
                    raise HarnessUnavailable(f"the harness stopped (exit {process.poll()}); see {self.log_path}")
                result = json.loads(line)
                if result.get("id") != case.get("id", ""):
                    raise RuntimeError(f"harness answered {result.get('id')!r} for {case.get('id')!r}")
                results.append(result)
            writer.join()
        if failure:
            raise HarnessUnavailable(f"writing to the harness failed: {failure[0]}")
        return results

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._watchdog.stop()
        self._log.close()

    def __enter__(self) -> PulsarHarness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def verdict(case: Mapping[str, Any], pulsar: Mapping[str, Any]) -> Verdict:
    """Run the ports on a case and compare with Pulsar's result; a port that raises is a mismatch."""
    try:
        python = run_python(case)
    except (ValueError, ArithmeticError, KeyError, IndexError) as err:
        return Verdict(str(case.get("id", "")), str(case["strategy"]), "mismatch", f"the port raised {err!r}")
    return compare(case, pulsar, python)


def compare_all(harness: PulsarHarness, cases: Sequence[Mapping[str, Any]]) -> list[Verdict]:
    """Run cases on both sides and compare each."""
    return [verdict(case, j) for case, j in zip(cases, harness.run(cases), strict=True)]


# ---- seeded random snapshots for the differential test ----

PROFILES = (
    "random",
    "ties",
    "zero",
    "one-broker",
    "all-overloaded",
    "empty-brokers",
    "big-bundles",
    "direct-memory",
    "history",
)
_STATEFUL = {"ThresholdShedder", "AvgShedder", "TransferShedder", "LeastResourceUsageWithWeight"}


def generate_cases(strategy: str, count: int, seed: int = 0) -> list[dict[str, Any]]:
    """``count`` snapshots for ``strategy``, the same for the same seed; each profile in turn."""
    return [generate_case(strategy, seed, index) for index in range(count)]


def generate_case(strategy: str, seed: int, index: int) -> dict[str, Any]:
    """One seeded snapshot: a cluster, its evolution over some cycles, and what to place."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}")
    rng = random.Random(f"{strategy}:{seed}:{index}")
    profile = PROFILES[index % len(PROFILES)]
    world = _World(rng, profile)
    if profile == "history" or (strategy in _STATEFUL and rng.random() < 0.4):
        n_cycles = rng.randint(2, 8)
    else:
        n_cycles = rng.randint(1, 2)
    cycles = []
    timestamp = rng.randint(1_000, 2_000_000)
    for c in range(n_cycles):
        if c:
            world.evolve(leave_join=profile == "history" or rng.random() < 0.1)
            timestamp += rng.choice((30, 60, 60, 120, 300))
        cycle = world.snapshot(timestamp)
        _requests(rng, strategy, world, cycle, last=c == n_cycles - 1)
        if rng.random() < 0.25 and world.owned():
            owned = world.owned()
            cycle["recentlyUnloaded"] = {b: timestamp * 1000 for b in rng.sample(owned, rng.randint(1, len(owned)))}
        if strategy == "TransferShedder" and rng.random() < 0.15:
            brokers = [b["name"] for b in cycle["brokers"]]
            if brokers:
                ago = rng.choice((0, 60, 179, 180, 181, 600))
                cycle["recentlyUnloadedBrokers"] = {rng.choice(brokers): (timestamp - ago) * 1000}
        cycles.append(cycle)
    return {
        "id": f"{strategy}-{seed}-{index}-{profile}",
        "strategy": strategy,
        "conf": _random_conf(rng, strategy, profile),
        "cycles": cycles,
    }


def _pick(rng: random.Random, *options: Any) -> Any:
    return rng.choice(options)


def _random_conf(rng: random.Random, strategy: str, profile: str) -> dict[str, Any]:
    conf: dict[str, Any] = {}
    if rng.random() < 0.6 or profile == "direct-memory":
        conf["loadBalancerCPUResourceWeight"] = _pick(rng, 1.0, 1.0, 0.5, 0.0)
        conf["loadBalancerBandwidthInResourceWeight"] = _pick(rng, 1.0, 1.0, 0.5, 0.0)
        conf["loadBalancerBandwidthOutResourceWeight"] = _pick(rng, 1.0, 1.0, 0.7)
        conf["loadBalancerDirectMemoryResourceWeight"] = _pick(rng, 0.0, 0.5, 1.0, 1.0)
        conf["loadBalancerMemoryResourceWeight"] = _pick(rng, 0.0, 0.0, 0.3, 1.0)
    if profile == "direct-memory":
        conf["loadBalancerDirectMemoryResourceWeight"] = _pick(rng, 1.0, 1.0, 0.8, 1.5)
    conf["loadBalancerBrokerOverloadedThresholdPercentage"] = _pick(rng, 85, 85, 50, 70, 95)
    if strategy == "ThresholdShedder":
        conf["loadBalancerBrokerThresholdShedderPercentage"] = _pick(rng, 10, 10, 5, 20, 0)
        conf["loadBalancerHistoryResourcePercentage"] = _pick(rng, 0.9, 0.9, 0.5, 0.0, 1.0)
        conf["loadBalancerBundleUnloadMinThroughputThreshold"] = _pick(rng, 10.0, 0.0, 0.1, 1.0)
        conf["lowerBoundarySheddingEnabled"] = rng.random() < 0.4
    elif strategy == "UniformLoadShedder":
        conf["loadBalancerMsgRateDifferenceShedderThreshold"] = _pick(rng, 50.0, 50.0, 25.0, 0.0, 200.0)
        conf["loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold"] = _pick(rng, 4.0, 4.0, 2.0, 0.0)
        conf["maxUnloadPercentage"] = _pick(rng, 0.2, 0.2, 0.5, 1.0, 0.05)
        conf["minUnloadMessage"] = _pick(rng, 1000, 1000, 0, 100, 10000)
        conf["minUnloadMessageThroughput"] = _pick(rng, MB, MB, 0, 1024, 100 * MB)
        conf["maxUnloadBundleNumPerShedding"] = _pick(rng, -1, -1, 1, 2, 5)
    elif strategy == "AvgShedder":
        conf["loadBalancerAvgShedderLowThreshold"] = _pick(rng, 15, 15, 5, 0, 30)
        conf["loadBalancerAvgShedderHighThreshold"] = _pick(rng, 40, 40, 20, 60)
        conf["loadBalancerAvgShedderHitCountLowThreshold"] = _pick(rng, 8, 1, 2, 3)
        conf["loadBalancerAvgShedderHitCountHighThreshold"] = _pick(rng, 2, 1, 2, 3)
        conf["maxUnloadPercentage"] = _pick(rng, 0.5, 0.5, 0.2, 1.0)
        conf["minUnloadMessage"] = _pick(rng, 1000, 0, 100, 50000)
        conf["minUnloadMessageThroughput"] = _pick(rng, MB, 0, 1024, 50 * MB)
    elif strategy == "TransferShedder":
        conf["loadBalancerBrokerLoadTargetStd"] = _pick(rng, 0.25, 0.25, 0.1, 0.05, 0.5, 1.5)
        conf["loadBalancerSheddingConditionHitCountThreshold"] = _pick(rng, 3, 0, 0, 1, 2)
        conf["loadBalancerTransferEnabled"] = rng.random() < 0.75
        conf["loadBalancerMaxNumberOfBrokerSheddingPerCycle"] = _pick(rng, 3, 3, 1, 10)
        conf["loadBalanceSheddingDelayInSeconds"] = _pick(rng, 180, 0, 60, 600)
        conf["loadBalancerMaxNumberOfBundlesInBundleLoadReport"] = _pick(rng, 10, 10, 1, 2, 3, 5)
        conf["loadBalancerDebugModeEnabled"] = rng.random() < 0.4
        conf["loadBalancerHistoryResourcePercentage"] = _pick(rng, 0.9, 0.9, 0.5, 0.0)
    elif strategy == "LeastResourceUsageWithWeight":
        conf["loadBalancerHistoryResourcePercentage"] = _pick(rng, 0.9, 0.9, 0.5, 0.0, 1.0)
        conf["loadBalancerAverageResourceUsageDifferenceThresholdPercentage"] = _pick(rng, 10, 10, 0, 5, 30)
    return conf


class _World:
    """A cluster that a case evolves from cycle to cycle: brokers, their bundles, usages, rates."""

    def __init__(self, rng: random.Random, profile: str) -> None:
        self.rng = rng
        self.profile = profile
        style = rng.randrange(3)
        n_brokers = 1 if profile == "one-broker" else rng.randint(2, 10)
        self.all_brokers = [self._broker_name(style, i) for i in range(n_brokers + (2 if profile == "history" else 0))]
        self.live = self.all_brokers[:n_brokers]
        self.bundles: dict[str, list[float]] = {}  # name -> short-term [rateIn, rateOut, tpIn, tpOut]
        self.long: dict[str, list[float] | None] = {}
        self.owner: dict[str, str] = {}
        self.usage: dict[str, list[list[float]]] = {}
        self.report_factor: dict[str, float] = {}
        self.extra: list[str] = []  # bundles with data that no broker reports (placements, preallocations)
        counter = 0
        for broker in self.all_brokers:
            empty = profile == "empty-brokers" and rng.random() < 0.5
            k = 0 if empty else rng.choice((0, 1, 2, 3, 4, 5, 6, 8, 12) if profile != "one-broker" else (0, 1, 2, 5, 9))
            for _ in range(k):
                name = self._bundle_name(counter)
                counter += 1
                self.bundles[name] = self._rates()
                self.long[name] = None if rng.random() < 0.5 else [v * rng.choice((0.5, 0.9, 1.0, 1.3)) for v in self.bundles[name]]
                self.owner[name] = broker
            if profile == "big-bundles" and k:
                big = rng.choice([b for b, o in self.owner.items() if o == broker])
                self.bundles[big] = [v * rng.choice((10, 20, 50)) for v in self.bundles[big]]
            self.usage[broker] = self._usages()
            self.report_factor[broker] = 1.0 if rng.random() < 0.7 else rng.choice((0.0, 0.5, 0.97, 1.1, 3.0))
        if rng.random() < 0.1 and self.bundles:  # a bundle some broker reports but has no data for
            orphan = rng.choice(list(self.bundles))
            self.bundles.pop(orphan)
            self.long.pop(orphan)
            self.owner[orphan + "-nodata"] = self.owner.pop(orphan)
        for i in range(rng.randint(0, 4)):
            name = f"fresh-tenant/new-ns/0x{i:08x}_0x{i + 1:08x}"
            self.bundles[name] = self._rates()
            self.long[name] = None
            self.extra.append(name)

    def _broker_name(self, style: int, i: int) -> str:
        if style == 0:
            return f"broker-{i}:8080"
        if style == 1:
            return f"10.0.{i // 7}.{i * 13 % 250}:8080"
        return f"pulsar-{self.rng.randrange(10_000)}-{i}.example.com:8080"

    def _bundle_name(self, i: int) -> str:
        lo = self.rng.randrange(1 << 32)
        return f"tenant-{i % 3}/ns-{i % 7}/0x{lo:08x}_0x{(lo + 1) % (1 << 32):08x}"

    def _value(self, scale: float) -> float:
        rng, profile = self.rng, self.profile
        if profile == "ties":
            return rng.choice((0.0, 1.0, 2.0, 5.0)) * scale
        if profile == "zero":
            return rng.choice((0.0, 0.0, 1e-9, 1e-6, 0.001, 0.5, scale * rng.random()))
        value = scale * rng.lognormvariate(0, 1.2)
        return round(value, rng.choice((0, 3))) if rng.random() < 0.5 else value

    def _rates(self) -> list[float]:
        rate_in, rate_out = self._value(1000.0), self._value(1000.0)
        size = self.rng.choice((100.0, 1024.0, 5000.0)) if self.profile != "ties" else 1024.0
        tp_in = rate_in * size if self.rng.random() < 0.8 else self._value(1e5)
        tp_out = rate_out * size if self.rng.random() < 0.8 else self._value(1e5)
        return [rate_in, rate_out, tp_in, tp_out]

    def _percent(self) -> float:
        rng, profile = self.rng, self.profile
        if profile == "ties":
            return float(rng.choice((0, 10, 20, 40, 50, 60, 80, 85, 90, 100)))
        if profile == "zero":
            return float(rng.choice((0.0, 0.0, 0.001, 0.1, 1.0, rng.uniform(0, 100))))
        if profile == "all-overloaded":  # CPU beyond its limit too, which Pulsar counts as it is
            return rng.uniform(85, 100) if rng.random() < 0.7 else rng.uniform(100, 250)
        if rng.random() < 0.03:
            return rng.uniform(100, 400)
        return round(rng.uniform(0, 100), rng.choice((0, 1, 2, 6)))

    def _usages(self) -> list[list[float]]:
        """cpu, memory, directMemory, bandwidthIn, bandwidthOut as [usage, limit]."""
        out = []
        for resource in range(5):
            percent = self._percent()
            if self.profile == "direct-memory" and resource == 2:
                percent = self.rng.uniform(50, 100)
            if self.profile == "all-overloaded" and resource != 0:
                percent = self.rng.uniform(0, 100)
            limit = self.rng.choice((100.0, 100.0, 800.0, 1000.0, 3.5))
            if self.profile == "zero" and self.rng.random() < 0.2:
                limit = 0.0  # ResourceUsage() as Pulsar's tests build it: no limit, 0%
            out.append([percent * limit / 100, limit])
        return out

    def owned(self) -> list[str]:
        return [b for b, o in self.owner.items() if o in self.live]

    def evolve(self, leave_join: bool) -> None:
        rng = self.rng
        for name, rates in self.bundles.items():
            if rng.random() < 0.5:
                factor = rng.choice((0.0, 0.5, 0.9, 1.1, 2.0)) if self.profile != "ties" else 1.0
                self.bundles[name] = [v * factor for v in rates]
        for broker in self.all_brokers:
            if rng.random() < 0.6:
                self.usage[broker] = self._usages()
        if leave_join and len(self.all_brokers) > 1:
            broker = rng.choice(self.all_brokers)
            if broker in self.live and len(self.live) > 1:
                self.live.remove(broker)
            elif broker not in self.live:
                self.live.append(broker)
        if rng.random() < 0.2 and self.owned() and len(self.live) > 1:  # a bundle moved
            bundle = rng.choice(self.owned())
            self.owner[bundle] = rng.choice(self.live)

    def snapshot(self, timestamp: int) -> dict[str, Any]:
        brokers = []
        for broker in self.live:
            names = [b for b, o in self.owner.items() if o == broker]
            sums = [0.0, 0.0, 0.0, 0.0]
            for b in names:
                for i, v in enumerate(self.bundles.get(b, (0.0, 0.0, 0.0, 0.0))):
                    sums[i] += v
            factor = self.report_factor[broker]
            cpu, memory, direct, bw_in, bw_out = self.usage[broker]
            brokers.append({
                "name": broker, "cpu": cpu, "memory": memory, "directMemory": direct,
                "bandwidthIn": bw_in, "bandwidthOut": bw_out,
                "msgRateIn": sums[0] * factor, "msgRateOut": sums[1] * factor,
                "msgThroughputIn": sums[2] * factor, "msgThroughputOut": sums[3] * factor,
                "bundles": names,
            })
        bundles = [
            {"name": b, "shortTerm": list(r), "longTerm": list(self.long.get(b) or r)}
            for b, r in self.bundles.items()
        ]
        return {"timestamp": timestamp, "brokers": brokers, "bundles": bundles}


def _requests(rng: random.Random, strategy: str, world: _World, cycle: dict[str, Any], last: bool) -> None:
    """What a cycle asks the placement: new bundles among candidates, or the bundles just unloaded."""
    brokers = [b["name"] for b in cycle["brokers"]]
    if strategy == "AvgShedder":
        cycle["placeUnloaded"] = True
        if rng.random() < 0.2 and len(brokers) > 1:
            cycle["placeExclude"] = [rng.choice(brokers)]
        if last and world.extra and rng.random() < 0.3:
            cycle["place"] = [{"bundle": rng.choice(world.extra), "candidates": brokers}]
        return
    if strategy not in PLACEMENTS:
        return
    requests = []
    for _ in range(rng.randint(1, 3)):
        if not world.extra:
            break
        r = rng.random()
        candidates = brokers if r < 0.5 else [] if r < 0.55 else rng.sample(brokers, rng.randint(1, len(brokers)))
        requests.append({"bundle": rng.choice(world.extra), "candidates": candidates})
    cycle["place"] = requests
    if strategy == "LeastLongTermMessageRate" and world.extra and rng.random() < 0.6:
        cycle["preallocated"] = {
            b: rng.sample(world.extra, rng.randint(1, len(world.extra))) for b in rng.sample(brokers, rng.randint(1, len(brokers)))
        }
