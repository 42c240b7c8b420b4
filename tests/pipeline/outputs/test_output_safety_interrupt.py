"""Issue 42 case 4 as reported: `rebalancer pipeline run --mode overwrite`, stopped by Ctrl-C (SIGINT)
or SIGKILL, lost the previous run, and its partial metrics/ and quarantine/ made the next default run
refuse. The CLI runs as a child that stops at a named point until the test has signalled it (a pipe
each way, `output_safety_runs`): no sleeps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from output_safety_runs import held_child, tree, wait_ready

from rebalancer.pipeline import RunRequest, run

HERE = Path(__file__).parent.parent  # the helpers sit in tests/pipeline
EXE = str(Path(sys.executable).with_name("rebalancer"))
WAIT_S = 600.0  # for the child's Spark to start and reach its point: a bound for a stuck child only
# Written by the run but not data: the log is the latest run's, the manifest names it.
NOT_DATA = ("spark.log", "_manifest.json")
REFUSED = (
    "rebalancer: error: output out already holds a run's outputs (metrics, plan.json, quarantine, …): "
    "--mode overwrite replaces them, --mode append adds this run to them"
)


def _data_tree(out: Path) -> dict[str, str]:
    return {name: digest for name, digest in tree(out).items() if name not in NOT_DATA}


CASES = [
    (signal.SIGINT, "stage:dispatch and persist"),  # Ctrl-C while Spark writes the new run's metrics
    (signal.SIGKILL, "stage:dispatch and persist"),
    (signal.SIGKILL, "swap"),  # the previous run set aside, the new one not yet in: the next run puts it back
]


@pytest.mark.spark
@pytest.mark.timeout(1800)
@pytest.mark.parametrize(("signum", "point"), CASES, ids=[f"{signal.Signals(s).name}-{p}" for s, p in CASES])
def test_a_cli_overwrite_stopped_by_a_signal_keeps_the_previous_run_whole(
    spark, dataset: tuple[Path, pd.DataFrame], tmp_path: Path, signum: int, point: str
) -> None:
    data, good = dataset
    out = tmp_path / "out"
    run(RunRequest(input=data, output=out, partitions=2), spark=spark)  # the previous run
    (out / "shedding").mkdir()
    (out / "shedding" / "avgshedder.png").write_bytes(b"\x89PNG plot")
    previous = _data_tree(out)
    argv = ["cli", "pipeline", "run", "--input", str(data), "--output", "out", "--partitions", "2", "--mode", "overwrite"]
    with held_child(tmp_path, point, *argv) as (child, ready, _go):
        assert wait_ready(ready, WAIT_S) == f"{point}\n"
        child.send_signal(signum)
        _stdout, stderr = child.communicate(timeout=WAIT_S)
    if signum == signal.SIGINT:
        assert child.returncode == 130 and stderr.splitlines()[-1] == (
            "rebalancer: interrupted (Spark's log: out/spark.log)"
        ), stderr
        assert _data_tree(out) == previous  # at once: no staging left, nothing moved
    else:
        assert child.returncode == -signal.SIGKILL
    # The next default run refuses for the previous run, in one line, before Spark starts.
    done = subprocess.run(
        [EXE, "pipeline", "run", "--input", str(data), "--output", "out", "--partitions", "2"],
        capture_output=True, text=True, cwd=tmp_path, timeout=WAIT_S,
    )
    assert done.returncode == 2 and done.stderr.splitlines()[-1] == REFUSED, done.stderr
    # That refused run has already put back what a killed run left: nothing is left to put right.
    from rebalancer.pipeline.outputs.mode import check_run_outputs
    from rebalancer.pipeline.outputs.recover import recover

    assert not [name for name in os.listdir(out) if name.startswith(".rebalancer")]
    states = check_run_outputs(RunRequest(input=data, output=out, mode="overwrite"))
    assert recover([s for s in states if s is not None], None) == 0
    assert _data_tree(out) == previous
    assert json.loads((out / "_manifest.json").read_text())["entries"] == [
        "metrics", "plan.json", "quarantine", "report.html", "spark.log", "summary.json"
    ]
    done = subprocess.run(
        [EXE, "pipeline", "run", "--input", str(data), "--output", "out", "--partitions", "2", "--mode", "overwrite",
         "--quiet"],
        capture_output=True, text=True, cwd=tmp_path, timeout=WAIT_S,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["output"] == "out" and summary["accepted"] == len(good)
    assert int(pd.read_parquet(out / "metrics")["count"].sum()) == len(good)
    assert sorted(p.name for p in out.iterdir()) == [
        "_manifest.json", "metrics", "plan.json", "quarantine", "report.html", "shedding", "spark.log", "summary.json"
    ]
    assert tree(out / "shedding") == {"avgshedder.png": previous["shedding/avgshedder.png"]}
