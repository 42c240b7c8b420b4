"""Issue 46, item 7: the JVM a local session starts has a pid file (`rebalancer stop` finds a stuck
run's JVM by it, where `pkill -f pyspark` would hit every user's Spark); this process's exit removes it."""

from __future__ import annotations

import os

from pyspark import SparkContext

from rebalancer import _pidfiles


def test_the_sessions_jvm_is_recorded_as_one_process_of_this_drivers_group(spark) -> None:
    jvm = SparkContext._gateway.proc.pid  # type: ignore[union-attr]
    (entry,) = [entry for entry in _pidfiles.recorded() if entry.pid == jvm]
    assert (entry.what, entry.group, entry.signal) == (
        f"Spark's JVM for rebalancer-tests (driver pid {os.getpid()})", False, "SIGTERM"
    )
    assert entry.command[0].endswith("java") and _pidfiles.is_running(entry)
