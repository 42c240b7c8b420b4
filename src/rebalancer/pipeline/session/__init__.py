"""The Spark session: building it (local, standalone, Connect), its logs, its workers and its errors.

The names below load on first use (`rebalancer._lazy`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rebalancer._lazy import lazy_exports

if TYPE_CHECKING:
    from rebalancer.pipeline.session.build import (
        build_session,
        default_parallelism,
        pipeline_conf,
        spark_error_reason,
    )
    from rebalancer.pipeline.session.connect import is_connect, is_connect_url

_HOMES = {
    "build_session": "rebalancer.pipeline.session.build",
    "default_parallelism": "rebalancer.pipeline.session.build",
    "is_connect": "rebalancer.pipeline.session.connect",
    "is_connect_url": "rebalancer.pipeline.session.connect",
    "pipeline_conf": "rebalancer.pipeline.session.build",
    "spark_error_reason": "rebalancer.pipeline.session.build",
}
__all__ = ["build_session", "default_parallelism", "is_connect", "is_connect_url", "pipeline_conf", "spark_error_reason"]
__getattr__, __dir__ = lazy_exports("rebalancer.pipeline.session", _HOMES)
