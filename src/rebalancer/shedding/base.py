"""The two roles of Pulsar's modular load manager: shedding (what to unload) and placement (where to)."""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Iterable

from rebalancer.shedding.model import ClusterLoad, ShedderConfig


class LoadSheddingStrategy(ABC):
    """Pulsar's ``LoadSheddingStrategy``: picks bundles to unload; keeps state between calls."""

    name: str = "shedder"

    @abstractmethod
    def find_bundles_for_unloading(self, cluster: ClusterLoad, conf: ShedderConfig) -> dict[str, list[str]]:
        """Broker -> bundles to unload from it."""

    def on_active_brokers_change(self, active_brokers: set[str]) -> None:  # noqa: B027 - optional hook
        """Pulsar calls this when brokers join or leave; most strategies ignore it."""


class PlacementStrategy(ABC):
    """Pulsar's ``ModularLoadManagerStrategy``: chooses the broker for one bundle."""

    name: str = "placement"

    def __init__(self, seed: int | None = None) -> None:
        self._rng = random.Random(seed)

    @abstractmethod
    def select_broker(
        self, candidates: set[str], bundle: str, cluster: ClusterLoad, conf: ShedderConfig
    ) -> str | None:
        """The broker for ``bundle`` among ``candidates``, or None when there is none."""

    def draw(self, brokers: list[str]) -> str:
        """One of ``brokers`` at random, from the seeded generator (Pulsar's random pick among equals)."""
        return brokers[self._rng.randrange(len(brokers))]

    def choices(
        self, candidates: set[str], bundle: str, cluster: ClusterLoad, conf: ShedderConfig
    ) -> list[str]:
        """The brokers ``select_broker`` would draw from, sorted; one when it decides. Updates state as
        ``select_broker`` does. The conformance harness compares these sets, not random draws."""
        chosen = self.select_broker(candidates, bundle, cluster, conf)
        return [] if chosen is None else [chosen]

    def on_active_brokers_change(self, active_brokers: set[str]) -> None:  # noqa: B027 - optional hook
        """Forget state about brokers that left."""


class PlanBoundPlacement(PlacementStrategy):
    """Placement bound to the strategy's own shedding plan (PIP-364): a bundle it unloaded goes where
    the plan said. Keyed by bundle name, and an entry is dropped once used (Pulsar keyed it by a
    mutable stats object, so entries became unreachable: apache/pulsar#26246)."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(seed)
        self.bundle_broker_plan: dict[str, str] = {}

    def select_broker(
        self, candidates: set[str], bundle: str, cluster: ClusterLoad, conf: ShedderConfig
    ) -> str | None:
        ordered = sorted_candidates(candidates, cluster)
        cluster.check_bundle(bundle)
        if not ordered:
            return None
        planned = self.bundle_broker_plan.pop(bundle, None)
        if planned is not None and planned in candidates:
            return planned
        return self.unplanned_broker(ordered, bundle, cluster, conf)

    def choices(
        self, candidates: set[str], bundle: str, cluster: ClusterLoad, conf: ShedderConfig
    ) -> list[str]:
        ordered = sorted_candidates(candidates, cluster)
        cluster.check_bundle(bundle)
        if not ordered:
            return []
        planned = self.bundle_broker_plan.pop(bundle, None)
        if planned is not None and planned in candidates:
            return [planned]
        return self.unplanned_choices(ordered, bundle, cluster, conf)

    @abstractmethod
    def unplanned_broker(
        self, ordered: list[str], bundle: str, cluster: ClusterLoad, conf: ShedderConfig
    ) -> str:
        """The broker for a bundle the plan says nothing about (cluster start, broker failure)."""

    def unplanned_choices(
        self, ordered: list[str], bundle: str, cluster: ClusterLoad, conf: ShedderConfig
    ) -> list[str]:
        """What ``unplanned_broker`` draws from; a deterministic strategy's single choice by default."""
        return [self.unplanned_broker(ordered, bundle, cluster, conf)]


def sorted_candidates(candidates: Iterable[str], cluster: ClusterLoad) -> list[str]:
    """Validated candidates in a fixed order, so seeded random choices are reproducible."""
    return sorted(cluster.check_candidates(candidates))
