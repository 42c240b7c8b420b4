"""The JVM's log (OUTPUT/spark.log, and the quiet console) shows a URL's user info masked.

Hadoop logs `WARN FileSystem: Failed to initialize filesystem hdfs://u:PW@h/p: ...` for a location
it cannot open, and the log4j2 configs wrote it as it was: the password of --plan-from, --input,
--output or --report-dir reached spark.log. Their PatternLayout now masks `scheme://USERINFO@` in
the message and in the exception's text, as `_secrets.masked_url` does. Each case is a subprocess:
the log4j2 config is read when a JVM starts.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from pipeline_data import good_frame

from rebalancer.pipeline.generate import write_frame

pytestmark = pytest.mark.spark

CLI = [sys.executable, "-m", "rebalancer.cli"]
SECRET = "Zq9Secret"
JVM_RUN_DEADLINE_S = 900  # a JVM's start on a loaded 2-core machine; nothing here waits on time


@pytest.fixture(scope="module")
def small_input(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("masked_log") / "input"
    write_frame(good_frame(events=200, seed=5), data, "parquet", 1)
    return data


@pytest.mark.timeout(JVM_RUN_DEADLINE_S)
@pytest.mark.parametrize("flag", ["--plan-from", "--input", "--output", "--report-dir"])
def test_hadoop_warning_in_spark_log_shows_the_url_masked(small_input: Path, tmp_path: Path, flag: str) -> None:
    url = f"hdfs://u:{SECRET}@h/p"
    given = {"--input": str(small_input), "--output": str(tmp_path / "out"), flag: url}
    argv = [arg for pair in given.items() for arg in pair]
    done = subprocess.run(
        [*CLI, "pipeline", "run", *argv], capture_output=True, text=True, timeout=JVM_RUN_DEADLINE_S, cwd=tmp_path
    )
    found = re.fullmatch(r"rebalancer: error: Spark: java\.net\.UnknownHostException: h \(Spark's log: (\S+)\)\n", done.stderr)
    assert done.returncode == 2 and found, done.stderr[-3000:]
    log = (tmp_path / found.group(1)).read_text()
    assert SECRET not in done.stdout + done.stderr + log
    assert log.count("WARN FileSystem: Failed to initialize filesystem hdfs://***@h/p: ") == 1, log[-3000:]


LOGS = """\
import sys
from rebalancer.pipeline.session.build import build_session
session = build_session("local[1]", quiet=True, log_file=sys.argv[1])
jvm = session.sparkContext._jvm
url = "hdfs://u:Zq9Secret@h/p"
error = jvm.java.io.IOException(f"cannot open {url}", jvm.java.lang.IllegalStateException(f"bad '{url}'"))
jvm.org.apache.logging.log4j.LogManager.getLogger("rebalancer.test").warn(f"at {url} and hdfs://nn/x@y", error)
session.stop()
"""


@pytest.mark.timeout(JVM_RUN_DEADLINE_S)
def test_an_exception_is_written_once_and_masked(tmp_path: Path) -> None:
    """The exception's text (its cause's too) is masked, and not appended a second time as it was
    (PatternLayout's alwaysWriteExceptions); an '@' in a path with no ':' before it is shown."""
    log = tmp_path / "spark.log"
    done = subprocess.run(
        [sys.executable, "-c", LOGS, str(log)], capture_output=True, text=True, timeout=JVM_RUN_DEADLINE_S
    )
    assert done.returncode == 0, done.stderr[-3000:]
    text = log.read_text()
    assert SECRET not in done.stdout + done.stderr + text
    assert text.count(" WARN test: at hdfs://***@h/p and hdfs://nn/x@y\njava.io.IOException: cannot open hdfs://***@h/p\n") == 1, text
    assert text.count("java.io.IOException") == 1, text
    assert text.count("Caused by: java.lang.IllegalStateException: bad 'hdfs://***@h/p'\n") == 1, text
