"""A Spark Connect server from the pyspark wheel, on loopback, for the tests that run through it.

`bin/spark-submit --class ...SparkConnectServer` with the wheel's `jars/spark-connect_*.jar` (what
`sbin/start-connect-server.sh --wait` runs), on 127.0.0.1 and a free port. `spark-submit` runs
`java` as a child, so the server is started in its own session and stopped with `os.killpg`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cluster_fixtures import _group_alive, _kill_group, free_port, spark_home

from rebalancer._watchdog import Watchdog

# A JVM that compiles Spark on a loaded 2-core machine: minutes, not seconds, in the worst case.
START_DEADLINE_S = 420.0
STOP_GRACE_S = 30.0


@dataclass(frozen=True)
class ConnectServer:
    url: str
    log: Path


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def _log_tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    home = spark_home()
    jars = sorted((home / "jars").glob("spark-connect_*.jar"))
    assert jars, f"the pyspark wheel has no spark-connect jar in {home / 'jars'}"
    workdir = tmp_path_factory.mktemp("connect-server")  # no stray module shadows the stdlib for workers
    log = workdir / "server.log"
    port = free_port()
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "PYSPARK_PYTHON": sys.executable,  # the server's Python workers need pandas, pyarrow, rebalancer
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(workdir),
    }
    for inherited in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "PYSPARK_GATEWAY_PORT"):
        env.pop(inherited, None)
    command = [
        str(home / "bin" / "spark-submit"),
        "--class",
        "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master",
        "local[2]",
        "--conf",
        "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf",
        f"spark.connect.grpc.binding.port={port}",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.shuffle.partitions=4",
        "--conf",
        "spark.driver.memory=1g",
        "--jars",
        str(jars[-1]),
        "spark-internal",
    ]
    with log.open("wb") as out:
        server = subprocess.Popen(
            command, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    watchdog = Watchdog(kill_groups=[server.pid])  # if pytest dies without this teardown
    try:
        deadline = time.monotonic() + START_DEADLINE_S
        while not _accepts(port):
            if server.poll() is not None:
                pytest.fail(f"the Spark Connect server exited with {server.returncode}:\n{_log_tail(log)}")
            if time.monotonic() > deadline:
                pytest.fail(f"no Spark Connect server on port {port} after {START_DEADLINE_S:.0f} s:\n{_log_tail(log)}")
            time.sleep(0.5)
        yield ConnectServer(url=f"sc://127.0.0.1:{port}", log=log)
    finally:
        try:
            _stop(server)
        finally:
            watchdog.stop()


def _stop(server: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's whole process group (spark-submit, its JVM, the JVM's Python workers),
    SIGKILL to whatever outlives the grace period; then nothing of the group may be left."""
    try:
        os.killpg(server.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_GRACE_S
    try:
        server.wait(timeout=STOP_GRACE_S)  # reaps the leader, whose zombie would keep the group "alive"
    except subprocess.TimeoutExpired:
        pass
    _kill_group(server.pid, deadline)
    server.wait()
    assert not _group_alive(server.pid), f"Spark Connect server processes still running (group {server.pid})"
