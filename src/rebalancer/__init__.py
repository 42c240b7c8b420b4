"""rebalancer: move partitioned work and keep it balanced, from drain threads to clusters."""

__version__ = "0.1.0"
