"""Py4J's line per JVM call, with no value in it: only the call's shape is logged.

At DEBUG (`rebalancer -vvv`, or an application whose root logger is at DEBUG) Py4J logs every
command it sends and every answer, arguments included: a `kafka.sasl.password` reader option, an
output URI's password, the bytes of a pickled function (which may hold a PostgreSQL URL) and
Py4J's own gateway token. Which string is a secret cannot be told from the command, so every
string and bytes value is hidden; the command, its target object, the method and the other typed
values (references, numbers, booleans) stay, which is what such a line is read for.
"""

from __future__ import annotations

import logging

from py4j import protocol

from rebalancer._secrets import MASK

__all__ = ["PY4J_LOGGERS", "Py4JValuesHidden", "hide_py4j_values", "shape"]

PY4J_LOGGERS = ("py4j.clientserver", "py4j.java_gateway")
_PREFIXES = ("Command to send: ", "Answer received: ")
# Commands whose lines after the first `n` are typed values (the rest are names: target, method).
_HEADERS = {
    protocol.CALL_COMMAND_NAME: 3,  # c, target, method
    protocol.STREAM_COMMAND_NAME: 3,
    protocol.CONSTRUCTOR_COMMAND_NAME: 2,  # i, class
    protocol.ARRAY_COMMAND_NAME: 3,  # a, sub-command, target
    protocol.LIST_COMMAND_NAME: 3,
    protocol.FIELD_COMMAND_NAME: 4,  # f, sub-command, target, field
}
# Typed values that never hold text: shown as they are.
_SHOWN_TYPES = frozenset(
    {
        protocol.REFERENCE_TYPE,
        protocol.INTEGER_TYPE,
        protocol.LONG_TYPE,
        protocol.BOOLEAN_TYPE,
        protocol.DOUBLE_TYPE,
        protocol.DECIMAL_TYPE,
        protocol.NULL_TYPE,
        protocol.VOID_TYPE,
        protocol.END,
    }
)


def _value(line: str) -> str:
    return line if line[:1] in _SHOWN_TYPES else f"{line[:1]}{MASK}"


def shape(text: str) -> str:
    """A Py4J command or answer on one line, each string, bytes or unknown value as `<type>***`.

    A command Py4J's protocol gives no typed arguments (authentication, reflection, imports...)
    keeps its first line only: what follows is names or a token, not told apart here.
    """
    lines = text.rstrip("\n").split("\n")
    if lines[0].startswith(protocol.RETURN_MESSAGE):  # "!y" or "!x", then one typed value
        head = lines[0][:2]
        return " ".join([head + _value(lines[0][2:]) if len(lines[0]) > 2 else head, *map(_value, lines[1:])])
    header = _HEADERS.get(lines[0] + "\n")
    if header is None:
        hidden = len(lines) - 1
        return lines[0] + (f" ({hidden} line{'s' if hidden != 1 else ''} hidden)" if hidden else "")
    return " ".join([*lines[:header], *(_value(line) for line in lines[header:] if line)])


class Py4JValuesHidden(logging.Filter):
    """Rewrites Py4J's "Command to send" and "Answer received" records to their `shape`."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        for prefix in _PREFIXES:
            if message.startswith(prefix):
                record.msg, record.args = prefix + shape(message[len(prefix) :]), ()
                break
        return True


_FILTER = Py4JValuesHidden()


def hide_py4j_values() -> None:
    """Put the filter on Py4J's loggers (once): a filter on a logger sees the records it logs."""
    for name in PY4J_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
