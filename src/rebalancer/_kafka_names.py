"""Kafka's topic-name rule, in one place: the test clusters (`testing`) and the pipeline's
`kafka://HOST:PORT/TOPIC` inputs and `produce` command (`pipeline`) check names by it, so a name a
real broker refuses fails where it is given, in one line, not at the broker.

A neutral module (stdlib and `_numbers` only): `pipeline` and `testing` must not import each other.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from rebalancer._numbers import shown

__all__ = ["INTERNAL_TOPICS", "TOPIC_NAME_MAX", "TOPIC_PARTITIONS_MAX", "check_topic_name"]

# org.apache.kafka.common.internals.Topic: MAX_NAME_LENGTH and the legal characters.
TOPIC_NAME_MAX = 249
# Topics Kafka keeps for itself (Topic.INTERNAL_TOPICS, and KRaft's metadata log): a client may read
# them, but a broker refuses a producer's records for them, and a topic made under one of these
# names would stand in for the coordinators' own (the broker refuses to create __cluster_metadata).
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state", "__share_group_state", "__cluster_metadata")
# The most partitions one topic can be created with: a KRaft controller writes a CreateTopics as one
# batch of at most 10000 metadata records (QuorumController.MAX_RECORDS_PER_USER_OP), a TopicRecord
# and one PartitionRecord per partition; Kafka 4.3.1 answers 10000 with POLICY_VIOLATION. librdkafka's
# mock checks nothing and allocates every partition at once (10**9 aborted the process).
TOPIC_PARTITIONS_MAX = 9999
_TOPIC_CHARS = re.compile(r"[a-zA-Z0-9._-]+", re.ASCII)


def check_topic_name(
    name: object, *, field: str = "topic name", show: Callable[[str], str] = shown, internal: bool = True
) -> str:
    """`name` if Kafka's brokers take it as a topic (Topic.validate: 1..249 ASCII letters, digits,
    '.', '_', '-'; not '.' or '..'); else ValueError naming `field` and the name as `show` renders it
    (a bounded repr; a caller whose names may hold a pasted secret masks it there). `internal=False`
    (a topic to create or write to) also refuses Kafka's own topics, INTERNAL_TOPICS."""
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
    if not internal and name in INTERNAL_TOPICS:
        raise ValueError(f"{field} must not be one of Kafka's own topics ({', '.join(INTERNAL_TOPICS)}), got {name!r}")
    return name
