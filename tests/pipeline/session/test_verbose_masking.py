"""Finding: with -v a Spark error the CLI does not turn into its own words was re-raised, and Python
printed its traceback unmasked (Spark's `Wrong FS: file://u:PASSWORD@/...` quotes the URI whole).
Everything printed is masked, verbose or not: the traceback, and every log record on the console.

The CLI runs as a subprocess (its real stdout and stderr, its own JVM). Its run is replaced by one
that fails in Spark the way a read of a password-bearing location does: no check of ours refuses
that URI first, so the error is Spark's own, and the CLI's last guard is what is tested.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pipeline_data import write_dataset

pytestmark = pytest.mark.spark

GUARD_S = 560  # a subprocess's guard, not a timed assertion (a JVM's start on a loaded 2-core box)
SECRET = "Zq21Leak"
URI = f"file://u:{SECRET}@/nonexistent/in"
SHOWN = "file://***@/nonexistent/in"
LAST_LINE = f"rebalancer: error: Spark: Wrong FS: {SHOWN}, expected: file:///"
DRIVER = """\
import logging
import sys

import rebalancer.pipeline.runner as runner
from rebalancer.cli import main

URI = sys.argv[1]


def failing_run(request, spark, **kwargs):
    logging.getLogger("pyspark.reader").warning("cannot read %s", URI)  # a library's record quoting it
    return spark.read.parquet(URI).count()  # Hadoop: "Wrong FS: <the URI>, expected: file:///"


runner.run = failing_run
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.timeout(600)
@pytest.mark.parametrize("verbose", ["-v", "-vv"])
def test_a_spark_error_at_v_prints_its_traceback_masked(tmp_path: Path, verbose: str) -> None:
    write_dataset(tmp_path / "in")
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    done = subprocess.run(
        [sys.executable, str(driver), URI, verbose, "pipeline", "run", "--input", str(tmp_path / "in"),
         "--output", str(tmp_path / "out"), "--partitions", "2"],
        capture_output=True, text=True, timeout=GUARD_S, cwd=tmp_path,
    )  # fmt: skip
    printed = done.stdout + done.stderr
    # -v adds the traceback and changes nothing else: the line and exit code of a run without -v.
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.splitlines()[-1] == LAST_LINE, done.stderr[-3000:]
    assert SECRET not in printed, printed[-5000:]
    # Not vacuous: the traceback and the record are there, with the URI masked where it was quoted.
    assert "Traceback (most recent call last):" in done.stderr, done.stderr[-3000:]
    assert f"IllegalArgumentException: Wrong FS: {SHOWN}, expected: file:///" in done.stderr, done.stderr[-3000:]
    assert f"WARNING pyspark.reader: cannot read {SHOWN}\n" in done.stderr, done.stderr[-3000:]
