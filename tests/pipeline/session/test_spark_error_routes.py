"""Issue 33 follow-up: every place that reduces a Spark failure to one line does it the same way,
through `session.spark_error_reason`: the exception at the end of the last Python traceback (all of
its lines), else the Java root cause, never Spark's wrapping ("An error occurred while calling …").

The handler and sink cases are the exact text PySpark gives for a task that raised (captured from
`mapInArrow(...).collect()` and a handler run), so they need no Spark; the input case reads a file.
"""

from __future__ import annotations

import pytest

from rebalancer.pipeline.routing.handler_map import handler_failure

# str() of the PythonException a handler's task raised: balanced_apply wraps the handler's own error,
# whose message has two lines.
HANDLER_FAILURE = (
    "An exception was thrown from the Python worker:\n"
    "Traceback (most recent call last):\n"
    '  File "/x/rebalancer/pipeline/apply.py", line 1198, in run_item\n'
    "    yield call(item, terms.to_pandas(table))\n"
    "          ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/x/rebalancer/pipeline/apply.py", line 997, in call\n'
    "    raise RuntimeError(\n"
    "RuntimeError: balanced_apply: func failed on key ('metric_0000',): MyProblem: first line of the problem\n"
    "second line: details"
)


def test_a_handler_failure_keeps_every_line_of_the_handlers_error():
    error = handler_failure("multi", Exception(HANDLER_FAILURE))
    assert str(error) == (
        "handler 'multi' failed: balanced_apply: func failed on key ('metric_0000',): MyProblem: "
        "first line of the problem second line: details"
    )


def test_a_handler_failure_without_a_python_traceback_is_its_first_line_without_the_sqlstate():
    text = "[UNRESOLVED_COLUMN] A column `kind` cannot be resolved. SQLSTATE: 42703\n== SQL ==\nselect kind"
    assert str(handler_failure("h", Exception(text))) == (
        "handler 'h' failed: [UNRESOLVED_COLUMN] A column `kind` cannot be resolved."
    )


# str() of the PythonException of a sink task that failed: psycopg's errors carry a DETAIL line, and
# this one quotes the connection URL with its password.
SINK_FAILURE = (
    "An exception was thrown from the Python worker:\n"
    "Traceback (most recent call last):\n"
    '  File "/x/rebalancer/pipeline/sinks/postgres.py", line 700, in __call__\n'
    '    conn = psycopg.connect("postgresql://u:S3CRET@h/db")\n'
    "psycopg.errors.UniqueViolation: duplicate key value violates unique constraint \"t_pkey\" "
    "(from postgresql://u:S3CRET@h/db)\n"
    "DETAIL:  Key (k1, k2)=(3, 10) already exists.\n"
)


def test_a_sink_task_failure_is_the_cause_with_all_its_lines_and_the_password_masked():
    pytest.importorskip("psycopg")
    from rebalancer.pipeline.sinks._pg_url import _python_error, _redacted_text

    reason = _python_error(Exception(SINK_FAILURE))
    assert reason == (  # the password is masked where the reason is made (issue 42's secrets)
        'psycopg.errors.UniqueViolation: duplicate key value violates unique constraint "t_pkey" '
        "(from postgresql://***@h/db) DETAIL:  Key (k1, k2)=(3, 10) already exists."
    )
    shown = _redacted_text(reason, {})  # what the sink does with it, before cutting it to length
    assert "S3CRET" not in shown and "postgresql://***@h/db" in shown


@pytest.mark.spark
def test_an_unreadable_remote_parquet_input_names_the_cause_not_the_py4j_call(spark, tmp_path, monkeypatch):
    """A Parquet input on a remote filesystem is checked by reading its schema through Spark; the
    error used to be Py4J's first line, "An error occurred while calling o64.parquet."."""
    from rebalancer.pipeline import paths
    from rebalancer.pipeline.ingest.inspect import inspect_input

    monkeypatch.setattr(paths, "LOCAL_SCHEMES", frozenset())  # file: read through Hadoop, as hdfs: is
    data = tmp_path / "in"
    data.mkdir()
    (data / "part-0.parquet").write_bytes(b"this is not parquet")
    uri = f"file://{data}"
    with pytest.raises(ValueError) as info:
        inspect_input(uri, spark=spark)
    message = str(info.value)
    assert message.startswith(f"unreadable input {uri}: "), message
    assert "is not a Parquet file" in message and "An error occurred while calling" not in message, message
    assert "\n" not in message
