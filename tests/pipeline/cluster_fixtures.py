"""A real Spark standalone cluster for the `cluster` tests: a Master and two Workers (1 core, 1g each)
started from the pyspark wheel's `bin/spark-class` on 127.0.0.1, once per test session.

`spark-class` runs `java` as a child, so each daemon gets its own process group (`start_new_session`)
and is stopped with `os.killpg`; the teardown then checks that no process of any group is left. A
watchdog beside each group kills it if pytest dies without a teardown (SIGKILL, a timeout's exit).

The executors' Python (`worker_python`) is a virtualenv that sees the main environment's libraries
(pyspark, pandas, pyarrow, numpy) but not `rebalancer`: the job has to ship it (`--ship`).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rebalancer._watchdog import Watchdog

WORKERS = 2
# A loaded 2-core machine starts three JVMs slowly; readiness is polled, so this is only a bound.
READY_DEADLINE_S = 240.0
STOP_DEADLINE_S = 60.0
APP_DEADLINE_S = 60.0  # for the master to record a finished application


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def python_without_rebalancer(root: Path) -> Path:
    """A virtualenv whose Python imports the main environment's libraries but not `rebalancer`.

    Its one `.pth` line names a directory of links to every entry of the main site-packages except
    rebalancer's own (the package, its metadata, an editable install's hook). A plain path in a
    `.pth` file is not a site directory, so the `.pth` files inside it are not run either.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    links = root / "main-site-packages"
    links.mkdir()
    site_dirs = {Path(sysconfig.get_paths()[key]) for key in ("purelib", "platlib")}
    for site in site_dirs:
        for entry in site.iterdir():
            if entry.name.lower().startswith(("rebalancer", "__editable__")) or (links / entry.name).exists():
                continue
            (links / entry.name).symlink_to(entry)
    python = root / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    (Path(site) / "main-libraries.pth").write_text(f"{links}\n")
    return python


@dataclass
class StandaloneCluster:
    master_url: str
    ui_url: str
    worker_python: Path
    spark_home: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    watchdogs: list[Watchdog] = field(default_factory=list)
    logs: Path | None = None

    def state(self) -> dict[str, Any]:
        """The master's own JSON status page: workers, cores, applications."""
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=10) as response:
            return json.loads(response.read())

    def completed_apps(self, at_least: int, timeout: float = APP_DEADLINE_S) -> list[dict[str, Any]]:
        """The master's finished applications, once there are `at_least` of them (or at the deadline).

        A driver tells the master it is done with a one-way message as it stops, so its process may
        exit before the master has moved the application to `completedapps`.
        """
        deadline = time.monotonic() + timeout
        while True:
            apps: list[dict[str, Any]] = self.state().get("completedapps", [])
            if len(apps) >= at_least or time.monotonic() > deadline:
                return apps
            time.sleep(0.2)

    def env(self, **extra: str) -> dict[str, str]:
        """An environment for a driver on this cluster: loopback only, executors on `worker_python`."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_GATEWAY", "SPARK_"))}
        env.update(
            SPARK_HOME=str(self.spark_home),
            SPARK_LOCAL_IP="127.0.0.1",
            PYSPARK_PYTHON=str(self.worker_python),
            PYSPARK_DRIVER_PYTHON=sys.executable,
            REBALANCER_DRIVER_MEMORY="1g",
        )
        env.update(extra)
        return env

    def log_tail(self, lines: int = 40) -> str:
        if self.logs is None:
            return ""
        return "\n".join(
            f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
            for log in sorted(self.logs.glob("*.log"))
        )


def _start(cluster: StandaloneCluster, name: str, args: list[str], env: dict[str, str]) -> None:
    assert cluster.logs is not None
    log = (cluster.logs / f"{name}.log").open("wb")
    spark_class = cluster.spark_home / "bin" / "spark-class"
    process = subprocess.Popen(
        [str(spark_class), *args], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    log.close()  # the child holds its own descriptor
    cluster.processes.append(process)
    cluster.watchdogs.append(Watchdog(kill_groups=[process.pid]))


def _wait_ready(cluster: StandaloneCluster) -> None:
    """Polls the master's status page until every worker is ALIVE with its core."""
    deadline = time.monotonic() + READY_DEADLINE_S
    last: Any = None
    while time.monotonic() < deadline:
        dead = [p.args for p in cluster.processes if p.poll() is not None]
        if dead:
            raise RuntimeError(f"a cluster process exited: {dead}\n{cluster.log_tail()}")
        try:
            last = cluster.state()
        except OSError as exc:  # the master's UI is not up yet
            last = exc
        else:
            alive = [w for w in last.get("workers", []) if w.get("state") == "ALIVE"]
            if len(alive) == WORKERS and last.get("cores") == WORKERS:
                return
        time.sleep(0.5)
    raise RuntimeError(f"the cluster was not ready after {READY_DEADLINE_S:.0f} s: {last}\n{cluster.log_tail()}")


def _stop(cluster: StandaloneCluster) -> None:
    """SIGTERM to every process group, SIGKILL to what outlives the deadline, then check none is left."""
    for process in cluster.processes:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + STOP_DEADLINE_S
    for process in cluster.processes:
        try:
            process.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            pass
    for process in cluster.processes:
        _kill_group(process.pid, deadline)
        process.wait()  # reaps the leader, whose zombie would keep its group "alive"
    leftover = [process.pid for process in cluster.processes if _group_alive(process.pid)]
    for watchdog in cluster.watchdogs:
        watchdog.stop()
    assert not leftover, f"cluster process groups still running: {leftover}"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _kill_group(pgid: int, deadline: float) -> None:
    """The JVM a `spark-class` shell started may outlive it: wait for the group, then SIGKILL it."""
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _group_alive(pgid):
        os.killpg(pgid, signal.SIGKILL)
        kill_deadline = time.monotonic() + 10
        while _group_alive(pgid) and time.monotonic() < kill_deadline:
            time.sleep(0.1)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    root = tmp_path_factory.mktemp("spark-cluster")
    port, ui_port = free_port(), free_port()
    cluster = StandaloneCluster(
        master_url=f"spark://127.0.0.1:{port}",
        ui_url=f"http://127.0.0.1:{ui_port}",
        worker_python=python_without_rebalancer(root / "worker-venv"),
        spark_home=spark_home(),
        logs=root / "logs",
    )
    assert cluster.logs is not None
    cluster.logs.mkdir()
    env = cluster.env(SPARK_LOG_DIR=str(cluster.logs), SPARK_WORKER_DIR=str(root / "work"))
    try:
        _start(cluster, "master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                   "--port", str(port), "--webui-port", str(ui_port)], env)
        for index in range(WORKERS):
            _start(cluster, f"worker-{index}", [
                "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                "--webui-port", str(free_port()), "--work-dir", str(root / f"work-{index}"), cluster.master_url,
            ], env)
        _wait_ready(cluster)
        yield cluster
    finally:
        _stop(cluster)
