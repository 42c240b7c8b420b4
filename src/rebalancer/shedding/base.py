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

    def on_active_brokers_change(self, active_brokers: set[str]) -> None:  # noqa: B027 - optional hook
        """Forget state about brokers that left."""


def sorted_candidates(candidates: Iterable[str], cluster: ClusterLoad) -> list[str]:
    """Validated candidates in a fixed order, so seeded random choices are reproducible."""
    return sorted(cluster.check_candidates(candidates))


def descending(items: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """Java's stable sort by descending value (ties keep report order)."""
    return sorted(items, key=lambda item: -item[1])
