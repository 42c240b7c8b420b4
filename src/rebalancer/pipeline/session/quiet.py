"""Spark's and the JVM's startup output, silenced unless asked for (`rebalancer -v` shows it).

Three sources: log4j (Spark's and Hadoop's WARN lines and the "default log4j profile" banner), which
the shipped log4j2.properties sets to errors only; the hostname-resolves-to-loopback warning, which
SPARK_LOCAL_IP=127.0.0.1 avoids for a local master; and the JVM's own "Using incubator modules"
line, which no JVM flag turns off, so the JVM's stderr is filtered for that one line.

A CLI run without -v goes further (`jvm_stderr_to`, `spark_python_logs_to`): Spark's logs, the
JVM's stderr and Py4J's Python records all go to OUTPUT/spark.log, so a failure or a Ctrl-C ends in
the command's one line, which names the file.

Whatever the level, the JVM a session start launches has a pipe for its stderr, which a thread of
this process relays line by line with each URL's password masked (Ivy prints a repository's URL
whole), to the console or to the log file: nothing the JVM prints on its own stderr escapes masking.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from rebalancer._secrets import MaskedFormatter, masked_text
from rebalancer.pipeline.session.connect import is_connect

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

LOG4J2_PROPERTIES = Path(__file__).with_name("log4j2.properties")
# Lines the JVM prints to stderr before log4j starts; everything else it writes is passed through.
JVM_NOISE = (b"WARNING: Using incubator modules",)


def quiet_java_options() -> str:
    """Driver JVM options that point log4j at the shipped configuration."""
    return f"-Dlog4j2.configurationFile={LOG4J2_PROPERTIES.as_uri()}"


@contextmanager
def jvm_stderr_filtered(drop: tuple[bytes, ...] = JVM_NOISE) -> Iterator[None]:
    """While the JVM starts, fd 2 is a pipe; the JVM keeps it as its stderr for life, so a daemon
    thread forwards each line to the real stderr, masked (`_relay`), except those starting with one
    of `drop`, until the JVM exits."""
    sys.stderr.flush()
    with _jvm_stderr_relayed(os.dup(2), drop):
        yield


# What the JVM this process started wrote on its stderr while starting, masked: the cause of a JVM
# that exits before its gateway answers, which -v prints to the console where no log keeps it.
_start_lines: list[str] = []
_start_lock = threading.Lock()
_START_LINES_KEPT = 10_000  # Ivy's resolution of many packages is hundreds; a bound all the same
_keeping = [False]  # whether the relay keeps the lines it reads (under _start_lock)


def jvm_start_lines() -> list[str]:
    """The lines (masked, without their newline) the JVM this process started wrote on its stderr
    while starting, if that start failed; [] once a JVM has started."""
    with _start_lock:
        return list(_start_lines)


@contextmanager
def _jvm_stderr_relayed(out: int, drop: tuple[bytes, ...]) -> Iterator[None]:
    """fd 2 is a pipe to a `_relay` thread writing to `out` (closed when the JVM exits) for the
    block: the JVM started in it keeps that pipe as its stderr. A start that failed with the JVM
    gone (PySpark's JAVA_GATEWAY_EXITED, a JVM stopped at a deadline) waits for the relay to reach
    the JVM's last line, so that its lines come before the command's error line, not after it."""
    read_end, write_end = os.pipe()
    _keep_start_lines(True)
    real = os.dup(2)
    os.dup2(write_end, 2)
    os.close(write_end)
    relay = threading.Thread(target=_relay, args=(read_end, out, drop), name="jvm-stderr", daemon=True)
    relay.start()

    def restore() -> None:
        sys.stderr.flush()
        os.dup2(real, 2)  # this process writes to its own stderr again; the JVM keeps the pipe
        os.close(real)

    try:
        yield
    except KeyboardInterrupt:  # the JVM may run on (it ignores SIGINT): nothing to wait for
        restore()
        _keep_start_lines(False)
        raise
    except BaseException:
        restore()
        from pyspark import SparkContext

        if SparkContext._gateway is None:  # no JVM runs on: the pipe ends once the relay has read it all
            relay.join(RELAY_DRAIN_S)
        _keep_start_lines(False, clear=False)  # the error's explanation reads them
        raise
    restore()
    _keep_start_lines(False)


def _keep_start_lines(keep: bool, clear: bool = True) -> None:
    with _start_lock:
        _keeping[0] = keep
        if clear:
            _start_lines.clear()


RELAY_DRAIN_S = 60.0  # a bound, not a wait: a JVM that has exited leaves at most a pipe's worth unread


def _relay(read_end: int, out: int, drop: tuple[bytes, ...]) -> None:
    """Each line read is written to `out` with the URLs in it masked (`masked_text`): Ivy prints a
    `spark.jars.repositories` URL whole, its password included ("... added as a remote repository",
    "Server access error at url ..."), and Hadoop quotes a location it cannot open. The lines are
    kept too (`jvm_start_lines`) while the JVM starts. Once `out` fails (a closed console) lines are
    still read, so that the JVM never blocks on a full pipe."""
    with os.fdopen(read_end, "rb") as lines:
        for line in lines:
            if drop and line.startswith(drop):
                continue
            text = masked_text(line.decode("utf-8", "surrogateescape"))
            with _start_lock:
                if _keeping[0] and len(_start_lines) < _START_LINES_KEPT:
                    _start_lines.append(text.rstrip("\n"))
            data = text.encode("utf-8", "surrogateescape")
            while data and out >= 0:
                try:
                    data = data[os.write(out, data) :]
                except OSError:
                    os.close(out)
                    out = -1
    if out >= 0:
        os.close(out)


# -- A quiet CLI run: Spark's logs in a file, Ctrl-C without tracebacks ------------------------------
LOG4J2_FILE_PROPERTIES = Path(__file__).with_name("log4j2-file.properties")
# The file the JVM this process started logs to (build_session(log_file=...)); one JVM per process.
_jvm_log: Path | None = None


def jvm_log_file() -> Path | None:
    """Where the JVM this process started writes its logs and its stderr; None when they reach the
    console (no log file was asked for, or the JVM was started by someone else)."""
    return _jvm_log


def file_java_options(log_file: Path) -> str:
    """Driver JVM options that send every log4j line to `log_file` and none to the console.

    The path is double-quoted for Spark's launcher, which splits these options as a shell would."""
    quoted = str(log_file).replace("\\", "\\\\").replace('"', '\\"')
    return f'-Dlog4j2.configurationFile={LOG4J2_FILE_PROPERTIES.as_uri()} "-Drebalancer.spark.log={quoted}"'


@contextmanager
def jvm_stderr_to(log_file: Path) -> Iterator[None]:
    """While the JVM starts, its stderr is a pipe relayed (masked, `_relay`) to `log_file`, appended
    to; the JVM keeps it for life, so what it prints there itself (Ivy's resolution, stack traces,
    its Python workers' stderr, which it relays) lands in the log, never on the console. (What the
    JVM writes there after this process has exited is lost: its own log4j lines are not, log4j
    writes to the file itself.)"""
    global _jvm_log
    log_file.parent.mkdir(parents=True, exist_ok=True)
    log_file.write_bytes(b"")  # a previous run's log is not this one's
    sys.stderr.flush()
    _jvm_log = log_file  # from its first line: a JVM that fails to start says why there
    with _jvm_stderr_relayed(os.open(log_file, os.O_WRONLY | os.O_APPEND), drop=()):
        yield


_SPARK_PACKAGES = ("py4j", "pyspark")


def _package_dirs() -> tuple[str, ...]:
    found = []
    for name in _SPARK_PACKAGES:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            found.append(str(Path(str(module.__file__)).parent) + os.sep)
    return tuple(found)


class _SparkRecords(logging.Filter):
    """Py4J's and PySpark's records: Py4J logs a lost connection, or a Ctrl-C in the middle of a call,
    with a traceback on the *root* logger, so its records are told by their file as well as by name."""

    def __init__(self, keep: bool) -> None:
        super().__init__()
        self.keep = keep
        self.dirs = _package_dirs()

    def filter(self, record: logging.LogRecord) -> bool:
        ours = record.name.split(".")[0] in _SPARK_PACKAGES or record.pathname.startswith(self.dirs)
        return ours == self.keep


@contextmanager
def spark_python_logs_to(log_file: Path) -> Iterator[None]:
    """Py4J's and PySpark's Python log records go to `log_file` for the duration, not to the console
    handlers the root logger has (the command's own records still reach those)."""
    root = logging.getLogger()
    to_file = logging.FileHandler(log_file, encoding="utf-8")
    to_file.addFilter(_SparkRecords(keep=True))
    to_file.setFormatter(MaskedFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))  # URIs masked
    not_spark = _SparkRecords(keep=False)
    consoles = list(root.handlers)
    for handler in consoles:
        handler.addFilter(not_spark)
    root.addHandler(to_file)
    try:
        yield
    finally:
        root.removeHandler(to_file)
        to_file.close()
        for handler in consoles:
            handler.removeFilter(not_spark)


@contextmanager
def interrupt_cancels_jobs(spark: SparkSession) -> Iterator[None]:
    """Ctrl-C during the block cancels the session's jobs and ends the block in KeyboardInterrupt.

    The JVM ignores SIGINT (PySpark starts it so), so a job would run on after the main thread's
    call is interrupted: it is cancelled from another thread (the main thread's Py4J connection is
    the one the signal broke). Whatever the interrupted call or the cleanup after it then raise (a
    cancelled job's error, a closed connection's), the block ends as an interrupt."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread takes signals
        yield
        return
    interrupted = threading.Event()
    previous = signal.getsignal(signal.SIGINT)

    def on_sigint(signum: int, frame: object) -> None:
        if not interrupted.is_set():
            interrupted.set()
            threading.Thread(target=_cancel_jobs, args=(spark,), name="cancel-jobs", daemon=True).start()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    except BaseException:
        if interrupted.is_set():
            raise KeyboardInterrupt from None
        raise
    finally:
        signal.signal(signal.SIGINT, previous)


def _cancel_jobs(spark: SparkSession) -> None:
    try:
        if is_connect(spark):
            spark.interruptAll()
        else:
            spark.sparkContext.cancelAllJobs()
    except Exception as exc:  # the session is stopping already: nothing left to cancel
        log.debug("cancelling Spark's jobs after Ctrl-C: %s", exc)


@contextmanager
def sigint(handler: Callable[[int, FrameType | None], Any] | int | signal.Handlers | None) -> Iterator[None]:
    """`handler` for SIGINT for the duration, where this thread may set it (the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
