"""Watching a running query: Spark Connect progress, waking on stop, Ctrl-C."""

from __future__ import annotations

import functools
import logging
import os
import select
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rebalancer.pipeline.session.quiet import sigint
from rebalancer.pipeline.stream.state import (
    PROGRESS_KEPT,
    BatchProgress,
    StopAfterBatches,
    StreamData,
    StreamState,
)

if TYPE_CHECKING:
    pass

# The logger of the module these lines came from, so logging set up for it keeps working.
log = logging.getLogger("rebalancer.pipeline.stream")


# foreachBatch on Spark Connect unpickles the processor in the server driver's Python, which
# `--ship` (an artifact: executors only) does not reach.
MISSING_ON_SERVER = "No module named 'rebalancer'"
NOT_ON_CONNECT_SERVER = (
    "the Spark Connect server's Python cannot import rebalancer: a stream's foreachBatch runs there, "
    "and --ship reaches only the executors; install rebalancer where the server runs"
)


def stopped_after_batches(error: BaseException) -> bool:
    """A query failure that is `StopAfterBatches` raised in Spark Connect's foreachBatch worker: the
    client sees only the worker's traceback text, where the class appears by its qualified name."""
    return f"{StopAfterBatches.__module__}.{StopAfterBatches.__qualname__}:" in str(error)


class _ConnectProgress:
    """Progress lines of a Spark Connect stream, in the client: foreachBatch runs in the server's
    worker, whose state file (saved before each batch commits) lists every applied batch's progress.
    Each query progress event (on the client's listener thread) prints the batches not printed yet;
    `flush` does the same once the query has ended, for events that never came."""

    def __init__(self, state: StreamState, on_batch: Callable[[BatchProgress], None] | None) -> None:
        self.path = state.path
        self.partitions = state.partitions
        self.on_batch = on_batch
        self.printed_batches = int(state.data.batches)  # applied before this run
        self.lock = threading.Lock()
        self.listener = _progress_listener_class()(self)

    def on_progress_event(self) -> None:
        try:
            self.flush()
        except (OSError, ValueError):  # the run's end flushes again, and reports a bad state there
            log.debug("could not read the stream state for progress", exc_info=True)

    def flush(self) -> StreamData:
        """Calls `on_batch` for each batch applied since the last call; returns the state read."""
        with self.lock:
            data = StreamState(self.path, self.partitions).data
            for record in data.progress or []:
                record = dict(record)
                batches = int(record.pop("batches"))
                if batches <= self.printed_batches:
                    continue
                if batches > self.printed_batches + 1:
                    log.warning(
                        "%d micro-batches were applied without a progress line (the state keeps the last %d)",
                        batches - self.printed_batches - 1,
                        PROGRESS_KEPT,
                    )
                self.printed_batches = batches
                if self.on_batch is not None:
                    self.on_batch(BatchProgress(**record))
            return data


@functools.cache
def _progress_listener_class() -> type[Any]:
    """A StreamingQueryListener (pyspark is optional: imported on first use) calling `_ConnectProgress`."""
    from pyspark.sql.streaming import StreamingQueryListener

    class ProgressListener(StreamingQueryListener):
        def __init__(self, progress: _ConnectProgress) -> None:
            self.progress = progress

        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            self.progress.on_progress_event()

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return ProgressListener


class _QueryWaiter:
    """Waits for a query on a helper thread, so that Ctrl-C finds the main thread outside Py4J.

    A SIGINT during a Py4J call leaves that call's connection mid-answer, and pyspark's own SIGINT
    handler makes a Py4J call from inside the handler: either can end in a Py4J traceback. Here the
    main thread waits on a pipe, and Ctrl-C only raises KeyboardInterrupt out of that wait.

    The pipe is also the signal wakeup fd. The kernel may hand SIGINT to any thread (gRPC's native
    threads, on Spark Connect), and a lock wait in the main thread is only cut short by a signal
    that thread itself receives; Python's handler writes to the wakeup fd whichever thread took it.
    """

    def __init__(self, query: Any) -> None:
        self.query = query
        self.ended = threading.Event()
        self.failure: BaseException | None = None
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)
        self._watcher = threading.Thread(target=self._watch, name="stream-query-wait", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        try:
            self.query.awaitTermination()
        except BaseException as exc:  # handed to the main thread, which decides
            self.failure = exc
        finally:
            self.ended.set()  # before the byte: a reader woken by it must find `ended` set
            self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._write_fd, b"\0")
        except BlockingIOError:  # full: the reader has a wake-up pending already
            pass

    def wait(self) -> bool:
        """True if Ctrl-C came before the query ended."""
        if threading.current_thread() is not threading.main_thread():
            self.ended.wait()
            return False
        previous = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        try:
            with sigint(signal.default_int_handler):
                while not self.ended.is_set():
                    select.select([self._read_fd], [], [])
                    self._drain()
        except KeyboardInterrupt:
            return True
        finally:
            signal.set_wakeup_fd(previous)
        return False

    def _drain(self) -> None:
        try:
            while os.read(self._read_fd, 64):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        """Closes the pipe once the watcher is done with it (else leaves it: two descriptors)."""
        if self.ended.is_set() and self._read_fd >= 0:
            self._watcher.join()  # past `ended` it only writes its byte, then returns
            os.close(self._read_fd)
            os.close(self._write_fd)
            self._read_fd = self._write_fd = -1
