"""`balanced_apply`: `df.groupBy(key).applyInPandas(func, schema)` with keys placed by measured cost.

Spark places a grouped map's keys by hash, so one heavy key (or a task that drew many small ones)
becomes a straggler, and AQE splits skewed joins, never groups. Here the keys are counted first,
weighted by rows or by the seconds their calls took last time (`PlanStore`), and placed on slots
by `rebalancer.balance`; each row gets an int slot key that Spark's hash partitioner sends exactly
to its slot (`slots.partition_keys`), so one `repartition(n, slot key)` realises the plan and the
grouping reuses that partitioning. `help(balanced_apply)` has the contract.

The modules: `_keys` (the keys, as `groupBy` resolves them), `_func` (func's form and checks, as
applyInPandas decides them), `_key_plan` (counting and planning), `_store` (the plan store), `_slot_columns`
(each row's slot and item), `_convert` and `_grouped` (the grouped execution), `_result` (what is
returned), `_call` (`balanced_apply` itself); the task clock is `rebalancer.pipeline.clock`, shared
with the pipeline's handlers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rebalancer._lazy import lazy_exports

if TYPE_CHECKING:
    from rebalancer.pipeline.apply._call import balanced_apply, parse_schema
    from rebalancer.pipeline.apply._func import check_one_argument, func_form
    from rebalancer.pipeline.apply._items import COSTS, ApplyItem
    from rebalancer.pipeline.apply._key_plan import ApplyPlan, KeyCost, plan_keys
    from rebalancer.pipeline.apply._result import BalancedApply, TaskStats, wait_per_row
    from rebalancer.pipeline.apply._slot_columns import LOOKUP_ITEMS
    from rebalancer.pipeline.apply._store import STORE_VERSION, PlanStore, is_store_file, stored_plan
    from rebalancer.pipeline.clock import TaskClock, own_clock, queued_seconds

_HOMES = {
    "ApplyItem": "rebalancer.pipeline.apply._items",
    "ApplyPlan": "rebalancer.pipeline.apply._key_plan",
    "BalancedApply": "rebalancer.pipeline.apply._result",
    "COSTS": "rebalancer.pipeline.apply._items",
    "KeyCost": "rebalancer.pipeline.apply._key_plan",
    "LOOKUP_ITEMS": "rebalancer.pipeline.apply._slot_columns",
    "PlanStore": "rebalancer.pipeline.apply._store",
    "STORE_VERSION": "rebalancer.pipeline.apply._store",
    "TaskClock": "rebalancer.pipeline.clock",
    "TaskStats": "rebalancer.pipeline.apply._result",
    "balanced_apply": "rebalancer.pipeline.apply._call",
    "check_one_argument": "rebalancer.pipeline.apply._func",
    "func_form": "rebalancer.pipeline.apply._func",
    "is_store_file": "rebalancer.pipeline.apply._store",
    "own_clock": "rebalancer.pipeline.clock",
    "parse_schema": "rebalancer.pipeline.apply._call",
    "plan_keys": "rebalancer.pipeline.apply._key_plan",
    "queued_seconds": "rebalancer.pipeline.clock",
    "stored_plan": "rebalancer.pipeline.apply._store",
    "wait_per_row": "rebalancer.pipeline.apply._result",
}
__all__ = ["COSTS", "LOOKUP_ITEMS", "STORE_VERSION", "ApplyItem", "ApplyPlan", "BalancedApply", "KeyCost", "PlanStore", "TaskClock", "TaskStats", "balanced_apply", "check_one_argument", "func_form", "is_store_file", "own_clock", "parse_schema", "plan_keys", "queued_seconds", "stored_plan", "wait_per_row"]
__getattr__, __dir__ = lazy_exports("rebalancer.pipeline.apply", _HOMES)
