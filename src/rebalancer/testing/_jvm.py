"""What the real-broker test peers share: Java and jars, free loopback ports, log tails, and stopping
JVMs by process group (`KafkaCluster`'s brokers, `PulsarCluster`'s JVMs).

Each JVM runs in its own session (start_new_session=True), so its pid is its process group's id, and
a watchdog beside it (rebalancer._watchdog) kills that group if the owner dies without cleaning up.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rebalancer._watchdog import Watchdog

__all__ = ["JarCache", "JvmProcess", "cache_dir", "find_java", "free_ports", "jars", "log4j2_to_file", "signal_group", "stop_jvms", "stop_watchdog", "tail"]


class JvmProcess(Protocol):
    """A node of a cluster: its JVM (None once stopped) and the watchdog guarding it."""

    process: subprocess.Popen[bytes] | None
    watchdog: Watchdog | None


def cache_dir(name: str) -> Path:
    """Where a `make` target puts a cluster's jars: ${XDG_CACHE_HOME:-~/.cache}/rebalancer/<name>."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rebalancer" / name


def jars(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.jar")) if directory.is_dir() else []


@dataclass(frozen=True)
class JarCache:
    """A product whose jars a `make` target fetches from Maven Central into the per-user cache (`make
    kafka`, `make pulsar`): where its jars are, which version they are, and errors that say how to
    get them. The product's own jar (`main_jar`, its version in group 1) tells its directory apart."""

    product: str  # "Kafka", "Pulsar": the cache directory is its lower-case name and the version
    version: str  # the one the fetch script pins
    main_jar: re.Pattern[str]
    main_jar_name: str  # main_jar's shape with `*` for the version, for the errors
    lib_env: str  # the variable that points at another directory of these jars
    fetch_command: str
    missing: type[FileNotFoundError]

    def home(self, version: str | None = None) -> Path:
        return cache_dir(f"{self.product.lower()}-{version or self.version}")

    def lib_dir(self) -> Path:
        """$<lib_env> if set, else `home()/lib`; refused when the product's own jar is not there."""
        override = os.environ.get(self.lib_env)
        lib = Path(override) if override else self.home() / "lib"
        if not any(self.main_jar.match(p.name) for p in jars(lib)):
            raise self.missing(
                f"no Apache {self.product} jars ({self.main_jar_name}) in {lib}: run `{self.fetch_command}` "
                f"(scripts/fetch-{self.product.lower()}.sh fetches {self.product} {self.version} from Maven "
                f"Central), or set {self.lib_env} to a directory of {self.product} jars"
            )
        return lib

    def jar_version(self, lib: Path) -> str:
        """The version of the one product jar in `lib` (two versions side by side are refused)."""
        versions = sorted({m[1] for p in jars(lib) if (m := self.main_jar.match(p.name))})
        if len(versions) != 1:
            shape = self.main_jar_name.replace("*", "<version>")
            raise self.missing(f"expected one {shape} in {lib}, found {versions}")
        return versions[0]


def log4j2_to_file(writer: str, path: Path, extra: str = "") -> str:
    """A log4j2.properties sending a JVM's WARN and ERROR lines to one file, `writer` named in its
    header; `extra` adds lines (a logger turned down)."""
    return (
        f"# Written by rebalancer.testing.{writer}: the JVM's WARN and ERROR lines, to one file.\n"
        "status = warn\n"
        "appender.file.type = File\n"
        "appender.file.name = file\n"
        f"appender.file.fileName = {path}\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
        "rootLogger.level = warn\n"
        "rootLogger.appenderRef.file.ref = file\n"
        f"{extra}"
    )


def find_java(java: str | None, who: str) -> str:
    """`java` if given, else $JAVA_HOME/bin/java, else `java` on PATH; `who` names the cluster in the error."""
    if java:
        return java
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise FileNotFoundError(f"{who} needs Java 17 or newer and 'java' is not on PATH: `make java`")
    return found


def free_ports(count: int) -> list[int]:
    """`count` distinct free loopback ports: all bound at once, then released (the JVMs bind them next)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def tail(path: Path, lines: int = 25) -> str:
    """The last lines of a log, for an error message (the logs are deleted with the cluster)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(not written yet)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"


def signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)  # start_new_session: the group id is the JVM's pid


def stop_watchdog(node: JvmProcess) -> None:
    watchdog, node.watchdog = node.watchdog, None
    if watchdog is not None:
        watchdog.stop()


def stop_jvms(nodes: Sequence[JvmProcess], grace_s: float) -> None:
    """SIGTERM every node's process group, SIGKILL what is left after `grace_s`, reap everything."""
    running = [n for n in nodes if n.process is not None]
    for node in running:
        assert node.process is not None
        signal_group(node.process, signal.SIGTERM if grace_s > 0 else signal.SIGKILL)
    deadline = time.monotonic() + grace_s
    for node in running:
        assert node.process is not None
        try:
            node.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            signal_group(node.process, signal.SIGKILL)
            node.process.wait()
        signal_group(node.process, signal.SIGKILL)  # anything the JVM left in its group
        node.process = None
    for node in nodes:
        stop_watchdog(node)
