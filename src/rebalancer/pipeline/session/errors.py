"""A Spark failure no command turned into its own words, explained in one line for the command
(`rebalancer._command` looks this module up by name once PySpark is loaded).

The cause goes in the line; the traceback goes in Spark's log when the run has one, or above the
line at -v. -v adds the traceback and changes nothing else: the same last line, the same exit code.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Iterable
from pathlib import Path

from rebalancer._command import Explained, imported_errors
from rebalancer._secrets import masked_text
from rebalancer.pipeline.session.build import spark_error_reason
from rebalancer.pipeline.session.quiet import jvm_log_file, jvm_start_lines

__all__ = ["explain", "log_note", "spark_errors"]


def spark_errors() -> tuple[type[BaseException], ...]:
    """PySpark's and Py4J's base errors, of those already imported."""
    return imported_errors(("pyspark.errors", "PySparkException"), ("py4j.protocol", "Py4JError"))


# The JVM's own words when it dies before the gateway is up: `Exception in thread "main" org...X: why`.
_JVM_CAUSE = re.compile(r'^(?:Exception in thread "[^"]*" )?(?:[\w$]+\.)+\w*(?:Exception|Error): (?P<why>\S.*)$')
_GATEWAY_EXITED = "JAVA_GATEWAY_EXITED"


def jvm_start_cause(log: Path | None) -> str | None:
    """The first line of a JVM's log that names why it stopped (an `...Exception: why` or `...Error:
    why` line), for a gateway that exited before it answered; None if the log has none."""
    if log is None:
        return None
    try:
        with open(log, encoding="utf-8", errors="replace") as lines:
            return first_cause(lines)
    except OSError:
        return None


def first_cause(lines: Iterable[str]) -> str | None:
    """The cause the first `...Exception: why` (or `...Error: why`) line of `lines` names, masked."""
    for line in lines:
        found = _JVM_CAUSE.match(line.strip())
        if found:
            return masked_text(found.group("why").strip())
    return None


def explain(exc: BaseException, verbose: int) -> Explained | None:
    """`Spark: <cause>` for a PySpark or Py4J error, else None."""
    if not isinstance(exc, spark_errors()):
        return None
    reason = spark_error_reason(exc)
    if _GATEWAY_EXITED in str(exc):
        # PySpark says only that the JVM exited; the JVM said why, in its log (read before the
        # traceback is appended to it), or on its stderr, which -v shows and this process relayed.
        cause = jvm_start_cause(jvm_log_file()) or first_cause(jvm_start_lines())
        if cause:
            reason = f"the JVM exited at start: {cause}"
    if verbose:
        return Explained(f"Spark: {reason}", traceback=True)
    note = log_note(exc) or " (-v shows the traceback)"
    return Explained(f"Spark: {reason}{note}")


def log_note(exc: BaseException | None) -> str:
    """" (Spark's log: PATH)" when this process started a JVM that logs to a file (a pipeline run
    without -v), else "". `exc`'s traceback is appended to that file: nothing is lost by the one line."""
    path = jvm_log_file()
    if path is None:
        return ""
    if exc is not None:
        try:
            with open(path, "a", encoding="utf-8") as log:
                log.write(masked_text("".join(traceback.format_exception(exc))))
        except OSError:
            pass  # the line still names the log, which has Spark's side of the failure
    return f" (Spark's log: {path})"
