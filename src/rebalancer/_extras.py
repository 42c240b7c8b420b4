"""Optional extras: a component whose third-party packages are missing says which extra installs them.

The core (queue, balance, consumers, shedding without plots) needs only numpy. The rest is split into
extras so that a user of the BatchQueue does not install Spark:

- ``spark``: the pipeline (pyspark, pandas, pyarrow, and matplotlib for its report);
- ``kafka``: the batching producer and the mock cluster (aiokafka, confluent-kafka);
- ``plots``: the shedding plots (matplotlib);
- ``postgres``: the pipeline's PostgreSQL sink (psycopg, and pgpq for binary COPY);
- ``cli``: the ``rebalancer`` command's sub-commands (rich prints their tables; ``--help`` and
  ``--version`` work without it);
- ``pulsar``: reading a Pulsar broker.conf (javaproperties), and watching a running cluster through its
  admin REST API (httpx; ``rebalancer.shedding.live`` checks for it alone);
- ``all``: every extra.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator

from rebalancer import DISTRIBUTION

EXTRAS: dict[str, tuple[str, ...]] = {
    "spark": ("pyspark", "pandas", "pyarrow", "matplotlib"),
    "kafka": ("aiokafka", "confluent_kafka"),
    "plots": ("matplotlib",),
    "postgres": ("psycopg", "pgpq"),
    "cli": ("rich",),
    "pulsar": ("javaproperties",),
}


class MissingExtraError(ImportError):
    """A component was imported without the extra that installs its packages."""

    def __init__(self, component: str, extra: str, missing: list[str]) -> None:
        self.component = component
        self.extra = extra
        self.missing = tuple(missing)
        super().__init__(
            f"{component} needs {', '.join(missing)}, from the '{extra}' extra: "
            f"pip install '{DISTRIBUTION}[{extra}]'",
            name=missing[0],
        )


def require_extra(component: str, extra: str, modules: tuple[str, ...] | None = None) -> None:
    """Raise MissingExtraError naming `extra` unless its top-level `modules` are installed.

    find_spec does not import anything, so checking costs microseconds even for pyspark.
    """
    if extra not in EXTRAS:
        raise ValueError(f"extra must be one of {sorted(EXTRAS)}, got {extra!r}")
    missing = [m for m in (modules or EXTRAS[extra]) if _absent(m)]
    if missing:
        error = MissingExtraError(component, extra, missing)
        if _deferred:
            _deferred[-1].append(error)
            return
        raise error


# The lists `deferred_extras()` collects into, innermost last; empty: require_extra raises.
_deferred: list[list[MissingExtraError]] = []


@contextlib.contextmanager
def deferred_extras() -> Iterator[list[MissingExtraError]]:
    """Within: require_extra records a missing extra in the list yielded instead of raising.

    For the command's parser only: `rebalancer produce demo --help` must load the produce package's
    `commands` module (its flags) on an install without the 'kafka' extra, whose `__init__` checks
    the extra first. A module loaded this way must not be used for work: the command replaces its
    handlers with one that raises the recorded error, and forgets the modules loaded.
    """
    found: list[MissingExtraError] = []
    _deferred.append(found)
    try:
        yield found
    finally:
        _deferred.pop()


def _absent(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # a parent that fails to import, or a None in sys.modules
        return True
