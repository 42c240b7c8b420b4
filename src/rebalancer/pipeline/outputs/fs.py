"""The few filesystem operations the output modes need, on a local directory (Python's I/O) or a
remote one (Spark's Hadoop FileSystem), and the names of a run's staging directories.

A run in error or overwrite mode writes DIR/.rebalancer-staging-TOKEN/ and, when it swaps itself
in, moves the previous run's entries to DIR/.rebalancer-old-TOKEN/ (see `outputs.swap`): both are
hidden (a leading '.'), so Spark's and pandas' readers never list them.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rebalancer.pipeline.paths import HadoopFS, UriPath, join, local_path, write_json

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MANIFEST = "_manifest.json"  # DIR/_manifest.json: the entries the last run wrote in DIR
STAGING = ".rebalancer-staging-"  # + token: where a run in error or overwrite mode writes
ASIDE = ".rebalancer-old-"  # + token: the previous run's entries, while the new run is swapped in
INFO = "_staging.json"  # STAGING + token/_staging.json: which run it is, and (once swapping) what moves


def location_key(location: str | Path) -> str:
    """What two spellings of one directory share: a local path resolved, a URI without its last '/'."""
    local = local_path(location)
    return str(local.resolve()) if local is not None else str(location).rstrip("/")


class RunFS:
    """Listing, moving and removing under one directory tree, local or remote.

    A remote location needs `spark` (its Hadoop FileSystem); without it `RunFS.reach` gives None."""

    def __init__(self, location: str | Path, spark: SparkSession | None) -> None:
        self.local = local_path(location) is not None
        self.hadoop = None if self.local else HadoopFS(spark) if spark is not None else None
        if not self.local and self.hadoop is None:
            raise ValueError(f"{location} is on a remote filesystem: it needs a Spark session to be reached")

    @classmethod
    def reach(cls, location: str | Path, spark: SparkSession | None) -> RunFS | None:
        """A RunFS for `location`, or None for a remote one while no session is up to reach it."""
        if local_path(location) is None and spark is None:
            return None
        return cls(location, spark)

    def _remote(self) -> HadoopFS:
        assert self.hadoop is not None
        return self.hadoop

    def names(self, where: str | Path) -> list[str]:
        """The names directly in directory `where` (none if it is absent or not a directory)."""
        local = local_path(where)
        if local is not None:
            return sorted(p.name for p in local.iterdir()) if local.is_dir() else []
        return self._remote().children(str(where))

    def exists(self, where: str | Path) -> bool:
        local = local_path(where)
        if local is not None:
            return local.exists() or local.is_symlink()
        return self._remote().status(str(where)) is not None

    def mkdir(self, where: str | Path) -> None:
        local = local_path(where)
        if local is not None:
            local.mkdir(parents=True, exist_ok=True)
        else:
            self._remote().mkdirs(str(where))

    def move(self, source: str | Path, target: str | Path) -> None:
        """Rename `source` to `target`, which must not exist (a rename never replaces anything here)."""
        if self.exists(target):
            raise ValueError(f"cannot move {source} to {target}: something is there already")
        local = local_path(source)
        if local is not None:
            os.rename(local, str(local_path(target)))
        else:
            self._remote().move(str(source), str(target))

    def remove(self, where: str | Path) -> None:
        """Remove `where`, a directory with everything under it (nothing there is fine)."""
        local = local_path(where)
        if local is None:
            self._remote().delete(str(where))
        elif local.is_dir() and not local.is_symlink():
            shutil.rmtree(local)
        elif local.exists() or local.is_symlink():
            local.unlink()

    def read_json(self, where: str | Path) -> Any:
        """The JSON in file `where`; FileNotFoundError if absent, ValueError if it cannot be read."""
        local = local_path(where)
        try:
            text = local.read_text() if local is not None else self._remote().read_bytes(str(where)).decode()
            return json.loads(text)
        except FileNotFoundError:
            raise
        except (OSError, ValueError) as exc:  # not JSON, not UTF-8, unreadable
            raise ValueError(f"{where} cannot be read: {type(exc).__name__}: {' '.join(str(exc).split())}") from None

    def write_json(self, where: str | Path, payload: dict[str, Any]) -> None:
        """Written beside, then renamed over: a reader sees the old file or the new one."""
        local = local_path(where)
        write_json(local if local is not None else UriPath(str(where), self._remote()), payload)


def staging_name(token: str) -> str:
    return STAGING + token


def aside_name(token: str) -> str:
    return ASIDE + token


def leftover_tokens(names: list[str]) -> list[str]:
    """The tokens of the staging and set-aside directories among `names`, oldest first."""
    found = {name[len(prefix) :] for name in names for prefix in (STAGING, ASIDE) if name.startswith(prefix)}
    return sorted(found)


def at(location: str | Path, *names: str) -> str | Path:
    for name in names:
        location = join(location, name)
    return location
