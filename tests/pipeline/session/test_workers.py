"""When Spark's Python workers cannot import what they need, the error is one paragraph naming the
interpreter they ran and the settings that choose another (PYSPARK_PYTHON, spark.pyspark.python)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from rebalancer.pipeline.session.build import spark_error_reason

DRIVER = f"{sys.version_info[0]}.{sys.version_info[1]}"
SYSTEM_PYTHON = "/usr/bin/python3"
# A pyspark PythonException's text when a worker could not unpickle a rebalancer function.
WORKER_FAILED = (
    "An exception was thrown from the Python worker:\n"
    "Traceback (most recent call last):\n"
    '  File "/x/pyspark.zip/pyspark/serializers.py", line 483, in loads\n'
    "    return cloudpickle.loads(obj, encoding=encoding)\n"
    "ModuleNotFoundError: No module named 'rebalancer'\n"
    " SQLSTATE: 38000"
)


def _paragraph(python: str, missing: str, tail: str = ".") -> str:
    return (
        f"Spark's Python workers run {python}, which cannot import {missing}. Set PYSPARK_PYTHON before "
        f"the session starts (or spark.pyspark.python with spark-submit) to a Python {DRIVER} that has "
        f"numpy, pandas, pyarrow and rebalancer, such as this driver's {sys.executable}{tail}"
    )


def test_a_workers_failed_import_reads_as_the_paragraph(monkeypatch):
    monkeypatch.setattr("pyspark.SparkContext._active_spark_context", None)
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python3")
    ship = "; or send rebalancer to the workers (SparkContext.addPyFile of a zip from `python -m rebalancer.pipeline.ship DIR`)."
    assert spark_error_reason(RuntimeError(WORKER_FAILED)) == _paragraph("/opt/py/bin/python3", "rebalancer", ship)
    pandas = WORKER_FAILED.replace("'rebalancer'", "'pandas'")
    assert spark_error_reason(RuntimeError(pandas)) == _paragraph("/opt/py/bin/python3", "pandas")
    # The driver's own import failure, or a worker's of another module, is not the workers' Python.
    assert spark_error_reason(ModuleNotFoundError("No module named 'pandas'")) == "No module named 'pandas'"
    other = WORKER_FAILED.replace("'rebalancer'", "'mylib'")
    assert spark_error_reason(RuntimeError(other)) == "ModuleNotFoundError: No module named 'mylib'"


SCRIPT = textwrap.dedent(
    """
    import os, sys
    os.environ["PYSPARK_PYTHON"] = sys.argv[1]
    from rebalancer.pipeline import balanced_apply
    from rebalancer.pipeline.session.build import build_session

    spark = build_session(master="local[1]", app_name="worker-python", shuffle_partitions=1, quiet=True)
    df = spark.createDataFrame([("a", 1.0)], "key string, v double")
    try:
        balanced_apply(df, "key", lambda frame: frame, "key string, v double").frame.collect()
    except RuntimeError as exc:
        print(exc)
        sys.exit(3)
    """
)


@pytest.mark.spark
def test_a_local_master_whose_workers_lack_pandas_fails_with_one_paragraph_and_no_java_trace(tmp_path):
    """One JVM of its own: PYSPARK_PYTHON must be set before a session starts."""
    lacks = subprocess.run([SYSTEM_PYTHON, "-c", "import numpy, pandas, pyarrow"], capture_output=True)
    if lacks.returncode == 0:
        pytest.skip(f"{SYSTEM_PYTHON} has numpy, pandas and pyarrow here")
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    done = subprocess.run(
        [sys.executable, str(script), SYSTEM_PYTHON], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=240
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout == _paragraph(SYSTEM_PYTHON, "numpy, pandas, pyarrow, rebalancer") + "\n"
    java = [line for line in done.stderr.splitlines() if line.startswith("\tat ") or "Exception" in line or " ERROR " in line]
    assert java == [], done.stderr
