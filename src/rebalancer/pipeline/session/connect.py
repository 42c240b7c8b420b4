"""Whether a session or an address is Spark Connect: a leaf module, so that modules `session`
imports (such as `quiet`) can ask too."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["CONNECT_SCHEME", "is_connect", "is_connect_url"]

CONNECT_SCHEME = "sc://"


def is_connect_url(master: str | None) -> bool:
    """A Spark Connect address (`sc://host:port`), which a session reaches over gRPC, with no JVM here."""
    return bool(master) and str(master).lower().startswith(CONNECT_SCHEME)


def is_connect(spark: SparkSession) -> bool:
    """A Spark Connect session: no SparkContext, no accumulators, no JVM in this process.

    Checked by class, not by `spark.sparkContext` (which raises there), and without importing the
    Connect client (it needs grpcio, which a classic install may lack).
    """
    return type(spark).__module__.startswith("pyspark.sql.connect")
