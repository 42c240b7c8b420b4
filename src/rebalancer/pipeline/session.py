"""SparkSession construction shared by the CLI, the benchmarks and the tests."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING

from rebalancer._numbers import parse_int

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
) -> SparkSession:
    """A session whose Python workers run this interpreter; `master=None` defers to spark-submit.

    `quiet` silences Spark's and the JVM's startup output when this call starts the JVM (see
    `rebalancer.pipeline.quiet`); errors still reach stderr.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    if is_connect_url(master):
        return _connect_session(str(master), app_name, shuffle_partitions)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    for key, value in PIPELINE_CONF.items():
        builder = builder.config(key, value)
    builder = (
        builder.config("spark.ui.enabled", "true" if ui else "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", os.environ.get("REBALANCER_DRIVER_MEMORY", "4g"))
        .config("spark.ui.showConsoleProgress", "false")
    )
    if shuffle_partitions is None and master and master.startswith("local"):
        # 200 shuffle partitions cost seconds per small aggregation on one machine; a cluster keeps its own.
        shuffle_partitions = 2 * _local_cores(master)
    if shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    from pyspark import SparkContext

    starts_jvm = (
        quiet and SparkContext._active_spark_context is None and "PYSPARK_GATEWAY_PORT" not in os.environ
    )
    startup: AbstractContextManager[None] = nullcontext()
    if starts_jvm:
        from rebalancer.pipeline.quiet import jvm_stderr_filtered, quiet_java_options

        if master and master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no "hostname resolves to loopback"
        builder = builder.config("spark.driver.extraJavaOptions", quiet_java_options())
        startup = jvm_stderr_filtered()
    with startup:
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


CONNECT_SCHEME = "sc://"
# pyspark[connect]'s client needs these; the 'spark' extra installs them.
CONNECT_CLIENT_MODULES = ("grpc", "grpc_status", "google.rpc", "zstandard")


def is_connect_url(master: str | None) -> bool:
    """A Spark Connect address (`sc://host:port`), which a session reaches over gRPC, with no JVM here."""
    return bool(master) and str(master).lower().startswith(CONNECT_SCHEME)


def is_connect(spark: SparkSession) -> bool:
    """A Spark Connect session: no SparkContext, no accumulators, no JVM in this process.

    Checked by class, not by `spark.sparkContext` (which raises there), and without importing the
    Connect client (it needs grpcio, which a classic install may lack).
    """
    return type(spark).__module__.startswith("pyspark.sql.connect")


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

    from rebalancer._extras import require_extra

    require_extra("Spark Connect (sc://)", "spark", CONNECT_CLIENT_MODULES)
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
    Py4J error, else the error's first line; Spark's SQLSTATE suffix is dropped either way.
    """
    text = str(exc)
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
    reason = _SQLSTATE.sub("", reason).strip()
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

