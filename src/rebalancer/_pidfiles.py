"""Pid files for the processes this project starts and leaves running, so that `rebalancer stop`
stops exactly those: never another user's Spark or Kafka, as `pkill -f pyspark` would.

Where: `${XDG_CACHE_HOME:-~/.cache}/rebalancer/pids/` (beside the Kafka jars `make kafka` caches),
one JSON file per process, `<pid>.json`, holding:

- `pid`, and `group`: whether the whole process group is ours (a process started with
  `start_new_session=True` leads its own group, whose id is its pid);
- `signal`: the one that stops it cleanly (PostgreSQL's fast shutdown is SIGINT);
- `what` it is, and its `command` line when it was recorded (for the report);
- its identity: `boot` (the kernel's boot id) and `start` (its start time in clock ticks since boot,
  from /proc/PID/stat). A pid is given to another process once this one has exited; the pair (boot,
  start) never is. The command line is no identity: `spark-class` execs java, PostgreSQL retitles.

Who writes them: `rebalancer._watchdog.Watchdog`, for each process group it guards (Kafka brokers,
a stream run, the harnesses' JVMs), `LocalPostgres` for its server, and the pipeline for the JVM
of a local SparkSession. Each removes its file once it has stopped the process; a file whose
process is gone is stale, and `stop_recorded` removes it. Linux only (/proc); elsewhere nothing is
recorded and nothing is stopped.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from rebalancer._secrets import masked_argument

__all__ = ["STOP_GRACE_S", "Recorded", "forget", "is_running", "pid_dir", "record", "recorded", "running", "stop_recorded"]

log = logging.getLogger(__name__)

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
STOP_GRACE_S = 10.0  # a JVM's shutdown hooks, a PostgreSQL checkpoint: then SIGKILL


def pid_dir() -> Path:
    """The one directory every pid file of this user's is in."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "rebalancer" / "pids"


@dataclass(frozen=True)
class Recorded:
    """One pid file's content (`path`: the file)."""

    pid: int
    group: bool
    signal: str
    what: str
    command: tuple[str, ...]
    boot: str
    start: int
    path: Path

    def shown(self) -> str:
        """`what (process group N)`, as the report names it."""
        return f"{self.what} ({'process group' if self.group else 'pid'} {self.pid})"


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state first), or None if there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _start_time(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[19]) if fields is not None else None  # field 22, starttime


def _boot_id() -> str:
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return ""


def _command(pid: int) -> tuple[str, ...]:
    """The command line as recorded: each secret's value as *** (`masked_argument`), since a pid
    file outlives a killed run (a JVM's `-D...password=`, a URL's password)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ()
    return tuple(masked_argument(part.decode(errors="replace")) for part in raw.split(b"\0") if part)


def record(
    pid: int, what: str | None = None, *, group: bool = True, stop_signal: signal.Signals = signal.SIGTERM
) -> Recorded | None:
    """Write `pid`'s file (`what`: how the report names it; its command line if None); what it holds,
    or None where it could not be written (not Linux, no home to write in): a starter goes on without
    one, and only `rebalancer stop` misses it."""
    start = _start_time(pid)
    if start is None:
        return None
    command = _command(pid)
    entry = {
        "pid": pid,
        "group": group,
        "signal": stop_signal.name,
        "what": what or " ".join(Path(part).name if i == 0 else part for i, part in enumerate(command[:3])),
        "command": list(command),
        "boot": _boot_id(),
        "start": start,
    }
    path = pid_dir() / f"{pid}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        partial = path.with_name(f".{pid}.json.{os.getpid()}")
        partial.write_text(json.dumps(entry) + "\n")
        os.replace(partial, path)  # a reader sees the whole file or none
    except OSError as exc:
        log.warning("could not write the pid file %s (rebalancer stop will not see pid %d): %s", path, pid, exc)
        return None
    return _entry(path, entry)


def forget(process: Recorded | int) -> None:
    """Remove a process's file: the one that started it has stopped it. Given what `record` returned,
    only that process's file (not a later process's that was given its pid); given a pid, its file."""
    if isinstance(process, Recorded):
        current = _read(process.path)
        if current is None or (current.pid, current.boot, current.start) != (process.pid, process.boot, process.start):
            return
        path = process.path
    else:
        path = pid_dir() / f"{process}.json"
    with contextlib.suppress(OSError):
        path.unlink()


def _entry(path: Path, entry: dict[str, object]) -> Recorded:
    command = entry["command"]
    assert isinstance(command, list)
    return Recorded(
        pid=int(str(entry["pid"])),
        group=bool(entry["group"]),
        signal=str(entry["signal"]),
        what=str(entry["what"]),
        command=tuple(str(part) for part in command),
        boot=str(entry["boot"]),
        start=int(str(entry["start"])),
        path=path,
    )


def _read(path: Path, *, strict: bool = False) -> Recorded | None:
    """A pid file's content; None if it is gone or not one of ours (another shape). A file that
    cannot be read raises OSError under `strict`: it may name a process that runs."""
    try:
        text = path.read_text()
    except FileNotFoundError:  # its process was stopped while we looked
        return None
    except OSError as exc:
        if strict:
            raise
        log.debug("skipping %s: %s", path, exc)
        return None
    try:
        return _entry(path, json.loads(text))
    except (ValueError, KeyError, TypeError, AssertionError) as exc:
        log.debug("skipping %s: %s", path, exc)
        return None


def recorded() -> list[Recorded]:
    """Every pid file, oldest process first; a file that is not one of ours (another shape) is
    skipped. OSError (its `filename` says which) if the directory or a file in it cannot be read:
    "nothing runs" would then be a guess, and `rebalancer stop` says so instead of stopping nothing."""
    directory = pid_dir()
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    paths = [directory / name for name in names if name[:1].isdigit() and name.endswith(".json")]
    found = [entry for path in paths if (entry := _read(path, strict=True)) is not None]
    return sorted(found, key=lambda r: (r.boot, r.start, r.pid))


def running() -> list[Recorded]:
    """The recorded processes that still run."""
    return [entry for entry in recorded() if is_running(entry)]


def _is_ours(entry: Recorded) -> bool:
    """The recorded process is still there (a zombie too): the same boot and the same start time,
    not a later process given its pid. A recorded group whose leader has exited (spark-class's shell,
    while the JVM it started runs on) is ours while a member runs: Linux gives no process a pid that
    is still a live group's id, so the group's members are the recorded leader's."""
    if entry.boot != _boot_id():
        return False
    fields = _stat(entry.pid)
    if fields is not None:
        return int(fields[19]) == entry.start
    return entry.group and any((_start_time(member) or -1) >= entry.start for member in _members(entry.pid))


def _members(pgid: int) -> list[int]:
    """The live (non-zombie) processes of process group `pgid`."""
    members = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            fields = _stat(int(proc.name))
            if fields is not None and fields[2] == str(pgid) and fields[0] != "Z":
                members.append(int(proc.name))
    return members


def _alive(entry: Recorded) -> bool:
    """Something of it still runs: a process of its group (whose leader may have exited), or itself."""
    if entry.group:
        return bool(_members(entry.pid))
    fields = _stat(entry.pid)
    return fields is not None and fields[0] != "Z"


def is_running(entry: Recorded) -> bool:
    """Whether the recorded process (with its group, if that is ours) still runs."""
    return _is_ours(entry) and _alive(entry)


def _send(entry: Recorded, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        if entry.group:
            os.killpg(entry.pid, sig)
        else:
            os.kill(entry.pid, sig)


def _wait_ended(entries: list[Recorded], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while any(_alive(entry) for entry in entries) and time.monotonic() < deadline:
        time.sleep(0.1)


def stop_recorded(grace_s: float = STOP_GRACE_S) -> list[tuple[Recorded, str]]:
    """Stop every recorded process that still runs: its own signal (to its whole group if the group
    is ours), SIGKILL to what is left after `grace_s`. Each entry with what happened to it, and its
    file removed: `stopped`, `killed` (SIGKILL was needed), `gone` (it had ended already: a stale
    file), or `refused: REASON` (not ours to signal; the file stays).
    """
    outcome: dict[Path, str] = {}
    entries = recorded()
    stopping = []
    for entry in entries:
        if not is_running(entry):
            outcome[entry.path] = "gone"
            continue
        try:
            _send(entry, signal.Signals.__members__.get(entry.signal, signal.SIGTERM))
        except PermissionError as exc:
            outcome[entry.path] = f"refused: {exc.strerror}"
            continue
        stopping.append(entry)
    _wait_ended(stopping, grace_s)
    killed = [entry for entry in stopping if _alive(entry)]
    for entry in stopping:
        outcome[entry.path] = "killed" if entry in killed else "stopped"
    for entry in killed:
        _send(entry, signal.SIGKILL)
    _wait_ended(killed, grace_s)
    for entry in entries:
        if not outcome[entry.path].startswith("refused"):
            with contextlib.suppress(OSError):
                entry.path.unlink()
    return [(entry, outcome[entry.path]) for entry in entries]
