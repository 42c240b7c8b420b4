"""LocalPostgres: a port it chose, taken before the server bound it, is retried once on a new port
(issue 42 item 10's pattern, found in the PostgreSQL test peer); a port the caller gave is not."""

from __future__ import annotations

import logging
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rebalancer.testing import postgres
from rebalancer.testing.postgres import URL_FILE, LocalPostgres

pytestmark = pytest.mark.postgres


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port held by a listening socket for the whole test."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(8)
        yield holder.getsockname()[1]


@pytest.fixture
def directory() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="rebalancer-pg-", dir="/tmp"))  # reachable by the postgres user
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_chosen_port_taken_before_the_server_binds_it_is_retried(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, taken_port: int, directory: Path
) -> None:
    choose = postgres.free_port
    choices = [taken_port]
    monkeypatch.setattr(postgres, "free_port", lambda: choices.pop() if choices else choose())
    server = LocalPostgres(directory, fast=True)
    assert server.port == taken_port
    try:
        with caplog.at_level(logging.WARNING, logger=postgres.__name__):
            server.start()
        assert server.port != taken_port
        assert [r.getMessage() for r in caplog.records] == [
            f"PostgreSQL: port {taken_port} was taken between choosing and binding it; retrying on a new port"
        ]
        assert f"@127.0.0.1:{server.port}/" in (directory / URL_FILE).read_text()
        import psycopg

        with psycopg.connect(server.url, connect_timeout=30) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        server.stop()


def test_a_given_port_that_is_taken_is_not_replaced(taken_port: int, directory: Path) -> None:
    server = LocalPostgres(directory, port=taken_port, fast=True)
    try:
        with pytest.raises(RuntimeError, match=r"^pg_ctl failed: "):
            server.start()
        assert server.port == taken_port
    finally:
        server.stop()
