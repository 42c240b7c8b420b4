"""Fixtures for the pipeline tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from cluster_fixtures import spark_cluster  # noqa: F401  (a standalone Spark master and two workers)
from conftest_pg import pg_connect, pg_schema  # noqa: F401  (the PostgreSQL sink's fixtures; postgres is tests/conftest.py's)
from connect_fixtures import connect_server  # noqa: F401  (a local Spark Connect server)
from kafka_fixtures import kafka_cluster, kafka_topic  # noqa: F401  (the Kafka source's mock cluster)
from pipeline_data import write_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    return write_dataset(tmp_path_factory.mktemp("telemetry") / "input")


@pytest.fixture
def conf(spark: Any) -> Iterator[Callable[[str, str], None]]:
    """Set session confs for one test; the shared session gets its old values back."""
    saved: dict[str, str | None] = {}

    def set_conf(key: str, value: str) -> None:
        saved.setdefault(key, spark.conf.get(key, None))
        spark.conf.set(key, value)

    yield set_conf
    for key, value in saved.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)
