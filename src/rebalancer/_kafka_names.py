"""Kafka's topic-name rule, in one place: the test clusters (`testing`) and the pipeline's
`kafka://HOST:PORT/TOPIC` inputs and `produce` command (`pipeline`) check names by it, so a name a
real broker refuses fails where it is given, in one line, not at the broker.

A neutral module (stdlib and `_numbers` only): `pipeline` and `testing` must not import each other.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from rebalancer._numbers import shown

__all__ = ["TOPIC_NAME_MAX", "check_topic_name"]

# org.apache.kafka.common.internals.Topic: MAX_NAME_LENGTH and the legal characters.
TOPIC_NAME_MAX = 249
_TOPIC_CHARS = re.compile(r"[a-zA-Z0-9._-]+", re.ASCII)


def check_topic_name(name: object, *, field: str = "topic name", show: Callable[[str], str] = shown) -> str:
    """`name` if Kafka's brokers take it as a topic (Topic.validate: 1..249 ASCII letters, digits,
    '.', '_', '-'; not '.' or '..'); else ValueError naming `field` and the name as `show` renders it
    (a bounded repr; a caller whose names may hold a pasted secret masks it there)."""
    if not isinstance(name, str):
        raise ValueError(f"{field} must be a str, got {shown(name)}")
    if not name:
        raise ValueError(f"{field} must not be empty, got ''")
    if name in (".", ".."):
        raise ValueError(f"{field} cannot be '.' or '..', got {name!r}")
    if len(name) > TOPIC_NAME_MAX:
        raise ValueError(f"{field} must be at most {TOPIC_NAME_MAX} characters, got {len(name)}: {show(name)}")
    if not _TOPIC_CHARS.fullmatch(name):
        raise ValueError(f"{field} may hold only ASCII letters, digits, '.', '_' and '-', got {show(name)}")
    return name
