"""One `?group=` run at a time per output: an exclusive claim held from planning to the offset commit.

Kafka's offset commit is not conditional, and the output is outside Kafka: two overlapping runs of
one group both start at the same committed offsets, both write batch `N` (the sum of those offsets),
and the one that commits last sets the group, backward if it read less (issue 42, item 5). Fencing
at the broker (a transactional id, static membership) cannot help: it stops the older run's commit,
not its write, which may land after the newer run's and replace a longer batch with a shorter one.
So the claim covers the whole run, outputs included: `flock` on `OUT/_kafka_group.lock`. The kernel
drops it when its holder dies, SIGKILL included, so there is no stale marker to clear; a second run
is refused in one line naming the group, with the holder's group, pid and host. For an output on a
Hadoop filesystem (hdfs://, s3a://, ...) the lock file is in the local temporary directory, keyed by
the output's URI: it serialises the runs of this machine only (docs/pipeline.md).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import inspect
import json
import os
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from rebalancer._secrets import masked_url
from rebalancer.pipeline.kafka.telemetry import group_source
from rebalancer.pipeline.outputs.manifest import GROUP_LOCK as LOCK_NAME
from rebalancer.pipeline.paths import local_path

__all__ = [ "GroupBusyError", "claim_output", "group_claim", "lock_path", "one_group_run_per_output"
]

P = ParamSpec("P")
R = TypeVar("R")

_REMOTE_LOCKS = "rebalancer-kafka-group"


class GroupBusyError(ValueError):
    """Another `?group=` run holds the output: a mistake the user fixes by waiting (CLI: exit 2)."""


@dataclass
class _Held:
    thread: int
    fd: int
    depth: int = 1


# The claims this process holds, by lock file: the thread that took one may take it again (`run`
# around `run_batch`); any other open of the file, another thread's included, meets the flock.
_held: dict[str, _Held] = {}
_registry = threading.Lock()


def _forget_in_child() -> None:
    """A forked child closes its copies of the lock files: the claim is its parent's, and a child that
    outlives a SIGKILLed parent must not keep it (the flock lasts while any copy is open)."""
    global _registry
    for held in _held.values():
        try:
            os.close(held.fd)
        except OSError:
            pass
    _held.clear()
    _registry = threading.Lock()  # the parent's may have been held by another thread at the fork


os.register_at_fork(after_in_child=_forget_in_child)


def lock_path(out: str | Path) -> Path:
    """Where the claim of `out` lives: in it, or (a remote output) in the local temporary directory."""
    local = local_path(out)
    if local is not None:
        return local / LOCK_NAME
    digest = hashlib.sha256(str(out).encode()).hexdigest()[:32]
    return Path(tempfile.gettempdir()) / _REMOTE_LOCKS / f"{digest}.lock"


def _holder(fd: int) -> str:
    """` (group 'g', pid 12 on host)` from the holder's note, or empty while it is being written."""
    try:
        note = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f" (group {note['group']!r}, pid {note['pid']} on {note['host']})"
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def _lock(path: Path, out: str | Path, group: str) -> int:
    """The lock file, opened, flocked and noted with this holder; GroupBusyError if another holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            shown = masked_url(out) if isinstance(out, str) else str(out)
            raise GroupBusyError(
                f"group {group!r}: another run is writing to {shown}{_holder(fd)}; one output takes one "
                f"group run at a time: run this one again once it has finished"
            ) from None
        note = json.dumps({"group": group, "pid": os.getpid(), "host": socket.gethostname()})
        os.ftruncate(fd, 0)
        os.pwrite(fd, note.encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def claim_output(out: str | Path, group: str) -> Iterator[None]:
    """Hold `out` for a run of `group`, or raise GroupBusyError at once if another run holds it.

    The lock file is never removed: a run that opened it just before would lock an unlinked inode
    while the next one created a new file, and both would hold "the" claim. Its note is cleared on
    release, so a refusal never names a holder that has gone."""
    path = lock_path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = os.path.realpath(path)
    with _registry:
        held = _held.get(key)
        if held is not None and held.thread == threading.get_ident():
            held.depth += 1
        else:
            held = _held[key] = _Held(threading.get_ident(), _lock(path, out, group))
    try:
        yield
    finally:
        with _registry:
            held.depth -= 1
            if held.depth == 0 and _held.get(key) is held:
                del _held[key]
                try:
                    os.ftruncate(held.fd, 0)
                finally:
                    os.close(held.fd)  # the flock goes with the last open copy of the file


def group_claim(source: object, out: str | Path) -> AbstractContextManager[None]:
    """The claim of `out` for a `kafka://…?group=NAME` input (a URL or a parsed `KafkaInput`);
    nothing for any other input, or for an output that is a file or no location (the run's own
    checks refuse those)."""
    read = group_source(source)
    if read is None:
        return nullcontext()
    try:
        local = local_path(out)
    except ValueError:
        return nullcontext()  # not a location (a file: URI naming a host): the run's checks say so, naming it
    if local is not None and local.exists() and not local.is_dir():
        return nullcontext()
    return claim_output(out, read[0])


def one_group_run_per_output(
    where: Callable[[Mapping[str, Any]], tuple[object, str | Path]],
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a run so that it holds its output's claim throughout, taken before anything else:
    `where(arguments)` is (its input, its output), from its arguments by name."""

    def decorate(func: Callable[P, R]) -> Callable[P, R]:
        signature = inspect.signature(func)

        @functools.wraps(func)
        def claimed(*args: P.args, **kwargs: P.kwargs) -> R:
            source, out = where(signature.bind(*args, **kwargs).arguments)
            with group_claim(source, out):
                return func(*args, **kwargs)

        return claimed

    return decorate
