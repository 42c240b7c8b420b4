"""librdkafka's log lines as Python log records, for every confluent-kafka client the library makes.

Without a `logger`, librdkafka writes its lines (`%3|1700000000.123|FAIL|rdkafka#consumer-1| ...`)
straight to stderr, where a user cannot silence them: a refused connection is logged at every
reconnect backoff, and a client that outlives its brokers logs each disconnect.
"""

from __future__ import annotations

import logging

librdkafka_log = logging.getLogger("rebalancer.kafka.librdkafka")


class LibrdkafkaLog:
    """confluent-kafka's `logger`: librdkafka's lines at INFO (its errors) or DEBUG (the rest) on the
    `rebalancer.kafka.librdkafka` logger, so they show with -v only; in the Python workers, where
    nothing configures logging, logging's last-resort handler passes warnings and above only."""

    def log(self, level: int, fmt: str, *args: object) -> None:
        librdkafka_log.log(logging.INFO if level >= logging.ERROR else logging.DEBUG, fmt, *args)
