"""SparkSession construction shared by the CLI, the benchmarks and the tests."""

from __future__ import annotations

import atexit
import os
import re
import shlex
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from rebalancer._numbers import parse_int
from rebalancer._pidfiles import forget, record
from rebalancer._secrets import masked_text, shown_location
from rebalancer.pipeline.checks import check_seconds
from rebalancer.pipeline.session.connect import is_connect, is_connect_url
from rebalancer.pipeline.session.py4j_log import hide_py4j_values

hide_py4j_values()  # before any session: Py4J's DEBUG lines would carry option values and passwords

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# What the pipeline's outputs mean depends on these, so a run pins them whatever session it is given:
# text timestamps without an offset are UTC, `date` partitions are UTC days, and Parquet timestamps are
# INT64 microseconds (INT96 is read wrongly by pandas and pyarrow outside 1677-2262) in the proleptic
# Gregorian calendar every reader uses.
PIPELINE_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
}
# For a run only, not for a session build_session makes:
# - the run caches its parsed rows for the passes after the first and drops them at its end;
#   compressing that cache cost about a third of the first pass (MEMORY_AND_DISK spills what does
#   not fit in memory);
# - Spark 4 caps the bytes of each Arrow batch sent to Python (64 MiB by default) by measuring the
#   batch after every row, unless the cap is INT_MAX. In the weighted dispatch (`mapInArrow`) that
#   measuring was a fifth of the JVM's time. Its rows are four narrow columns, so a batch stays
#   bounded by `maxRecordsPerBatch` (10,000 rows), as before Spark 4.
ARROW_BYTES_UNCAPPED = str(2**31 - 1)
RUN_CONF = {
    **PIPELINE_CONF,
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    "spark.sql.execution.arrow.maxBytesPerBatch": ARROW_BYTES_UNCAPPED,
}


def build_session(
    master: str | None = "local[*]",
    app_name: str = "rebalancer",
    shuffle_partitions: int | None = None,
    ui: bool = False,
    quiet: bool = False,
    conf: Mapping[str, str] | None = None,
    log_file: str | Path | None = None,
    connect_timeout: float | None = None,
    field: str = "master",
    advice: str = "",
) -> SparkSession:
    """A session whose Python workers run this interpreter; `master=None` defers to spark-submit.

    `conf` adds Spark settings set at the session's start (e.g. `spark.jars`); on Spark Connect the
    server owns those, so it is refused there.

    `quiet` silences Spark's and the JVM's startup output when this call starts the JVM (see
    `rebalancer.pipeline.session.quiet`); errors still reach stderr. With `log_file` as well, Spark's logs
    and the JVM's stderr go to that file and none to the console (`quiet.jvm_log_file()` names it).

    `connect_timeout` (seconds) bounds the wait for a spark://, sc:// or k8s:// master to answer:
    an unreachable one is a ValueError naming it (as `field`, then `advice`), not Spark's retries of
    a minute or more. It also bounds the session's start (for spark://, once the JVM is up): a
    listener that accepts the connection but is no Spark master or Connect server is refused the
    same way.
    """
    if connect_timeout is not None:
        check_seconds(connect_timeout, "connect_timeout")
        check_reachable(master, connect_timeout, field=field, advice=advice)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    if is_connect_url(master):
        if conf:
            raise ValueError(f"conf: a Spark Connect session takes no start-up settings, got {sorted(conf)}")
        from rebalancer._extras import require_extra

        require_extra("Spark Connect (sc://)", "spark", CONNECT_CLIENT_MODULES)
        if connect_timeout is None:
            return _connect_session(str(master), app_name, shuffle_partitions)
        from rebalancer.pipeline.session.connect_start import bounded_connect_start

        return bounded_connect_start(
            str(master),
            lambda: _connect_session(str(master), app_name, shuffle_partitions),
            connect_timeout,
            field,
            advice,
        )
    from pyspark import SparkContext

    settings: dict[str, str] = {"spark.app.name": app_name}
    if master:
        settings["spark.master"] = master
    settings.update(PIPELINE_CONF)
    settings.update(
        {
            "spark.ui.enabled": "true" if ui else "false",
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.driver.memory": os.environ.get("REBALANCER_DRIVER_MEMORY", "4g"),
            "spark.ui.showConsoleProgress": "false",
        }
    )
    given = dict(conf or {})
    settings.update(given)
    if shuffle_partitions is None and master and master.startswith("local"):
        # 200 shuffle partitions cost seconds per small aggregation on one machine; a cluster keeps its own.
        shuffle_partitions = 2 * _local_cores(master)
    if shuffle_partitions is not None:
        settings["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    had_jvm = SparkContext._gateway is not None
    starts_jvm = not had_jvm and "PYSPARK_GATEWAY_PORT" not in os.environ
    startup: AbstractContextManager[None] = nullcontext()
    to_file = starts_jvm and quiet and log_file is not None
    if starts_jvm:
        from rebalancer.pipeline.session.quiet import (
            file_java_options,
            jvm_stderr_filtered,
            jvm_stderr_to,
            quiet_java_options,
        )

        if quiet and master and master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no "hostname resolves to loopback"
        if to_file:
            path = Path(str(log_file))  # shown as given; the JVM, whose working directory may differ, gets it whole
            ours = file_java_options(path.absolute())
            startup = jvm_stderr_to(path)
        elif quiet:
            ours = quiet_java_options()
            startup = jvm_stderr_filtered()
        else:  # -vv: all of the JVM's startup output, masked all the same
            ours = ""
            startup = jvm_stderr_filtered(drop=())
        if ours:
            settings[JAVA_OPTIONS] = merged_java_options(given.get(JAVA_OPTIONS), ours)
            if JAVA_OPTIONS in given:
                given[JAVA_OPTIONS] = settings[JAVA_OPTIONS]
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    with startup:
        if starts_jvm and given:  # the caller's settings, kept off the JVM's command line
            launch_jvm({key: value for key, value in settings.items() if key not in given}, given)
        if connect_timeout is not None and str(master).lower().startswith("spark://"):
            session = _bounded_start(builder, str(master), connect_timeout, field, advice, had_jvm)
        else:
            session = builder.getOrCreate()
    if not had_jvm:
        _record_jvm(app_name)
    if not to_file:  # a log file keeps Spark's warnings too: it is read when something went wrong
        session.sparkContext.setLogLevel("ERROR")
    return session


JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def merged_java_options(given: str | None, ours: str) -> str:
    """The caller's driver JVM options, then ours: a JVM takes the last of two `-Dkey=`s, so ours
    (the log4j configuration, the log file) hold, and the caller's others (a proxy, a trust store,
    a JVM flag) reach the JVM beside them."""
    return f"{given} {ours}" if given and given.strip() else ours


def launch_jvm(command_line: Mapping[str, str], private: Mapping[str, str]) -> None:
    """Start the driver JVM (PySpark's gateway, through spark-submit) with `command_line` as its
    `--conf` arguments and `private` (the caller's settings) in a properties file, never on a
    command line: `ps` shows any process's arguments to every user of the machine, and the pid file
    records them. The file (mode 0600, in a directory of mode 0700) is given to spark-submit with
    `--extra-properties-file`, which its launcher (for the JVM's own options) and SparkSubmit read
    as they parse their arguments, long before the gateway answers; its settings rank over
    spark-defaults.conf, still read, and `private` holds no key of `command_line`. So driver settings
    (spark.driver.memory, .extraJavaOptions) and what spark-submit acts on (spark.jars.packages,
    .repositories) apply. It is removed once the JVM is up (or has failed). The session's start then
    sets `private` on the SparkConf over Py4J as well, as given: spark-submit trims a file's values."""
    from pyspark import SparkConf, SparkContext

    launch = SparkConf(loadDefaults=False)
    for key, value in command_line.items():
        launch.set(key, value)
    folder = Path(tempfile.mkdtemp(prefix="rebalancer-conf-"))  # mode 0700: only its owner lists or reads it
    try:
        path = folder / "spark.properties"
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as out:
            out.write(java_properties(private))
        previous = os.environ.get(SUBMIT_ARGS)
        os.environ[SUBMIT_ARGS] = f"--extra-properties-file {shlex.quote(str(path))} {previous or 'pyspark-shell'}"
        try:
            SparkContext._ensure_initialized(conf=launch)
        finally:
            if previous is None:
                os.environ.pop(SUBMIT_ARGS, None)
            else:
                os.environ[SUBMIT_ARGS] = previous
    finally:
        shutil.rmtree(folder, ignore_errors=True)


SUBMIT_ARGS = "PYSPARK_SUBMIT_ARGS"  # what PySpark adds to the spark-submit command it starts the JVM with
_PROPERTY_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}


def java_properties(settings: Mapping[str, str]) -> str:
    """`settings` as a Java .properties file (UTF-8, as spark-submit reads one), one `key=value` per
    line, escaped as `java.util.Properties.store` escapes them: every key and value reads back as
    written (but for the spaces around a value, which spark-submit trims)."""

    def escaped(text: str, key: bool) -> str:
        out = []
        for i, char in enumerate(text):
            if char in _PROPERTY_ESCAPES:
                out.append(_PROPERTY_ESCAPES[char])
            elif char in "=:#!" or (char == " " and (key or i == 0)):
                out.append("\\" + char)
            elif ord(char) < 0x20 or 0xD800 <= ord(char) <= 0xDFFF or ord(char) == 0x7F:
                out.append(f"\\u{ord(char):04x}")
            else:
                out.append(char)
        return "".join(out)

    return "".join(f"{escaped(key, True)}={escaped(value, False)}\n" for key, value in settings.items())


def _record_jvm(app_name: str) -> None:
    """A pid file for the JVM this process started (`rebalancer stop`), removed when this process
    exits, as the JVM does with it. Not its group: that is this process's own."""
    from pyspark import SparkContext

    process = getattr(SparkContext._gateway, "proc", None)  # None under spark-submit: its JVM runs us
    if process is not None and (entry := record(process.pid, f"Spark's JVM for {app_name} (driver pid {os.getpid()})", group=False)):
        atexit.register(forget, entry)


def _bounded_start(
    builder: SparkSession.Builder, master: str, timeout: float, field: str, advice: str, had_jvm: bool
) -> SparkSession:
    """`builder.getOrCreate()`, given `timeout` seconds from the JVM being up to the session being up.

    Spark's registration with a spark:// master that never answers (a listener that is no master)
    retries for about a minute, then fails in Java traces; here the JVM this call started is
    stopped at the deadline and the caller gets one ValueError naming `field` and the master."""
    from pyspark import SparkContext

    started: list[SparkSession] = []
    failed: list[BaseException] = []

    def start() -> None:
        try:
            started.append(builder.getOrCreate())
        except BaseException as exc:  # handed to the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=start, name="rebalancer-session-start", daemon=True)
    thread.start()
    deadline: float | None = None
    while thread.is_alive():
        if deadline is None and SparkContext._gateway is not None:
            deadline = time.monotonic() + timeout  # the JVM's own start is not the master's to answer
        wait = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
        if wait <= 0:
            if not had_jvm:
                _stop_jvm(thread)
            advice = f"; {advice}" if advice else ""
            raise ValueError(
                f"{field}: {shown_location(master)} accepted a connection but did not answer as a Spark master "
                f"within {timeout:g} s{advice}"
            )
        thread.join(wait)
    if failed:
        raise failed[0]
    return started[0]


def _stop_jvm(starting: threading.Thread) -> None:
    """Kill the JVM gateway a session start left waiting and forget it, so a later session starts a
    new one; py4j's errors from the waiting call (the JVM gone under it) are expected, not shown."""
    import logging

    from pyspark import SparkContext

    gateway = SparkContext._gateway
    py4j = logging.getLogger("py4j")
    level = py4j.level
    py4j.setLevel(logging.CRITICAL)
    try:
        process = getattr(gateway, "proc", None)
        if process is not None:
            process.kill()
            process.wait()
        if gateway is not None:
            try:
                gateway.shutdown()
            except Exception:  # its JVM is gone: what is left to close may fail to
                pass
        starting.join(10)  # the waiting call ends once its connection drops
    finally:
        SparkContext._gateway = None
        SparkContext._jvm = None
        py4j.setLevel(level)


# The ports a master URL without one is reached at (Spark's, Spark Connect's and HTTPS's defaults).
_MASTER_PORTS = {"spark": 7077, "sc": 15002, "k8s": 443}


def master_addresses(master: str | None) -> list[tuple[str, int]]:
    """The (host, port) pairs a spark:// (several for a standby master), sc:// or k8s:// master is
    reached at; [] for the others (local, yarn), which have no address of their own to try."""
    text = str(master or "").strip()
    scheme, _, rest = text.partition("://")
    scheme = scheme.lower()
    if scheme not in _MASTER_PORTS or not rest:
        return []
    port = _MASTER_PORTS[scheme]
    if scheme == "k8s":
        inner = rest if "://" in rest else f"https://{rest}"
        port = 80 if inner.lower().startswith("http://") else port
        hosts = [urlsplit(inner).netloc]
    elif scheme == "sc":
        hosts = [rest.split("/", 1)[0].split(";", 1)[0]]
    else:
        hosts = rest.split("/", 1)[0].split(",")
    found = []
    for host in hosts:
        parts = urlsplit(f"//{host.strip()}")
        try:
            found.append((parts.hostname or "", parts.port or port))
        except ValueError:
            raise ValueError(f"master: bad port in {shown_location(text)!r}: {host!r}") from None
    if not all(name for name, _ in found):
        raise ValueError(f"master: no host in {shown_location(text)!r}")
    return found


def check_reachable(master: str | None, timeout: float, field: str = "master", advice: str = "") -> None:
    """Refuses, in `timeout` seconds at most, a spark://, sc:// or k8s:// master nothing answers at.

    Spark itself retries an unreachable standalone master for about 80 s and a Spark Connect server
    for minutes, then fails in a page of Java or gRPC trace. A TCP connection tells an address where
    nothing listens (refused, unknown, silent), not a listener that is no Spark master.
    Raises ValueError naming `field`, the URL, each address's reason, then `advice`."""
    check_seconds(timeout, "timeout")
    addresses = master_addresses(master)
    deadline = time.monotonic() + timeout
    reasons = []
    for host, port in addresses:
        left = deadline - time.monotonic()
        if left <= 0:
            reasons.append(f"{host}:{port}: not tried")
            continue
        try:
            with socket.create_connection((host, port), timeout=left):
                return
        except socket.gaierror as exc:
            reasons.append(f"{host}:{port}: unknown host ({exc.strerror})")
        except TimeoutError:
            reasons.append(f"{host}:{port}: no answer")
        except OSError as exc:
            reasons.append(f"{host}:{port}: {exc.strerror or type(exc).__name__}")
    if reasons:
        advice = f"; {advice}" if advice else ""
        shown = shown_location(str(master))  # sc://HOST:PORT/;token=... as ***
        raise ValueError(f"{field}: cannot reach {shown} within {timeout:g} s ({'; '.join(reasons)}){advice}")


# pyspark[connect]'s client needs these; the 'spark' extra installs them.
CONNECT_CLIENT_MODULES = ("grpc", "grpc_status", "google.rpc", "zstandard")


def shuffle_partitions(spark: SparkSession) -> int:
    """`spark.sql.shuffle.partitions`: the tasks `groupBy` gives a grouped map."""
    key = "spark.sql.shuffle.partitions"
    configured = spark.conf.get(key, "200")
    return max(parse_int(str(configured), field=key), 1)


def default_parallelism(spark: SparkSession) -> int:
    """The tasks a stage gets by default: the SparkContext's where there is one; on Spark Connect
    `spark.default.parallelism` if the server sets it, else `spark.sql.shuffle.partitions`."""
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    key = "spark.default.parallelism"
    configured = spark.conf.get(key, None)
    if not configured:
        key = "spark.sql.shuffle.partitions"
        configured = spark.conf.get(key, "200")
    # A server's setting, read as text: `int()` would take `1_0` or `٣`, or fail naming no setting.
    return max(parse_int(str(configured), field=key), 1)


def _connect_session(url: str, app_name: str, shuffle_partitions: int | None) -> SparkSession:
    """A Spark Connect session; the server owns the JVM and its static settings (memory, UI, logs),
    so only the SQL settings the pipeline relies on are set, per session."""
    from pyspark.sql import SparkSession

    session = SparkSession.builder.remote(url).appName(app_name).getOrCreate()
    session.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
    for key, value in PIPELINE_CONF.items():
        session.conf.set(key, value)
    if shuffle_partitions is not None:
        session.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    return session


@contextmanager
def pipeline_conf(spark: SparkSession) -> Iterator[None]:
    """RUN_CONF on `spark` for the duration; a caller's own settings come back afterwards."""
    saved = {key: spark.conf.get(key, None) for key in RUN_CONF}
    for key, value in RUN_CONF.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, previous in saved.items():
            if previous is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, previous)


def _local_cores(master: str) -> int:
    """Cores of a local[N] / local[*] master.

    N is read as `rebalancer._numbers` reads numbers: `isdigit()` passed `²` (then `int()` failed
    naming nothing) and `٣` (read as 3, where Spark refuses the master). Anything else is refused
    here, before the JVM starts, naming the master.
    """
    inside = master[master.find("[") + 1 : master.find("]")] if "[" in master else "1"
    head = inside.split(",")[0].strip()
    if head == "*":
        return os.cpu_count() or 1
    try:
        cores = parse_int(head, field="master")
    except ValueError:
        raise ValueError(
            f"master: the thread count in {master!r} must be an integer or *, got {head!r}"
        ) from None
    return max(cores, 1)


PYTHON_TRACEBACK = "Traceback (most recent call last):"
# Where the exception's own lines end: Spark's SQLSTATE suffix, a JVM stack frame, a stack section.
_AFTER_CAUSE = re.compile(r"^\s*(SQLSTATE: |at [\w$.]+\(|JVM stacktrace:|Driver stacktrace:)")
# Types whose message is the whole story (the library's bad-input and failure types); others are kept.
_PLAIN_TYPES = re.compile(r"^(builtins\.)?(ValueError|RuntimeError): ")
_SQLSTATE = re.compile(r"(\s*SQLSTATE: \w+\.?)+$")


def spark_error_reason(exc: BaseException, limit: int = 300) -> str:
    """One line saying why a Spark action failed, for a user: the cause, not Spark's wrapping.

    PySpark's errors (`PySparkException`, `AnalysisException`, `PythonException`, Py4J's
    `Py4JJavaError`) carry the Python traceback of a data source or a task as text, and their first
    line is Spark's ("[PYTHON_DATA_SOURCE_ERROR] ... Traceback (most recent call last):"). The cause
    is the exception at the end of the last traceback: `ValueError: topic 'missing' does not exist`
    gives "topic 'missing' does not exist". Without a Python traceback it is the root Java cause of a
    Py4J error, else the error's first line; Spark's SQLSTATE suffix is dropped either way, and a
    URL's password (an ftp:// output's) is shown as ***.
    """
    text = str(exc)
    workers = worker_import_reason(text)
    if workers:
        return workers  # a paragraph that names the fix: never cut short
    at = text.rfind(PYTHON_TRACEBACK)
    reason = ""
    if at >= 0:
        cause: list[str] = []
        for line in text[at + len(PYTHON_TRACEBACK) :].splitlines():
            if not cause:  # the frames are indented; the exception starts at column 0
                if line.strip() and not line[0].isspace():
                    cause.append(line.strip())
            elif not line.strip() or _AFTER_CAUSE.match(line):
                break
            else:
                cause.append(line.strip())
        reason = _PLAIN_TYPES.sub("", " ".join(cause))
    if not reason:
        reason = _java_root_cause(exc) or next((line.strip() for line in text.splitlines() if line.strip()), "")
    reason = masked_text(_SQLSTATE.sub("", reason).strip())  # a URI Spark quotes, with its password
    return (reason or type(exc).__name__)[:limit]


def _java_root_cause(exc: BaseException) -> str:
    """`Class: message` of the innermost cause of a Py4J error's Java exception; "" if there is none
    (or the JVM cannot be asked)."""
    java = getattr(exc, "java_exception", None)
    if java is None:
        return ""
    try:
        while java.getCause() is not None:
            java = java.getCause()
        message = str(java.getMessage() or "").strip().splitlines()
        return f"{java.getClass().getName()}: {message[0]}" if message else str(java.getClass().getName())
    except Exception:  # Py4JError: the gateway is gone; the text is all there is
        return ""


# What a pipeline's Python workers import: Spark's pandas and Arrow functions need numpy, pandas
# and pyarrow; unpickling one of rebalancer's functions needs rebalancer.
WORKER_MODULES = ("numpy", "pandas", "pyarrow", "rebalancer")
_NO_MODULE = re.compile(r"No module named '([\w.]+)'")
_NOT_INSTALLED = re.compile(r"\[PACKAGE_NOT_INSTALLED\] (\w+) >= \S+ must be installed")
DRIVER_VERSION = f"{sys.version_info[0]}.{sys.version_info[1]}"


def worker_python(spark: SparkSession | None = None) -> str:
    """The interpreter Spark's Python workers run: the SparkContext's (PYSPARK_PYTHON when it
    started, else python3), or what one started now would take."""
    from pyspark import SparkContext

    context = spark.sparkContext if spark is not None else SparkContext._active_spark_context
    python = getattr(context, "pythonExec", None)
    return str(python or os.environ.get("PYSPARK_PYTHON") or "python3")


def worker_python_problem(python: str, missing: list[str], version: str | None = None) -> str:
    """One paragraph for workers whose interpreter lacks `missing` (or runs another `version`):
    which interpreter that was, and the settings that choose another."""
    driver = DRIVER_VERSION
    if missing:
        what = f"cannot import {', '.join(missing)}"
    elif version and version != driver:
        what = f"is Python {version}, where this driver is Python {driver}"
    else:
        what = "could not be run"
    return (
        f"Spark's Python workers run {python}, which {what}. Set PYSPARK_PYTHON before the session "
        f"starts (or spark.pyspark.python with spark-submit) to a Python {driver} that has numpy, "
        f"pandas, pyarrow and rebalancer, such as this driver's {sys.executable}"
        + (
            "; or send rebalancer to the workers (SparkContext.addPyFile of a zip from "
            "`python -m rebalancer.pipeline.ship DIR`)."
            if missing == ["rebalancer"]
            else "."
        )
    )


def worker_import_reason(text: str) -> str:
    """The `worker_python_problem` paragraph when `text` (a failed action's error) is a Python
    worker that could not import one of WORKER_MODULES; "" for any other error."""
    if "Python worker" not in text and "api.python.PythonException" not in text:
        return ""
    found = [match.group(1).split(".")[0] for match in _NO_MODULE.finditer(text)]
    found += [match.group(1).lower() for match in _NOT_INSTALLED.finditer(text)]
    missing = [name for name in WORKER_MODULES if name in found]
    return worker_python_problem(worker_python(), missing) if missing else ""
