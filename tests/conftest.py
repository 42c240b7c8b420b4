"""Shared fixtures: one SparkSession for the whole test session, and a clean queue registry."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

# Spark's Python workers must run this interpreter (it has pyarrow); set before any session starts.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """`local[2]`, few shuffle partitions, no UI: one JVM for every Spark test."""
    from rebalancer.pipeline.session import build_session

    session = build_session(master="local[2]", app_name="rebalancer-tests", shuffle_partitions=4, ui=False)
    yield session
    session.stop()
