"""Drain workers and dispatch: the loop each drain thread runs, and how a batch reaches handlers.

A worker's pass takes everything from the partitions it owns, hands it to handlers grouped by type,
checks flush-on-idle for handlers whose partitions it found empty, and then tells the ownership table
the pass is over. Only the worker's own thread writes its counters. Before each handler call the
worker passes its gate, so a shutdown that gives up on a stuck worker knows exactly which items were
never handed over, and no call starts after shutdown has returned.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import repeat, starmap
from typing import Any

from rebalancer.queue._counter import Counter
from rebalancer.queue._ownership import DRAIN_CONTEXT, OwnershipTable
from rebalancer.queue._partitions import Partitions, type_name
from rebalancer.queue.config import ErrorHandler

log = logging.getLogger(__name__)

PASSES_PER_TURN = 16  # then the task yields its thread: a shared pool serves its queues in turn
FINAL = -2  # the index of the shutdown drain, run on the caller's thread


@dataclass(eq=False)
class HandlerRecord:
    """One registered handler object; its lock keeps consume and on_idle single-threaded."""

    consume: Callable[[list[Any]], object]
    on_idle: Callable[[], object] | None
    lock: threading.Lock
    partitions: tuple[int, ...] = ()  # where its types live: it is idle when all are empty
    dirty: bool = False  # consumed since its last on_idle (written under `lock`)
    last_idle: float = -math.inf


@dataclass(eq=False)
class SingleConsumer:
    consume: Callable[[list[Any]], object]
    on_idle: Callable[[], object] | None
    idle_lock: threading.Lock = field(default_factory=threading.Lock)  # on_idle never overlaps itself
    dirty: bool = False
    last_idle: float = -math.inf


class Dispatcher:
    """Handlers, error reporting and flush-on-idle, shared by every worker of one queue."""

    def __init__(self, name: str, parts: Partitions, single: SingleConsumer | None,
                 error_handler: ErrorHandler | None, max_idle: float) -> None:
        self.name = name
        self.parts = parts
        self.single = single
        self.error_handler = error_handler
        self.max_idle = max_idle
        self.handlers: dict[type, HandlerRecord] = {}
        self.idle_map: list[tuple[HandlerRecord, ...]] = []  # per partition: handlers with on_idle there
        self.idle_failures = Counter()
        self._warned: set[type] = set()
        self._warn_lock = threading.Lock()

    def reindex(self) -> None:
        """Rebuild which handlers live where (under the admin lock, after a handler or a partition)."""
        count = len(self.parts)
        records = {id(h): h for h in self.handlers.values()}.values()
        spans: dict[int, set[int]] = {id(h): set() for h in records}
        pinned = self.parts.selector.pins_types
        for t, h in self.handlers.items():
            p = self.parts.type_partition.get(t)
            if pinned and p is not None:
                spans[id(h)].add(p)
            else:
                spans[id(h)].update(range(count))
        idle_map: list[list[HandlerRecord]] = [[] for _ in range(count)]
        for h in records:
            h.partitions = tuple(sorted(spans[id(h)]))
            if h.on_idle is not None:
                for p in h.partitions:
                    idle_map[p].append(h)
        self.idle_map = [tuple(hs) for hs in idle_map]

    # ---------------------------------------------------------------- dispatch

    def dispatch(self, w: DrainWorker, got: list[tuple[int, list[Any]]], lock_timeout: float = -1) -> None:
        if self.single is not None:
            batch = got[0][1] if len(got) == 1 else [item for _, chunk in got for item in chunk]
            self._call_single(w, batch)
            return
        groups: dict[type, list[Any]] = {}
        kinds = self.parts.types if self.parts.selector.pins_types else None
        for p, chunk in got:
            types = kinds[p] if kinds is not None else ()
            if len(types) == 1:  # type_hash pins a type to a partition: no per-item grouping
                g = groups.get(types[0])
                if g is None:
                    groups[types[0]] = chunk
                else:
                    g.extend(chunk)
                continue
            for item in chunk:
                t = type(item)
                g = groups.get(t)
                if g is None:
                    groups[t] = [item]
                else:
                    g.append(item)
        handlers = self.handlers
        for t, batch in groups.items():
            h = handlers.get(t)
            if h is None:
                with w.gate:
                    if w.abandoned:
                        return
                    w.pending -= len(batch)
                    w.unhandled += len(batch)
                self._warn_unhandled(t, len(batch))
            elif not self._call(w, h, batch, lock_timeout):
                return

    def _call(self, w: DrainWorker, h: HandlerRecord, batch: list[Any], lock_timeout: float) -> bool:
        if not h.lock.acquire(True, lock_timeout):
            return False  # the shutdown drain ran out of time behind a stuck handler
        try:
            with w.gate:
                if w.abandoned:
                    return False
                w.pending -= len(batch)
                w.dispatched += len(batch)
            try:
                h.consume(batch)
            except BaseException as exc:  # the worker survives whatever a handler raises
                w.failed += len(batch)
                self._report(w, batch, exc)
            finally:
                h.dirty = True
        finally:
            h.lock.release()
        return True

    def _call_single(self, w: DrainWorker, batch: list[Any]) -> None:
        single = self.single
        assert single is not None
        with w.gate:
            if w.abandoned:
                return
            w.pending -= len(batch)
            w.dispatched += len(batch)
        try:
            single.consume(batch)
        except BaseException as exc:
            w.failed += len(batch)
            self._report(w, batch, exc)
        finally:
            single.dirty = True

    def _report(self, w: DrainWorker, batch: list[Any], exc: BaseException) -> None:
        if isinstance(exc, KeyboardInterrupt | SystemExit) and w.index == FINAL and w.interrupt is None:
            w.interrupt = exc  # the shutdown drain re-raises it once every item has been handed over
        handler = self.error_handler
        if handler is None:
            log.error("BatchQueue[%s]: handler failed on a batch of %d", self.name, len(batch), exc_info=exc)
            return
        try:
            handler(batch, exc)
        except BaseException:
            log.exception("BatchQueue[%s]: error_handler raised on a batch of %d", self.name, len(batch))

    def _warn_unhandled(self, t: type, n: int) -> None:
        if t in self._warned:
            return
        with self._warn_lock:
            if t in self._warned:
                return
            self._warned.add(t)
        log.warning("BatchQueue[%s]: no handler for type %s; its items are counted as unhandled "
                    "(first batch: %d)", self.name, type_name(t), n)

    # ---------------------------------------------------------------- flush on idle

    def idle(self, empty: list[int], pass_empty: bool, now: float) -> None:
        """Call on_idle for handlers whose partitions are all empty: at once after new data, then at
        most once per max_idle while they stay empty; skipped (not waited for) while they consume."""
        single = self.single
        if single is not None:
            if pass_empty and single.on_idle is not None and (single.dirty or now - single.last_idle >= self.max_idle):
                if single.idle_lock.acquire(False):
                    try:
                        single.dirty = False
                        single.last_idle = now
                        self._run_idle(single.on_idle)
                    finally:
                        single.idle_lock.release()
            return
        idle_map = self.idle_map
        deques = self.parts.deques
        seen: set[int] = set()
        for p in empty:
            if p >= len(idle_map):
                continue
            for h in idle_map[p]:
                if id(h) in seen or not (h.dirty or now - h.last_idle >= self.max_idle):
                    continue
                seen.add(id(h))
                if any(deques[q] for q in h.partitions) or not h.lock.acquire(False):
                    continue
                try:
                    if h.dirty or now - h.last_idle >= self.max_idle:
                        h.dirty = False
                        h.last_idle = now
                        self._run_idle(h.on_idle)  # type: ignore[arg-type]
                finally:
                    h.lock.release()

    def final_idle(self, deadline: float) -> None:
        """Shutdown: one last on_idle per handler, so everything buffered is flushed."""
        if self.single is not None:
            if self.single.on_idle is not None and self.single.idle_lock.acquire(True, _left(deadline)):
                try:
                    self._run_idle(self.single.on_idle)
                finally:
                    self.single.idle_lock.release()
            return
        for h in {id(h): h for h in self.handlers.values()}.values():
            if h.on_idle is not None and h.lock.acquire(True, _left(deadline)):
                try:
                    self._run_idle(h.on_idle)
                finally:
                    h.lock.release()

    def _run_idle(self, on_idle: Callable[[], object]) -> None:
        try:
            on_idle()
        except BaseException:
            self.idle_failures.increment()
            log.exception("BatchQueue[%s]: on_idle raised", self.name)


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


class DrainWorker:
    """One drain task: passes until one comes back empty (or the turn's budget is spent), then the
    backoff delay `min_idle * 2**idle`, capped at `max_idle`."""

    __slots__ = (
        "abandoned", "active", "dispatched", "dispatcher", "failed", "finished", "gate", "idle", "index",
        "interrupt", "items", "max_idle", "min_idle", "next_idle_check", "parts", "pending", "scheduler",
        "stopping", "table", "unhandled",
    )

    def __init__(self, index: int, parts: Partitions, table: OwnershipTable, dispatcher: Dispatcher,
                 min_idle: float, max_idle: float, scheduler: object) -> None:
        self.index = index
        self.parts = parts
        self.table = table
        self.dispatcher = dispatcher
        self.min_idle = min_idle
        self.max_idle = max_idle
        self.scheduler = scheduler
        self.items = 0  # taken out of partitions
        self.dispatched = 0  # handed to a handler (its call started)
        self.unhandled = 0
        self.failed = 0
        self.pending = 0  # taken in the current pass, not yet handed over
        self.idle = 0
        self.next_idle_check = 0.0
        self.active = True  # false once retiring: it keeps draining what it owns until handed off
        self.stopping = False
        self.abandoned = False  # set by a shutdown that gave up on this worker
        self.gate = threading.Lock()
        self.interrupt: BaseException | None = None
        self.finished = threading.Event()
        if index >= 0:
            table.add_worker(index)

    def run(self) -> float | None:
        ctx = DRAIN_CONTEXT
        ctx.table, ctx.worker, ctx.scheduler = self.table, self.index, self.scheduler
        try:
            for _ in range(PASSES_PER_TURN):
                if self.stopping:
                    self.table.worker_exited(self.index)
                    return None
                try:
                    got = self._pass()
                except Exception:  # a bug of ours must not strand this worker's partitions
                    log.exception("BatchQueue[%s]: drain pass failed", self.dispatcher.name)
                    got = False
                self.table.pass_done(self.index)
                if not got:
                    delay = min(self.min_idle * (1 << min(self.idle, 20)), self.max_idle)
                    self.idle += 1
                    return delay
                self.idle = 0
            return 0.0
        finally:
            ctx.table = None

    def _pass(self) -> bool:
        owner = self.table.owner
        deques = self.parts.deques
        me = self.index
        got: list[tuple[int, list[Any]]] = []
        empty: list[int] = []
        taken = 0
        with self.gate:  # a shutdown that abandons this worker sees every item it has taken
            if self.abandoned:
                return False
            for p in self.table.scan(me):
                if owner[p] != me:
                    continue  # revoked: the new owner takes it after this pass ends
                part = deques[p]
                n = len(part)
                if n:
                    got.append((p, list(starmap(part.popleft, repeat((), n)))))  # popleft n times, in C
                    taken += n
                else:
                    empty.append(p)
            self.items += taken
            self.pending = taken
        if taken:
            self.parts.made_room()
            self.dispatcher.dispatch(self, got)
        if empty:
            now = time.monotonic()
            if now >= self.next_idle_check:
                self.next_idle_check = now + self.min_idle
                self.dispatcher.idle(empty, not taken, now)
        return bool(taken)

    def drain_final(self, partitions: list[int], deadline: float) -> None:
        """Shutdown, on the caller's thread: take and dispatch what is left in `partitions`."""
        while True:
            got = [(p, self.parts.take(p)) for p in partitions]
            got = [(p, chunk) for p, chunk in got if chunk]
            if not got:
                return
            taken = sum(len(c) for _, c in got)
            self.items += taken
            self.pending += taken
            self.dispatcher.dispatch(self, got, lock_timeout=_left(deadline))
            if self.pending:
                return  # a handler lock was still held at the deadline: report it, don't wait

    def abandon(self) -> int:
        """Shutdown gave up on this worker: no further handler call starts. Returns the items it had
        taken and not handed over, which will never be."""
        with self.gate:
            self.abandoned = True
            return self.pending
