"""rebalancer: move partitioned work and keep it balanced, from drain threads to clusters."""

__version__ = "0.1.0"
# The name on PyPI (`pip install partition-rebalancer`): `rebalancer` there is another project, whose
# import package is also `rebalancer`, so the two must not share one environment.
DISTRIBUTION = "partition-rebalancer"
