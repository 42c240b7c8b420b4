"""rebalancer.pipeline."""
