"""rebalancer.pipeline: the PySpark telemetry pipeline (needs the 'spark' extra)."""

from rebalancer._extras import require_extra

require_extra("rebalancer.pipeline", "spark")
