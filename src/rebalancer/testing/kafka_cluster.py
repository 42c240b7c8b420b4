"""Real Apache Kafka brokers on loopback for tests: KRaft, one JVM per broker, counted by the brokers.

`MockKafkaCluster` (librdkafka's mock) starts in milliseconds and can inject any error, but it is
not Kafka: it does not replicate, elect leaders or fence a crashed broker. `KafkaCluster` runs the
real broker, from the jars `make kafka` copies to a per-user cache, so a test can crash a broker
(SIGKILL) and see what a client really sees. Requests are counted by the brokers themselves: each
JVM carries the Jolokia agent, which serves the broker's JMX metrics as JSON on a loopback port.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
import uuid
import weakref
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from rebalancer._librdkafka import LibrdkafkaLog
from rebalancer._watchdog import Watchdog
from rebalancer.testing._checks import (
    check_api_key,
    check_broker_id,
    check_brokers,
    check_seconds,
    check_topic,
)
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
    "FETCH_COMMAND",
    "KAFKA_API_KEYS",
    "KAFKA_LIB_ENV",
    "KAFKA_VERSION",
    "BrokerExitedError",
    "BrokerStartError",
    "JolokiaPortTakenError",
    "KafkaCluster",
    "KafkaNotInstalledError",
    "kafka_home",
    "kafka_lib_dir",
]

log = logging.getLogger(__name__)

# The version jvm/kafka/pom.xml pins (a test checks that they agree); `make kafka` fetches it.
KAFKA_VERSION = "4.3.1"
KAFKA_LIB_ENV = "REBALANCER_KAFKA_LIB"
FETCH_COMMAND = "make kafka"

# Kafka's ApiKeys (id by name) as the brokers name them in their request metrics; read from
# org.apache.kafka.common.protocol.ApiKeys of kafka-clients 4.3.1.
KAFKA_API_KEYS: dict[str, int] = {
    name: key
    for key, name in enumerate(
        (
            "Produce Fetch ListOffsets Metadata LeaderAndIsr StopReplica UpdateMetadata ControlledShutdown "
            "OffsetCommit OffsetFetch FindCoordinator JoinGroup Heartbeat LeaveGroup SyncGroup DescribeGroups "
            "ListGroups SaslHandshake ApiVersions CreateTopics DeleteTopics DeleteRecords InitProducerId "
            "OffsetForLeaderEpoch AddPartitionsToTxn AddOffsetsToTxn EndTxn WriteTxnMarkers TxnOffsetCommit "
            "DescribeAcls CreateAcls DeleteAcls DescribeConfigs AlterConfigs AlterReplicaLogDirs "
            "DescribeLogDirs SaslAuthenticate CreatePartitions CreateDelegationToken RenewDelegationToken "
            "ExpireDelegationToken DescribeDelegationToken DeleteGroups ElectLeaders IncrementalAlterConfigs "
            "AlterPartitionReassignments ListPartitionReassignments OffsetDelete DescribeClientQuotas "
            "AlterClientQuotas DescribeUserScramCredentials AlterUserScramCredentials Vote BeginQuorumEpoch "
            "EndQuorumEpoch DescribeQuorum AlterPartition UpdateFeatures Envelope FetchSnapshot "
            "DescribeCluster DescribeProducers BrokerRegistration BrokerHeartbeat UnregisterBroker "
            "DescribeTransactions ListTransactions AllocateProducerIds ConsumerGroupHeartbeat "
            "ConsumerGroupDescribe ControllerRegistration GetTelemetrySubscriptions PushTelemetry "
            "AssignReplicasToDirs ListConfigResources DescribeTopicPartitions ShareGroupHeartbeat "
            "ShareGroupDescribe ShareFetch ShareAcknowledge AddRaftVoter RemoveRaftVoter UpdateRaftVoter "
            "InitializeShareGroupState ReadShareGroupState WriteShareGroupState DeleteShareGroupState "
            "ReadShareGroupStateSummary StreamsGroupHeartbeat StreamsGroupDescribe "
            "DescribeShareGroupOffsets AlterShareGroupOffsets DeleteShareGroupOffsets"
        ).split()
    )
}
_API_NAMES = {key: name for name, key in KAFKA_API_KEYS.items()}

# One MBean per request name and API version; each has a Count (a Yammer meter's total).
_REQUESTS_MBEAN = "kafka.network:type=RequestMetrics,name=RequestsPerSec,request=*,version=*"
_BROKER_STATE_MBEAN = "kafka.server:type=KafkaServer,name=BrokerState"
# The metadata log's committed offset (every controller knows it) and how far each broker has applied it.
_COMMITTED_MBEAN = "kafka.controller:type=KafkaController,name=LastCommittedRecordOffset"
_APPLIED_MBEAN = "kafka.server:type=broker-metadata-metrics"
_APPLIED_ATTRIBUTE = "last-applied-record-offset"
_RUNNING = 3  # BrokerState RUNNING: registered with the controller and unfenced
_RUNTIME_MBEAN = "java.lang:type=Runtime"  # its Pid names the JVM that answers on a Jolokia port
_JOLOKIA_FAILED = "Could not start Jolokia agent"  # what the agent prints when its port is taken
# Requests the brokers send each other all the time (replication, heartbeats, Raft): counted, but
# a read does not wait for them to stop.
_BACKGROUND = frozenset(
    {"Fetch", "BrokerHeartbeat", "Vote", "BeginQuorumEpoch", "EndQuorumEpoch", "FetchSnapshot", "AlterPartition"}
)
_REQUEST_TAG = re.compile(r"[:,]request=([^,]+)")
_KAFKA_JAR = re.compile(r"^kafka_\d+\.\d+-(\d+\.\d+\.\d+[^-]*)\.jar$")
_BIND_ERRORS = ("BindException", "Address already in use")
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class KafkaNotInstalledError(FileNotFoundError):
    """The Kafka jars (or the Jolokia agent) are not where `make kafka` puts them."""


_KAFKA_JARS = JarCache(
    "Kafka", KAFKA_VERSION, _KAFKA_JAR, "kafka_2.13-*.jar", KAFKA_LIB_ENV, FETCH_COMMAND, KafkaNotInstalledError
)


def kafka_home(version: str = KAFKA_VERSION) -> Path:
    """The per-user cache `make kafka` fills: `lib/` (the broker's classpath) and `agent/` (Jolokia)."""
    return _KAFKA_JARS.home(version)


def kafka_lib_dir() -> Path:
    """The directory of Kafka jars: $REBALANCER_KAFKA_LIB, else `kafka_home()/lib`."""
    return _KAFKA_JARS.lib_dir()


def _jolokia_agent(lib: Path) -> Path:
    for directory in (lib.parent / "agent", lib):
        found = sorted(directory.glob("jolokia-agent-jvm-*-javaagent.jar")) if directory.is_dir() else []
        if found:
            return found[-1]
    raise KafkaNotInstalledError(
        f"no Jolokia agent (jolokia-agent-jvm-*-javaagent.jar) in {lib.parent / 'agent'} or {lib}: "
        f"run `{FETCH_COMMAND}`; KafkaCluster reads the brokers' request metrics through it"
    )


def _cluster_id() -> str:
    """A Kafka Uuid as the storage formatter wants it: 16 random bytes, URL-safe base64, no padding.

    Never one starting with "-" (1 in 64): `kafka-storage format --cluster-id -x...` reads it as an
    option and fails; Kafka's own `Uuid.randomUuid()` skips those too.
    """
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def _jolokia(port: int, requests: list[dict[str, Any]], timeout_s: float = 5.0) -> list[dict[str, Any]] | None:
    """One bulk Jolokia request; None when the agent is not reachable (the JVM is down or starting)."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/jolokia/",
        data=json.dumps(requests).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with _NO_PROXY.open(req, timeout=timeout_s) as resp:
            reply = json.load(resp)
    except (OSError, ValueError):
        return None
    return reply if isinstance(reply, list) else [reply]


@dataclass
class _Node:
    """One broker+controller JVM: its ports, directory, process and the counts of its earlier lives."""

    broker_id: int
    port: int
    controller_port: int
    jolokia_port: int
    home: Path
    process: subprocess.Popen[bytes] | None = None
    watchdog: Watchdog | None = None  # SIGKILLs the JVM's group if this process dies without close()
    # Request counts of the JVMs this node ran before (set_down): JMX counters restart at 0.
    carried: Counter[str] = field(default_factory=Counter)
    stdout_start: int = 0  # where this JVM's output begins in stdout.log (earlier lives' comes before)

    @property
    def up(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stdout_of_this_jvm(self) -> str:
        try:
            with open(self.home / "stdout.log", "rb") as out:
                out.seek(self.stdout_start)
                return out.read().decode(errors="replace")
        except OSError:
            return ""

    def logs_tail(self) -> str:
        """The end of the JVM's output and of its WARN+ log: errors quote it (close() deletes the files)."""
        return "\n".join(
            f"--- broker {self.broker_id}'s {name}, last lines ---\n{tail(self.home / name)}"
            for name in ("stdout.log", "broker.log")
        )


@dataclass
class _State:
    """What the finalizer needs to stop the JVMs; it must not reference the KafkaCluster itself."""

    root: Path
    owner_pid: int
    grace_s: float = 3.0
    nodes: dict[int, _Node] = field(default_factory=dict)
    started_pids: list[int] = field(default_factory=list)
    closed: bool = False


class BrokerStartError(RuntimeError):
    """A broker did not start; `bind_failed` when a port chosen for it was taken (start-up retries that)."""

    def __init__(self, node: _Node, message: str, bind_failed: bool) -> None:
        self.node = node
        self.bind_failed = bind_failed
        super().__init__(message)


class BrokerExitedError(BrokerStartError):
    """A broker's JVM exited while the cluster waited for it to start."""

    def __init__(self, node: _Node, returncode: int) -> None:
        bind_failed = any(marker in node.logs_tail() for marker in _BIND_ERRORS)
        super().__init__(
            node,
            f"Kafka broker {node.broker_id} exited with code {returncode} while starting"
            f"{' (a port was taken)' if bind_failed else ''}:\n{node.logs_tail()}",
            bind_failed,
        )


class JolokiaPortTakenError(BrokerStartError):
    """A broker's Jolokia port was taken: its JVM runs on, but its metrics are unreadable, or another
    process answers for it. Nothing would ever read the broker as RUNNING: fail now, not at the timeout."""

    def __init__(self, node: _Node, why: str) -> None:
        super().__init__(
            node,
            f"Kafka broker {node.broker_id}: its Jolokia port 127.0.0.1:{node.jolokia_port} was taken "
            f"({why}):\n{node.logs_tail()}",
            True,
        )


def _shutdown(state: _State) -> None:
    """close(), garbage collection and the interpreter's exit all end here (weakref.finalize)."""
    if state.closed or os.getpid() != state.owner_pid:  # a forked child must not stop its parent's JVMs
        return
    state.closed = True
    stop_jvms(list(state.nodes.values()), state.grace_s)
    shutil.rmtree(state.root, ignore_errors=True)


class KafkaCluster:
    """`brokers` real Apache Kafka brokers (ids 1..brokers), each a KRaft broker and controller, on 127.0.0.1.

    The surface follows `MockKafkaCluster`; what only a mock can do (inject errors, delay responses)
    raises NotImplementedError. Use it as a context manager, or call `close()`; the interpreter's exit
    stops the JVMs too, and a watchdog process kills them if this process dies without cleaning up.
    """

    def __init__(
        self,
        brokers: int = 3,
        *,
        heap: str = "512m",
        broker_config: Mapping[str, str | int | bool] | None = None,
        jvm_options: Sequence[str] = (),
        java: str | None = None,
        lib_dir: str | os.PathLike[str] | None = None,
        start_timeout_s: float = 120.0,
    ) -> None:
        brokers = check_brokers(brokers)  # the checks MockKafkaCluster makes too (testing/_checks.py)
        check_seconds("start_timeout_s", start_timeout_s)
        if isinstance(jvm_options, str):  # list("-Xss1m") would pass it one character at a time
            raise ValueError(f"jvm_options must be a sequence of options, not one str, got {jvm_options!r}")
        self.brokers = brokers
        self._lib = Path(lib_dir) if lib_dir is not None else kafka_lib_dir()
        self.version: str = _KAFKA_JARS.jar_version(self._lib)
        self._agent = _jolokia_agent(self._lib)
        self._java = find_java(java, "KafkaCluster")
        self._heap = heap
        self._broker_config = {k: _config_value(v) for k, v in (broker_config or {}).items()}
        self._jvm_options = list(jvm_options)
        self._start_timeout_s = start_timeout_s
        self._lock = threading.RLock()
        self._admin_client: Any = None
        self._baseline: dict[int, Counter[str]] | None = None
        self._frozen: dict[int, Counter[str]] | None = None
        self.bootstrap_servers: str = ""
        self._state = _State(root=Path(tempfile.mkdtemp(prefix="rebalancer-kafka-")), owner_pid=os.getpid())
        # Runs on close(), on garbage collection and at the interpreter's exit (finalize's own atexit hook).
        self._finalizer = weakref.finalize(self, _shutdown, self._state)
        started = time.monotonic()
        try:
            try:
                self._start()
            except BrokerStartError as exc:
                if not exc.bind_failed:
                    raise
                log.warning("a Kafka port was taken between choosing and binding it; retrying on new ports: %s",
                            str(exc).splitlines()[0])
                stop_jvms(list(self._state.nodes.values()), 0)
                self._admin_client = None
                self._start()
        except BaseException:
            self.close()
            raise
        self.startup_s: float = time.monotonic() - started
        log.info(
            "KafkaCluster: %d broker(s), Apache Kafka %s, up in %.1f s at %s (data in %s)",
            brokers, self.version, self.startup_s, self.bootstrap_servers, self._state.root,
        )

    # -- start-up ----------------------------------------------------------------------------------
    def _start(self) -> None:
        deadline = time.monotonic() + self._start_timeout_s
        n = self.brokers
        ports = free_ports(3 * n)
        nodes: dict[int, _Node] = {}
        for i in range(n):
            broker_id = i + 1
            home = self._state.root / f"broker-{broker_id}"
            shutil.rmtree(home, ignore_errors=True)
            (home / "data").mkdir(parents=True)
            nodes[broker_id] = _Node(broker_id, ports[3 * i], ports[3 * i + 1], ports[3 * i + 2], home)
        self._state.nodes = nodes
        voters = ",".join(f"{b}@127.0.0.1:{node.controller_port}" for b, node in nodes.items())
        for node in nodes.values():
            (node.home / "server.properties").write_text(self._server_properties(node, voters))
            (node.home / "log4j2.properties").write_text(log4j2_to_file("KafkaCluster", node.home / "broker.log"))
        self._format(list(nodes.values()), _cluster_id(), deadline)
        for node in nodes.values():
            self._launch(node)
        self.bootstrap_servers = ",".join(f"127.0.0.1:{node.port}" for node in nodes.values())
        self._wait_running(list(nodes.values()), deadline, f"within start_timeout_s={self._start_timeout_s:g}")

    def _server_properties(self, node: _Node, voters: str) -> str:
        n = self.brokers
        config: dict[str, str] = {
            "process.roles": "broker,controller",
            "node.id": str(node.broker_id),
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(node.home / "data"),
            "num.partitions": "1",
            "default.replication.factor": "1",
            "offsets.topic.replication.factor": str(min(3, n)),
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": str(min(3, n)),
            "transaction.state.log.min.isr": str(min(2, n)),
            "transaction.state.log.num.partitions": "10",
            "share.coordinator.state.topic.replication.factor": str(min(3, n)),
            "share.coordinator.state.topic.min.isr": str(min(2, n)),
            "group.initial.rebalance.delay.ms": "0",
            # Few threads and a small cleaner buffer: three brokers share two cores and a 512 MiB heap.
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            "num.replica.fetchers": "1",
            "num.recovery.threads.per.data.dir": "1",
            "log.cleaner.threads": "1",
            "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
            # A crashed broker is fenced (and leaves every ISR) after 6 s instead of 9 s.
            "broker.heartbeat.interval.ms": "1000",
            "broker.session.timeout.ms": "6000",
            "replica.lag.time.max.ms": "10000",
        }
        config.update(self._broker_config)
        lines = ["# Written by rebalancer.testing.KafkaCluster", *(f"{k}={v}" for k, v in config.items())]
        return "\n".join(lines) + "\n"

    def _format(self, nodes: Sequence[_Node], cluster_id: str, deadline: float) -> None:
        """Format every node's storage with one cluster id, in parallel (each is a JVM start)."""
        procs: list[tuple[_Node, subprocess.Popen[bytes]]] = []
        try:
            for node in nodes:
                with open(node.home / "format.log", "wb") as out:
                    proc = subprocess.Popen(
                        [
                            self._java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
                            "-cp", str(self._lib / "*"), "kafka.tools.StorageTool", "format",
                            "--cluster-id", cluster_id, "--config", str(node.home / "server.properties"),
                        ],
                        stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                self._state.started_pids.append(proc.pid)
                procs.append((node, proc))
            for node, proc in procs:
                try:
                    rc = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    raise TimeoutError(
                        f"formatting broker {node.broker_id}'s storage took longer than the start-up timeout:\n"
                        f"{tail(node.home / 'format.log')}"
                    ) from None
                if rc != 0:
                    raise RuntimeError(
                        f"formatting broker {node.broker_id}'s storage failed (exit {rc}):\n"
                        f"{tail(node.home / 'format.log')}"
                    )
        finally:
            for _, proc in procs:
                if proc.poll() is None:
                    signal_group(proc, signal.SIGKILL)
                    proc.wait()

    def _launch(self, node: _Node) -> None:
        """Start the node's JVM in its own session (its own process group) and its watchdog."""
        command = [
            self._java,
            f"-Xmx{self._heap}",
            # C1 only: about 20% faster start-up and no C2 compiler threads on shared cores; a test's
            # load does not need peak throughput (jvm_options "-XX:TieredStopAtLevel=4" restores it).
            "-XX:TieredStopAtLevel=1",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={node.home / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={node.home}",
            f"-javaagent:{self._agent}=host=127.0.0.1,port={node.jolokia_port},discoveryEnabled=false",
            *self._jvm_options,
            "-cp", str(self._lib / "*"),
            "kafka.Kafka", str(node.home / "server.properties"),
        ]  # fmt: skip
        with open(node.home / "stdout.log", "ab") as out:
            node.stdout_start = out.tell()
            node.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=node.home, start_new_session=True,
            )  # fmt: skip
        self._state.started_pids.append(node.process.pid)
        node.watchdog = Watchdog(
            kill_groups=[node.process.pid], what=f"Kafka broker {node.broker_id} of a KafkaCluster in {self._state.root}"
        )
        self._state.started_pids.append(node.watchdog.pid)
        log.debug("Kafka broker %d: pid %d, port %d", node.broker_id, node.process.pid, node.port)

    def _wait_running(self, nodes: Sequence[_Node], deadline: float, what: str) -> None:
        """Until each JVM says RUNNING and the cluster's metadata lists it; bounded by `deadline`."""
        pending = {node.broker_id: node for node in nodes}
        while True:
            for broker_id, node in list(pending.items()):
                assert node.process is not None
                rc = node.process.poll()
                if rc is not None:
                    raise BrokerExitedError(node, rc)
                # Before reading the port: whoever took it may accept a connection and never answer.
                if _JOLOKIA_FAILED in node.stdout_of_this_jvm():
                    raise JolokiaPortTakenError(node, "its agent could not bind it")
                if self._broker_state(node) == _RUNNING:
                    # RUNNING may come from another JVM on that port (another cluster's broker that
                    # took it first): the agent that answers must be this JVM's.
                    owner = self._read_value(node, _RUNTIME_MBEAN, "Pid")
                    if owner is not None and owner != node.process.pid:
                        raise JolokiaPortTakenError(node, f"process {owner} answers on it")
                    if owner is not None:
                        del pending[broker_id]
            if not pending and {n.broker_id for n in nodes} <= self._registered_brokers():
                self._wait_metadata_applied(deadline, what)
                return
            if time.monotonic() > deadline:
                waiting = list(pending.values()) or list(nodes)
                raise TimeoutError(
                    f"Kafka broker(s) {[n.broker_id for n in waiting]} not RUNNING and in the cluster's "
                    f"metadata {what}:\n" + "\n".join(n.logs_tail() for n in waiting)
                )
            time.sleep(0.25)

    def _broker_state(self, node: _Node) -> int | None:
        return self._read_value(node, _BROKER_STATE_MBEAN, "Value")

    def _read_value(self, node: _Node, mbean: str, attribute: str) -> int | None:
        reply = _jolokia(node.jolokia_port, [{"type": "read", "mbean": mbean, "attribute": attribute}])
        if not reply or reply[0].get("status") != 200:
            return None
        value = reply[0].get("value")
        return int(value) if isinstance(value, int | float) else None

    def _wait_metadata_applied(self, deadline: float, what: str) -> None:
        """Until every running broker has applied the metadata log up to what is committed now.

        Clients ask any broker for metadata: without this, the broker that answers may not know yet
        about a topic just created or a broker just restarted.
        """
        nodes = [n for n in self._state.nodes.values() if n.up]
        while True:
            offsets = [v for n in nodes if (v := self._read_value(n, _COMMITTED_MBEAN, "Value")) is not None]
            if offsets:
                committed = max(offsets)
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"no controller reported its committed metadata offset {what}")
            time.sleep(0.05)
        while True:
            behind = {
                n.broker_id: applied
                for n in nodes
                if (applied := self._read_value(n, _APPLIED_MBEAN, _APPLIED_ATTRIBUTE)) is None or applied < committed
            }
            if not behind:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"broker(s) {sorted(behind)} had not applied the metadata log up to offset {committed} "
                    f"{what}: {behind}"
                )
            time.sleep(0.05)

    def _registered_brokers(self) -> set[int]:
        from confluent_kafka import KafkaException  # the 'kafka' extra: loaded on use

        try:
            return set(self._admin().list_topics(timeout=5).brokers)
        except KafkaException:
            return set()

    def _admin(self) -> Any:
        if self._admin_client is None:
            from confluent_kafka.admin import AdminClient  # the 'kafka' extra: loaded on use

            # Quiet: a downed broker is expected here, and every failure surfaces as an exception.
            conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers, "log_level": 0, "logger": LibrdkafkaLog()}
            self._admin_client = AdminClient(conf)
        return self._admin_client

    # -- lifecycle ---------------------------------------------------------------------------------
    def close(self, grace_s: float = 3.0) -> None:
        """SIGTERM every broker's process group, SIGKILL after `grace_s`, delete the data; safe twice.

        A clean stop gains nothing for data that is deleted next, and the last broker of a quorum
        waits 5 s for Raft peers that are already gone: hence a short grace.
        """
        check_seconds("grace_s", grace_s, zero=True)
        with self._lock:
            self._state.grace_s = grace_s
            self._admin_client = None
            self._finalizer()

    @property
    def closed(self) -> bool:
        return self._state.closed

    def __enter__(self) -> KafkaCluster:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"bootstrap_servers={self.bootstrap_servers!r}"
        return f"KafkaCluster(brokers={self.brokers}, version={self.version!r}, {state})"

    @property
    def pids(self) -> dict[int, int]:
        """{broker_id: pid} of the JVMs running now (a downed broker is absent)."""
        return {b: n.process.pid for b, n in self._state.nodes.items() if n.process is not None and n.up}

    @property
    def started_pids(self) -> tuple[int, ...]:
        """Every process this cluster started: JVMs (all their lives), formatters and watchdogs."""
        return tuple(self._state.started_pids)

    @property
    def data_dir(self) -> Path:
        """The temporary directory with each broker's config, data and logs; `close()` removes it."""
        return self._state.root

    # -- topology ----------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._state.closed:
            raise RuntimeError("the Kafka cluster is closed")

    def _node(self, broker_id: int) -> _Node:
        self._check_open()
        return self._state.nodes[check_broker_id(broker_id, self.brokers)]

    def is_up(self, broker_id: int) -> bool:
        return self._node(broker_id).up

    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int = 1,
        config: Mapping[str, str | int | bool] | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        """Create `name` and wait until every partition has a leader; `config` e.g. {"min.insync.replicas": 2}."""
        from confluent_kafka import KafkaException  # the 'kafka' extra: loaded on use
        from confluent_kafka.admin import NewTopic  # the 'kafka' extra: loaded on use

        self._check_open()
        partitions, replication_factor = check_topic(name, partitions, replication_factor, self.brokers)
        check_seconds("timeout_s", timeout_s)
        deadline = time.monotonic() + timeout_s
        topic = NewTopic(
            name, num_partitions=partitions, replication_factor=replication_factor,
            config={k: _config_value(v) for k, v in (config or {}).items()},
        )  # fmt: skip
        future = self._admin().create_topics([topic], operation_timeout=timeout_s, request_timeout=timeout_s)[name]
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            raise ValueError(f"create_topic({name!r}) failed: {exc.args[0]}") from exc
        while True:
            leaders = self._leaders(name)
            if len(leaders) == partitions and all(b >= 0 for b in leaders.values()):
                self._wait_metadata_applied(deadline, f"after creating {name!r}")
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {name!r}: not every partition had a leader after {timeout_s} s: {leaders}")
            time.sleep(0.1)

    def _leaders(self, topic: str) -> dict[int, int]:
        from confluent_kafka import KafkaException  # the 'kafka' extra: loaded on use

        try:
            metadata = self._admin().list_topics(timeout=5)  # all topics: naming one could auto-create it
        except KafkaException:
            return {}
        t = metadata.topics.get(topic)
        if t is None or t.error is not None:
            return {}
        return {p: pm.leader for p, pm in sorted(t.partitions.items())}

    def partition_leaders(self, topic: str) -> dict[int, int]:
        """{partition: leader broker id} from the cluster's metadata (-1 while a partition has none)."""
        self._check_open()
        return self._leaders(topic)

    def wait_until_in_sync(self, timeout_s: float = 60.0) -> None:
        """Until every partition of every topic has its full replica set in sync (after set_up, say)."""
        from confluent_kafka import KafkaException  # the 'kafka' extra: loaded on use

        self._check_open()
        check_seconds("timeout_s", timeout_s)
        deadline = time.monotonic() + timeout_s
        behind: list[str] = ["(metadata not read yet)"]
        while True:
            with contextlib.suppress(KafkaException):
                metadata = self._admin().list_topics(timeout=5)
                behind = [
                    f"{name}[{p}] isr={sorted(pm.isrs)} replicas={sorted(pm.replicas)}"
                    for name, t in metadata.topics.items()
                    for p, pm in t.partitions.items()
                    if sorted(pm.isrs) != sorted(pm.replicas)
                ]
                if not behind:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"partitions still out of sync after {timeout_s} s: {behind[:10]}")
            time.sleep(0.25)

    def set_leader(self, topic: str, partition: int, broker_id: int) -> None:
        raise NotImplementedError(
            "a real Kafka cluster elects its own leaders; use MockKafkaCluster.set_leader to place one"
        )

    # -- faults ------------------------------------------------------------------------------------
    def set_down(self, broker_id: int) -> None:
        """SIGKILL broker `broker_id`'s JVM (a crash: no controlled shutdown); a no-op if it is down.

        The controller fences it after broker.session.timeout.ms (6 s here); until then the
        metadata still lists it and partitions it led have no working leader.
        """
        with self._lock:
            node = self._node(broker_id)
            if not node.up:
                return
            # The JVM's counters die with it: keep what it counted so far.
            live = self._live_counts(node)
            if live:
                node.carried.update(live)
            assert node.process is not None
            signal_group(node.process, signal.SIGKILL)
            node.process.wait()
            node.process = None
            stop_watchdog(node)
            log.info("Kafka broker %d killed (SIGKILL)", broker_id)

    def set_up(self, broker_id: int, timeout_s: float = 120.0) -> None:
        """Restart broker `broker_id` on its ports and log dirs; returns once it is RUNNING and in the metadata."""
        check_seconds("timeout_s", timeout_s)
        with self._lock:
            node = self._node(broker_id)
            if node.up:
                return
            deadline = time.monotonic() + timeout_s
            for attempt in range(3):
                self._launch(node)
                try:
                    self._wait_running([node], deadline, f"within set_up({broker_id}, timeout_s={timeout_s:g})")
                except BrokerStartError as exc:
                    stop_jvms([node], 0)
                    if exc.bind_failed and attempt < 2 and time.monotonic() < deadline:
                        log.warning("Kafka broker %d: its port is still taken; retrying", broker_id)
                        if isinstance(exc, JolokiaPortTakenError):  # only this port may change: clients know the others
                            node.jolokia_port = free_ports(1)[0]
                        else:
                            time.sleep(1.0)
                        continue
                    raise
                except BaseException:
                    stop_jvms([node], 0)
                    raise
                log.info("Kafka broker %d restarted (pid %d)", broker_id, node.process.pid if node.process else -1)
                return

    def set_rtt(self, broker_id: int, ms: int) -> None:
        raise NotImplementedError(
            "a real broker cannot delay its responses on request; use MockKafkaCluster.set_rtt for latency"
        )

    def push_request_errors(self, api_key: int, errors: Sequence[int]) -> None:
        raise NotImplementedError(
            "a real broker cannot be told to fail requests; use MockKafkaCluster.push_request_errors"
        )

    def clear_request_errors(self, api_key: int) -> None:
        raise NotImplementedError("a real broker has no injected errors; use MockKafkaCluster")

    # -- request counting (broker side) ------------------------------------------------------------
    def _live_counts(self, node: _Node) -> Counter[str] | None:
        """{request name: count} the running JVM has answered, from its RequestsPerSec meters."""
        if not node.up:
            return None
        for attempt in range(3):
            reply = _jolokia(node.jolokia_port, [{"type": "read", "mbean": _REQUESTS_MBEAN, "attribute": "Count"}])
            if reply:
                result = reply[0]
                if result.get("status") == 404:  # no request of any kind yet
                    return Counter()
                if result.get("status") == 200 and isinstance(result.get("value"), dict):
                    counts: Counter[str] = Counter()
                    for mbean, attrs in result["value"].items():
                        match = _REQUEST_TAG.search(mbean)
                        if match and isinstance(attrs, dict):
                            counts[match[1]] += int(attrs.get("Count", 0))
                    return counts
            if not node.up:
                return None
            time.sleep(0.1 * (attempt + 1))
        raise RuntimeError(
            f"could not read broker {node.broker_id}'s request metrics from Jolokia on 127.0.0.1:{node.jolokia_port}"
        )

    def _read_counts(self) -> dict[int, Counter[str]]:
        """{broker_id: every request counted since the cluster started}: earlier JVMs' counts plus this one's."""
        out: dict[int, Counter[str]] = {}
        for broker_id, node in self._state.nodes.items():
            total = Counter(node.carried)
            total.update(self._live_counts(node) or Counter())
            out[broker_id] = total
        return out

    def _settled_counts(self, request: str | None) -> dict[int, Counter[str]]:
        """Counts once two reads 100 ms apart agree (at most 2 s).

        A broker marks a request's meter just after writing its response, so a client can hold its
        ack a moment before the count moves (longer when the broker's network thread waits for a core).
        """
        deadline = time.monotonic() + 2.0
        previous = self._read_counts()
        while True:
            time.sleep(0.1)
            current = self._read_counts()
            if request in _BACKGROUND or time.monotonic() > deadline:
                return current  # the cluster's own traffic never stops: there is nothing to wait for
            if all(_watched(current[b], request) == _watched(previous[b], request) for b in current):
                return current
            previous = current

    def start_request_tracking(self) -> None:
        """Count requests from now: later reads give what the brokers answered since this call."""
        with self._lock:
            self._check_open()
            self._baseline = self._settled_counts(None)
            self._frozen = None

    def stop_request_tracking(self) -> None:
        """Freeze the counts: later reads give what the brokers answered until this call."""
        with self._lock:
            self._check_open()
            if self._baseline is not None and self._frozen is None:
                self._frozen = self._settled_counts(None)

    def clear_requests(self) -> None:
        """Forget what was counted so far (tracking, if on, goes on from now)."""
        with self._lock:
            self._check_open()
            if self._baseline is None:
                return
            self._baseline = self._settled_counts(None)
            if self._frozen is not None:
                self._frozen = self._baseline

    def _tracked(self, request: str | None) -> dict[int, Counter[str]]:
        with self._lock:
            self._check_open()
            if self._baseline is None:
                return {b: Counter() for b in self._state.nodes}
            current = self._frozen if self._frozen is not None else self._settled_counts(request)
            return {b: current[b] - self._baseline.get(b, Counter()) for b in current}

    def requests(self, api_key: int | None = None) -> dict[int, int]:
        """{broker_id: count} of tracked requests (every broker, 0s too), optionally of one ApiKey.

        Without `api_key` this includes the cluster's own traffic: followers' Fetch, heartbeats,
        Raft votes.
        """
        if api_key is None:
            return {b: sum(c.values()) for b, c in sorted(self._tracked(None).items())}
        check_api_key(api_key)  # the mock's check: 'x' and True are no ApiKey on either
        if api_key not in _API_NAMES:
            raise ValueError(f"unknown Kafka ApiKey {api_key!r} (see KAFKA_API_KEYS)")
        name = _API_NAMES[api_key]
        return {b: c[name] for b, c in sorted(self._tracked(name).items())}

    def requests_by_api_key(self) -> dict[int, int]:
        """{api_key: count} of tracked requests over all brokers (Produce 0, Fetch 1, Metadata 3...)."""
        total: Counter[int] = Counter()
        for counts in self._tracked(None).values():
            for name, count in counts.items():
                if count and name in KAFKA_API_KEYS:
                    total[KAFKA_API_KEYS[name]] += count
        return dict(sorted(total.items()))

    def request_log(self) -> list[Any]:
        raise NotImplementedError(
            "real brokers count requests but keep no per-request log; use MockKafkaCluster.request_log"
        )

    def produce_requests(self) -> dict[int, int]:
        """{broker_id: ProduceRequests the broker answered} since `start_request_tracking()`."""
        return self.requests(KAFKA_API_KEYS["Produce"])


def _watched(counts: Counter[str], request: str | None) -> Counter[str] | int:
    """What a settled read compares: one request's count, or every count but the background ones."""
    if request is not None:
        return counts[request]
    return Counter({name: n for name, n in counts.items() if name not in _BACKGROUND})


def _config_value(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
