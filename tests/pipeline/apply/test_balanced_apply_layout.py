"""`rebalancer.pipeline.apply` is a package of small private modules (issue 35) whose public names
stay where callers import them from."""

from __future__ import annotations

from pathlib import Path

import rebalancer.pipeline
import rebalancer.pipeline.apply as apply

PIPELINE = Path(rebalancer.pipeline.__file__).parent
PUBLIC = ("balanced_apply", "PlanStore", "BalancedApply", "ApplyPlan", "TaskStats")


def test_apply_is_a_package_of_modules_of_at_most_400_lines() -> None:
    assert not (PIPELINE / "apply.py").exists()
    assert Path(apply.__file__).name == "__init__.py"
    sizes = {path.name: len(path.read_text().splitlines()) for path in (PIPELINE / "apply").glob("*.py")}
    assert len(sizes) >= 6 and max(sizes.values()) <= 400, sizes
    assert all(name.startswith("_") for name in sizes), sorted(sizes)  # private implementation modules


def test_the_public_names_stay_importable_from_pipeline_and_pipeline_apply() -> None:
    for name in PUBLIC:
        assert getattr(rebalancer.pipeline, name) is getattr(apply, name), name
    assert set(PUBLIC) <= set(apply.__all__)
    result = apply.BalancedApply.__dataclass_fields__
    assert {"frame", "plan"} <= set(result) and callable(apply.BalancedApply.task_stats)
