"""DIR/_manifest.json: what a run records of a directory it wrote, the one place it is written and read.

A manifest names the run (its token), the entries it wrote (only those are ever replaced), what
the directory is to runs (its role: output, report-dir, checkpoint; no run writes it in another),
and, in an output keyed by batch, whose batches it holds: who numbers them (`batches`) and, for a
Kafka `?group=` run, the last range read (`group`: the cluster's id and the offsets). The names a
run writes, by role, are here too: a directory without a manifest counts as a run's only those.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rebalancer import __version__
from rebalancer.pipeline.outputs.fs import MANIFEST, RunFS, at

REPORT_FILES = ("summary.json", "plan.json", "report.html")
# A quiet CLI run's Spark log (see rebalancer.pipeline.session.quiet), written in place from before the run
# starts: the latest run's log, never swapped, never alone a reason to refuse a directory.
SPARK_LOG = "spark.log"
# The claim a Kafka `?group=` run holds on its output (rebalancer.pipeline.outputs.claim): no run's
# entry, so never listed in a manifest, replaced or cleared (a run may hold it while it swaps).
GROUP_LOCK = "_kafka_group.lock"
PLANS = "_plans"  # the handlers' plan stores
CHECKPOINT = "_checkpoint"  # a stream's default checkpoint, OUTPUT/_checkpoint
COMPARE_SCRATCH = "_compare_hash"  # --compare-hash's passes, removed after
CHECKPOINT_ENTRIES = ("query", "rebalancer")  # Spark's checkpoint, and the rebalancer's state beside it
# The names a run writes, by what the directory is to it: what a directory without a manifest
# counts as a run's.
KNOWN = {
    "output": frozenset(
        {"metrics", "quarantine", *REPORT_FILES, PLANS, CHECKPOINT, SPARK_LOG, COMPARE_SCRATCH}
    ),
    "report-dir": frozenset({*REPORT_FILES, PLANS, SPARK_LOG}),
    "checkpoint": frozenset(CHECKPOINT_ENTRIES),
}


def holds_checkpoint(fs: RunFS, bases: list[str | Path]) -> bool:
    """Spark's checkpoint (query/metadata) or the rebalancer's state (rebalancer/state.json) in a base."""
    marks = (("query", "metadata"), ("rebalancer", "state.json"))
    return any(fs.exists(at(base, *mark)) for base in bases for mark in marks)


def _offsets(data: object) -> dict[int, int] | None:
    """{partition: offset} from JSON's {"0": 12, …}; None if it is not that."""
    if not isinstance(data, dict):
        return None
    try:
        found = {int(p): o for p, o in data.items()}
    except (TypeError, ValueError):
        return None
    ok = all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in found.values())
    return found if ok else None


@dataclass(frozen=True)
class GroupRange:
    """A Kafka `?group=` run's range: the cluster it read (its id; None when not known, as in a
    summary.json from before clusters were recorded), and each partition's first and next offset.
    A group's batch id is the sum of its start offsets, so an append into an output holding another
    cluster's batches, or a range that went back, would number a batch over an earlier one."""

    cluster: str | None
    start: Mapping[int, int]
    end: Mapping[int, int]

    @property
    def batch_id(self) -> int:
        return sum(self.start.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "start": {str(p): o for p, o in sorted(self.start.items())},
            "end": {str(p): o for p, o in sorted(self.end.items())},
        }

    @classmethod
    def from_json(cls, data: object) -> GroupRange | None:
        """A range from a manifest or a summary's `kafka_group`; None if `data` is not one."""
        if not isinstance(data, dict):
            return None
        cluster, start, end = data.get("cluster"), _offsets(data.get("start")), _offsets(data.get("end"))
        if start is None or end is None or not (cluster is None or isinstance(cluster, str)):
            return None
        return cls(cluster, start, end)


@dataclass(frozen=True)
class Manifest:
    run: str  # the token of the run that wrote it
    entries: frozenset[str]
    role: str | None = None  # RunDir.role of the run that wrote it; None in a manifest older than roles
    batches: str | None = None  # RunDir.batches of the run that wrote it (an output keyed by batch)
    group: GroupRange | None = None  # the last group run's range (an output of `?group=` runs)

    def to_json(self) -> dict[str, Any]:
        manifest: dict[str, Any] = {
            "version": 1, "written_by": f"rebalancer {__version__}", "run": self.run, "entries": sorted(self.entries)
        }  # fmt: skip
        if self.role is not None:
            manifest["role"] = self.role
        if self.batches is not None:
            manifest["batches"] = self.batches
        if self.group is not None:
            manifest["group"] = self.group.to_json()
        return manifest

    @classmethod
    def from_json(cls, data: object) -> Manifest | None:
        """A manifest's fields, or None if `data` is not a run's manifest."""
        if not isinstance(data, dict):
            return None
        entries, run, role, batches = (
            data.get("entries"),
            data.get("run"),
            data.get("role"),
            data.get("batches"),
        )
        group = GroupRange.from_json(data["group"]) if "group" in data else None
        if (
            not isinstance(entries, list)
            or not all(isinstance(n, str) for n in entries)
            or not isinstance(run, str)
            or (role is not None and role not in KNOWN)
            or (batches is not None and not isinstance(batches, str))
            or ("group" in data and group is None)
        ):
            return None
        return cls(run, frozenset(entries), role, batches, group)


def read_manifest(fs: RunFS, location: str | Path) -> Manifest | None:
    """DIR/_manifest.json; None when there is none. One that cannot be used is refused, naming it:
    without it, what in the directory is a run's is not known."""
    path = at(location, MANIFEST)
    try:
        data = fs.read_json(path)
    except FileNotFoundError:
        return None
    manifest = Manifest.from_json(data)
    if manifest is None and isinstance(data, dict) and "group" in data:
        if Manifest.from_json({key: value for key, value in data.items() if key != "group"}) is not None:
            raise ValueError(
                f"{path}: its group record is not a Kafka group run's range ({{cluster, start, end}}, "
                "each offset an int >= 0): restore it, or remove it"
            )
    if manifest is None:
        raise ValueError(f"{path} is not a run's manifest ({{run, entries}}): restore it, or remove it")
    return manifest
