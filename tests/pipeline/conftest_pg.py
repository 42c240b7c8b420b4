"""A private PostgreSQL server for the sink tests: started once on 127.0.0.1, stopped at the end.

Loaded by tests/pipeline/conftest.py. Under root the server runs as the `postgres` user; its
directory is made in /tmp (which that user can reach), not under pytest's root-only temp tree.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rebalancer.testing.postgres import LocalPostgres

_schemas = itertools.count()


@pytest.fixture(scope="session")
def postgres() -> Iterator[LocalPostgres]:
    directory = Path(tempfile.mkdtemp(prefix="rebalancer-pg-", dir="/tmp"))
    server = LocalPostgres(directory, fast=True)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def pg_schema(postgres: LocalPostgres) -> str:
    """A schema name no other test uses, so tests never see each other's tables."""
    return f"test_{next(_schemas)}"


@pytest.fixture
def pg_connect(postgres: LocalPostgres) -> Iterator[object]:
    import psycopg

    with psycopg.connect(postgres.url, autocommit=True) as conn:
        yield conn
