"""What a run does with an output directory that already holds a run: Spark's SaveMode words.

- error (the default): refuse it, before any work, naming the flag;
- overwrite: clear the whole previous run first (data, report, plan, plan stores, checkpoint);
- append: add this run to it (a stream resuming from its checkpoint, a Kafka `?group=` run), but
  never a stream's batch_id=N/ outputs next to a batch run's date=…/ ones, nor the reverse.

Without this, two runs' outputs mixed silently: `out/metrics` held date= and batch_id= folders
and `pd.read_parquet("out/metrics")` read both, and a batch run's report.html outlived the stream
that followed it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from rebalancer._secrets import masks_errors
from rebalancer.pipeline.paths import HadoopFS, join, local_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

OUTPUT_MODES = ("error", "overwrite", "append")
REPORT_FILES = ("summary.json", "plan.json", "report.html")
# What only a run writes into its output: an output holding none of them is not a run's to clear.
# A quiet CLI run's Spark log (see rebalancer.pipeline.quiet), written from before the run starts.
SPARK_LOG = "spark.log"
# The claim a Kafka `?group=` run holds on its output (rebalancer.pipeline.kafka.claim): never cleared,
# since a run may hold it while clearing.
GROUP_LOCK = "_kafka_group.lock"
RUN_MARKERS = ("summary.json", "metrics", "quarantine", "_checkpoint")
# How a run keys its metrics: each kind of run, and the folders it writes under OUTPUT/metrics/.
BY_BATCH = "a stream's (or a Kafka group run's) outputs, metrics/batch_id=N/"
BY_DATE = "a batch run's outputs, metrics/date=…/"


def _entries(location: str | Path, spark: SparkSession | None) -> list[str] | None:
    """The names in directory `location`; None for a remote one while no session is up to look."""
    local = local_path(location)
    if local is not None:
        return sorted(p.name for p in local.iterdir()) if local.is_dir() else []
    if spark is None:
        return None
    return HadoopFS(spark).children(str(location))


def _layout(output: str | Path, spark: SparkSession | None) -> str | None:
    """How the run already in `output` keyed its metrics: by batch, by date, or None (no metrics)."""
    names = _entries(join(output, "metrics"), spark) or []
    if any(name.startswith("batch_id=") for name in names):
        return BY_BATCH
    if any(name.startswith("date=") for name in names):
        return BY_DATE
    return None


@masks_errors  # its messages name the output: a URI's password shows as ***
def check_output_mode(
    output: str | Path,
    mode: str,
    keyed_by_batch: bool,
    report_dir: str | Path | None = None,
    checkpoint: str | Path | None = None,
    spark: SparkSession | None = None,
) -> None:
    """Refuse, in one line naming --mode, an output this run must not write into as it is.

    A remote output is checked once `spark` is given (through its Hadoop FileSystem)."""
    if mode == "error" and checkpoint is not None and [n for n in _entries(checkpoint, spark) or [] if n[0] != "."]:
        raise ValueError(
            f"checkpoint {checkpoint} already holds a stream's state: --mode append resumes from it, "
            "--mode overwrite starts afresh"
        )
    entries = _entries(output, spark)
    if entries is None:
        return
    reports = [n for n in (_entries(report_dir, spark) or []) if n in REPORT_FILES] if report_dir is not None else []
    held = [name for name in entries if not name.startswith(".") and name != SPARK_LOG]
    held += reports
    if not held:
        return
    if mode == "error":
        shown = ", ".join(held[:3]) + (", …" if len(held) > 3 else "")
        raise ValueError(
            f"output {output} already holds a run's outputs ({shown}): --mode overwrite replaces them, "
            "--mode append adds this run to them"
        )
    if mode == "overwrite":
        if not any(name in RUN_MARKERS for name in entries) and not reports:
            raise ValueError(
                f"output {output} is not empty and holds no run's outputs (no summary.json, metrics/): "
                "--mode overwrite clears only a run's output directory"
            )
        return
    ours = BY_BATCH if keyed_by_batch else BY_DATE
    theirs = _layout(output, spark)
    if theirs is not None and theirs != ours:
        raise ValueError(
            f"output {output} holds {theirs}; --mode append would mix in {ours}: give another --output "
            "or --mode overwrite"
        )


@masks_errors
def clear_outputs(
    output: str | Path,
    mode: str,
    report_dir: str | Path | None,
    checkpoint: str | Path | None,
    spark: SparkSession | None,
) -> None:
    """--mode overwrite: remove the previous run whole (its checkpoint too: a stream that resumed
    from it would not be a new run); other modes leave everything as it is."""
    if mode != "overwrite":
        return
    check_output_mode(output, mode, False, report_dir, None, spark)
    # The log of this very run (OUTPUT/spark.log, being written since Spark started) is no previous run's.
    targets = [join(output, name) for name in _entries(output, spark) or [] if name not in (SPARK_LOG, GROUP_LOCK)]
    if report_dir is not None:
        targets += [join(report_dir, name) for name in (*REPORT_FILES, "_plans")]
    if checkpoint is not None:
        targets.append(checkpoint)
    for target in targets:
        local = local_path(target)
        if local is None:
            assert spark is not None  # _entries looked remotely through it
            HadoopFS(spark).delete(str(target))
        elif local.is_dir() and not local.is_symlink():
            shutil.rmtree(local)
        elif local.exists() or local.is_symlink():
            local.unlink()
