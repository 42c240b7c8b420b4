"""Lazy package exports: a package names its public names and the modules that define them, and
each module loads on first use. `import rebalancer.pipeline` stays cheap (no PySpark), and a package
`__init__` importing its rooms eagerly would run their imports before the room that asked is done.

A name must not be the name of one of the package's own modules: importing that module would set
the package's attribute to the module, hiding the name (the layout test checks it).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(package: str, homes: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module `__getattr__` for `package` that imports `homes[name]` on first use of `name`, and a
    `__dir__` that lists those names with what the package holds already (`dir()`, `help()`)."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(home), name)

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *homes})

    return __getattr__, __dir__
