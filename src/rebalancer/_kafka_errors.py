"""The Kafka clients' errors that no command turned into its own words, in one line: the safety net
of every command that talks to Kafka (`pipeline`, `produce`, `queue`), on any install with a Kafka
client, PySpark or not. `rebalancer._command` looks this module up by name once a client is loaded.

A command that knows its servers names them itself (a ValueError); this is the net below that.
"""

from __future__ import annotations

from rebalancer._command import Explained, imported_errors
from rebalancer._secrets import masked_text

__all__ = ["client_errors", "explain", "log_note"]


def client_errors() -> tuple[type[BaseException], ...]:
    """The Kafka clients' base errors, of those clients already imported."""
    return imported_errors(("aiokafka.errors", "KafkaError"), ("confluent_kafka", "KafkaException"))


def explain(exc: BaseException, verbose: int) -> Explained | None:
    """`Kafka: <ErrorClass>: <text>` for a client's error, else None."""
    if not isinstance(exc, client_errors()):
        return None
    return Explained(f"Kafka: {type(exc).__name__}: {masked_text(_text(exc))}")


def log_note(exc: BaseException | None) -> str:
    """The clients keep no log file of ours: nothing to add."""
    return ""


def _text(exc: BaseException) -> str:
    """The error's own text without aiokafka's repeated `ClassName: ` prefix."""
    text = str(exc)
    prefix = f"{type(exc).__name__}: "
    return text[len(prefix):] if text.startswith(prefix) else text
