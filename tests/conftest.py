"""Shared fixtures: one SparkSession, one librdkafka mock cluster, one real Kafka cluster, one real
Pulsar cluster and one PostgreSQL server for the whole test session, and `any_kafka_cluster`, which
runs a test on each of the two Kafka peers."""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from rebalancer.testing import KafkaCluster, MockKafkaCluster, PulsarCluster
    from rebalancer.testing.postgres import LocalPostgres

log = logging.getLogger(__name__)

# Spark's Python workers must run this interpreter (it has pyarrow); set before any session starts.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# `import readline` (pytest loads it) writes the terminal's COLUMNS into the C environment, which
# every subprocess inherits though os.environ never held it: the command would wrap its error lines
# at 80 columns in a test's pipe as on a terminal. Only a COLUMNS the user set is kept.
if "COLUMNS" not in os.environ:
    os.unsetenv("COLUMNS")
# Every JVM the tests start through spark-submit (the session's, each CLI run's, each docs block's)
# lives seconds, not hours: C1 alone compiles what it runs for about a third less CPU than C1 then
# C2, the suite's main cost on two cores. Spark's launcher adds SPARK_SUBMIT_OPTS to the JVM's
# command line without printing it. A user's own setting is kept.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")


@pytest.fixture(autouse=True)
def restore_logger_levels() -> Iterator[None]:
    """`cli.main` sets logger levels for its process (aiokafka's off without -v); a test that calls it
    in-process must not change what a later test's `caplog` sees."""
    names = ("", "rebalancer", "py4j", "aiokafka")
    levels = {name: logging.getLogger(name).level for name in names}
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """`local[2]`, few shuffle partitions, no UI: one JVM for every Spark test."""
    from rebalancer.pipeline.session.build import build_session

    session = build_session(master="local[2]", app_name="rebalancer-tests", shuffle_partitions=4, ui=False)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator[LocalPostgres]:
    """A private PostgreSQL server on 127.0.0.1, for the sink's tests and the docs' blocks. Under root
    it runs as `postgres`: its directory is made in /tmp, which that user can reach, not under
    pytest's root-only temporary tree."""
    from rebalancer.testing.postgres import LocalPostgres

    directory = Path(tempfile.mkdtemp(prefix="rebalancer-pg-", dir="/tmp"))
    server = LocalPostgres(directory, fast=True)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


# -- Kafka: one mock and one real cluster per session, and a test parametrized over both --------------
_kafka_startups: list[str] = []
_kafka_topic_ids = itertools.count()


@pytest.fixture(scope="session")
def kafka_mock_cluster() -> Iterator[MockKafkaCluster]:
    """librdkafka's mock brokers (3), in this process: starts in milliseconds."""
    from rebalancer.testing import MockKafkaCluster

    mock = MockKafkaCluster(brokers=3)
    try:
        yield mock
    finally:
        mock.close()


@pytest.fixture(scope="session")
def kafka_real_cluster() -> Iterator[KafkaCluster]:
    """Three real Apache Kafka brokers (KRaft, loopback). Three JVMs cost about 10 s: started once,
    and only when a test asks for them (`-m "not kafka_real"` never does)."""
    from rebalancer.testing import KafkaCluster

    load = os.getloadavg()[0]
    cluster = KafkaCluster(brokers=3)
    line = (
        f"KafkaCluster: 3 brokers (Apache Kafka {cluster.version}) started in {cluster.startup_s:.1f} s "
        f"(1-minute load average {load:.1f} on {os.cpu_count()} cores)"
    )
    log.info(line)
    _kafka_startups.append(line)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(
    params=[
        pytest.param("mock", marks=pytest.mark.kafka),
        pytest.param("real", marks=pytest.mark.kafka_real),
    ],
    ids=["mock", "real"],
)
def any_kafka_cluster(request: pytest.FixtureRequest) -> MockKafkaCluster | KafkaCluster:
    """The session's mock cluster, then the session's real one: a Kafka contract runs on both.

    Where they disagree, the real cluster is right. Real-only assertions check
    `isinstance(cluster, KafkaCluster)`.
    """
    name = "kafka_mock_cluster" if request.param == "mock" else "kafka_real_cluster"
    cluster: MockKafkaCluster | KafkaCluster = request.getfixturevalue(name)
    return cluster


@pytest.fixture
def any_kafka_topic(any_kafka_cluster: MockKafkaCluster | KafkaCluster) -> Callable[..., str]:
    """make(partitions, replication_factor=1, min_insync_replicas=None) -> a new topic's name on
    `any_kafka_cluster`. Durable tests ask for RF 3 with min.insync.replicas 2."""

    from kafka_helpers import create_topic

    def make(partitions: int, replication_factor: int = 1, min_insync_replicas: int | None = None) -> str:
        name = f"contract-{next(_kafka_topic_ids)}"
        create_topic(any_kafka_cluster, name, partitions, replication_factor, min_insync_replicas)
        return name

    return make


# -- Pulsar: one real cluster per session ------------------------------------------------------------
_pulsar_startups: list[str] = []


@pytest.fixture(scope="session")
def pulsar_cluster() -> Iterator[PulsarCluster]:
    """A real Apache Pulsar cluster (loopback): ZooKeeper and a bookie in one JVM, two broker JVMs.
    Three JVMs cost about a minute on two cores: started once, and only when a test asks for them
    (`-m "not pulsar_real"` never does). A test marked `closes_pulsar_cluster` runs last."""
    from rebalancer.testing import PulsarCluster

    load = os.getloadavg()[0]
    cluster = PulsarCluster(brokers=2)
    line = (
        f"PulsarCluster: 2 brokers (Apache Pulsar {cluster.version}) started in {cluster.start_seconds:.1f} s, "
        f"{cluster.rss_bytes() / 2**20:.0f} MiB resident (1-minute load average {load:.1f} on {os.cpu_count()} cores)"
    )
    log.info(line)
    _pulsar_startups.append(line)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="session")
def pulsar_harness() -> Iterator[object]:
    """One JVM for the whole session: the Pulsar conformance harness (conformance/pulsar), for
    tests/conformance and the live watch's tests. `make test` builds it first (`make
    pulsar-conformance`); run alone, it is built with Maven if its sources changed. Without a JDK or
    Maven the tests fail, naming what is missing; deselect them with `-m "not pulsar"`."""
    from pulsar_conformance import HarnessUnavailable, PulsarHarness

    try:
        harness = PulsarHarness()
    except HarnessUnavailable as err:
        pytest.fail(f"the Pulsar conformance harness is unavailable: {err}", pytrace=False)
    # The ports log every sole-bundle warning Pulsar logs; thousands of snapshots make that noise.
    logging.getLogger("rebalancer.shedding").setLevel(logging.ERROR)
    yield harness
    harness.close()


# -- two workers (`make test` runs `pytest -n 2 --dist loadgroup`) ------------------------------------
# Fixtures that start a server beside the test process: every test that uses one runs on one worker,
# so each server starts once. The in-process ones (`spark`, `kafka_mock_cluster`) start on each
# worker that needs them.
SERVER_FIXTURES = frozenset(
    {"postgres", "kafka_real_cluster", "pulsar_cluster", "pulsar_harness", "spark_cluster", "connect_server"}
)
# The marks of a test that asks for one of them at run time (`any_kafka_cluster`'s real side, a docs
# block's `needs:`), which its fixture names do not show.
SERVER_MARKS = frozenset({"kafka_real", "pulsar", "pulsar_real", "postgres", "cluster", "connect"})
SERVERS_GROUP = "servers"


def worker_unit(item: pytest.Item) -> tuple[str, bool]:
    """The unit a test runs in on one worker, and whether the test itself needs a server. A module
    is one unit (its module fixtures run once); a document's blocks are one (they run in reading
    order, in one directory)."""
    needs_server = bool(SERVER_FIXTURES & set(getattr(item, "fixturenames", ()))) or any(
        mark.name in SERVER_MARKS for mark in item.iter_markers()
    )
    block = item.callspec.params.get("block") if hasattr(item, "callspec") else None
    if block is not None and hasattr(block, "doc"):
        return f"docs:{block.doc.name}", needs_server
    return item.nodeid.split("::", 1)[0], needs_server


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that closes the session's Pulsar cluster runs after every other test (a stable sort).
    Each test is marked with its worker unit before pytest-xdist reads the marks; every unit that
    has a test needing a server joins one group, so each server starts once."""
    items.sort(key=lambda item: item.get_closest_marker("closes_pulsar_cluster") is not None)
    units = [worker_unit(item) for item in items]
    with_servers = {unit for unit, needs_server in units if needs_server}
    for item, (unit, _) in zip(items, units, strict=True):
        item.add_marker(pytest.mark.xdist_group(SERVERS_GROUP if unit in with_servers else unit))


_servers_started: list[str] = []  # the server fixtures this process set up


class ServerSetups:
    """Records each server fixture's setup. A plugin, not a conftest hook: pytest asks a session
    fixture's setup hooks of the session's node, which sees no conftest below the rootdir."""

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef[object]) -> Iterator[object]:
        result = yield
        if fixturedef.argname in SERVER_FIXTURES:
            _servers_started.append(fixturedef.argname)
        return result


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(ServerSetups(), "rebalancer-server-setups")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On a worker: hand the servers it started and their start-up lines to the controller. On the
    controller: a server that started on two workers fails the run, naming it; the grouping above
    is what keeps each to one, and nothing else would show that it had stopped working."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["startups"] = [*_kafka_startups, *_pulsar_startups]
        workeroutput["servers"] = list(_servers_started)
        workeroutput["worker"] = session.config.workerinput["workerid"]  # type: ignore[attr-defined]
        return
    twice = sorted(name for name, workers in _servers_by_worker.items() if len(workers) > 1)
    if twice:
        _workers_startups.append(
            f"ERROR: started on more than one worker: {', '.join(twice)} (the grouping in tests/conftest.py "
            "did not hold; is pytest-xdist's loadgroup working with this pytest?)"
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """pytest-xdist's hook, on the controller: a worker's start-up lines and servers."""
    output = getattr(node, "workeroutput", {})
    _workers_startups.extend(output.get("startups", []))
    worker = output.get("worker", "?")
    for name in output.get("servers", []):
        _servers_by_worker.setdefault(name, set()).add(worker)


_workers_startups: list[str] = []
_servers_by_worker: dict[str, set[str]] = {}


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in [*_kafka_startups, *_pulsar_startups, *_workers_startups]:
        terminalreporter.write_line(line)
