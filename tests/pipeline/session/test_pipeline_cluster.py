"""The pipeline on a real standalone cluster (cluster_fixtures.py), shipping its own code to executors
whose Python cannot import it, with outputs equal to a local run's."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from rebalancer.pipeline.batch import run_batch
from rebalancer.pipeline.generate import GenerateConfig, generate
from rebalancer.pipeline.ingest.inspect import inspect_input

# The first test also waits for the cluster to start: a loaded machine needs more than the default.
pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.timeout(900)]

PARTITIONS = 4
REBALANCER = Path(sys.executable).with_name("rebalancer")
RUN_TIMEOUT_S = 600  # a loaded 2-core machine; a healthy run takes well under a minute


@pytest.fixture(scope="module")
def cluster_input(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20,000 skewed rows over 40 types, some bad, in 4 CSV files."""
    data = tmp_path_factory.mktemp("cluster-input") / "telemetry"
    config = GenerateConfig(events=20_000, types=40, skew=1.1, entities=20, bad_rate=0.002, seed=11,
                            minutes=5, files=4, format="csv")
    generate(config, data)
    return data


def _run_on_cluster(
    cluster, data: Path, out: Path, *flags: str, task_attempts: int = 4
) -> subprocess.CompletedProcess[str]:
    argv = [str(REBALANCER), "pipeline", "run", "--master", cluster.master_url, "--input", f"file://{data}",
            "--output", f"file://{out}", "--partitions", str(PARTITIONS), "--no-report", *flags]
    # The driver's JVM options, as pyspark passes them to spark-submit: few shuffle partitions, as the
    # local session has, and how often a failing task is tried.
    submit = f"--conf spark.sql.shuffle.partitions=4 --conf spark.task.maxFailures={task_attempts} pyspark-shell"
    env = cluster.env(PYSPARK_SUBMIT_ARGS=submit)
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


def _sorted(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return frame.sort_values(keys).reset_index(drop=True)


def test_package_zip_holds_the_package_and_imports_from_the_zip(tmp_path):
    from rebalancer.pipeline.ship import package_dir, package_zip

    archive = package_zip(tmp_path)
    with zipfile.ZipFile(archive) as opened:
        names = opened.namelist()
    assert archive.name.startswith("rebalancer-") and "rebalancer/pipeline/handler/builtin.py" in names
    assert not [n for n in names if n.endswith(".pyc") or "__pycache__" in n]
    sources = {f.relative_to(package_dir()).as_posix() for f in package_dir().rglob("*.py") if "__pycache__" not in f.parts}
    assert {n.removeprefix("rebalancer/") for n in names if n.endswith(".py")} == sources
    # -S -I: no site-packages, so no installed or editable rebalancer: only the zip can provide it.
    probe = "import sys; sys.path.insert(0, sys.argv[1]); import rebalancer; print(rebalancer.__file__)"
    found = subprocess.run([sys.executable, "-S", "-I", "-c", probe, str(archive)], capture_output=True, text=True,
                           cwd=tmp_path, check=True)
    assert found.stdout.strip() == str(archive / "rebalancer" / "__init__.py")
    # A destination that does not exist yet is made (`ship dist/` on a fresh clone).
    made = package_zip(tmp_path / "missing" / "x")
    assert made.parent == tmp_path / "missing" / "x" and made.name == archive.name
    taken = tmp_path / "taken"
    taken.write_text("x")
    with pytest.raises(ValueError, match=r"^dest must be a directory or a \.zip path, got the file "):
        package_zip(taken)


def test_executor_python_cannot_import_rebalancer(spark_cluster):
    """The premise of --ship: the workers' Python has the libraries but not the package."""
    python = str(spark_cluster.worker_python)
    assert subprocess.run([python, "-c", "import numpy, pandas, pyarrow, pyspark"], capture_output=True).returncode == 0
    missing = subprocess.run([python, "-c", "import rebalancer"], capture_output=True, text=True, cwd="/")
    assert missing.returncode == 1 and "No module named 'rebalancer'" in missing.stderr


def test_without_ship_the_executors_fail_to_import_rebalancer(spark_cluster, cluster_input, tmp_path):
    result = _run_on_cluster(spark_cluster, cluster_input, tmp_path / "out", "--partitioning", "hash", task_attempts=1)
    assert result.returncode != 0, result.stdout
    # One paragraph naming the workers' interpreter and the way out (--ship), not Spark's trace.
    assert "which cannot import rebalancer" in result.stderr and "ship" in result.stderr, result.stderr


# Hash only: the weighted plan's cluster run is the handler map's below, which checks the same outputs.
def test_cluster_run_with_ship_equals_a_local_run(spark, spark_cluster, cluster_input, tmp_path):
    partitioning = "hash"
    finished_before = len(spark_cluster.state().get("completedapps", []))
    cluster_out = tmp_path / "cluster"
    result = _run_on_cluster(spark_cluster, cluster_input, cluster_out, "--partitioning", partitioning, "--ship")
    assert result.returncode == 0, result.stderr[-3000:] + spark_cluster.log_tail()
    assert "shipping rebalancer to the executors: rebalancer-" in result.stdout
    # It ran as an application of the standalone master, on its two one-core workers.
    apps = spark_cluster.completed_apps(finished_before + 1)
    assert len(apps) == finished_before + 1 and apps[-1]["name"] == "rebalancer"

    local_out = tmp_path / "local"
    local = run_batch(spark, inspect_input(cluster_input), local_out, partitioning, PARTITIONS, report=False)
    remote = json.loads((cluster_out / "summary.json").read_text())
    for key in ("ingested", "accepted", "quarantined", "quarantine_reasons", "types", "sharded_types",
                "planned_load", "hash_load", "task_rows"):
        assert remote[key] == local[key], key
    assert remote["ingested"] == 20_000 and remote["quarantined"] > 0
    assert json.loads((cluster_out / "plan.json").read_text())["items"] == (
        json.loads((local_out / "plan.json").read_text())["items"]
    )
    keys = ["type", "entity", "minute"]
    pd.testing.assert_frame_equal(
        _sorted(pd.read_parquet(cluster_out / "metrics"), keys),
        _sorted(pd.read_parquet(local_out / "metrics"), keys),
        check_exact=False, rtol=1e-12,
    )
    quarantine_keys = ["ts", "type", "entity", "value", "reason"]
    pd.testing.assert_frame_equal(
        _sorted(pd.read_parquet(cluster_out / "quarantine").fillna(""), quarantine_keys),
        _sorted(pd.read_parquet(local_out / "quarantine").fillna(""), quarantine_keys),
    )


# Two handlers whose hot types the plan must split at 4 partitions (metric_0000 holds 60% of
# `latency`'s rows, metric_0001 48% of `rollup`'s), one split-safe by entity and one merged by
# `combine`; every other type goes to the built-in aggregation.
CLUSTER_HANDLERS = '''
import pandas as pd
from rebalancer.pipeline import Pipeline

pipeline = Pipeline()


def merge_rollups(partials):
    return partials.groupby(["type", "minute"], as_index=False).agg(
        n=("n", "sum"), positive=("positive", "sum"), low=("low", "min"), high=("high", "max"))


@pipeline.handler(("metric_0001", "metric_001*"), split_by="entity", combine=merge_rollups,
                  schema="type string, minute timestamp, n long, positive long, low double, high double")
def rollup(frame):
    counted = frame.assign(positive=(frame["value"] > 0).astype("int64"))
    out = counted.groupby(["type", "minute"], as_index=False).agg(
        n=("value", "size"), positive=("positive", "sum"), low=("value", "min"), high=("value", "max"))
    return out[["type", "minute", "n", "positive", "low", "high"]]


# Registered second: metric_0001 matches both patterns and goes to `rollup`, the first match.
@pipeline.handler("metric_000[0-4]", split_by="entity",
                  schema="type string, entity string, minute timestamp, n long, total double, p50 double")
def latency(frame):
    grouped = frame.groupby(["type", "entity", "minute"], as_index=False)
    out = grouped.agg(n=("value", "size"), total=("value", "sum"), p50=("value", "median"))
    return out[["type", "entity", "minute", "n", "total", "p50"]]


pipeline.default("metrics")
'''
# What two runs of one plan may disagree on in a handler's summary section: where, and how long.
VARYING_KEYS = ("output", "task_seconds", "seconds_skew_ratio")


def _same_in_two_runs(section: dict) -> dict:
    return {key: value for key, value in section.items() if key not in VARYING_KEYS}


def _read_output(path: Path, keys: list[str]) -> pd.DataFrame:
    frame = pd.read_parquet(path)
    frame["date"] = frame["date"].astype(str)
    return _sorted(frame, keys)


def test_cluster_run_with_the_handler_map_equals_a_local_run(spark, spark_cluster, cluster_input, tmp_path):
    from rebalancer.pipeline.routing.handler_map import load_handlers

    handlers = tmp_path / "cluster_handlers.py"
    handlers.write_text(CLUSTER_HANDLERS)
    finished_before = len(spark_cluster.state().get("completedapps", []))
    cluster_out = tmp_path / "cluster"
    result = _run_on_cluster(spark_cluster, cluster_input, cluster_out, "--ship", "--handlers", str(handlers))
    assert result.returncode == 0, result.stderr[-3000:] + spark_cluster.log_tail()
    assert "shipping rebalancer to the executors: rebalancer-" in result.stdout
    apps = spark_cluster.completed_apps(finished_before + 1)  # an application of the standalone master
    assert len(apps) == finished_before + 1 and apps[-1]["name"] == "rebalancer"

    local_out = tmp_path / "local"
    local = run_batch(spark, inspect_input(cluster_input), local_out, "weighted", PARTITIONS, report=False,
                      handlers=load_handlers(handlers))
    remote = json.loads((cluster_out / "summary.json").read_text())
    for key in ("ingested", "accepted", "quarantined", "quarantine_reasons", "types", "sharded_types",
                "planned_load", "hash_load", "handled", "unhandled", "unhandled_types", "task_rows"):
        assert remote[key] == local[key], key
    assert remote["partitioning"] == "weighted"
    assert json.loads((cluster_out / "plan.json").read_text())["items"] == (
        json.loads((local_out / "plan.json").read_text())["items"]
    )
    quarantine_keys = ["ts", "type", "entity", "value", "reason"]
    pd.testing.assert_frame_equal(
        _sorted(pd.read_parquet(cluster_out / "quarantine").fillna(""), quarantine_keys),
        _sorted(pd.read_parquet(local_out / "quarantine").fillna(""), quarantine_keys),
    )
    assert remote["accepted"] == remote["handled"] and remote["unhandled"] == 0
    assert set(remote["handlers"]) == set(local["handlers"]) == {"metrics", "latency", "rollup"}
    for name, cluster_section in remote["handlers"].items():
        assert _same_in_two_runs(cluster_section) == _same_in_two_runs(local["handlers"][name]), name
    for name in ("latency", "rollup"):
        cluster_section = remote["handlers"][name]
        # Spark ran the planned placement on the cluster, and the hot type was split there.
        assert cluster_section["task_rows"] == cluster_section["planned_rows"]
        assert cluster_section["split_types"] == [{"latency": "metric_0000", "rollup": "metric_0001"}[name]]
        assert len(cluster_section["task_seconds"]) == PARTITIONS
    assert remote["handlers"]["latency"]["types"] == 4 and remote["handlers"]["rollup"]["types"] == 11
    assert remote["handlers"]["metrics"]["rows"] == local["handlers"]["metrics"]["rows"] > 0
    assert sum(remote["handlers"][name]["rows"] for name in remote["handlers"]) == remote["accepted"]

    latency_keys, rollup_keys = ["type", "entity", "minute"], ["type", "minute"]
    # `total` is a float sum whose order may differ between the runs; everything else is exact.
    pd.testing.assert_frame_equal(
        _read_output(cluster_out / "latency", latency_keys), _read_output(local_out / "latency", latency_keys),
        check_exact=False, rtol=1e-12,
    )
    cluster_rollup = _read_output(cluster_out / "rollup", rollup_keys)
    pd.testing.assert_frame_equal(cluster_rollup, _read_output(local_out / "rollup", rollup_keys), check_exact=True)
    # combine merged the split type's shards: one row per (type, minute), none left partial.
    assert not cluster_rollup.duplicated(rollup_keys).any()
    assert cluster_rollup["n"].sum() == remote["handlers"]["rollup"]["rows"]
    pd.testing.assert_frame_equal(
        _read_output(cluster_out / "metrics", latency_keys), _read_output(local_out / "metrics", latency_keys),
        check_exact=False, rtol=1e-12,
    )
