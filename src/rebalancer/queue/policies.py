"""How many drain workers and partitions a queue gets: callers describe the workload, not threads."""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass


def _cpu_count() -> int:
    return os.cpu_count() or 1


class BufferStrategy(enum.Enum):
    """What `produce()` does when the item's partition is full."""

    BLOCKING = "blocking"  # wait until a drain worker makes room
    IF_POSSIBLE = "if_possible"  # return False at once and count the item as dropped


@dataclass(frozen=True)
class ThreadPolicy:
    """A drain-worker count, fixed or relative to the machine's cores; always resolves to >= 1."""

    base: int = 0
    per_core: float = 0.0

    @classmethod
    def fixed(cls, threads: int) -> ThreadPolicy:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"ThreadPolicy.fixed: threads must be an int >= 1, got {threads!r}")
        return cls(base=threads)

    @classmethod
    def cpu_cores(cls, multiplier: float) -> ThreadPolicy:
        _check_multiplier("ThreadPolicy.cpu_cores", multiplier)
        return cls(per_core=float(multiplier))

    @classmethod
    def cpu_cores_with_base(cls, base: int, multiplier: float) -> ThreadPolicy:
        if isinstance(base, bool) or not isinstance(base, int) or base < 0:
            raise ValueError(f"ThreadPolicy.cpu_cores_with_base: base must be an int >= 0, got {base!r}")
        _check_multiplier("ThreadPolicy.cpu_cores_with_base", multiplier)
        return cls(base=base, per_core=float(multiplier))

    def resolve(self, cores: int | None = None) -> int:
        cores = _cpu_count() if cores is None else cores
        return max(1, self.base + round(self.per_core * cores))

    def __str__(self) -> str:
        if not self.per_core:
            return f"fixed({self.base})"
        if not self.base:
            return f"cpu_cores({self.per_core:g})"
        return f"cpu_cores_with_base({self.base}, {self.per_core:g})"


def _check_multiplier(where: str, multiplier: float) -> None:
    if isinstance(multiplier, bool) or not isinstance(multiplier, int | float) or not multiplier > 0:
        raise ValueError(f"{where}: multiplier must be a number > 0, got {multiplier!r}")


@dataclass(frozen=True)
class PartitionPolicy:
    """A partition count: fixed, a multiple of the drain workers, or adaptive to the handler count."""

    kind: str
    value: int

    @classmethod
    def fixed(cls, partitions: int) -> PartitionPolicy:
        _check_positive("PartitionPolicy.fixed: partitions", partitions)
        return cls("fixed", partitions)

    @classmethod
    def thread_multiply(cls, multiplier: int) -> PartitionPolicy:
        _check_positive("PartitionPolicy.thread_multiply: multiplier", multiplier)
        return cls("thread_multiply", multiplier)

    @classmethod
    def adaptive(cls, multiplier: int = 25) -> PartitionPolicy:
        _check_positive("PartitionPolicy.adaptive: multiplier", multiplier)
        return cls("adaptive", multiplier)

    @property
    def is_adaptive(self) -> bool:
        return self.kind == "adaptive"

    def resolve(self, threads: int, handlers: int = 0) -> int:
        """Adaptive: one partition per handler up to threads*multiplier, then half a partition per handler."""
        if self.kind == "fixed":
            return self.value
        if self.kind == "thread_multiply":
            return self.value * threads
        if handlers <= 0:
            return threads
        threshold = threads * self.value
        if handlers <= threshold:
            return handlers
        return threshold + (handlers - threshold) // 2

    def __str__(self) -> str:
        return f"{self.kind}({self.value})"


def _check_positive(what: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be an int >= 1, got {value!r}")
