"""A Spark Connect session's start, bounded: the gRPC client retries a server that never answers
(or answers in another protocol) for ten minutes or more, silently; here it gets a deadline."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from rebalancer._secrets import shown_location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["bounded_connect_start"]

logger = logging.getLogger(__name__)

# Longest pause between the client's retries while the start is bounded: after the deadline the
# channel is closed, and a retry pause is all that keeps the starting thread (and pyspark's session
# locks it holds) alive, so it is kept short. Retries are not counted: the deadline ends them.
START_BACKOFF_MS = 500


def bounded_connect_start(
    url: str, start: Callable[[], SparkSession], timeout: float, field: str, advice: str
) -> SparkSession:
    """`start()` (the session's first RPCs), given `timeout` seconds for the server at `url` to answer.

    The client is made first, which sends nothing, so that its channel can be closed at the deadline:
    that ends the RPC under way, and the caller gets one ValueError naming `field` and `url`."""
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client.retries import DefaultPolicy

    session = SparkSession.builder.remote(url).getOrCreate()  # no settings given: no RPC yet
    client = session.client  # a Connect session's gRPC client
    saved = client.get_retry_policies()
    client.set_retry_policies(
        [DefaultPolicy(max_retries=None, max_backoff=START_BACKOFF_MS, recognize_server_retry_delay=False)]
    )
    started: list[SparkSession] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            started.append(start())
        except BaseException as exc:  # handed to the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=run, name="rebalancer-connect-start", daemon=True)
    try:
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            _abandon(session, thread)
            advice = f"; {advice}" if advice else ""
            raise ValueError(
                f"{field}: {shown_location(url)} accepted a connection but did not answer as a Spark Connect server "
                f"within {timeout:g} s{advice}"
            )
    finally:
        client.set_retry_policies(saved)
    if failed:
        raise failed[0]
    return started[0]


def _abandon(session: SparkSession, starting: threading.Thread) -> None:
    """Close the session's channel, which fails the RPC `starting` waits on (or its next retry), and
    forget the session so a later `getOrCreate()` makes a new one."""
    session.client.close()
    starting.join(2 * START_BACKOFF_MS / 1000)
    if starting.is_alive():  # it holds pyspark's session lock: stop() would wait for it
        logger.debug("the Spark Connect start is still ending; its channel is closed")
        return
    session.stop()  # closed: nothing to release on the server, only the default session to forget
