"""`make run` tells the story: the sample, this run against Spark's hash placement, the files, the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rebalancer.cli import build_parser, main
from rebalancer.pipeline import commands
from rebalancer.pipeline.generate import GenerateConfig
from rebalancer.pipeline.session.quiet import LOG4J2_PROPERTIES, jvm_stderr_filtered, quiet_java_options


@pytest.mark.spark
@pytest.mark.timeout(600)  # a whole run plus the session's start: past 300 s on a 2-core box under load
def test_run_without_input_tells_the_story(spark, tmp_path, monkeypatch, capsys):
    # `make run` is `rebalancer pipeline run` in the repository: a sample in data/telemetry, results in out/.
    # (Absolute here: the shared JVM resolves relative paths against the directory it started in.)
    monkeypatch.setattr(commands, "DEFAULT_INPUT", tmp_path / "data" / "telemetry")
    monkeypatch.setattr(commands, "DEFAULT_OUTPUT", tmp_path / "out")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "300")  # rich wraps nothing: one row per line
    monkeypatch.setattr(commands, "DEFAULT_SAMPLE", GenerateConfig(events=4000, types=40, skew=1.3, entities=5,
                                                                   bad_rate=0.01, files=2, minutes=2))
    # 4 tasks, not the default 16: the same story, a quarter of the per-task overhead on a 2-core CI box.
    assert main(["pipeline", "run", "--partitions", "4"]) == 0
    printed = capsys.readouterr().out
    summary = json.loads(Path("out/summary.json").read_text())
    assert summary["partitions"] == 4
    assert summary["version"] == __import__("rebalancer").__version__
    assert summary["finished_at"].endswith("+00:00")
    assert summary["hash_skew_ratio"] > summary["skew_ratio"]
    lines = printed.splitlines()
    assert lines[0] == f"generated a sample: 4,000 events over 40 types (Zipf 1.3) in {tmp_path}/data/telemetry/"
    assert lines[-1] == f"report: {tmp_path}/out/report.html  (open it in a browser)"
    flat = " ".join(printed.split())
    assert (f"skew, max/median task rows │ {summary['skew_ratio']:.2f} this run (weighted), "
            f"{summary['hash_skew_ratio']:.2f} with Spark's hash") in flat
    assert (f"largest task, rows │ {max(summary['planned_load']):,} planned, "
            f"{max(summary['hash_load']):,} with Spark's hash") in flat
    for path in ("out/metrics/", "out/quarantine/", "out/summary.json", "out/plan.json", "out/report.html"):
        assert f"{tmp_path}/{path}" in printed, path
    assert f"elapsed │ {summary['elapsed_s']:.1f} s (read and count" in flat

    # The first run places every type; nothing "moves", whatever the planner's skipped reason says.
    plan = json.loads(Path("out/plan.json").read_text())
    assert plan["moves"] == []
    assert len({p["type"] for p in plan["placements"]}) == summary["types"]
    report = Path("out/report.html").read_text()
    assert "The charts compare how many rows each of the 4 Spark tasks processed" in report
    assert (f"{summary['skew_ratio']:.2f} this run, {summary['hash_skew_ratio']:.2f} with Spark&#x27;s hash placement"
            in report)
    assert f"{summary['elapsed_s']:.1f} s (reading to metrics written)" in report
    assert report.index("Rows per task") < report.index("Seconds per task") < report.index("Counts")


def test_out_and_output_are_one_flag_and_the_demo_uses_16_tasks():
    parser = build_parser()
    assert parser.parse_args(["pipeline", "run"]).partitions == commands.DEFAULT_PARTITIONS == 16
    for flag in ("--out", "--output"):
        assert parser.parse_args(["pipeline", "run", flag, "o"]).output == Path("o")
        assert parser.parse_args(["pipeline", "generate", flag, "g"]).out == Path("g")


def test_the_shipped_log4j_configuration_is_what_the_jvm_gets():
    assert LOG4J2_PROPERTIES.is_file()
    text = LOG4J2_PROPERTIES.read_text()
    # Warnings stop at the console's threshold; the root stays at the WARN Spark expects of a shell,
    # or Spark prints "Setting default log level" at startup.
    assert "rootLogger.level = warn" in text and "appender.console.filter.threshold.level = error" in text
    assert quiet_java_options() == f"-Dlog4j2.configurationFile=file://{LOG4J2_PROPERTIES}"


def test_the_jvm_stderr_filter_drops_only_the_incubator_warning(capfd):
    script = ("import sys; sys.stderr.write('WARNING: Using incubator modules: jdk.incubator.vector\\n"
              "26/11/23 ERROR Executor: a real error\\n'); sys.stderr.flush()")
    with jvm_stderr_filtered():
        # A child started inside keeps the pipe as its stderr, as the JVM does.
        child = subprocess.Popen([sys.executable, "-c", script])
    child.wait()
    for thread in [t for t in threading.enumerate() if t.name == "jvm-stderr"]:
        thread.join(timeout=30)
    assert capfd.readouterr().err == "26/11/23 ERROR Executor: a real error\n"
    os.write(2, b"after\n")  # this process's stderr is its own again
    assert capfd.readouterr().err == "after\n"
