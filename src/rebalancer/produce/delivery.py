"""`Delivery`: what `BatchingProducer.send()` returns, a future-like view of one message's outcome.

Why not an asyncio.Future per message: below one message per partition per window the producer's
CPU went, per message, to creating that future, resolving it on the ack, and (at high rates) the
garbage collector walking every one of them while they waited. A `Delivery` is two slots (its
batch, its index in it) and resolves with its batch's one future: nothing per message happens on
the ack, and a caller that drops it leaves nothing alive. Awaiting, `done()`, `result()`,
`exception()`, `cancel()` and done callbacks behave as an asyncio.Future's do; `asyncio.isfuture`
is true, so every asyncio function that takes a future takes it (gather, wait, wait_for, shield,
as_completed, ensure_future, a Task awaiting it, TaskGroup). `gather` also reads two private
members of its children, `_cancel_message` and `_make_cancelled_error()` (CPython's tasks.py):
both are here, with asyncio.Future's meaning; tests/produce/test_delivery_asyncio.py holds every
one of those functions to it, cancelled from either side.

Single-threaded like asyncio itself: every method runs on the producer's event loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import functools
from collections.abc import Callable, Generator
from typing import Any, Protocol

__all__ = ["Delivery"]


class _Batch(Protocol):
    """What a Delivery reads of its batch: the batch's future and its partition."""

    future: asyncio.Future
    partition: int


_Callback = tuple[Callable[["Delivery"], object], Callable[[asyncio.Future], None], contextvars.Context | None]


class Delivery:
    """One message's (partition, offset), or its error; resolves when its batch does."""

    # Two slots set per message; everything else lives in the instance dict, made only for a
    # Delivery that is awaited, cancelled, given a callback or asked for its error.
    __slots__ = ("__dict__", "batch", "index")

    _asyncio_future_blocking = False  # asyncio's marker of a future-like object (the Task sets it)
    _cancelled: asyncio.CancelledError | None = None
    _callbacks: list[_Callback] | None = None
    _error: BaseException | None = None

    def __init__(self, batch: _Batch, index: int) -> None:
        self.batch = batch
        self.index = index  # the record's offset within its batch

    def __repr__(self) -> str:
        state = "cancelled" if self.cancelled() else "finished" if self.done() else "pending"
        return f"<Delivery {state} partition={self.batch.partition} index={self.index}>"

    # -- asyncio.Future's read side ----------------------------------------------------------------
    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self.batch.future.get_loop()

    def done(self) -> bool:
        return self._cancelled is not None or self.batch.future.done()

    def cancelled(self) -> bool:
        # The producer never cancels a batch's future; if something did, its messages are cancelled.
        return self._cancelled is not None or self.batch.future.cancelled()

    def result(self) -> tuple[int, int]:
        """(partition, offset); offset -1 with acks=0. Raises the message's error, or InvalidStateError."""
        if self._cancelled is not None:
            raise copy.copy(self._cancelled)
        future = self.batch.future
        if not future.done():
            raise asyncio.InvalidStateError("Result is not ready.")
        if future.exception() is not None:
            raise self._own_error()
        base = future.result()
        return (self.batch.partition, -1 if base is None else base + self.index)

    def exception(self) -> BaseException | None:
        """The message's error (its own copy of the batch's), None if acked."""
        if self._cancelled is not None:
            raise copy.copy(self._cancelled)
        future = self.batch.future
        if not future.done():
            raise asyncio.InvalidStateError("Exception is not set.")
        return None if future.exception() is None else self._own_error()

    @property
    def _cancel_message(self) -> object:
        """The message given to `cancel()` (None without one): gather puts it in the CancelledError
        it returns for a cancelled child under return_exceptions=True."""
        cancelled = self._cancelled
        return cancelled.args[0] if cancelled is not None and cancelled.args else None

    def _make_cancelled_error(self) -> asyncio.CancelledError:
        """The CancelledError to raise for this message (asyncio.Future's own helper).

        gather calls it on a child that is not cancelled too (when the gather itself was cancelled,
        on whichever child finished last), so it never assumes a cancellation.
        """
        if self._cancelled is not None:
            return copy.copy(self._cancelled)
        return asyncio.CancelledError()

    def _own_error(self) -> BaseException:
        # Each message raises its own copy, as aiokafka's per-message futures did: one exception
        # object raised from many awaits would grow one traceback without end.
        error = self._error
        if error is None:
            shared = self.batch.future.exception()
            assert shared is not None
            error = self._error = copy.copy(shared)
        return error

    def __await__(self) -> Generator[Any, None, tuple[int, int]]:
        if not self.done():
            self._asyncio_future_blocking = True
            yield self  # the Task waits through add_done_callback, as for a Future
        if not self.done():
            raise RuntimeError("await wasn't used with future")
        return self.result()

    __iter__ = __await__

    # -- callbacks and cancellation ------------------------------------------------------------------
    # A callback is registered on the batch's future through a relay that passes this Delivery, so
    # it runs as soon after the ack as a Future's callback would: no extra loop turn.
    def add_done_callback(
        self, fn: Callable[[Delivery], object], *, context: contextvars.Context | None = None
    ) -> None:
        """`fn(self)` soon after this message resolves (at once, via the loop, if it has)."""
        if self.done():
            self.get_loop().call_soon(fn, self, context=context)
            return
        relay = functools.partial(_relay, fn, self)
        self.batch.future.add_done_callback(relay, context=context)
        if self._callbacks is None:
            self._callbacks = []
        self._callbacks.append((fn, relay, context))

    def remove_done_callback(self, fn: Callable[[Delivery], object]) -> int:
        """How many registrations of `fn` were removed: 0 once resolved (they are scheduled), as for a Future."""
        callbacks = self._callbacks
        if not callbacks or self.done():
            return 0
        removed = 0
        for item in [item for item in callbacks if item[0] == fn]:
            callbacks.remove(item)
            self.batch.future.remove_done_callback(item[1])
            removed += 1
        return removed

    def cancel(self, msg: object = None) -> bool:
        """Stop waiting for this message (it may still be delivered); False if it already resolved."""
        if self.done():
            return False
        self._cancelled = asyncio.CancelledError() if msg is None else asyncio.CancelledError(msg)
        callbacks, self._callbacks = self._callbacks or [], None
        loop = self.get_loop()
        for fn, relay, context in callbacks:
            self.batch.future.remove_done_callback(relay)  # they run now, and only now
            loop.call_soon(fn, self, context=context)
        return True


def _relay(fn: Callable[[Delivery], object], delivery: Delivery, _future: asyncio.Future) -> None:
    fn(delivery)
