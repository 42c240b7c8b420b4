"""SparkSession construction shared by the CLI, the benchmarks and the tests."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def build_session(
    master: str | None = "local[*]",
    app_name: str = "rebalancer",
    shuffle_partitions: int | None = None,
    ui: bool = False,
) -> SparkSession:
    """A session whose Python workers run this interpreter; `master=None` defers to spark-submit."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    builder = (
        builder.config("spark.ui.enabled", "true" if ui else "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", os.environ.get("REBALANCER_DRIVER_MEMORY", "4g"))
        .config("spark.ui.showConsoleProgress", "false")
    )
    if shuffle_partitions is None and master and master.startswith("local"):
        # 200 shuffle partitions cost seconds per small aggregation on one machine; a cluster keeps its own.
        shuffle_partitions = 2 * _local_cores(master)
    if shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def _local_cores(master: str) -> int:
    """Cores of a local[N] / local[*] master."""
    inside = master[master.find("[") + 1 : master.find("]")] if "[" in master else "1"
    head = inside.split(",")[0].strip()
    if head == "*" or not head.isdigit():
        return os.cpu_count() or 1
    return max(int(head), 1)
