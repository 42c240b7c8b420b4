"""The producer's own errors (delivery errors from the brokers are aiokafka's `KafkaError`s)."""

from __future__ import annotations

from aiokafka.errors import KafkaError

__all__ = ["ProducerStoppedError", "TransactionAbortedError"]


class ProducerStoppedError(KafkaError):
    """`send` on a producer that is stopping or stopped, or a message a cancelled `stop()` gave up on.

    A KafkaError (hence a RuntimeError), so a failed delivery future always holds a KafkaError.
    """


class TransactionAbortedError(KafkaError):
    """The message was still unsent when `abort_transaction()` dropped it; it never reached a broker."""

    retriable = False
