"""Checking where a run writes: never into its input, its checkpoint, or each other, and only where
it can write."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rebalancer._secrets import masks_errors
from rebalancer.pipeline.ingest.contract import (
    REASONS as REASONS,
)
from rebalancer.pipeline.ingest.files import InputSpec
from rebalancer.pipeline.paths import HadoopFS, OutputPath, local_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from rebalancer.pipeline.ingest.contract import Input


@masks_errors  # its messages name the output, input and checkpoint: a URI's password shows as ***
def check_output_location(
    out: str | Path | OutputPath,
    spec: InputSpec | Input,
    checkpoint: str | Path | OutputPath | None = None,
    spark: SparkSession | None = None,
    report_dir: str | Path | OutputPath | None = None,
) -> None:
    """Refuse an output that would clobber the input or cannot be written, and a checkpoint or
    report directory in (or around) the input: every location a run writes is checked against it.

    A local output (a path or a `file:` URI) is checked before Spark starts; a remote one (hdfs://,
    s3a://, ...) through Spark's Hadoop FileSystem, so it needs `spark`, and nothing local is touched.
    """
    out_text = out if isinstance(out, Path) else str(out)
    others = [
        (label, where if isinstance(where, Path) else str(where))
        for label, where in (("checkpoint", checkpoint), ("report-dir", report_dir))
        if where is not None
    ]
    local_out = local_path(out_text)
    local_others = [(label, local_path(where)) for label, where in others]
    if local_out is None or any(local is None for _, local in local_others):
        _check_remote_output(out_text, spec, [(label, where) for label, where in others], spark)
    if local_out is not None:
        _check_local_output(local_out, spec, [(label, local) for label, local in local_others if local is not None])
    for label, local in local_others:
        if local is not None:
            check_writable(label, local)


def check_writable(label: str, location: Path, inner: tuple[str, ...] = ()) -> None:
    """A local directory a run writes in (and its `inner` subdirectories, where they exist) can be
    written, or created: else a ValueError naming `label` and the location, before Spark starts
    (`--report-dir /proc/self` failed only once the run was done). Nothing is created to find out.
    A URI is not checked here: only its filesystem, through Spark, can say."""
    if location.exists() and not location.is_dir():
        raise ValueError(f"{label} must be a directory, got a file: {location}")
    existing = location
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{label}: cannot create {location}: {existing} is not a directory")
    if existing != location and not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{label}: cannot create {location}: {existing} is not writable")
    for directory in (location, *(location / name for name in inner)):
        if directory.is_dir() and not os.access(directory, os.W_OK | os.X_OK):
            where = "" if directory == location else f": {directory} is not"
            raise ValueError(f"{label} {location} is not writable{where}")


def _local_source(spec: Any) -> Path | None:  # an InputSpec, or a topic (no files)
    """The input's resolved local path; None for a Kafka topic or a remote URI (nothing local to overlap)."""
    uri = getattr(spec, "uri", None)  # a KafkaInput has no files and no uri
    if not spec.files or (uri is not None and local_path(uri) is None):
        return None
    return spec.path.resolve()


def _check_local_output(out: Path, spec: Any, others: list[tuple[str, Path]]) -> None:
    target = out.resolve()
    source = _local_source(spec)
    if out.exists() and not out.is_dir():
        if target == source:
            raise ValueError(f"output {out} is the input file; give a directory for the results")
        raise ValueError(f"output must be a directory, got a file: {out}")
    if target == source:
        raise ValueError(f"output {out} is the input directory; a re-run would read its own results")
    if source in target.parents:
        raise ValueError(f"output {out} is inside the input {spec.path}; a re-run would read its own results")
    if source is not None and target in source.parents:
        raise ValueError(
            f"input {spec.path} is inside the output {out}; the run would overwrite what it reads"
        )
    for label, location in others:
        where = location.resolve()
        if source is not None and (where == source or source in where.parents or where in source.parents):
            raise ValueError(f"{label} {location} overlaps the input {spec.path}")
    check_writable("output", out, ("metrics", "quarantine"))  # written in place by an append


def _under(inner: str, outer: str) -> bool:
    return inner.startswith(outer.rstrip("/") + "/")


def _check_remote_output(out: str | Path, spec: Any, others: list[tuple[str, str | Path]], spark: Any) -> None:
    """The same refusals, with URIs qualified by their Hadoop filesystem (scheme and authority filled in)."""
    if spark is None:
        raise ValueError(f"output {out} is on a remote filesystem: it is checked once Spark has started")
    fs = HadoopFS(spark)
    uri = getattr(spec, "uri", None)
    source = fs.qualified(uri or str(spec.path.resolve())) if spec.files else None
    shown = uri or spec.path
    if local_path(out) is None:
        status = fs.status(str(out))
        target = fs.qualified(str(out))
        if status is not None and not status.isDirectory():
            raise ValueError(f"output must be a directory, got a file: {out}")
        if source is not None and target == source:
            raise ValueError(f"output {out} is the input directory; a re-run would read its own results")
        if source is not None and _under(target, source):
            raise ValueError(f"output {out} is inside the input {shown}; a re-run would read its own results")
        if source is not None and _under(source, target):
            raise ValueError(
                f"input {shown} is inside the output {out}; the run would overwrite what it reads"
            )
    for label, location in others:
        where = fs.qualified(str(location))
        if source is not None and (where == source or _under(where, source) or _under(source, where)):
            raise ValueError(f"{label} {location} overlaps the input {shown}")
