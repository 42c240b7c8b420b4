"""A JVM that exits before Spark's gateway answers: the error line gives the JVM's own cause, not
only PySpark's JAVA_GATEWAY_EXITED (issue 46, item 5)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from rebalancer.pipeline.session.errors import jvm_start_cause

EXE = str(Path(sys.executable).with_name("rebalancer"))


def test_the_first_line_naming_a_cause_is_taken(tmp_path: Path) -> None:
    log = tmp_path / "spark.log"
    log.write_text(
        "WARN Utils: Your hostname resolves to a loopback address\n"
        'Exception in thread "main" org.apache.spark.SparkException: master yarn needs HADOOP_CONF_DIR\n'
        "\tat org.apache.spark.deploy.SparkSubmit.error(SparkSubmit.scala:1)\n"
        "Caused by: java.lang.IllegalStateException: later\n"
    )
    assert jvm_start_cause(log) == "master yarn needs HADOOP_CONF_DIR"
    log.write_text("java.lang.OutOfMemoryError: Java heap space\n")
    assert jvm_start_cause(log) == "Java heap space"
    log.write_text("nothing to see\n")
    assert jvm_start_cause(log) is None
    assert jvm_start_cause(tmp_path / "missing.log") is None
    assert jvm_start_cause(None) is None


def test_master_yarn_without_hadoop_conf_dir_says_why(dataset: tuple[Path, pd.DataFrame], tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("HADOOP_CONF_DIR", "YARN_CONF_DIR")}
    done = subprocess.run(
        [EXE, "pipeline", "run", "--input", str(dataset[0]), "--output", "out", "--master", "yarn"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [(
        "rebalancer: error: Spark: the JVM exited at start: When running with master 'yarn' either "
        "HADOOP_CONF_DIR or YARN_CONF_DIR must be set in the environment. (Spark's log: out/spark.log)"
    )]
