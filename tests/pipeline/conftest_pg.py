"""The PostgreSQL sink tests' fixtures over the session's server (`postgres`, in tests/conftest.py,
which the docs' blocks share). Loaded by tests/pipeline/conftest.py."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from rebalancer.testing.postgres import LocalPostgres

_schemas = itertools.count()


@pytest.fixture
def pg_schema(postgres: LocalPostgres) -> str:
    """A schema name no other test uses, so tests never see each other's tables."""
    return f"test_{next(_schemas)}"


@pytest.fixture
def pg_connect(postgres: LocalPostgres) -> Iterator[object]:
    import psycopg

    with psycopg.connect(postgres.url, autocommit=True) as conn:
        yield conn
