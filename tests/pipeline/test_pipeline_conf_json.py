"""`pipeline run --conf KEY=VALUE` reaches the session as spark-submit's does, and `--json` puts the
run's summary alone on stdout (issue 46, item 5). Each runs the real command as a subprocess."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

EXE = str(Path(sys.executable).with_name("rebalancer"))


def test_conf_and_json_in_one_real_run(dataset: tuple[Path, pd.DataFrame], tmp_path: Path) -> None:
    events = tmp_path / "events"
    events.mkdir()
    command = [
        EXE, "pipeline", "run", "--input", str(dataset[0]), "--output", "out", "--partitions", "2",
        "--master", "local[1]", "--json",
        "--conf", "spark.eventLog.enabled=true", "--conf", f"spark.eventLog.dir=file://{events}",
    ]  # fmt: skip
    # As a user pipes it: the JSON must be all stdout carries, or json.tool fails.
    shell = f"set -o pipefail; {shlex.join(command)} | {shlex.quote(sys.executable)} -m json.tool"
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary == json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["partitioning"] == "weighted"
    assert "plan:" in done.stderr  # the text a person reads went to stderr
    # In a pipe, a line as each stage starts, then one with its seconds as it ends.
    stages = [line.split(" done (")[0] + (" done" if " done (" in line else "")
              for line in done.stderr.splitlines() if line.startswith("stage: ")]
    names = ["read and count", "plan", "quarantine", "dispatch and persist", "report"]
    assert stages == [f"stage: {n}{end}" for n in names for end in (" ...", " done")]
    # spark.eventLog.* reached the session: Spark wrote this application's event log there.
    assert ["local-" in p.name for p in events.iterdir()] == [True]


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("spark.driver.memory", "'spark.driver.memory'"),
        ("=2g", "'' and the rest, not shown"),
        (" spark.x=1", "'' and the rest, not shown"),
        # A mistyped separator: the value may be a secret, so only the key-like start is echoed.
        ("spark.hadoop.fs.s3a.secret.key:SeCrEt123", "'spark.hadoop.fs.s3a.secret.key' and the rest, not shown"),
        ("spark.hadoop.fs.s3a.secret.key SeCrEt123", "'spark.hadoop.fs.s3a.secret.key' and the rest, not shown"),
    ],
    ids=["no-equals", "no-key", "spaced-key", "colon-secret", "space-secret"],
)
def test_a_bad_conf_is_one_line_before_spark_starts(tmp_path: Path, value: str, shown: str) -> None:
    done = subprocess.run(
        [EXE, "pipeline", "run", "--output", "out", "--conf", value], capture_output=True, text=True,
        cwd=tmp_path, timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"rebalancer pipeline run: error: argument --conf: must be KEY=VALUE with a key such as "
        f"spark.driver.memory, got {shown}"
    ]
    assert not (tmp_path / "out").exists()


def test_conf_is_refused_for_spark_connect_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [EXE, "pipeline", "run", "--output", "out", "--remote", "sc://127.0.0.1:1", "--conf", "spark.x=1"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "rebalancer: error: --conf: a Spark Connect session takes its settings from its server, got ['spark.x']"
    ]


def test_a_failed_json_run_leaves_stdout_empty_and_says_why_on_stderr(tmp_path: Path) -> None:
    """A script reading `--json` tells a failure by the exit code and an empty stdout, never by half a
    JSON document; the reason is the one stderr line a run without --json prints."""
    argv = [EXE, "pipeline", "run", "--input", "missing", "--output", "out"]
    plain = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    done = subprocess.run([*argv, "--json"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == plain.stderr and len(done.stderr.splitlines()) == 1 and "missing" in done.stderr
