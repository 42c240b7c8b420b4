"""Lazy package exports: a package names its public names and the modules that define them, and
each module loads on first use. `import rebalancer.pipeline` stays cheap (no PySpark), and a package
`__init__` importing its rooms eagerly would run their imports before the room that asked is done."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package` that imports `homes[name]` on first use of `name`."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(home), name)

    return __getattr__
