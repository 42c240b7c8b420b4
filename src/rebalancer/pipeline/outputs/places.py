"""Where a run's directories may be: apart from each other, and never inside another run's.

A --report-dir inside the run's own output was written into the output's staging and failed only
at the swap; one inside an older run's output put plan.json among its Parquet files. Both are
refused before any work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rebalancer.pipeline.outputs.fs import MANIFEST, RunFS
from rebalancer.pipeline.outputs.manifest import Manifest
from rebalancer.pipeline.paths import local_path

if TYPE_CHECKING:
    from rebalancer.pipeline.outputs.mode import RunDir


def _inside(inner: str, outer: str) -> bool:
    """Location keys: `inner` is under `outer` (a local path's or a URI's, by its '/'s)."""
    return inner.startswith(outer.rstrip("/") + "/")


def refuse_nesting(dirs: list[RunDir]) -> None:
    """A run's directories are apart: one inside another (a --report-dir out/metrics) was written
    into the other's staging and failed only at the swap, after the whole run. The output with its
    own report (report-dir = output) is one directory, and a stream's OUTPUT/_checkpoint one of its
    entries; any other pair that is one directory, or nested, is refused before any work."""
    for run_dir in dirs:
        if "checkpoint" in run_dir.roles and len(run_dir.roles) > 1:
            raise ValueError(
                f"checkpoint {run_dir.location} is the {run_dir.field} too: a run's directories (output, "
                "report-dir, checkpoint) must be apart: give another --checkpoint"
            )
    for inner in dirs:
        for outer in dirs:
            if inner is not outer and _inside(inner.key, outer.key):
                raise ValueError(
                    f"{inner.field} {inner.location} is inside the {outer.field} {outer.location}: a run's "
                    f"directories (output, report-dir, checkpoint) must be apart: give another --{inner.field}"
                )


def refuse_inside_a_run(dirs: list[RunDir]) -> None:
    """No run writes inside another run's directory: a --report-dir old/metrics put plan.json among
    that run's Parquet files (its readers then fail), and an --output old/metrics/x a whole run in
    its dataset, which old's next overwrite removed. A local directory whose parent (any level up)
    holds a run's _manifest.json is refused; a remote one is not looked up."""
    for run_dir in dirs:
        local = local_path(run_dir.location)
        if local is None:
            continue
        for parent in local.resolve().parents:
            if not (parent / MANIFEST).exists():
                continue
            try:
                manifest = Manifest.from_json(RunFS(parent, None).read_json(parent / MANIFEST))
            except FileNotFoundError:
                continue
            except ValueError:
                break  # unreadable above here: nothing of ours is looked for further
            if manifest is None:
                continue  # not a run's manifest: not a run's directory
            raise ValueError(
                f"{run_dir.field} {run_dir.location} is inside {parent}, a run's "
                f"{manifest.role or 'directory'} (its {MANIFEST} says so): a run never "
                f"writes in another run's directory: give another --{run_dir.field}"
            )
