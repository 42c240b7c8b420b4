"""Shipping the installed `rebalancer` to Spark's executors, whose Python may not have it.

The pipeline's handlers run in the executors' Python workers, which import `rebalancer` to unpickle
them. A zip of the package directory on their Python path is enough: `SparkContext.addPyFile` on a
classic session (what spark-submit's `--py-files` and `spark.submit.pyFiles` do), `addArtifacts(...,
pyfile=True)` on Spark Connect. Only rebalancer's own pure-Python code travels: numpy, pandas and
pyarrow must be on the executors' Python already, or travel as a packed environment with
`spark.archives` (docs/pipeline.md, "Running on a cluster").

    rebalancer pipeline ship dist/        # writes dist/rebalancer-VERSION.zip for --py-files
"""

from __future__ import annotations

import logging
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import rebalancer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# Compiled files are the interpreter's own business, and differ between the driver's and executors' Pythons.
_SKIPPED_SUFFIXES = (".pyc", ".pyo")


def package_dir() -> Path:
    """The directory `rebalancer` is imported from (an installed or an editable copy alike)."""
    return Path(rebalancer.__file__).resolve().parent


def package_zip(dest: str | Path) -> Path:
    """The installed package as a zip whose top level is `rebalancer/`, ready for `--py-files`.

    `dest` is the zip's path (a name ending in .zip), or a directory to write
    `rebalancer-VERSION.zip` into; either's missing directories are created, so `ship dist/` works
    in a fresh clone.
    """
    target = Path(dest)
    if target.is_dir() or target.suffix.lower() != ".zip":
        if target.exists() and not target.is_dir():
            raise ValueError(f"dest must be a directory or a .zip path, got the file {dest}")
        target.mkdir(parents=True, exist_ok=True)
        target = target / f"rebalancer-{rebalancer.__version__}.zip"
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
    root = package_dir()
    count = 0
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in sorted(root.rglob("*")):
            if not file.is_file() or "__pycache__" in file.parts or file.suffix in _SKIPPED_SUFFIXES:
                continue
            archive.write(file, (Path("rebalancer") / file.relative_to(root)).as_posix())
            count += 1
    log.info("packaged %d files of %s into %s", count, root, target)
    return target


def ship_package(spark: SparkSession, archive: str | Path) -> None:
    """Puts the zip `archive` on the Python path of every executor of `spark`, for its later tasks.

    The file must stay where it is while the session runs: executors fetch it from the driver when
    their first task starts.
    """
    try:
        context = spark.sparkContext
    except Exception:  # Spark Connect has no SparkContext
        context = None
    if context is not None:
        context.addPyFile(str(archive))
    else:
        spark.addArtifacts(str(archive), pyfile=True)
    log.info("shipped %s to the executors", archive)


@contextmanager
def shipped(spark: SparkSession) -> Iterator[Path]:
    """The installed package on the executors' Python path for the duration of the block; the zip is
    removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="rebalancer-ship-") as work:
        archive = package_zip(work)
        ship_package(spark, archive)
        yield archive


if __name__ == "__main__":  # `python -m rebalancer.pipeline.ship DEST`, as before: the command's
    from rebalancer._command import main

    sys.exit(main(["pipeline", "ship", *sys.argv[1:]]))
