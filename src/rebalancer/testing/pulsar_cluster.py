"""A real Apache Pulsar cluster on loopback for tests: ZooKeeper and one bookie in one JVM, one JVM per broker.

`rebalancer.shedding` ports Pulsar's shedders; `PulsarCluster` runs the real brokers they would act
on, from the jars `make pulsar` copies to a per-user cache, so a test can put skewed load on bundles
through the `pulsar-client` wheel, read the brokers' load reports through the admin REST API, unload
bundles, and crash a broker (SIGKILL) to see what the cluster does.

What runs, each JVM in its own process group with a watchdog beside it (the pattern of `KafkaCluster`):
- the metadata JVM: Pulsar's `PulsarStandaloneStarter --no-broker`, which runs ZooKeeper and one
  bookie in one JVM (Pulsar's `LocalBookkeeperEnsemble`). Its ZooKeeper listens on every interface:
  that class binds no address; everything here reaches it on 127.0.0.1;
- `brokers` brokers: `PulsarBrokerStarter` with a generated broker.conf on 127.0.0.1, running the
  classic `ModularLoadManagerImpl` with its own shedding off unless `shedding_enabled=True`.

The cluster's metadata (the cluster, the `public` tenant, `public/default`) is created through the
admin API once the brokers are up, as `pulsar standalone` does.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from rebalancer._numbers import shown
from rebalancer._watchdog import Watchdog
from rebalancer.testing._checks import check_brokers, check_int, check_seconds
from rebalancer.testing._jvm import (
    JarCache,
    find_java,
    free_ports,
    log4j2_to_file,
    signal_group,
    stop_jvms,
    stop_watchdog,
    tail,
)

__all__ = [
    "CLUSTER_NAME",
    "FETCH_COMMAND",
    "LOAD_MANAGER",
    "PULSAR_LIB_ENV",
    "PULSAR_VERSION",
    "PulsarAdminError",
    "PulsarCluster",
    "PulsarNotInstalledError",
    "PulsarStartError",
    "pulsar_home",
    "pulsar_lib_dir",
]

log = logging.getLogger(__name__)

# The version jvm/pulsar/pom.xml pins (a test checks that they agree); `make pulsar` fetches it.
PULSAR_VERSION = "4.2.4"
PULSAR_LIB_ENV = "REBALANCER_PULSAR_LIB"
FETCH_COMMAND = "make pulsar"
CLUSTER_NAME = "rebalancer"
LOAD_MANAGER = "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl"
BUNDLES_MAX = 1024  # a test namespace's bundles; Pulsar's own split limit (loadBalancerNamespaceMaximumBundles) is 128

_BROKER_JAR = re.compile(r"^pulsar-broker-(\d+\.\d+\.\d+[^-]*)\.jar$")
# Pulsar's NamedEntity rule for tenant, namespace and cluster names.
_NAME = re.compile(r"[-=:.\w]+", re.ASCII)
_CONFIG_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*", re.ASCII)
_HEAP = re.compile(r"[1-9][0-9]*[kKmMgG]?", re.ASCII)
_BIND_ERRORS = ("BindException", "Address already in use", "ZooKeeper bind failed")
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# A topic lookup the start-up makes through each broker: it gives public/default's bundle an owner.
_PROBE_LOOKUP = "/lookup/v2/topic/persistent/public/default/rebalancer-start-probe"

# What Pulsar's own launcher (bin/pulsar) opens to Netty, the load manager's host-usage readers and
# Pulsar's allocator; without them a broker logs reflection warnings and falls back to slower paths.
_ADD_OPENS = (
    "java.base/java.nio", "java.base/jdk.internal.misc", "java.base/sun.net", "java.base/java.lang",
    "java.base/java.io", "java.base/java.util", "java.base/jdk.internal.platform",
    "java.management/sun.management", "jdk.management/com.sun.management.internal",
)  # fmt: skip

# Its WARN says "not ready" each time the start-up probes /status.html.
_LOG4J2_EXTRA = (
    "logger.vip.name = org.apache.pulsar.common.configuration.VipStatus\n"
    "logger.vip.level = error\n"
)

# Set by the cluster itself; broker_config may not change them (the ports, addresses and stores are
# what the Python side connects to; shedding has its own argument).
_OWNED_KEYS = frozenset(
    {
        "clusterName", "metadataStoreUrl", "configurationMetadataStoreUrl", "brokerServicePort",
        "webServicePort", "bindAddress", "advertisedAddress", "loadManagerClassName",
        "loadBalancerSheddingEnabled", "loadBalancerSheddingGracePeriodMinutes",
        "loadBalancerOverrideBrokerNicSpeedGbps",
    }
)  # fmt: skip


class PulsarNotInstalledError(FileNotFoundError):
    """The Pulsar jars are not where `make pulsar` puts them."""


_PULSAR_JARS = JarCache(
    "Pulsar", PULSAR_VERSION, _BROKER_JAR, "pulsar-broker-*.jar", PULSAR_LIB_ENV, FETCH_COMMAND, PulsarNotInstalledError
)


class PulsarAdminError(RuntimeError):
    """The admin REST API answered a request with an error status (the status and the body's start)."""

    def __init__(self, method: str, path: str, status: int, body: bytes) -> None:
        self.status = status
        text = body.decode(errors="replace").strip()
        super().__init__(f"Pulsar admin {method} {path}: HTTP {status}: {text[:300] or '(no body)'}")


def pulsar_home(version: str = PULSAR_VERSION) -> Path:
    """The per-user cache `make pulsar` fills: `lib/` (the broker's, the bookie's and ZooKeeper's classpath)."""
    return _PULSAR_JARS.home(version)


def pulsar_lib_dir() -> Path:
    """The directory of Pulsar jars: $REBALANCER_PULSAR_LIB, else `pulsar_home()/lib`."""
    return _PULSAR_JARS.lib_dir()


def _config_value(key: str, value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str) or (isinstance(value, float) and math.isfinite(value)):
        text = str(value)
        if "\n" not in text and "\r" not in text:
            return text
    raise ValueError(f"broker_config[{key!r}] must be a str, int, finite float or bool on one line, got {shown(value)}")


def _properties(header: str, config: Mapping[str, str]) -> str:
    return "\n".join([f"# Written by rebalancer.testing.PulsarCluster: {header}", *(f"{k}={v}" for k, v in config.items())]) + "\n"


def _http(method: str, url: str, body: object = None, timeout_s: float = 10.0) -> tuple[int, bytes]:
    """(status, body) of one request; OSError when nothing answers (the JVM is down or starting)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json", "Accept": "application/json"}
    )
    try:
        with _NO_PROXY.open(request, timeout=timeout_s) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        with contextlib.closing(err):
            return err.code, err.read()


def _zookeeper_ok(port: int) -> bool:
    """ZooKeeper's `ruok`: `imok` once it serves (LocalBookkeeperEnsemble allows every four-letter word)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0) as s:
            s.sendall(b"ruok")
            return s.recv(16) == b"imok"
    except OSError:
        return False


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0):
            return True
    except OSError:
        return False


def _rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


@dataclass
class _Node:
    """One JVM: the metadata JVM (ZooKeeper and the bookie) or broker `index`; its ports and process."""

    name: str  # "metadata" or "broker-<index>"
    home: Path
    ports: dict[str, int]
    index: int = -1  # a broker's index in `PulsarCluster.brokers`; -1 for the metadata JVM
    process: subprocess.Popen[bytes] | None = None
    watchdog: Watchdog | None = None  # SIGKILLs the JVM's group if this process dies without close()
    # Where this JVM's lines begin in stdout.log and pulsar.log (earlier lives' come before).
    stdout_start: int = 0
    log_start: int = 0
    killed_at: float | None = None  # time.monotonic() of set_down's SIGKILL

    @property
    def up(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def output_of_this_jvm(self) -> str:
        """This life's stdout and WARN+ log."""
        parts = []
        for name, start in (("stdout.log", self.stdout_start), ("pulsar.log", self.log_start)):
            with contextlib.suppress(OSError), open(self.home / name, "rb") as out:
                out.seek(start)
                parts.append(out.read().decode(errors="replace"))
        return "\n".join(parts)

    def logs_tail(self) -> str:
        """The end of the JVM's output and of its WARN+ log: errors quote it (close() deletes the files)."""
        return "\n".join(
            f"--- {self.name}'s {name}, last lines ---\n{tail(self.home / name)}" for name in ("stdout.log", "pulsar.log")
        )


@dataclass
class _State:
    """What the finalizer needs to stop the JVMs; it must not reference the PulsarCluster itself."""

    root: Path
    owner_pid: int
    grace_s: float = 2.0
    nodes: list[_Node] = field(default_factory=list)  # the metadata JVM first, then the brokers
    started_pids: list[int] = field(default_factory=list)
    closed: bool = False


class PulsarStartError(RuntimeError):
    """A JVM did not start; `bind_failed` when a port chosen for it was taken (start-up retries that)."""

    def __init__(self, node: _Node, message: str, bind_failed: bool) -> None:
        self.node = node
        self.bind_failed = bind_failed
        super().__init__(message)


def _bind_failed(node: _Node) -> bool:
    return any(marker in node.output_of_this_jvm() for marker in _BIND_ERRORS)


def _exited(node: _Node, returncode: int) -> PulsarStartError:
    failed = _bind_failed(node)
    return PulsarStartError(
        node,
        f"Pulsar {node.name} exited with code {returncode} while starting"
        f"{' (a port was taken)' if failed else ''}:\n{node.logs_tail()}",
        failed,
    )


def _shutdown(state: _State) -> None:
    """close(), garbage collection and the interpreter's exit all end here (weakref.finalize)."""
    if state.closed or os.getpid() != state.owner_pid:  # a forked child must not stop its parent's JVMs
        return
    state.closed = True
    stop_jvms(state.nodes, state.grace_s)
    shutil.rmtree(state.root, ignore_errors=True)


class PulsarCluster:
    """A real Apache Pulsar cluster on 127.0.0.1: ZooKeeper and one bookie in one JVM, and `brokers` broker JVMs.

    `brokers` (the attribute) lists the brokers' ids as the admin API names them ("127.0.0.1:<web
    port>"); `set_down(i)` and `set_up(i)` take an index into it. Use it as a context manager, or call
    `close()`; the interpreter's exit stops the JVMs too, and a watchdog process kills them if this
    process dies without cleaning up. `start_seconds` is how long the start took (it is logged).

    Every broker runs on one host, so the host's CPU reading is the same for each of them: the load
    manager's CPU weight is 0 unless `broker_config` sets `loadBalancerCPUResourceWeight`, and each
    broker's bandwidth is counted against a NIC of `nic_speed_gbps`, small enough that a test's load
    shows.
    """

    def __init__(
        self,
        brokers: int = 2,
        *,
        shedding_enabled: bool = False,
        shedding_grace_period_minutes: int = 30,
        nic_speed_gbps: float = 0.1,
        broker_config: Mapping[str, str | int | float | bool] | None = None,
        heap: str = "384m",
        metadata_heap: str = "256m",
        jvm_options: Sequence[str] = (),
        java: str | None = None,
        lib_dir: str | os.PathLike[str] | None = None,
        start_timeout_s: float = 240.0,
    ) -> None:
        count = check_brokers(brokers)
        if not isinstance(shedding_enabled, bool):
            raise ValueError(f"shedding_enabled must be True or False, got {shown(shedding_enabled)}")
        grace_minutes = check_int("shedding_grace_period_minutes", shedding_grace_period_minutes, 0, 10**6)
        if isinstance(nic_speed_gbps, bool) or not isinstance(nic_speed_gbps, int | float) or not (
            math.isfinite(nic_speed_gbps) and 0 < nic_speed_gbps <= 10_000
        ):
            raise ValueError(f"nic_speed_gbps must be a number > 0 and at most 10000, got {shown(nic_speed_gbps)}")
        for name, value in (("heap", heap), ("metadata_heap", metadata_heap)):
            if not isinstance(value, str) or not _HEAP.fullmatch(value):
                raise ValueError(f"{name} must be a JVM heap size such as '384m' or '1g', got {shown(value)}")
        if isinstance(jvm_options, str) or not all(isinstance(o, str) for o in jvm_options):
            raise ValueError(f"jvm_options must be a sequence of str options, not one str, got {shown(jvm_options)}")
        extra = self._check_broker_config(broker_config)
        check_seconds("start_timeout_s", start_timeout_s)
        self._lib = Path(lib_dir) if lib_dir is not None else pulsar_lib_dir()
        self.version: str = _PULSAR_JARS.jar_version(self._lib)
        self._java = find_java(java, "PulsarCluster")
        self.shedding_enabled = shedding_enabled
        self.shedding_grace_period_minutes = grace_minutes
        self.nic_speed_gbps = float(nic_speed_gbps)
        self._heap = heap
        self._metadata_heap = metadata_heap
        self._broker_config = extra
        self._jvm_options = list(jvm_options)
        self._start_timeout_s = float(start_timeout_s)
        self._count = count
        self._lock = threading.RLock()
        self.admin_url = ""
        self.service_url = ""
        self.brokers: list[str] = []
        self._state = _State(root=Path(tempfile.mkdtemp(prefix="rebalancer-pulsar-")), owner_pid=os.getpid())
        # Runs on close(), on garbage collection and at the interpreter's exit (finalize's own atexit hook).
        self._finalizer = weakref.finalize(self, _shutdown, self._state)
        started = time.monotonic()
        try:
            try:
                self._start()
            except PulsarStartError as exc:
                if not exc.bind_failed:
                    raise
                log.warning(
                    "a Pulsar port was taken between choosing and binding it; retrying on new ports: %s",
                    str(exc).splitlines()[0],
                )
                stop_jvms(self._state.nodes, 0)
                self._start()
        except BaseException:
            self.close()
            raise
        self.start_seconds: float = time.monotonic() - started
        log.info(
            "PulsarCluster: %d broker(s), Apache Pulsar %s, up in %.1f s; admin %s, service %s (data in %s)",
            count, self.version, self.start_seconds, self.admin_url, self.service_url, self._state.root,
        )  # fmt: skip

    @staticmethod
    def _check_broker_config(broker_config: Mapping[str, str | int | float | bool] | None) -> dict[str, str]:
        if broker_config is None:
            return {}
        if not isinstance(broker_config, Mapping):
            raise ValueError(f"broker_config must be a mapping of broker.conf keys to values, got {shown(broker_config)}")
        out: dict[str, str] = {}
        for key, value in broker_config.items():
            if not isinstance(key, str) or not _CONFIG_KEY.fullmatch(key):
                raise ValueError(f"broker_config keys must be broker.conf names such as 'numIOThreads', got {shown(key)}")
            if key in _OWNED_KEYS:
                how = {
                    "loadBalancerSheddingEnabled": "pass shedding_enabled=",
                    "loadBalancerSheddingGracePeriodMinutes": "pass shedding_grace_period_minutes=",
                    "loadBalancerOverrideBrokerNicSpeedGbps": "pass nic_speed_gbps=",
                }.get(key, "the cluster sets it")
                raise ValueError(f"broker_config may not set {key!r}: {how}")
            out[key] = _config_value(key, value)
        return out

    # -- start-up ----------------------------------------------------------------------------------
    def _start(self) -> None:
        deadline = time.monotonic() + self._start_timeout_s
        n = self._count
        ports = free_ports(2 + 2 * n)
        root = self._state.root
        metadata = _Node("metadata", root / "metadata", {"zookeeper": ports[0], "bookie": ports[1]})
        brokers = [
            _Node(f"broker-{i}", root / f"broker-{i}", {"broker": ports[2 + 2 * i], "web": ports[3 + 2 * i]}, index=i)
            for i in range(n)
        ]
        for node in (metadata, *brokers):
            shutil.rmtree(node.home, ignore_errors=True)
            node.home.mkdir(parents=True)
            (node.home / "log4j2.properties").write_text(
                log4j2_to_file("PulsarCluster", node.home / "pulsar.log", _LOG4J2_EXTRA)
            )
        self._state.nodes = [metadata, *brokers]
        (metadata.home / "standalone.conf").write_text(_properties("ZooKeeper and the bookie", self._standalone_conf()))
        for node in brokers:
            (node.home / "status").write_text("OK\n")
            config = self._broker_conf(node, metadata.ports["zookeeper"])
            (node.home / "broker.conf").write_text(_properties(node.name, config))
        self.brokers = [f"127.0.0.1:{node.ports['web']}" for node in brokers]
        self.admin_url = f"http://{self.brokers[0]}"
        self.service_url = "pulsar://" + ",".join(f"127.0.0.1:{node.ports['broker']}" for node in brokers)

        self._launch(metadata)
        # The brokers need ZooKeeper to start, not the bookie: they start while it does.
        self._wait(metadata, deadline, lambda: _zookeeper_ok(metadata.ports["zookeeper"]), "ZooKeeper to answer")
        for node in brokers:
            self._launch(node)
        self._wait(metadata, deadline, lambda: _port_open(metadata.ports["bookie"]), "the bookie to listen")
        for node in brokers:
            self._wait(node, deadline, lambda node=node: self._ready(node), "the broker to be ready")
        self._create_cluster_metadata(deadline)
        self._wait_listed(brokers, set(self.brokers), deadline, f"within start_timeout_s={self._start_timeout_s:g}")
        # Listed is not yet placeable: until the leader's load manager has read the brokers' load
        # data, a lookup of a new bundle fails with "No available broker found".
        for node in brokers:
            self._wait(node, deadline, lambda node=node: self._lookup_ok(node), "a topic lookup to succeed")
        self._wait(brokers[0], deadline, lambda: self._leader_agreed(brokers), "the brokers to agree on a leader")

    def _standalone_conf(self) -> dict[str, str]:
        """The metadata JVM's file: read as a broker's config (only its cluster name matters) and as the bookie's."""
        return {
            "clusterName": CLUSTER_NAME,
            "advertisedAddress": "127.0.0.1",
            # The bookie: loopback only, DbLedgerStorage with small caches, no fsync (data is thrown away).
            "allowLoopback": "true",
            "listeningInterface": "lo",
            "ledgerStorageClass": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
            "dbStorage_writeCacheMaxSizeMb": "16",
            "dbStorage_readAheadCacheMaxSizeMb": "8",
            "dbStorage_rocksDB_writeBufferSizeMB": "4",
            "dbStorage_rocksDB_blockCacheSize": str(4 * 1024 * 1024),
            "journalSyncData": "false",
            "journalMaxGroupWaitMSec": "1",
            "entryLogFilePreallocationEnabled": "false",
            "numAddWorkerThreads": "1",
            "numReadWorkerThreads": "1",
            "numHighPriorityWorkerThreads": "1",
            "serverNumIOThreads": "1",
            "numLongPollWorkerThreads": "1",
            "httpServerEnabled": "false",
            # A shared disk's usage is not the test's business: the bookie must not turn read-only at 95%.
            "diskUsageThreshold": "0.99",
            "diskUsageWarnThreshold": "0.98",
            "diskUsageLwmThreshold": "0.97",
        }

    def _broker_conf(self, node: _Node, zookeeper_port: int) -> dict[str, str]:
        store = f"zk:127.0.0.1:{zookeeper_port}"
        config: dict[str, str] = {
            "clusterName": CLUSTER_NAME,
            "metadataStoreUrl": store,
            "configurationMetadataStoreUrl": store,
            "brokerServicePort": str(node.ports["broker"]),
            "webServicePort": str(node.ports["web"]),
            "bindAddress": "127.0.0.1",
            "advertisedAddress": "127.0.0.1",
            # A crashed broker leaves the admin API's list when its session expires (ZooKeeper's floor: 6 s).
            "metadataStoreSessionTimeoutMillis": "10000",
            "zookeeperSessionExpiredPolicy": "reconnect",
            "brokerShutdownTimeoutMs": "3000",
            # /status.html answers OK only while this file exists and the broker has started.
            "statusFilePath": str(node.home / "status"),
            # One bookie.
            "managedLedgerDefaultEnsembleSize": "1",
            "managedLedgerDefaultWriteQuorum": "1",
            "managedLedgerDefaultAckQuorum": "1",
            "managedLedgerCacheSizeMB": "16",
            # The classic load manager, its reports fresh within seconds, its own shedding off by default
            # (so that a shedder driven from outside is the only one acting), no bundle splits (a test's
            # bundles stay the ones it created).
            "loadManagerClassName": LOAD_MANAGER,
            "loadBalancerEnabled": "true",
            "loadBalancerSheddingEnabled": "true" if self.shedding_enabled else "false",
            "loadBalancerSheddingGracePeriodMinutes": str(self.shedding_grace_period_minutes),
            "loadBalancerAutoBundleSplitEnabled": "false",
            "loadBalancerAutoUnloadSplitBundlesEnabled": "false",
            "loadBalancerReportUpdateMinIntervalMillis": "1000",
            "loadBalancerReportUpdateThresholdPercentage": "1",
            "loadBalancerReportUpdateMaxIntervalMinutes": "1",
            "loadBalancerHostUsageCheckIntervalMinutes": "1",
            "loadBalancerResourceQuotaUpdateIntervalMinutes": "1",
            "statsUpdateFrequencyInSecs": "2",
            "statsUpdateInitialDelayInSecs": "2",
            "loadBalancerCPUResourceWeight": "0",
            "loadBalancerOverrideBrokerNicSpeedGbps": repr(self.nic_speed_gbps),
            # Nothing a test does not ask for: no functions, system topics, transactions or websocket.
            "functionsWorkerEnabled": "false",
            "systemTopicEnabled": "false",
            "topicLevelPoliciesEnabled": "false",
            "transactionCoordinatorEnabled": "false",
            "webSocketServiceEnabled": "false",
            "brokerDeleteInactiveTopicsEnabled": "false",
            # Few threads: the JVMs share two cores.
            "numIOThreads": "2",
            "numOrderedExecutorThreads": "2",
            "numExecutorThreadPoolSize": "2",
            "numCacheExecutorThreadPoolSize": "1",
            "managedLedgerNumSchedulerThreads": "2",
            "bookkeeperClientNumWorkerThreads": "2",
        }
        config.update(self._broker_config)
        return config

    def _jvm_command(self, node: _Node, heap: str, direct: str, main: list[str]) -> list[str]:
        return [
            self._java,
            f"-Xmx{heap}",
            f"-XX:MaxDirectMemorySize={direct}",
            # C1 only and the serial collector: faster start-up, fewer threads and less memory on
            # shared cores; a test's load does not need peak throughput.
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            "-Dio.netty.tryReflectionSetAccessible=true",
            "-Dio.netty.leakDetectionLevel=disabled",
            "-Djute.maxbuffer=10485760",
            "-Dzookeeper.sasl.client=false",
            f"-Dlog4j2.configurationFile={node.home / 'log4j2.properties'}",
            f"-Dpulsar.log.dir={node.home}",
            *(f"--add-opens={module}=ALL-UNNAMED" for module in _ADD_OPENS),
            *self._jvm_options,
            "-cp", str(self._lib / "*"),
            *main,
        ]  # fmt: skip

    def _launch(self, node: _Node) -> None:
        """Start the node's JVM in its own session (its own process group) and its watchdog."""
        env = dict(os.environ)
        if node.index < 0:
            env["PULSAR_STANDALONE_USE_ZOOKEEPER"] = "1"  # ZooKeeper, not RocksDB: brokers in other JVMs read it
            command = self._jvm_command(node, self._metadata_heap, "128m", [
                "org.apache.pulsar.PulsarStandaloneStarter", "--config", str(node.home / "standalone.conf"),
                "--no-broker", "--no-functions-worker", "--no-stream-storage", "--num-bookies", "1",
                "--zookeeper-port", str(node.ports["zookeeper"]), "--zookeeper-dir", str(node.home / "zookeeper"),
                "--bookkeeper-port", str(node.ports["bookie"]), "--bookkeeper-dir", str(node.home / "bookie"),
                "--advertised-address", "127.0.0.1",
            ])  # fmt: skip
        else:
            command = self._jvm_command(node, self._heap, "256m", [
                "org.apache.pulsar.PulsarBrokerStarter", "--broker-conf", str(node.home / "broker.conf"),
            ])  # fmt: skip
        with open(node.home / "stdout.log", "ab") as out:
            node.stdout_start = out.tell()
            with contextlib.suppress(OSError):
                node.log_start = (node.home / "pulsar.log").stat().st_size
            node.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=node.home, env=env, start_new_session=True,
            )  # fmt: skip
        self._state.started_pids.append(node.process.pid)
        node.watchdog = Watchdog(kill_groups=[node.process.pid])
        self._state.started_pids.append(node.watchdog.pid)
        log.debug("Pulsar %s: pid %d, ports %s", node.name, node.process.pid, node.ports)

    def _wait(self, node: _Node, deadline: float, condition: Any, what: str) -> None:
        """Until `condition()`; a PulsarStartError (with the JVM's log tail) if the JVM exits or time runs out."""
        while True:
            assert node.process is not None
            rc = node.process.poll()
            if rc is not None:
                raise _exited(node, rc)
            if condition():
                return
            if _bind_failed(node):  # the JVM may run on (ZooKeeper falls back to another port): fail now
                raise PulsarStartError(node, f"Pulsar {node.name}: a port was taken:\n{node.logs_tail()}", True)
            if time.monotonic() > deadline:
                raise PulsarStartError(
                    node, f"Pulsar {node.name}: timed out waiting for {what}:\n{node.logs_tail()}", False
                )
            time.sleep(0.25)

    @staticmethod
    def _ready(node: _Node) -> bool:
        """The broker's readiness probe: /status.html answers OK once the broker has fully started."""
        try:
            status, body = _http("GET", f"http://127.0.0.1:{node.ports['web']}/status.html", timeout_s=5.0)
        except OSError:
            return False
        return status == 200 and body.strip() == b"OK"

    @staticmethod
    def _leader_agreed(nodes: Sequence[_Node]) -> bool:
        """Every broker in `nodes` names the same leader, and it is one of them. The leader's load
        manager places bundles, an unload's destinationBroker included: until a restarted broker and
        the others agree on it, a lookup or an unload may be decided by a broker that is not the one
        the others follow, and a bundle lands where it was not asked to go."""
        leaders = set()
        for node in nodes:
            try:
                status, body = _http("GET", f"http://127.0.0.1:{node.ports['web']}/admin/v2/brokers/leaderBroker")
                leaders.add(str(json.loads(body).get("serviceUrl")) if status == 200 else None)
            except (OSError, ValueError, TypeError, AttributeError):
                return False
        urls = {f"http://127.0.0.1:{node.ports['web']}" for node in nodes}
        return len(leaders) == 1 and next(iter(leaders)) in urls

    @staticmethod
    def _lookup_ok(node: _Node) -> bool:
        try:
            status, body = _http("GET", f"http://127.0.0.1:{node.ports['web']}{_PROBE_LOOKUP}")
            return status == 200 and "brokerUrl" in json.loads(body)
        except (OSError, ValueError, TypeError):
            return False

    def _create_cluster_metadata(self, deadline: float) -> None:
        """The cluster, the `public` tenant and `public/default`, as PulsarClusterMetadataSetup would."""
        first = self._state.nodes[1]
        cluster = {
            "serviceUrl": f"http://127.0.0.1:{first.ports['web']}",
            "brokerServiceUrl": f"pulsar://127.0.0.1:{first.ports['broker']}",
        }
        self._admin_ok("PUT", f"/admin/v2/clusters/{CLUSTER_NAME}", cluster, deadline)
        self._ensure_tenant("public", deadline)
        self._admin_ok("PUT", "/admin/v2/namespaces/public/default", {}, deadline)

    def _ensure_tenant(self, tenant: str, deadline: float) -> None:
        body = {"adminRoles": [], "allowedClusters": [CLUSTER_NAME]}
        self._admin_ok("PUT", f"/admin/v2/tenants/{tenant}", body, deadline)

    def _admin_ok(self, method: str, path: str, body: object, deadline: float) -> None:
        """A create that may already be done (409 Conflict) and may meet a broker still settling (5xx)."""
        while True:
            status, reply = self._admin(method, path, body)
            if status < 300 or status == 409:
                return
            if status < 500 or time.monotonic() > deadline:
                raise PulsarAdminError(method, path, status, reply)
            time.sleep(0.5)

    def _wait_listed(self, nodes: Sequence[_Node], expected: set[str], deadline: float, what: str) -> None:
        """Until each of `nodes` (live brokers) lists exactly `expected` as the cluster's active brokers."""
        views: dict[str, list[str] | None] = {}
        while True:
            views = {node.name: self._listed_by(node) for node in nodes}
            if all(v is not None and set(v) == expected for v in views.values()):
                return
            for node in nodes:
                assert node.process is not None
                rc = node.process.poll()
                if rc is not None:
                    raise _exited(node, rc)
            if time.monotonic() > deadline:
                raise PulsarStartError(
                    nodes[0],
                    f"Pulsar brokers did not all list {sorted(expected)} {what}: {views}\n"
                    + "\n".join(node.logs_tail() for node in nodes),
                    False,
                )
            time.sleep(0.25)

    @staticmethod
    def _listed_by(node: _Node) -> list[str] | None:
        try:
            status, body = _http("GET", f"http://127.0.0.1:{node.ports['web']}/admin/v2/brokers/{CLUSTER_NAME}")
            listed = json.loads(body) if status == 200 else None
        except (OSError, ValueError):
            return None
        return sorted(str(b) for b in listed) if isinstance(listed, list) else None

    # -- the admin API ------------------------------------------------------------------------------
    def _admin(self, method: str, path: str, body: object = None) -> tuple[int, bytes]:
        """One admin request to the first live broker that answers (`admin_url` unless that broker is down)."""
        failures: list[str] = []
        for node in self._state.nodes[1:]:
            if not node.up:
                continue
            try:
                return _http(method, f"http://127.0.0.1:{node.ports['web']}{path}", body)
            except OSError as err:
                failures.append(f"{node.name}: {err}")
        raise ConnectionError(f"no Pulsar broker answered {method} {path}: {failures or 'every broker is down'}")

    def active_brokers(self) -> list[str]:
        """The brokers the admin API lists now (sorted); a killed one stays listed until its session expires."""
        self._check_open()
        status, body = self._admin("GET", f"/admin/v2/brokers/{CLUSTER_NAME}")
        if status != 200:
            raise PulsarAdminError("GET", f"/admin/v2/brokers/{CLUSTER_NAME}", status, body)
        return sorted(json.loads(body))

    def create_namespace(self, name: str, bundles: int = 16) -> str:
        """Create namespace `name` ("tenant/namespace", the tenant too if new) with `bundles` bundles.

        The bundles split the hash range evenly and have no owner until a client looks a topic up.
        Returns `name`; ValueError if it exists.
        """
        parts = name.split("/") if isinstance(name, str) else []
        if len(parts) != 2 or not all(_NAME.fullmatch(p) for p in parts):
            raise ValueError(
                f"name must be 'tenant/namespace', each part of letters, digits and -=:._, got {shown(name)}"
            )
        count = check_int("bundles", bundles, 1, BUNDLES_MAX)
        with self._lock:
            self._check_open()
            deadline = time.monotonic() + 60.0
            self._ensure_tenant(parts[0], deadline)
            path = f"/admin/v2/namespaces/{name}"
            status, reply = self._admin("PUT", path, {"bundles": {"numBundles": count}})
            if status == 409:
                raise ValueError(f"namespace {name!r} already exists")
            if status >= 300:
                raise PulsarAdminError("PUT", path, status, reply)
        log.info("Pulsar namespace %s created with %d bundles", name, count)
        return name

    # -- faults ------------------------------------------------------------------------------------
    def _broker(self, index: int) -> _Node:
        self._check_open()
        return self._state.nodes[1 + check_int("index", index, 0, self._count - 1)]

    def is_up(self, index: int) -> bool:
        return self._broker(index).up

    def set_down(self, index: int) -> None:
        """SIGKILL broker `index`'s process group (a crash); a no-op if it is down.

        The admin API lists it until its metadata session expires (metadataStoreSessionTimeoutMillis,
        10 s here); until then its bundles have an owner that does not answer.
        """
        with self._lock:
            node = self._broker(index)
            if not node.up:
                return
            assert node.process is not None
            signal_group(node.process, signal.SIGKILL)
            node.process.wait()
            node.process = None
            node.killed_at = time.monotonic()
            stop_watchdog(node)
            log.info("Pulsar broker %d (%s) killed (SIGKILL)", index, self.brokers[index])

    def _session_timeout_s(self) -> float:
        """The brokers' metadata session timeout (broker_config may change it), in seconds."""
        value = self._broker_conf(self._state.nodes[1], 0)["metadataStoreSessionTimeoutMillis"]
        try:
            return float(value) / 1000
        except ValueError:  # the brokers would not have started with it
            return 30.0  # Pulsar's default

    def set_up(self, index: int, timeout_s: float = 180.0) -> None:
        """Restart broker `index` on its ports; returns once every live broker lists it again.

        A broker killed a moment ago is still registered under its old session: the restart waits for
        that registration to expire, or the new JVM would find its id taken.
        """
        check_seconds("timeout_s", timeout_s)
        with self._lock:
            node = self._broker(index)
            if node.up:
                return
            deadline = time.monotonic() + timeout_s
            broker_id = self.brokers[index]
            live = [n for n in self._state.nodes[1:] if n.up]
            others = {self.brokers[n.index] for n in live}
            if live:
                self._wait_listed(live, others, deadline, f"after broker {index} went down (its session expiring)")
            elif node.killed_at is not None:  # no broker to ask: wait out the session, and a little more
                expiry = node.killed_at + self._session_timeout_s() + 2.0
                time.sleep(max(0.0, min(expiry, deadline) - time.monotonic()))
            for attempt in range(3):
                self._launch(node)
                try:
                    self._wait(node, deadline, lambda: self._ready(node), "the broker to be ready")
                    self._wait_listed([*live, node], {*others, broker_id}, deadline, f"after set_up({index})")
                    self._wait(node, deadline, lambda: self._lookup_ok(node), "a topic lookup to succeed")
                    self._wait(node, deadline, lambda: self._leader_agreed([*live, node]), "the brokers to agree on a leader")
                except PulsarStartError as exc:
                    stop_jvms([node], 0)
                    if exc.bind_failed and attempt < 2 and time.monotonic() < deadline:
                        log.warning("Pulsar broker %d: its port is still taken; retrying", index)
                        time.sleep(1.0)
                        continue
                    raise
                except BaseException:
                    stop_jvms([node], 0)
                    raise
                log.info("Pulsar broker %d restarted (pid %d)", index, node.process.pid if node.process else -1)
                return

    # -- lifecycle ---------------------------------------------------------------------------------
    def close(self, grace_s: float = 2.0) -> None:
        """SIGTERM every JVM's process group, SIGKILL after `grace_s`, delete the data; safe twice.

        A clean stop gains nothing for data that is deleted next, and a broker's clean stop unloads
        its bundles one by one: hence a short grace.
        """
        check_seconds("grace_s", grace_s, zero=True)
        with self._lock:
            self._state.grace_s = grace_s
            self._finalizer()

    def _check_open(self) -> None:
        if self._state.closed:
            raise RuntimeError("the Pulsar cluster is closed")

    @property
    def closed(self) -> bool:
        return self._state.closed

    def __enter__(self) -> PulsarCluster:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"admin_url={self.admin_url!r}, service_url={self.service_url!r}"
        return f"PulsarCluster(brokers={self._count}, version={self.version!r}, {state})"

    @property
    def pids(self) -> dict[str, int]:
        """{"metadata" or "broker-<index>": pid} of the JVMs running now (a downed broker is absent)."""
        return {n.name: n.process.pid for n in self._state.nodes if n.process is not None and n.up}

    @property
    def started_pids(self) -> tuple[int, ...]:
        """Every process this cluster started: JVMs (all their lives) and their watchdogs."""
        return tuple(self._state.started_pids)

    def rss_bytes(self) -> int:
        """The resident memory of the running JVMs, summed (from /proc)."""
        return sum(_rss_bytes(pid) for pid in self.pids.values())

    @property
    def data_dir(self) -> Path:
        """The temporary directory with each JVM's config, data and logs; `close()` removes it."""
        return self._state.root

    def broker_conf_path(self, index: int = 0) -> Path:
        """Broker `index`'s broker.conf (for `ShedderConfig.from_broker_conf`); the brokers differ only in ports."""
        return self._broker(index).home / "broker.conf"
