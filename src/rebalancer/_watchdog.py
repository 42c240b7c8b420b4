"""A watchdog process that cleans up after this process if it dies without doing so itself.

The test peers (`KafkaCluster`'s brokers, `LocalPostgres`, `StreamRun`) and the Pulsar conformance
harness start processes that must not outlive the Python process that started them (the owner),
even when it is SIGKILLed and runs no code of its own. Each such process gets a watchdog: a small
Python process in its own session that waits for the owner to exit and then, in this order, SIGKILLs
the process groups it was given, runs the commands it was given (each bounded) and removes the paths
it was given.

It watches the owner's pid through a pidfd, which becomes readable when that process exits, whatever
else holds a copy of the owner's files. A pipe alone is not enough: a child the owner had forked holds
a copy of the pipe's write end, and the pipe never closed while that child lived (issue 42 item 11).
Without pidfd_open (Linux < 5.3), the pipe on its stdin is the signal, and every child of os.fork()
closes its copy of the write end at once (subprocess's pipes are close-on-exec already).

A neutral module: `shedding` and `testing` both use it and must not import each other.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import weakref
from collections.abc import Sequence
from typing import IO

from rebalancer._pidfiles import forget, record

__all__ = ["COMMAND_TIMEOUT_S", "Watchdog"]

COMMAND_TIMEOUT_S = 120.0  # each cleanup command's bound: a hung `pg_ctl stop` must not hold the rest

_SCRIPT = """\
import json, os, select, shutil, signal, subprocess, sys
spec = json.loads(sys.argv[1])
owner = spec["owner"]
poller = select.poll()
poller.register(0, select.POLLIN)
try:
    poller.register(os.pidfd_open(owner), select.POLLIN)
except (AttributeError, OSError):
    pass
if os.getppid() == owner:  # else the owner died before the pidfd was opened: clean up now
    poller.poll()
for group in spec["groups"]:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
for command in spec["commands"]:
    try:
        subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=spec["timeout"], check=False)
    except (OSError, subprocess.SubprocessError):
        pass
for path in spec["remove"]:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass
"""

# The write ends of the live watchdogs' pipes, closed in every child os.fork() makes: a fork must
# not keep its parent's processes alive where the pipe is the only signal.
_PIPES: weakref.WeakSet[IO[bytes]] = weakref.WeakSet()


def _close_pipes_in_child() -> None:
    for pipe in list(_PIPES):
        with contextlib.suppress(OSError):
            pipe.close()
    _PIPES.clear()


os.register_at_fork(after_in_child=_close_pipes_in_child)


class Watchdog:
    """Started at once; when this process exits without `stop()`, SIGKILLs `kill_groups` (process group
    ids: start the watched process with start_new_session=True, its pid is its group's id), then runs
    each of `commands`, then removes each of `remove` (a directory with everything in it).

    `stop()` (the owner's own clean-up has run) ends the watchdog without it doing anything.

    Each of `kill_groups` also gets a pid file (`rebalancer._pidfiles`, named `what`), so that
    `rebalancer stop` can stop it while its owner lives on; `stop()` and the watchdog remove it.
    """

    def __init__(
        self,
        *,
        kill_groups: Sequence[int] = (),
        commands: Sequence[Sequence[str]] = (),
        remove: Sequence[str | os.PathLike[str]] = (),
        what: str | None = None,
    ) -> None:
        self.owner_pid = os.getpid()
        groups = [int(group) for group in kill_groups]
        self._pid_files = [entry for group in groups if (entry := record(group, what)) is not None]
        spec = {
            "owner": self.owner_pid,
            "groups": groups,
            "commands": [[str(arg) for arg in command] for command in commands],
            "remove": [*(os.fspath(path) for path in remove), *(str(entry.path) for entry in self._pid_files)],
            "timeout": COMMAND_TIMEOUT_S,
        }
        self.process: subprocess.Popen[bytes] = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _SCRIPT, json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        assert self.process.stdin is not None
        _PIPES.add(self.process.stdin)
        self._lock = threading.Lock()  # a thread that saw the process end may stop it as the owner does

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        """End the watchdog, doing nothing; safe twice. A no-op in a forked child: the watchdog is its
        parent's, and the child has no say over its parent's processes."""
        if os.getpid() != self.owner_pid:
            return
        with self._lock:
            for entry in self._pid_files:
                forget(entry)
            if self.process.returncode is not None:
                return
            # Killed before its pipe closes: a watchdog that saw the pipe close first would clean up.
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            self.process.wait()
            if self.process.stdin is not None:
                with contextlib.suppress(OSError):
                    self.process.stdin.close()
