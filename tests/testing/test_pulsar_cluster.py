"""PulsarCluster: a real Apache Pulsar cluster; its admin API, a 16-bundle namespace, messages in and out
through the pulsar-client wheel, a crashed broker and its return, memory, and nothing left running.

Every test shares the session's `pulsar_cluster` (three JVMs take about a minute to start); the one
that closes it is marked to run last."""

from __future__ import annotations

import itertools
import json
import os
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import pulsar
from process_helpers import alive, wait_gone, wait_until
from rebalancer.shedding.model import ShedderConfig
from rebalancer.testing import PulsarCluster
from rebalancer.testing.pulsar_cluster import (
    CLUSTER_NAME,
    LOAD_MANAGER,
    PULSAR_VERSION,
    PulsarNotInstalledError,
)

pytestmark = pytest.mark.pulsar_real

ROOT = Path(__file__).resolve().parents[2]
_names = itertools.count()
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def admin_get(base_url: str, path: str) -> Any:
    """GET on the admin REST API, independently of the cluster's own helpers."""
    with _NO_PROXY.open(f"{base_url}{path}", timeout=30) as response:
        return json.load(response)


def admin_put(url: str) -> int:
    """PUT on the admin API, following its 307s (urllib follows none for a PUT): the final status."""
    for _ in range(5):
        try:
            with _NO_PROXY.open(urllib.request.Request(url, method="PUT"), timeout=60) as response:
                return response.status
        except urllib.error.HTTPError as err:
            with err:
                if err.code != 307:
                    return err.code
                url = err.headers["Location"]
    raise AssertionError(f"more than 5 redirects from {url}")


def owner_of(cluster: PulsarCluster, topic: str) -> str:
    """The broker id owning `topic`'s bundle (a lookup assigns one if it has none)."""
    return str(admin_get(cluster.admin_url, f"/lookup/v2/topic/{topic}")["httpUrl"]).removeprefix("http://")


def new_namespace(prefix: str) -> str:
    return f"{prefix}-tenant/{prefix}-{next(_names)}"


# -- arguments, before any JVM -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"brokers": 0}, r"brokers must be an int in 1\.\.100, got 0 \(int\)"),
        ({"shedding_enabled": "no"}, r"shedding_enabled must be True or False, got 'no'"),
        ({"shedding_grace_period_minutes": -1}, r"shedding_grace_period_minutes must be an int in 0\.\.1000000, got -1 \(int\)"),
        ({"nic_speed_gbps": 0}, r"nic_speed_gbps must be a number > 0 and at most 10000, got 0 \(int\)"),
        ({"heap": "lots"}, r"heap must be a JVM heap size such as '384m' or '1g', got 'lots'"),
        ({"jvm_options": "-Xss1m"}, r"jvm_options must be a sequence of str options, not one str, got '-Xss1m'"),
        ({"broker_config": {"webServicePort": 1}}, r"broker_config may not set 'webServicePort': the cluster sets it"),
        (
            {"broker_config": {"loadBalancerSheddingEnabled": True}},
            r"broker_config may not set 'loadBalancerSheddingEnabled': pass shedding_enabled=",
        ),
        ({"broker_config": {"numIOThreads": "1\nx=2"}}, r"broker_config\['numIOThreads'\] must be a str, int, finite float or bool on one line"),
        ({"start_timeout_s": float("nan")}, r"start_timeout_s must be a number of seconds > 0 and at most 86400, got nan \(float\)"),
    ],
)
def test_bad_arguments_are_refused_before_any_jvm_starts(kwargs: dict[str, Any], message: str):
    with pytest.raises(ValueError, match=f"^{message}"):
        PulsarCluster(**kwargs)


def test_missing_jars_say_how_to_fetch_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("REBALANCER_PULSAR_LIB", str(tmp_path))
    with pytest.raises(PulsarNotInstalledError, match=r"no Apache Pulsar jars .* run `make pulsar`"):
        PulsarCluster(brokers=1)


# -- the cluster ---------------------------------------------------------------------------------------
def test_the_pom_pins_the_version_the_python_side_runs(pulsar_cluster: PulsarCluster):
    pom = (ROOT / "jvm" / "pulsar" / "pom.xml").read_text()
    (pinned,) = re.findall(r"<pulsar\.version>([^<]+)</pulsar\.version>", pom)
    conformance = (ROOT / "conformance" / "pulsar" / "pom.xml").read_text()
    assert re.findall(r"<pulsar\.version>([^<]+)</pulsar\.version>", conformance) == [pinned]
    assert pinned == PULSAR_VERSION == pulsar_cluster.version


def test_the_admin_api_lists_every_broker_on_loopback(pulsar_cluster: PulsarCluster):
    brokers = pulsar_cluster.brokers
    assert len(brokers) == 2 and all(re.fullmatch(r"127\.0\.0\.1:\d+", b) for b in brokers)
    assert pulsar_cluster.admin_url == f"http://{brokers[0]}"
    assert re.fullmatch(r"pulsar://127\.0\.0\.1:\d+,127\.0\.0\.1:\d+", pulsar_cluster.service_url)
    for broker in brokers:  # every broker sees every broker
        assert sorted(admin_get(f"http://{broker}", f"/admin/v2/brokers/{CLUSTER_NAME}")) == sorted(brokers)
    assert pulsar_cluster.active_brokers() == sorted(brokers)
    assert admin_get(pulsar_cluster.admin_url, "/admin/v2/clusters") == [CLUSTER_NAME]
    leader = admin_get(pulsar_cluster.admin_url, "/admin/v2/brokers/leaderBroker")
    assert leader["brokerId"] in brokers
    assert "admin_url='http://127.0.0.1:" in repr(pulsar_cluster)


def test_the_brokers_run_the_modular_load_manager_without_its_own_shedding(pulsar_cluster: PulsarCluster):
    for broker in pulsar_cluster.brokers:
        config = admin_get(f"http://{broker}", "/admin/v2/brokers/configuration/runtime")
        assert config["loadManagerClassName"] == LOAD_MANAGER
        assert config["loadBalancerSheddingEnabled"] == "false"
        assert config["loadBalancerSheddingGracePeriodMinutes"] == "30"
        report = admin_get(f"http://{broker}", "/admin/v2/broker-stats/load-report")
        assert report["webServiceUrl"] == f"http://{broker}"
        assert report["bandwidthIn"]["limit"] > 0
    settings = ShedderConfig.from_broker_conf(pulsar_cluster.broker_conf_path(1))
    assert settings.shedding_grace_period_minutes == 30


def test_create_namespace_makes_16_bundles_over_the_whole_hash_range(pulsar_cluster: PulsarCluster):
    name = new_namespace("bundles")
    assert pulsar_cluster.create_namespace(name) == name
    tenant = name.split("/")[0]
    assert name in admin_get(pulsar_cluster.admin_url, f"/admin/v2/namespaces/{tenant}")
    bundles = admin_get(pulsar_cluster.admin_url, f"/admin/v2/namespaces/{name}/bundles")
    assert bundles["numBundles"] == 16
    boundaries = [int(b, 16) for b in bundles["boundaries"]]
    assert len(boundaries) == 17 and boundaries[0] == 0 and boundaries[-1] == 0xFFFFFFFF
    assert boundaries == sorted(set(boundaries))
    with pytest.raises(ValueError, match=f"^namespace '{name}' already exists$"):
        pulsar_cluster.create_namespace(name)
    with pytest.raises(ValueError, match=r"^name must be 'tenant/namespace', .* got 'no-tenant'$"):
        pulsar_cluster.create_namespace("no-tenant")
    with pytest.raises(ValueError, match=r"^bundles must be an int in 1\.\.1024, got 0 \(int\)$"):
        pulsar_cluster.create_namespace(new_namespace("zero"), bundles=0)


def produce_and_consume(service_url: str, topic: str, count: int) -> list[bytes]:
    """`count` messages sent (every send acknowledged by the broker), then every one received."""
    client = pulsar.Client(
        service_url, operation_timeout_seconds=60, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
    )
    try:
        consumer = client.subscribe(topic, "reader", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        results: list[Any] = []
        for i in range(count):
            producer.send_async(f"m-{i}".encode(), lambda result, _id: results.append(result))
        producer.flush()
        assert results == [pulsar.Result.Ok] * count
        received = []
        for _ in range(count):
            message = consumer.receive(timeout_millis=60_000)
            consumer.acknowledge(message)
            received.append(message.data())
        return received
    finally:
        client.close()  # before the cluster: a client outliving its brokers retries for its whole timeout


def test_messages_go_in_and_out_through_the_service_url(pulsar_cluster: PulsarCluster):
    name = pulsar_cluster.create_namespace(new_namespace("traffic"))
    received = produce_and_consume(pulsar_cluster.service_url, f"persistent://{name}/events", 500)
    assert received == [f"m-{i}".encode() for i in range(500)]
    # The topic's bundle now has an owner, one of the brokers.
    lookup = admin_get(pulsar_cluster.admin_url, f"/lookup/v2/topic/persistent/{name}/events")
    assert lookup["httpUrl"] in {f"http://{b}" for b in pulsar_cluster.brokers}


def test_load_reports_show_traffic_and_unload_moves_a_bundle_to_the_broker_asked(pulsar_cluster: PulsarCluster):
    """What a live shedder reads and does: a broker's load report counts its messages, and the admin
    API's unload with destinationBroker hands a bundle to that broker."""
    name = pulsar_cluster.create_namespace(new_namespace("shedding"))
    topic = f"persistent/{name}/hot"
    client = pulsar.Client(pulsar_cluster.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        producer = client.create_producer(f"persistent://{name}/hot")
        owner = owner_of(pulsar_cluster, topic)

        def reported_rate() -> float:
            for _ in range(200):
                producer.send_async(b"x" * 100, None)
            producer.flush()
            try:
                report = admin_get(f"http://{owner}", "/admin/v2/broker-stats/load-report")
            except OSError:  # a slow answer on a loaded machine: ask again
                return 0.0
            return float(report["msgRateIn"])

        # Rates are the broker's stats, refreshed every 2 s (statsUpdateFrequencyInSecs): a loaded
        # machine is given far longer.
        assert wait_until(lambda: reported_rate() > 0, timeout_s=120)
        bundle = _NO_PROXY.open(f"{pulsar_cluster.admin_url}/lookup/v2/topic/{topic}/bundle", timeout=30).read().decode()
        assert re.fullmatch(r"0x[0-9a-f]{8}_0x[0-9a-f]{8}", bundle)
        other = next(b for b in pulsar_cluster.brokers if b != owner)
        for via in pulsar_cluster.brokers:  # the leader or not, the owner or not: both are redirected
            target = other if owner_of(pulsar_cluster, topic) == owner else owner
            url = f"http://{via}/admin/v2/namespaces/{name}/{bundle}/unload?destinationBroker={target}"
            assert admin_put(url) == 204

            seen: list[str] = []

            def moved(target: str = target, seen: list[str] = seen) -> bool:
                try:
                    seen.append(owner_of(pulsar_cluster, topic))
                except OSError as err:  # a lookup during the hand-over may fail: ask again
                    seen.append(f"{type(err).__name__}: {err}")
                return seen[-1] == target

            # Once owned, a bundle stays where it is: a wrong owner never turns right.
            assert wait_until(moved, timeout_s=60), f"{bundle} via {via} to {target}: owners seen {seen[-5:]}"
        producer.send(b"after the moves")  # the producer follows its bundle
    finally:
        client.close()


def test_a_killed_broker_leaves_the_admin_api_and_comes_back(pulsar_cluster: PulsarCluster):
    victim, survivor = pulsar_cluster.brokers[1], pulsar_cluster.brokers[0]
    old_pid = pulsar_cluster.pids["broker-1"]
    pulsar_cluster.set_down(1)
    assert not alive(old_pid) and "broker-1" not in pulsar_cluster.pids
    assert not pulsar_cluster.is_up(1) and pulsar_cluster.is_up(0)
    # Listed until its metadata session expires (10 s): a generous bound for a loaded machine.
    assert wait_until(lambda: pulsar_cluster.active_brokers() == [survivor], timeout_s=120)
    pulsar_cluster.set_down(1)  # a no-op when down
    pulsar_cluster.set_up(1)
    assert pulsar_cluster.pids["broker-1"] != old_pid
    assert pulsar_cluster.active_brokers() == sorted([survivor, victim])
    assert sorted(admin_get(f"http://{victim}", f"/admin/v2/brokers/{CLUSTER_NAME}")) == sorted([survivor, victim])
    # Both follow one leader, one of them: its load manager places bundles (an unload's destination too).
    leaders = {admin_get(f"http://{b}", "/admin/v2/brokers/leaderBroker")["serviceUrl"] for b in (survivor, victim)}
    assert len(leaders) == 1 and leaders <= {f"http://{survivor}", f"http://{victim}"}
    name = pulsar_cluster.create_namespace(new_namespace("after-restart"))
    assert produce_and_consume(pulsar_cluster.service_url, f"persistent://{name}/t", 50) == [
        f"m-{i}".encode() for i in range(50)
    ]
    with pytest.raises(ValueError, match=r"^index must be an int in 0\.\.1, got 2 \(int\)$"):
        pulsar_cluster.set_down(2)


def test_every_jvm_has_a_watchdog_for_its_process_group(pulsar_cluster: PulsarCluster):
    """A SIGKILLed owner runs no code: each JVM's watchdog (tests/test_watchdog.py) kills its group."""
    guarded: list[int] = []
    for pid in pulsar_cluster.started_pids:
        if not alive(pid):
            continue
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if b"-c" in argv and argv[-2:][0].startswith(b"{"):
            spec = json.loads(argv[-2])
            assert spec["owner"] == os.getpid()
            guarded.extend(spec["groups"])
    assert sorted(guarded) == sorted(pulsar_cluster.pids.values())
    assert len(guarded) == 3


def test_the_whole_cluster_stays_within_3_gb_of_memory(pulsar_cluster: PulsarCluster):
    assert set(pulsar_cluster.pids) == {"metadata", "broker-0", "broker-1"}
    rss = pulsar_cluster.rss_bytes()
    assert 0 < rss <= 3 * 1024**3, f"{rss / 2**20:.0f} MiB"


@pytest.mark.closes_pulsar_cluster
def test_close_stops_every_process_it_started(pulsar_cluster: PulsarCluster):
    data_dir = pulsar_cluster.data_dir
    pids = list(pulsar_cluster.started_pids)
    assert len(pids) >= 6  # three JVMs and their watchdogs
    pulsar_cluster.close()
    pulsar_cluster.close()  # twice is fine
    assert wait_gone(pids, timeout_s=0) == []  # close() reaped them all
    assert not data_dir.exists()
    assert repr(pulsar_cluster) == f"PulsarCluster(brokers=2, version='{PULSAR_VERSION}', closed)"
    with pytest.raises(RuntimeError, match=r"^the Pulsar cluster is closed$"):
        pulsar_cluster.create_namespace("t/n")
