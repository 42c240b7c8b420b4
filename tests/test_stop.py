"""Issue 46, item 7: `rebalancer stop` stops what this project started, by its pid files, and nothing
else. Real process groups: a shell and its children, started in their own session as the starters
start theirs. Each test has its own pid directory (XDG_CACHE_HOME)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from process_helpers import alive, wait_gone, wait_until
from rebalancer import _pidfiles
from rebalancer._watchdog import Watchdog

DEADLINE_S = 120
# A group of three: the shell (its leader) and two children, the second ignoring SIGTERM if asked.
GROUP = 'sleep 600 & {trap} sleep 600 & echo "$!"; wait'


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path


@pytest.fixture
def groups() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:  # whatever a failed test left
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def start_group(groups: list[subprocess.Popen[str]], ignore_term: bool = False) -> tuple[subprocess.Popen[str], int]:
    """A shell leading its own process group, and the pid of one of its children."""
    trap = "(trap '' TERM; exec sleep 600) &" if ignore_term else ""
    process = subprocess.Popen(
        ["sh", "-c", GROUP.format(trap=trap)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    groups.append(process)
    assert process.stdout is not None
    child = int(process.stdout.readline())
    return process, child


def stop(*argv: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run(
        [*prefix, sys.executable, "-m", "rebalancer.cli", "stop", *argv], capture_output=True, text=True,
        timeout=DEADLINE_S, env=env,
    )  # fmt: skip


def without_read_override() -> tuple[str, ...]:
    """A command prefix that takes away root's power to read what mode bits forbid (a user has none)."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("setpriv") is None:
        pytest.skip("root, and no setpriv to drop CAP_DAC_OVERRIDE")
    return ("setpriv", "--bounding-set", "-dac_override,-dac_read_search")


def test_stop_stops_a_recorded_group_whole_and_removes_its_file(cache, groups):
    leader, child = start_group(groups)
    entry = _pidfiles.record(leader.pid, "a test's group")
    assert entry is not None and entry.path == cache / "rebalancer" / "pids" / f"{leader.pid}.json"
    saved = json.loads(entry.path.read_text())
    assert saved["command"] == ["sh", "-c", GROUP.format(trap="")] and saved["group"] is True
    assert (saved["what"], saved["signal"]) == ("a test's group", "SIGTERM")
    listed = stop("--list")
    assert (listed.returncode, listed.stdout) == (0, f"running: a test's group (process group {leader.pid})\n")
    done = stop()
    assert (done.returncode, done.stdout, done.stderr) == (0, f"stopped: a test's group (process group {leader.pid})\n", "")
    assert leader.wait(timeout=DEADLINE_S) == -signal.SIGTERM
    assert wait_gone([child], 30) == []
    assert list(entry.path.parent.iterdir()) == []


def test_a_group_that_ignores_sigterm_is_killed_after_the_grace(cache, groups):
    leader, _ = start_group(groups, ignore_term=True)
    _pidfiles.record(leader.pid, "a stubborn group")
    done = stop("--grace", "0.5")
    assert (done.returncode, done.stdout) == (0, f"killed (still running after 0.5 s): a stubborn group (process group {leader.pid})\n")
    leader.wait(timeout=DEADLINE_S)
    assert wait_until(lambda: not _pidfiles._members(leader.pid), 30)


def test_a_reused_pid_is_left_alone_and_its_stale_file_removed(cache, groups):
    """The file names a pid that now belongs to another process (another start time): not ours."""
    leader, child = start_group(groups)
    entry = _pidfiles.record(leader.pid, "an older process with this pid")
    assert entry is not None
    saved = json.loads(entry.path.read_text())
    entry.path.write_text(json.dumps({**saved, "start": saved["start"] - 1}))
    done = stop()
    assert (done.returncode, done.stdout) == (0, (
        "removed 1 pid file of processes that had ended\n"
        f"nothing this project started was running (its pid files are in {cache}/rebalancer/pids)\n"
    ))
    assert alive(leader.pid) and alive(child)
    assert not entry.path.exists()


def test_stop_with_nothing_running_says_so_and_exits_0(cache):
    done = stop()
    assert (done.returncode, done.stdout, done.stderr) == (
        0, f"nothing this project started was running (its pid files are in {cache}/rebalancer/pids)\n", ""
    )
    assert stop("--list").stdout == f"nothing this project started is running (its pid files are in {cache}/rebalancer/pids)\n"


def test_one_process_not_its_group_when_the_group_is_not_ours(cache, groups):
    """The Spark JVM of a run is in its driver's group: only the pid is signalled."""
    leader, child = start_group(groups)
    _pidfiles.record(child, "one child", group=False)
    done = stop()
    assert done.stdout == f"stopped: one child (pid {child})\n"
    assert wait_gone([child], 30) == [] and alive(leader.pid)


def test_a_watchdogs_groups_have_pid_files_while_it_guards_them(cache, groups):
    leader, _ = start_group(groups)
    watchdog = Watchdog(kill_groups=[leader.pid], what="a guarded group")
    try:
        (entry,) = _pidfiles.recorded()
        assert (entry.pid, entry.what, entry.group) == (leader.pid, "a guarded group", True)
        assert _pidfiles.is_running(entry)
    finally:
        watchdog.stop()
    assert _pidfiles.recorded() == []
    assert alive(leader.pid)  # the owner's stop() stops the watchdog, not the group


def test_forget_spares_a_later_processs_file(cache, groups):
    first, _ = start_group(groups)
    entry = _pidfiles.record(first.pid, "first")
    assert entry is not None
    saved = json.loads(entry.path.read_text())
    entry.path.write_text(json.dumps({**saved, "start": saved["start"] + 1, "what": "a later one"}))
    _pidfiles.forget(entry)
    assert [e.what for e in _pidfiles.recorded()] == ["a later one"]
    _pidfiles.forget(first.pid)
    assert _pidfiles.recorded() == []


@pytest.mark.parametrize("unreadable", ["directory", "file"])
def test_an_unreadable_pid_directory_or_file_is_one_line_exit_1_and_nothing_stopped(cache, groups, unreadable):
    """Attack 46: with the pid directory (or a pid file) unreadable, after a `sudo make run` say,
    `stop --list` said "nothing this project started is running" and exit 0, and `stop` stopped
    nothing and said the same: the user believed nothing was left."""
    leader, child = start_group(groups)
    entry = _pidfiles.record(leader.pid, "a test's group")
    assert entry is not None
    target = entry.path.parent if unreadable == "directory" else entry.path
    target.chmod(0)
    try:
        for argv in (("--list",), ()):
            done = stop(*argv, prefix=without_read_override())
            assert (done.returncode, done.stdout) == (1, "")
            assert done.stderr == (
                f"rebalancer stop: cannot read the pid {unreadable} {target}: Permission denied; nothing was stopped\n"
            )
        assert alive(leader.pid) and alive(child)
    finally:
        target.chmod(0o700 if unreadable == "directory" else 0o600)
    assert stop().returncode == 0 and wait_gone([leader.pid, child], DEADLINE_S) == []


def test_a_group_whose_leader_exited_is_listed_and_stopped_while_a_member_runs(cache, groups):
    """Attack 46: spark-class's shell exits while the JVM it started runs on in its group. `stop`
    took the group for ended (its leader was gone), removed its file and left the JVM running."""
    group = subprocess.Popen(
        ["sh", "-c", 'sleep 600 & echo "$!"; read _'], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    groups.append(group)
    assert group.stdout is not None and group.stdin is not None
    child = int(group.stdout.readline())
    entry = _pidfiles.record(group.pid, "a group whose leader exits")
    assert entry is not None
    group.stdin.close()  # the leader's `read` ends: it exits; its child stays in its group
    group.wait(timeout=DEADLINE_S)
    assert alive(child) and os.getpgid(child) == group.pid
    listed = stop("--list")
    assert (listed.returncode, listed.stdout) == (0, f"running: a group whose leader exits (process group {group.pid})\n")
    done = stop("--grace", "30")
    assert (done.returncode, done.stdout) == (0, f"stopped: a group whose leader exits (process group {group.pid})\n")
    assert wait_gone([child], DEADLINE_S) == [] and not entry.path.exists()


def test_an_ended_group_whose_pid_now_leads_another_group_is_not_ours(cache, groups):
    """The other side of the rule above: a recorded leader's pid that now belongs to a later process
    (another start time) is not ours, even though that process leads a group of the same id."""
    leader, child = start_group(groups)
    _pidfiles.record(leader.pid, "a later group")
    path = cache / "rebalancer" / "pids" / f"{leader.pid}.json"
    saved = json.loads(path.read_text())
    path.write_text(json.dumps({**saved, "start": saved["start"] - 1}))  # an earlier process, same pid
    assert stop("--list").stdout.startswith("nothing this project started is running")
    assert alive(leader.pid) and alive(child)
