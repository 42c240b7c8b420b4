"""LocalPostgres does not outlive the process that started it (issue 42 item 11's pattern, found in the
PostgreSQL test peer): a SIGKILLed owner, even with a forked child alive, leaves no server running and
only the files that were there before; a failed start stops what it started; the CLI's `postgres start`
(detached) runs on until `postgres stop`."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from process_helpers import alive, killed_owner, wait_gone
from rebalancer import _pidfiles
from rebalancer.testing.postgres import LocalPostgres

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(240)]

_START = """
import sys
from pathlib import Path
from rebalancer.testing.postgres import LocalPostgres
server = LocalPostgres(Path(sys.argv[1]), fast=True)
server.start()
postmaster = int((server.data_dir / "postmaster.pid").read_text().split()[0])
report = {"postmaster": postmaster, "watchdog": server._watchdog.pid, "groups": [postmaster]}
"""


@pytest.fixture
def parent() -> Iterator[Path]:
    """A directory in /tmp that the postgres user can pass through (o+x), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="rebalancer-pg-", dir="/tmp"))
    path.chmod(0o711)
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)  # the server's files belong to its user


def postmaster_of(server: LocalPostgres) -> int:
    return int((server.data_dir / "postmaster.pid").read_text().split()[0])


def test_a_killed_owner_with_a_live_forked_child_leaves_no_server_and_removes_the_directory_it_made(
    parent: Path,
) -> None:
    directory = parent / "pg"  # start() makes it: the watchdog removes all of it
    with killed_owner(_START, str(directory)) as info:
        assert alive(info["postmaster"])
        # Before the fix nothing watched the owner: the server ran on. A process exit gets a generous bound.
        assert wait_gone([info["watchdog"]], timeout_s=120) == []
        assert not alive(info["postmaster"])
        assert sorted(p.name for p in parent.iterdir()) == []


def test_a_killed_owner_leaves_a_directory_it_did_not_make_with_only_what_was_there(parent: Path) -> None:
    (parent / "notes.txt").write_text("the caller's, not the server's")
    with killed_owner(_START, str(parent)) as info:
        assert wait_gone([info["watchdog"]], timeout_s=120) == []
        assert not alive(info["postmaster"])
        assert sorted(p.name for p in parent.iterdir()) == ["notes.txt"]  # data, sink-url, server.log removed


def test_a_killed_owner_of_an_existing_cluster_stops_it_and_deletes_nothing(parent: Path) -> None:
    first = LocalPostgres(parent, fast=True)
    first.start()
    first.stop()
    before = sorted(p.name for p in parent.iterdir())
    assert before == ["data", "server.log", "sink-url"]
    with killed_owner(_START, str(parent)) as info:
        assert wait_gone([info["watchdog"]], timeout_s=120) == []
        assert not alive(info["postmaster"])
        assert sorted(p.name for p in parent.iterdir()) == before
        assert not (parent / "data" / "postmaster.pid").exists()


def test_a_start_that_fails_after_the_server_started_stops_it(
    parent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = LocalPostgres(parent, fast=True)
    started: list[int] = []

    def fail() -> None:
        started.append(postmaster_of(server))
        raise RuntimeError("no database for you")

    monkeypatch.setattr(server, "_create_database", fail)
    with pytest.raises(RuntimeError, match=r"^no database for you$"):
        server.start()
    assert len(started) == 1
    assert not (server.data_dir / "postmaster.pid").exists()  # pg_ctl stop -w returned: it is down
    assert wait_gone(started, timeout_s=60) == []
    assert server._watchdog is None


def test_the_cli_start_runs_on_after_the_command_until_the_cli_stop(parent: Path) -> None:
    cli = [sys.executable, "-m", "rebalancer.cli", "pipeline", "postgres"]
    started = subprocess.run([*cli, "start", "--dir", str(parent)], capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr
    server = LocalPostgres(parent)
    postmaster = postmaster_of(server)
    try:
        import psycopg

        url = (parent / "sink-url").read_text().strip()
        with psycopg.connect(url, connect_timeout=30) as conn:  # the command has exited; the server answers
            assert conn.execute("SELECT 1").fetchone() == (1,)
        stopped = subprocess.run([*cli, "stop", "--dir", str(parent)], capture_output=True, text=True, timeout=120)
        assert (stopped.returncode, stopped.stdout) == (0, f"stopped the PostgreSQL server in {parent}\n")
        assert not (server.data_dir / "postmaster.pid").exists()
    finally:
        server.stop()
    assert wait_gone([postmaster], timeout_s=60) == []


def test_detach_starts_no_watchdog(parent: Path) -> None:
    server = LocalPostgres(parent, fast=True)
    try:
        server.start(detach=True)
        assert server._watchdog is None
    finally:
        server.stop()


def test_a_detached_server_has_a_pid_file_and_rebalancer_stop_stops_it(
    parent: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 46, item 7: `rebalancer stop`, not `pkill`, stops the server `postgres start` left
    running: a fast shutdown (SIGINT to the postmaster), after which its pid file is gone."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # the pid files of this test alone
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    cli = [sys.executable, "-m", "rebalancer.cli"]
    started = subprocess.run([*cli, "pipeline", "postgres", "start", "--dir", str(parent)],
                             capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert started.returncode == 0, started.stderr
    server = LocalPostgres(parent)
    postmaster = postmaster_of(server)
    try:
        (entry,) = _pidfiles.recorded()
        assert (entry.pid, entry.group, entry.signal) == (postmaster, False, "SIGINT")
        assert entry.what.startswith(f"PostgreSQL in {parent} on 127.0.0.1:")
        stopped = subprocess.run([*cli, "stop"], capture_output=True, text=True, timeout=120, env=env)
        assert (stopped.returncode, stopped.stdout) == (0, f"stopped: {entry.what} (pid {postmaster})\n")
        assert wait_gone([postmaster], timeout_s=60) == []
        assert not (server.data_dir / "postmaster.pid").exists()  # a clean shutdown removes it
        assert _pidfiles.recorded() == []
    finally:
        server.stop()


def test_postgres_stop_removes_the_servers_pid_file(parent: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    server = LocalPostgres(parent, fast=True)
    try:
        server.start()
        assert [entry.pid for entry in _pidfiles.recorded()] == [postmaster_of(server)]
    finally:
        server.stop()
    assert _pidfiles.recorded() == []
