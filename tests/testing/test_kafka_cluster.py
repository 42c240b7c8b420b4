"""KafkaCluster: real Apache Kafka brokers; requests counted by the brokers; crashes and restarts; no leaks."""

from __future__ import annotations

import http.server
import itertools
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from process_helpers import alive, killed_owner, wait_gone
from rebalancer.testing import KafkaCluster, kafka_cluster
from rebalancer.testing.kafka_cluster import KAFKA_API_KEYS, KAFKA_VERSION, KafkaNotInstalledError

pytestmark = pytest.mark.kafka_real

ROOT = Path(__file__).resolve().parents[2]
_topic_ids = itertools.count()


def new_topic_name(prefix: str) -> str:
    return f"{prefix}-{next(_topic_ids)}"


class Deliveries:
    """Delivery reports of a confluent-kafka Producer: every error is kept, so a test can assert none."""

    def __init__(self) -> None:
        self.ok = 0
        self.errors: list[str] = []

    def __call__(self, err, msg) -> None:
        if err is None:
            self.ok += 1
        else:
            self.errors.append(str(err))


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout_s: float = 60) -> tuple[list[bytes], int]:
    """Every value in `topic` from the start of each partition (until `expected` or the deadline), and
    the sum of the partitions' high watermarks: what the brokers hold."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader", "enable.auto.commit": False, "log_level": 0}
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while len(values) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error() is None:
                    values.append(msg.value())
        held = sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions))
        return values, held
    finally:
        consumer.close()


# -- the cluster itself ----------------------------------------------------------------------------
def test_the_pom_pins_the_version_the_python_side_runs(kafka_real_cluster: KafkaCluster):
    pom = (ROOT / "jvm" / "kafka" / "pom.xml").read_text()
    (pinned,) = re.findall(r"<kafka\.version>([^<]+)</kafka\.version>", pom)
    assert pinned == KAFKA_VERSION == kafka_real_cluster.version
    assert re.fullmatch(r"4\.\d+\.\d+", kafka_real_cluster.version)


def test_bootstrap_servers_list_every_broker_on_loopback(kafka_real_cluster: KafkaCluster):
    servers = kafka_real_cluster.bootstrap_servers.split(",")
    assert len(servers) == 3
    assert all(re.fullmatch(r"127\.0\.0\.1:\d+", s) for s in servers)
    assert len(set(servers)) == 3
    assert kafka_real_cluster.bootstrap_servers in repr(kafka_real_cluster)
    assert "brokers=3" in repr(kafka_real_cluster)
    metadata = AdminClient({"bootstrap.servers": servers[0]}).list_topics(timeout=10)
    assert sorted(metadata.brokers) == [1, 2, 3]
    assert sorted(f"{b.host}:{b.port}" for b in metadata.brokers.values()) == sorted(servers)


def test_arguments_are_checked_before_any_jvm_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    with pytest.raises(ValueError, match=r"^brokers must be an int in 1\.\.100, got 0 \(int\)$"):
        KafkaCluster(brokers=0)
    monkeypatch.setenv("REBALANCER_KAFKA_LIB", str(tmp_path))
    with pytest.raises(KafkaNotInstalledError, match="run `make kafka`"):
        KafkaCluster(brokers=1)


def test_arguments_and_mock_only_features(kafka_real_cluster: KafkaCluster):
    with pytest.raises(ValueError, match=r"^partitions must be an int in 1\.\.9999, got 0 \(int\)$"):
        kafka_real_cluster.create_topic("zero", partitions=0)
    with pytest.raises(ValueError, match=r"^replication_factor must be an int in 1\.\.3, got 4 \(int\)$"):
        kafka_real_cluster.create_topic("rf4", partitions=1, replication_factor=4)
    with pytest.raises(ValueError, match=r"broker_id must be in 1\.\.3, got 7"):
        kafka_real_cluster.set_down(7)
    with pytest.raises(NotImplementedError, match="MockKafkaCluster"):
        kafka_real_cluster.set_rtt(1, 100)
    with pytest.raises(NotImplementedError, match="MockKafkaCluster"):
        kafka_real_cluster.push_request_errors(KAFKA_API_KEYS["Produce"], [47])
    with pytest.raises(NotImplementedError, match="MockKafkaCluster"):
        kafka_real_cluster.request_log()
    with pytest.raises(NotImplementedError, match="MockKafkaCluster"):
        kafka_real_cluster.set_leader("t", 0, 1)


def test_create_topic_waits_until_every_partition_has_a_leader(kafka_real_cluster: KafkaCluster):
    topic = new_topic_name("sixty")
    kafka_real_cluster.create_topic(topic, partitions=60, replication_factor=3)
    leaders = kafka_real_cluster.partition_leaders(topic)
    assert sorted(leaders) == list(range(60))
    assert set(leaders.values()) == {1, 2, 3}  # spread over every broker
    with pytest.raises(ValueError, match="already exists"):
        kafka_real_cluster.create_topic(topic, partitions=60, replication_factor=3)
    # Seen from another client too: three replicas each.
    metadata = AdminClient({"bootstrap.servers": kafka_real_cluster.bootstrap_servers}).list_topics(timeout=10)
    partitions = metadata.topics[topic].partitions
    assert len(partitions) == 60
    assert all(sorted(p.replicas) == [1, 2, 3] and p.leader in (1, 2, 3) for p in partitions.values())


def test_produce_requests_are_counted_by_the_leader_broker(kafka_real_cluster: KafkaCluster):
    cluster = kafka_real_cluster
    topic = new_topic_name("counted")
    cluster.create_topic(topic, partitions=1, replication_factor=3)  # followers replicate by Fetch, not Produce
    (leader,) = cluster.partition_leaders(topic).values()
    deliveries = Deliveries()
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 0, "log_level": 0}
    )
    producer.produce(topic, b"warm-up", on_delivery=deliveries)  # metadata and connections first
    assert producer.flush(30) == 0
    cluster.start_request_tracking()
    n = 25
    for i in range(n):
        producer.produce(topic, f"m{i}".encode(), on_delivery=deliveries)
        assert producer.flush(30) == 0  # one message per flush: one ProduceRequest each
    assert deliveries.errors == [] and deliveries.ok == n + 1
    expected = {b: (n if b == leader else 0) for b in (1, 2, 3)}
    assert cluster.produce_requests() == expected
    assert cluster.requests(KAFKA_API_KEYS["Produce"]) == expected
    assert cluster.requests_by_api_key()[KAFKA_API_KEYS["Produce"]] == n
    assert cluster.requests()[leader] >= n  # every kind: Metadata, followers' Fetch...
    # Stopped: later requests are not counted; cleared: nothing is.
    cluster.stop_request_tracking()
    producer.produce(topic, b"after-stop", on_delivery=deliveries)
    assert producer.flush(30) == 0
    assert cluster.produce_requests() == expected
    cluster.clear_requests()
    assert cluster.produce_requests() == {1: 0, 2: 0, 3: 0}
    cluster.start_request_tracking()
    assert cluster.produce_requests() == {1: 0, 2: 0, 3: 0}


def test_a_crashed_broker_loses_no_acknowledged_data_and_rejoins(kafka_real_cluster: KafkaCluster):
    cluster = kafka_real_cluster
    topic = new_topic_name("crash")
    partitions = 6
    cluster.create_topic(topic, partitions, replication_factor=3, config={"min.insync.replicas": 2})
    victim = cluster.partition_leaders(topic)[0]  # leads partition 0: its leadership has to move
    deliveries = Deliveries()
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,  # retries after the crash must not duplicate
            "linger.ms": 5,
            "message.timeout.ms": 90_000,
            "log_level": 0,
        }
    )
    sent = itertools.count()

    def send(count: int, partition: int | None = None) -> None:
        for _ in range(count):
            i = next(sent)
            producer.produce(topic, str(i).encode(), partition=i % partitions if partition is None else partition,
                             on_delivery=deliveries)
        assert producer.flush(90) == 0

    send(300)
    cluster.start_request_tracking()
    for _ in range(5):  # five ProduceRequests to the victim, counted by the JVM about to be killed
        send(1, partition=0)
    old_pid = cluster.pids[victim]
    cluster.set_down(victim)
    assert not cluster.is_up(victim) and victim not in cluster.pids and not alive(old_pid)
    send(300)  # acks=all with min.insync.replicas=2: two brokers are enough once the victim is fenced
    cluster.set_up(victim)
    assert cluster.is_up(victim) and cluster.pids[victim] != old_pid
    metadata = AdminClient({"bootstrap.servers": cluster.bootstrap_servers}).list_topics(timeout=10)
    assert sorted(metadata.brokers) == [1, 2, 3]
    send(300)
    cluster.wait_until_in_sync(timeout_s=60)  # the restarted broker caught up on every partition
    total = next(sent)
    assert deliveries.errors == [] and deliveries.ok == total
    values, held = consume_all(cluster.bootstrap_servers, topic, partitions, total)
    assert sorted(int(v) for v in values) == list(range(total))  # every message, exactly once
    assert held == total
    # The victim's counts survived its restart (the killed JVM's 5 are kept as an offset).
    assert cluster.produce_requests()[victim] >= 5


# -- nothing left running --------------------------------------------------------------------------
def test_close_stops_every_process_it_started():
    cluster = KafkaCluster(brokers=1)
    data_dir = cluster.data_dir
    pids = list(cluster.started_pids)
    assert len(pids) >= 3  # the formatter, the JVM and its watchdog
    assert all(alive(p) for p in cluster.pids.values())
    cluster.close()
    cluster.close()  # twice is fine
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not data_dir.exists()
    assert "closed" in repr(cluster)
    with pytest.raises(RuntimeError, match="closed"):
        cluster.create_topic("t", partitions=1)


_START_AND_REPORT = """
import json, sys, time
from rebalancer.testing import KafkaCluster
cluster = KafkaCluster(brokers=1)
print(json.dumps({"pids": list(cluster.started_pids), "jvms": list(cluster.pids.values()),
                  "dir": str(cluster.data_dir)}), flush=True)
if sys.argv[1] == "sleep":
    time.sleep(600)
"""


def test_interpreter_exit_without_close_stops_the_brokers():
    proc = subprocess.run(
        [sys.executable, "-c", _START_AND_REPORT, "exit"], capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout.splitlines()[-1])
    assert info["jvms"] and set(info["jvms"]) <= set(info["pids"])
    for pid in info["pids"]:  # the exiting interpreter stopped and reaped them all
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not Path(info["dir"]).exists()


def test_a_killed_interpreter_leaves_no_broker_behind():
    # SIGKILL runs no Python code at all: the watchdog beside each JVM sees its pipe close and kills the group.
    proc = subprocess.Popen(
        [sys.executable, "-c", _START_AND_REPORT, "sleep"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        info = json.loads(line)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    try:
        assert wait_gone(info["pids"], timeout_s=15) == []
    finally:
        shutil.rmtree(info["dir"], ignore_errors=True)  # nothing ran to remove it


# -- issue 42 item 11: a forked child must not keep a SIGKILLed owner's brokers alive -----------------
# The watchdog's own tests (the pipe closed in forks, stop() in a fork) are tests/test_watchdog.py.
_START_AND_REPORT_FORKING = """
from rebalancer.testing import KafkaCluster
cluster = KafkaCluster(brokers=1)
report = {"pids": list(cluster.started_pids), "groups": list(cluster.pids.values()), "dirs": [str(cluster.data_dir)]}
"""


def test_a_killed_owner_with_a_live_forked_child_leaves_no_broker_behind():
    with killed_owner(_START_AND_REPORT_FORKING) as info:
        # Before the fix the JVM ran on as long as the child did; a process exit is given a generous bound.
        assert wait_gone(info["pids"], timeout_s=60) == []


# -- issue 42 item 10: a port taken between choosing and binding, Jolokia's included ----------------
def occupy_jolokia_port(monkeypatch: pytest.MonkeyPatch, port: int) -> list[list[int]]:
    """The port chooser, injected: its first choice gives broker 1's Jolokia agent `port`."""
    chosen: list[list[int]] = []
    choose = kafka_cluster.free_ports

    def chooser(count: int) -> list[int]:
        ports = choose(count)
        if not chosen:
            ports[2] = port  # broker 1: listener, controller, Jolokia
        chosen.append(ports)
        return ports

    monkeypatch.setattr(kafka_cluster, "free_ports", chooser)
    return chosen


class _FakeJolokia(http.server.BaseHTTPRequestHandler):
    """Another process's Jolokia on the port: it answers every read with 3, i.e. RUNNING (and pid 3)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps([{"status": 200, "value": 3}]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("holder", ["a silent socket", "another Jolokia"])
def test_a_taken_jolokia_port_is_retried_on_new_ports(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, holder: str
):
    if holder == "a silent socket":  # accepts connections, never answers
        server: Any = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
    else:  # answers as a RUNNING broker would: before the fix, the start could take it for its own
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeJolokia)
        port = server.server_address[1]
        threading.Thread(target=server.serve_forever, daemon=True).start()
    chosen = occupy_jolokia_port(monkeypatch, port)
    try:
        with caplog.at_level(logging.WARNING, logger=kafka_cluster.__name__):
            cluster = KafkaCluster(brokers=1)
        try:
            retries = [r.getMessage() for r in caplog.records if "retrying on new ports" in r.getMessage()]
            assert len(retries) == 1 and f"Jolokia port 127.0.0.1:{port} was taken (" in retries[0]
            assert len(chosen) == 2 and port not in chosen[1]
            node = cluster._state.nodes[1]
            assert node.jolokia_port == chosen[1][2]
            # Counted by this JVM's own agent: it answers with this JVM's pid.
            assert cluster._read_value(node, "java.lang:type=Runtime", "Pid") == cluster.pids[1]
            topic = new_topic_name("after-retry")
            cluster.create_topic(topic, partitions=1)
            assert cluster.partition_leaders(topic) == {0: 1}
        finally:
            cluster.close()
    finally:
        if isinstance(server, socket.socket):
            server.close()
        else:
            server.shutdown()
            server.server_close()
