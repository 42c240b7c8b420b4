"""Pure partition-to-worker planners shared by the queue, the consumers and the pipeline.

Nothing here starts threads or imports the rest of `rebalancer`.
"""

from rebalancer.balance.lpt import plan_lpt
from rebalancer.balance.metrics import imbalance, lower_bound, max_over_mean, max_over_median, spread
from rebalancer.balance.plan import Plan
from rebalancer.balance.rebalance import plan_rebalance

__all__ = [
    "Plan",
    "imbalance",
    "lower_bound",
    "max_over_mean",
    "max_over_median",
    "plan_lpt",
    "plan_rebalance",
    "spread",
]
