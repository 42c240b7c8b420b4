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
from rebalancer.pipeline.ingest import inspect_input

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
    assert archive.name.startswith("rebalancer-") and "rebalancer/pipeline/handler.py" in names
    assert not [n for n in names if n.endswith(".pyc") or "__pycache__" in n]
    sources = {f.relative_to(package_dir()).as_posix() for f in package_dir().rglob("*.py") if "__pycache__" not in f.parts}
    assert {n.removeprefix("rebalancer/") for n in names if n.endswith(".py")} == sources
    # -S -I: no site-packages, so no installed or editable rebalancer: only the zip can provide it.
    probe = "import sys; sys.path.insert(0, sys.argv[1]); import rebalancer; print(rebalancer.__file__)"
    found = subprocess.run([sys.executable, "-S", "-I", "-c", probe, str(archive)], capture_output=True, text=True,
                           cwd=tmp_path, check=True)
    assert found.stdout.strip() == str(archive / "rebalancer" / "__init__.py")
    with pytest.raises(ValueError, match=r"dest must be a directory or a \.zip path"):
        package_zip(tmp_path / "missing" / "x")


def test_executor_python_cannot_import_rebalancer(spark_cluster):
    """The premise of --ship: the workers' Python has the libraries but not the package."""
    python = str(spark_cluster.worker_python)
    assert subprocess.run([python, "-c", "import numpy, pandas, pyarrow, pyspark"], capture_output=True).returncode == 0
    missing = subprocess.run([python, "-c", "import rebalancer"], capture_output=True, text=True, cwd="/")
    assert missing.returncode == 1 and "No module named 'rebalancer'" in missing.stderr


def test_without_ship_the_executors_fail_to_import_rebalancer(spark_cluster, cluster_input, tmp_path):
    result = _run_on_cluster(spark_cluster, cluster_input, tmp_path / "out", "--partitioning", "hash", task_attempts=1)
    assert result.returncode != 0, result.stdout
    assert "No module named 'rebalancer'" in result.stderr + result.stdout


@pytest.mark.parametrize("partitioning", ["weighted", "hash"])
def test_cluster_run_with_ship_equals_a_local_run(spark, spark_cluster, cluster_input, tmp_path, partitioning):
    finished_before = len(spark_cluster.state().get("completedapps", []))
    cluster_out = tmp_path / "cluster"
    result = _run_on_cluster(spark_cluster, cluster_input, cluster_out, "--partitioning", partitioning, "--ship")
    assert result.returncode == 0, result.stderr[-3000:] + spark_cluster.log_tail()
    assert "shipping rebalancer to the executors: rebalancer-" in result.stdout
    # It ran as an application of the standalone master, on its two one-core workers.
    apps = spark_cluster.state().get("completedapps", [])
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
