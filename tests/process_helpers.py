"""Helpers for tests of what outlives a process: is a pid alive, wait (bounded) until pids are gone,
and run an owner that forks a child and is SIGKILLed.

A module, not a conftest: test files in any package import it (`from process_helpers import ...`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["FORK_A_SLEEPING_CHILD", "alive", "killed_owner", "wait_gone", "wait_until"]

# Appended to an owner's script: a forked child, alive and idle, holding a copy of everything the
# owner had open (what kept a watchdog's pipe open, issue 42 item 11). `report` is printed with it.
FORK_A_SLEEPING_CHILD = """
import json as _json, os as _os, time as _time
_child = _os.fork()
if _child == 0:
    _time.sleep(600)
    _os._exit(0)
print(_json.dumps({**report, "child": _child}), flush=True)
_time.sleep(600)
"""


def alive(pid: int) -> bool:
    """A process exists and is not a zombie (an orphan reaped late by PID 1 still answers kill 0)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    """The pids still alive after at most `timeout_s`: [] as soon as all are gone."""
    deadline = time.monotonic() + timeout_s
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def wait_until(condition: Any, timeout_s: float) -> bool:
    """Whether `condition()` became true within `timeout_s` (polled; returns as soon as it is)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@contextlib.contextmanager
def killed_owner(script: str, *args: str, env: dict[str, str] | None = None) -> Iterator[dict[str, Any]]:
    """Run `script` + FORK_A_SLEEPING_CHILD as a Python process (the owner); `script` sets `report`
    (a dict) once what it owns runs. The owner is SIGKILLed while its forked child lives, and the
    report (with "child", the child's pid) is yielded. On exit, whatever the outcome, the child is
    killed, and so are report["pids"] and the process groups in report["groups"], and report["dirs"]
    are removed: nothing of the test runs on."""
    proc = subprocess.Popen(
        [sys.executable, "-c", script + FORK_A_SLEEPING_CHILD, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    info: dict[str, Any] = {}
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            proc.wait()
            raise AssertionError(
                f"the owner exited ({proc.returncode}) before reporting: {proc.stderr.read() if proc.stderr else ''}"
            )
        info = json.loads(line)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert alive(info["child"])  # the fork outlives its parent, holding copies of its files
        yield info
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if info.get("child"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(info["child"], signal.SIGKILL)
        for pid in info.get("pids", []):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for group in info.get("groups", []):
            with contextlib.suppress(OSError):
                os.killpg(group, signal.SIGKILL)
        for path in info.get("dirs", []):
            shutil.rmtree(path, ignore_errors=True)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
