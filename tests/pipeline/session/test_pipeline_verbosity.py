"""`rebalancer -v…`: what each level shows of the logs, and what it keeps off.

One real pipeline run shows the stages and the plan at -v; the other levels run `pipeline generate`
(which logs one INFO line and needs no Spark) and then make calls to the JVM, whose Py4J DEBUG lines
must appear only at -vvv.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from rebalancer.cli import main

pytestmark = pytest.mark.spark
LOGGERS = ("", "rebalancer", "py4j")


@pytest.fixture(autouse=True)
def _restore_levels() -> Iterator[None]:
    saved = {name: logging.getLogger(name).level for name in LOGGERS}
    yield
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)


def _records(caplog, argv: list[str], spark=None) -> list[logging.LogRecord]:
    # caplog's handler keeps every record it gets; the loggers' levels, which main sets, decide. (Not
    # caplog.set_level: it would lower the root logger's level before main runs.)
    caplog.clear()
    assert main(argv) == 0
    if spark is not None:
        assert spark.range(10).count() == 10  # calls into the JVM through Py4J
    return list(caplog.records)


def _generate(verbose: int, tmp_path, caplog, spark) -> list[logging.LogRecord]:
    flags = [f"-{'v' * verbose}"] if verbose else []
    out = tmp_path / f"gen{verbose}"
    return _records(caplog, [*flags, "pipeline", "generate", "--out", str(out), "--events", "50"], spark)


def _ours(records: list[logging.LogRecord], level: int) -> list[str]:
    return [r.getMessage() for r in records if r.name.startswith("rebalancer") and r.levelno == level]


def _py4j_debug(records: list[logging.LogRecord]) -> list[logging.LogRecord]:
    return [r for r in records if r.name.startswith("py4j") and r.levelno == logging.DEBUG]


def test_default_shows_warnings_only(spark, tmp_path, caplog):
    records = _generate(0, tmp_path, caplog, spark)
    assert [r for r in records if r.levelno < logging.WARNING] == []


def test_v_shows_our_stages_and_plan_and_no_debug(spark, dataset, tmp_path, caplog):
    data, _ = dataset
    argv = ["-v", "pipeline", "run", "--input", str(data), "--out", str(tmp_path / "out"), "--partitions", "2",
            "--no-report"]
    records = _records(caplog, argv, spark)
    info = _ours(records, logging.INFO)
    assert [m for m in info if m.startswith("stage: ")][:2] == ["stage: read and count", "stage: plan"]
    plan = [m for m in info if m.startswith("plan: weighted over 2 tasks")]
    assert len(plan) == 1 and " moved; rows per task max " in plan[0], info
    assert [r for r in records if r.levelno < logging.INFO] == []  # no DEBUG, ours or Py4J's
    assert [r for r in records if not r.name.startswith("rebalancer") and r.levelno < logging.WARNING] == []


def test_vv_adds_our_debug_and_libraries_info_but_not_py4j_debug(spark, tmp_path, caplog):
    records = _generate(2, tmp_path, caplog, spark)
    assert _ours(records, logging.INFO) == ["wrote 50 events in 4 parquet files to " + str(tmp_path / "gen2")]
    assert logging.getLogger("rebalancer.pipeline").isEnabledFor(logging.DEBUG)
    assert logging.getLogger("matplotlib").isEnabledFor(logging.INFO)
    assert not logging.getLogger("matplotlib").isEnabledFor(logging.DEBUG)
    assert _py4j_debug(records) == []


def test_vvv_lets_py4j_debug_through(spark, tmp_path, caplog):
    records = _generate(3, tmp_path, caplog, spark)
    assert _ours(records, logging.INFO)
    assert len(_py4j_debug(records)) > 2  # a line per call to the JVM
