"""The watchdog shared by KafkaCluster, LocalPostgres, StreamRun and the Pulsar harness (rebalancer._watchdog):
it cleans up after an owner that dies without doing so, even while a child the owner forked lives on
(issue 42 item 11), and does nothing once the owner has stopped it."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from process_helpers import alive, killed_owner, wait_gone
from rebalancer._watchdog import Watchdog

pytestmark = pytest.mark.timeout(180)

_OWN_A_SLEEPER = """
import os, subprocess, sys
from rebalancer._watchdog import Watchdog
ran, made = sys.argv[1], sys.argv[2]
sleeper = subprocess.Popen(["sleep", "600"], start_new_session=True)
watchdog = Watchdog(kill_groups=[sleeper.pid], commands=[["touch", ran]], remove=[made])
report = {"sleeper": sleeper.pid, "watchdog": watchdog.pid, "groups": [sleeper.pid]}
"""


def test_a_killed_owner_with_a_live_forked_child_is_cleaned_up_after(tmp_path: Path) -> None:
    ran, made = tmp_path / "ran", tmp_path / "made"
    (made / "sub").mkdir(parents=True)
    (made / "sub" / "file").write_text("x")
    (tmp_path / "kept").write_text("not named: stays")
    with killed_owner(_OWN_A_SLEEPER, str(ran), str(made)) as info:
        # Before the fix the watchdog waited on a pipe the child still held, as long as it lived.
        assert wait_gone([info["watchdog"]], timeout_s=60) == []
        assert not alive(info["sleeper"])  # killed first, then the command, then the removal
        assert ran.exists() and not made.exists()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["kept", "ran"]


def test_stop_ends_the_watchdog_without_cleaning_up(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        watchdog = Watchdog(
            kill_groups=[sleeper.pid], commands=[["touch", str(tmp_path / "ran")]], remove=[tmp_path]
        )
        watchdog.stop()
        watchdog.stop()  # twice is fine
        assert watchdog.process.returncode == -signal.SIGKILL  # killed before its pipe closed
        assert watchdog.process.stdin is not None and watchdog.process.stdin.closed
        assert sleeper.poll() is None and tmp_path.exists() and list(tmp_path.iterdir()) == []
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_fork_closes_its_copy_of_the_pipe_and_cannot_stop_its_parents_watchdog() -> None:
    """The fallback where pidfd_open is missing: a child of os.fork() holds no watchdog pipe; and a
    child calling stop() (a fork running its copy of a clean-up) leaves its parent's watchdog be."""
    watchdog = Watchdog()
    try:
        pipe = watchdog.process.stdin
        assert pipe is not None and not os.get_inheritable(pipe.fileno())  # close-on-exec
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:
            closed = pipe.closed
            watchdog.stop()
            os.write(write_end, f"{closed} {watchdog.process.returncode}".encode())
            os._exit(0)
        os.close(write_end)
        # Before: the child's copy stayed open; and stop() killed the parent's watchdog (returncode 0,
        # as Popen records a process it cannot wait for).
        assert os.read(read_end, 100) == b"True None"
        os.close(read_end)
        os.waitpid(child, 0)
        assert not pipe.closed  # the owner's own copy stays open
    finally:
        watchdog.stop()
    assert watchdog.process.returncode == -signal.SIGKILL  # still running until the owner stopped it


def test_the_watchdog_runs_apart_from_its_owner() -> None:
    """Its own session: a Ctrl-C or a hang-up to the owner's terminal group does not reach it."""
    watchdog = Watchdog()
    try:
        assert os.getpgid(watchdog.pid) == watchdog.pid != os.getpgid(0)
    finally:
        watchdog.stop()
