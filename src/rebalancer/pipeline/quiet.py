"""Spark's and the JVM's startup output, silenced unless asked for (`rebalancer -v` shows it).

Three sources: log4j (Spark's and Hadoop's WARN lines and the "default log4j profile" banner), which
the shipped log4j2.properties sets to errors only; the hostname-resolves-to-loopback warning, which
SPARK_LOCAL_IP=127.0.0.1 avoids for a local master; and the JVM's own "Using incubator modules"
line, which no JVM flag turns off, so the JVM's stderr is filtered for that one line.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOG4J2_PROPERTIES = Path(__file__).with_name("log4j2.properties")
# Lines the JVM prints to stderr before log4j starts; everything else it writes is passed through.
JVM_NOISE = (b"WARNING: Using incubator modules",)


def quiet_java_options() -> str:
    """Driver JVM options that point log4j at the shipped configuration."""
    return f"-Dlog4j2.configurationFile={LOG4J2_PROPERTIES.as_uri()}"


@contextmanager
def jvm_stderr_filtered() -> Iterator[None]:
    """While the JVM starts, fd 2 is a pipe; the JVM keeps it as its stderr for life, so a daemon
    thread forwards each line to the real stderr except the JVM_NOISE ones, until the JVM exits."""
    sys.stderr.flush()
    real = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    threading.Thread(target=_forward, args=(read_end, real), name="jvm-stderr", daemon=True).start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(real, 2)  # this process writes to the terminal again; the JVM keeps the pipe


def _forward(read_end: int, real: int) -> None:
    with os.fdopen(read_end, "rb") as lines:
        for line in lines:
            if not line.startswith(JVM_NOISE):
                os.write(real, line)
    os.close(real)
