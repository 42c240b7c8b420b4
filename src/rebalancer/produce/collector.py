"""The broker-level batch collector: decides when a broker's ready partitions go out, and in which requests.

Pure state machine: time comes from an injected clock, nothing here does I/O, so every rule is
unit-tested with a fake clock. The producer feeds it (`add`, `complete`) and executes the `Send`
plans that `poll` returns.

Rules (issue 4, with the fork's two lessons built in):
- A send fires on the first of, in priority order: flush > broker.batch.max.partitions >
  broker.batch.max.bytes > broker.linger.ms. Each send records its reason.
- The linger window opens at the first add to an empty collector, not at the oldest message's
  timestamp, so already-old messages do not fire it at once (the seed's own fix).
- Partitions go oldest-first; ties are broken by a round-robin resume pointer that continues after
  the last partition sent, so equal-aged partitions take turns and none starves.
- A request stops at message.max.bytes (alias max.request.size); the rest goes into the next request.
- At most max.in.flight.requests.per.connection sends per broker are in flight. A full window holds
  the due partitions (they are not dropped and not sent) until `complete` frees a slot; the hold is
  counted (`window_waits`, `window_wait_ms`).
- A partition with a send in flight is not sent again until that send completes, which keeps
  per-partition ordering (and idempotent sequences) intact. Its new data keeps the time it was
  added: if the window expires meanwhile, it goes as soon as the send completes, so no message
  waits longer than broker.linger.ms plus one RTT (the seed's promise; C15 of issue 36).
- Adaptive mode is the seed's AIMD on two effective values per broker: the max wait (the linger
  in use) and the min partitions (an early-send partition count), both halved on congestion and
  raised additively when healthy (C23, C24).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field

from rebalancer.produce.collector_config import CollectorConfig
from rebalancer.produce.stats import LogHistogram

__all__ = [
    "ADAPTIVE_CONGESTED_RATIO",
    "ADAPTIVE_DECREASE",
    "ADAPTIVE_HEALTHY_RATIO",
    "ADAPTIVE_PARTITIONS_CAP",
    "ADAPTIVE_PARTITIONS_FLOOR",
    "ADAPTIVE_PARTITIONS_STEP",
    "ADAPTIVE_RTT_SLACK_MS",
    "ADAPTIVE_WAIT_CAP_MS",
    "ADAPTIVE_WAIT_FLOOR_MS",
    "ADAPTIVE_WAIT_STEP_MS",
    "REASONS",
    "SEED_TRIGGERS",
    "BrokerBatchCollector",
    "Send",
]

REASONS: tuple[str, ...] = ("flush", "max_partitions", "max_bytes", "broker_linger", "partition_linger")
# The seed's per-broker trigger counters, by the reasons they count. `partition_linger` (legacy
# mode) is a timeout too, so it counts as a time trigger.
SEED_TRIGGERS: dict[str, tuple[str, ...]] = {
    "batch_collector_trigger_partition_threshold": ("max_partitions",),
    "batch_collector_trigger_size_threshold": ("max_bytes",),
    "batch_collector_trigger_time_threshold": ("broker_linger", "partition_linger"),
    "batch_collector_trigger_flush": ("flush",),
}

log = logging.getLogger(__name__)

# Adaptive mode: the seed's AIMD on an RTT EMA (docs/produce.md says why congestion shrinks both).
ADAPTIVE_EMA_WEIGHT = 1 / 8  # as in the seed: ema = 7/8 ema + 1/8 rtt
ADAPTIVE_CONGESTED_RATIO = 1.5  # ema > 1.5 * baseline (+ slack): congested
ADAPTIVE_HEALTHY_RATIO = 1.1  # ema < 1.1 * baseline (+ slack): healthy
ADAPTIVE_RTT_SLACK_MS = 5.0  # sub-ms baselines jitter by several ms (scheduling, GC): not congestion
ADAPTIVE_DECREASE = 0.5  # the seed's multiplicative decrease, of both values
ADAPTIVE_WAIT_STEP_MS = 1.0  # the seed's max wait: +1000 us when healthy,
ADAPTIVE_WAIT_FLOOR_MS = 1.0  # never below 1 ms,
ADAPTIVE_WAIT_CAP_MS = 100.0  # never above 100 ms (nor above broker.linger.ms, the latency promise)
ADAPTIVE_PARTITIONS_STEP = 10  # the seed's min partitions: +10 when healthy,
ADAPTIVE_PARTITIONS_FLOOR = 1  # never below 1,
ADAPTIVE_PARTITIONS_CAP = 1000  # never above 1000 (or broker.batch.max.partitions where that is set)
# Deadlines compare float seconds; a nanosecond of rounding must not delay a send by a whole poll.
_EPS = 1e-9


@dataclass(slots=True)
class Send:
    """One planned request: these partitions go to `broker` in one ProduceRequest."""

    id: int
    broker: Hashable
    partitions: tuple[Hashable, ...]
    nbytes: int
    reason: str
    wait_ms: float  # from the window's first add to this send
    held_ms: float  # of which spent waiting for an in-flight slot
    created: float


@dataclass(slots=True)
class _Part:
    nbytes: int
    oldest: float  # oldest unsent message, for oldest-first ordering
    added: float  # when it entered the collector (legacy per-partition window)
    ordinal: int  # position in the broker's round-robin ring


@dataclass(slots=True)
class _Broker:
    parts: dict[Hashable, _Part] = field(default_factory=dict)
    total_bytes: int = 0
    first_add: float | None = None
    due_reason: str | None = None
    due_since: float | None = None
    held_since: float | None = None
    in_flight: dict[int, Send] = field(default_factory=dict)
    busy: set[Hashable] = field(default_factory=set)
    ordinals: dict[Hashable, int] = field(default_factory=dict)
    resume: int = 0
    # adaptive state
    rtt_ema_ms: float | None = None
    rtt_base_ms: float | None = None
    linger_ms: float = 0.0  # the effective max wait
    min_partitions: int = -1  # the effective early-send partition count (-1: off)
    last_decrease: float = float("-inf")
    # per-broker stats (the seed's metrics)
    sends: int = 0
    partitions_sent: int = 0
    wait_ms_total: float = 0.0
    triggers: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    window_waits: int = 0
    window_wait_ms: float = 0.0


class BrokerBatchCollector:
    """Per-broker collection of ready partitions; see the module docstring for the rules."""

    def __init__(
        self,
        config: Mapping[str, object] | CollectorConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config if isinstance(config, CollectorConfig) else CollectorConfig.from_dict(config)
        self._clock = clock
        self._brokers: dict[Hashable, _Broker] = {}
        self._flushing = False
        self._max_bytes = self.config.batch_max_bytes if self.config.batch_max_bytes > 0 else float("inf")
        self._ids = itertools.count(1)
        self._sends = 0
        self._partitions_sent = 0
        self._partitions_max = 0
        self._triggers = dict.fromkeys(REASONS, 0)
        self._wait = LogHistogram()
        self._window_waits = 0
        self._window_wait_ms = 0.0
        self._split_sends = 0
        self._adaptive_decreases = 0
        self._adaptive_increases = 0

    # -- feeding -----------------------------------------------------------------------------------
    def _broker(self, broker: Hashable) -> _Broker:
        state = self._brokers.get(broker)
        if state is None:
            state = self._new_broker()
            self._brokers[broker] = state
        return state

    def _new_broker(self) -> _Broker:
        cfg = self.config
        if not cfg.adaptive:
            return _Broker(linger_ms=cfg.broker_linger_ms, min_partitions=cfg.batch_max_partitions)
        return _Broker(linger_ms=self._wait_bounds()[1], min_partitions=self._partition_cap())

    def _wait_bounds(self) -> tuple[float, float]:
        """The adaptive max wait's floor and cap: the seed's 1..100 ms, never above broker.linger.ms."""
        linger = self.config.broker_linger_ms
        return min(ADAPTIVE_WAIT_FLOOR_MS, linger), min(ADAPTIVE_WAIT_CAP_MS, linger)

    def _partition_cap(self) -> int:
        configured = self.config.batch_max_partitions
        return configured if configured > 0 else ADAPTIVE_PARTITIONS_CAP

    def add(self, broker: Hashable, partition: Hashable, nbytes: int, *, oldest: float | None = None) -> bool:
        """Partition has `nbytes` more data for `broker`.

        Returns True when the driver should call `poll`/`next_deadline` now: a size trigger is met,
        or this add opened a new linger window (whose deadline the driver must schedule).

        `oldest` is when the partition's oldest unsent message arrived (default: now); it orders
        partitions but never opens or shortens the linger window.
        """
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        state = self._brokers.get(broker)
        if state is None:
            state = self._broker(broker)
        part = state.parts.get(partition)
        if part is not None and oldest is None:  # the hot path: one more message for a known partition
            part.nbytes += nbytes
            state.total_bytes += nbytes
            return state.total_bytes >= self._max_bytes
        now = self._clock()
        if part is None:
            ordinal = state.ordinals.get(partition)
            if ordinal is None:
                ordinal = state.ordinals[partition] = len(state.ordinals)
            state.parts[partition] = _Part(nbytes, now if oldest is None else oldest, now, ordinal)
            # A partition with a request in flight joins the window when `complete` frees it.
            if state.first_add is None and partition not in state.busy:
                state.first_add = now
                state.total_bytes += nbytes
                return True
        else:
            part.nbytes += nbytes
            if oldest is not None and oldest < part.oldest:
                part.oldest = oldest
        state.total_bytes += nbytes
        return (0 < state.min_partitions <= len(state.parts)) or (
            0 < self.config.batch_max_bytes <= state.total_bytes
        )

    def discard(self, broker: Hashable, partition: Hashable) -> int:
        """Forget `partition` (its data went elsewhere, e.g. a new leader); returns the bytes dropped."""
        state = self._brokers.get(broker)
        if state is None:
            return 0
        part = state.parts.pop(partition, None)
        if part is None:
            return 0
        state.total_bytes -= part.nbytes
        if not state.parts:
            self._reset_window(state)
        return part.nbytes

    def discard_partition(self, partition: Hashable) -> int:
        """Forget `partition` on whichever broker holds it (an abort dropped its data); returns the bytes."""
        return sum(self.discard(broker, partition) for broker in list(self._brokers))

    def set_flushing(self, flushing: bool) -> None:
        """While flushing, every broker with sendable partitions is due at once (reason `flush`)."""
        self._flushing = bool(flushing)
        if not flushing:
            for state in self._brokers.values():
                if state.due_reason == "flush":
                    state.due_reason = state.due_since = state.held_since = None

    @property
    def flushing(self) -> bool:
        return self._flushing

    # -- deciding ----------------------------------------------------------------------------------
    def _trigger(self, state: _Broker, now: float) -> str | None:
        cfg = self.config
        if self._flushing:
            return "flush"
        if 0 < state.min_partitions <= len(state.parts):
            return "max_partitions"
        if 0 < cfg.batch_max_bytes <= state.total_bytes:
            return "max_bytes"
        if cfg.legacy_linger_ms is not None:
            limit = cfg.legacy_linger_ms / 1000.0
            busy = state.busy
            for p, part in state.parts.items():
                if p not in busy and now - part.added >= limit - _EPS:
                    return "partition_linger"
            return None
        if state.first_add is not None and now - state.first_add >= state.linger_ms / 1000.0 - _EPS:
            return "broker_linger"
        return None

    def _reset_window(self, state: _Broker) -> None:
        """The window of what is left: partitions not in flight, from the earliest time one was added.

        Data of partitions in flight joins on `complete`, with the time it was added, so a window
        never restarts for it (C15), and never fires early for the others because of it.
        """
        state.due_reason = None
        state.due_since = None
        state.held_since = None
        busy = state.busy
        free = [part.added for p, part in state.parts.items() if p not in busy]
        state.first_add = min(free) if free else None

    def poll(self) -> list[Send]:
        """Every send that is due now, at most as many per broker as its in-flight window allows."""
        now = self._clock()
        sends: list[Send] = []
        for broker, state in self._brokers.items():
            if not state.parts:
                continue
            if state.due_reason is None or (self._flushing and state.due_reason != "flush"):
                reason = self._trigger(state, now)
                if reason is None:
                    continue
                state.due_reason = reason
                state.due_since = now
            sends.extend(self._build(broker, state, now))
        return sends

    def _eligible(self, state: _Broker, now: float) -> list[tuple[Hashable, _Part]]:
        cfg = self.config
        ring = max(1, len(state.ordinals))
        resume = state.resume
        busy = state.busy
        # Decorated tuples sort natively: a key function is one Python call per partition, and a
        # send can carry thousands of partitions. The ordinal is unique per partition, so the third
        # element is never compared.
        decorated = [
            (part.oldest, (part.ordinal - resume) % ring, p, part)
            for p, part in state.parts.items()
            if p not in busy
        ]
        if cfg.legacy_linger_ms is not None and state.due_reason == "partition_linger":
            limit = cfg.legacy_linger_ms / 1000.0
            decorated = [item for item in decorated if now - item[3].added >= limit - _EPS]
        decorated.sort()
        return [(p, part) for _, _, p, part in decorated]

    def _build(self, broker: Hashable, state: _Broker, now: float) -> list[Send]:
        cfg = self.config
        eligible = self._eligible(state, now)
        if not eligible:
            # Everything left has a request in flight: its window reopens when `complete` frees it,
            # with the time its data was added, so it goes at linger + one RTT at the latest.
            if state.due_reason != "flush":
                self._reset_window(state)
            return []
        free = cfg.max_in_flight - len(state.in_flight)
        if free <= 0:
            if state.held_since is None:
                state.held_since = now
            return []
        groups: list[list[tuple[Hashable, _Part]]] = []
        current: list[tuple[Hashable, _Part]] = []
        current_bytes = 0
        taken = 0
        for item in eligible:
            size = item[1].nbytes
            if current and current_bytes + size > cfg.max_request_size:
                groups.append(current)
                current, current_bytes = [], 0
                if len(groups) == free:
                    break
            current.append(item)
            current_bytes += size
            taken += 1
        else:
            if current:
                groups.append(current)
        held_ms = (now - state.held_since) * 1000.0 if state.held_since is not None else 0.0
        if held_ms > 0:
            self._window_waits += 1
            self._window_wait_ms += held_ms
            state.window_waits += 1
            state.window_wait_ms += held_ms
        window_start = state.first_add if state.first_add is not None else now
        wait_ms = (now - window_start) * 1000.0
        reason = state.due_reason or "flush"
        sends: list[Send] = []
        debug = log.isEnabledFor(logging.DEBUG)
        for group in groups:
            partitions = tuple(p for p, _ in group)
            nbytes = 0
            oldest = now
            for p, part in group:
                nbytes += part.nbytes
                if part.oldest < oldest:
                    oldest = part.oldest
                del state.parts[p]
                state.busy.add(p)
            state.total_bytes -= nbytes
            send = Send(next(self._ids), broker, partitions, nbytes, reason, wait_ms, held_ms, now)
            state.in_flight[send.id] = send
            sends.append(send)
            self._record(state, send)
            if debug:
                log.debug(
                    "sending batch to broker %s: %d partitions, %d bytes, oldest %.1f ms, reason=%s",
                    broker, len(partitions), nbytes, (now - oldest) * 1000.0, reason,
                )  # fmt: skip
        state.resume = (group[-1][1].ordinal + 1) % max(1, len(state.ordinals))
        if len(groups) > 1:
            self._split_sends += len(groups) - 1
        if taken < len(eligible):
            # Window full with due partitions left: hold them (still due) until a slot frees.
            state.held_since = now
        else:
            self._reset_window(state)
        return sends

    def _record(self, state: _Broker, send: Send) -> None:
        n = len(send.partitions)
        self._sends += 1
        self._partitions_sent += n
        if n > self._partitions_max:
            self._partitions_max = n
        self._triggers[send.reason] += 1
        self._wait.add(send.wait_ms)
        state.sends += 1
        state.partitions_sent += n
        state.wait_ms_total += send.wait_ms
        state.triggers[send.reason] += 1

    def complete(self, send: Send, *, rtt_ms: float | None = None, ok: bool = True) -> None:
        """`send` got its response (or failed): free its slot and partitions; feed adaptive mode."""
        state = self._brokers[send.broker]
        if state.in_flight.pop(send.id, None) is None:
            raise ValueError(f"send {send.id} to broker {send.broker!r} is not in flight")
        state.busy.difference_update(send.partitions)
        for partition in send.partitions:  # data that arrived meanwhile joins the window, as of its add
            part = state.parts.get(partition)
            if part is not None and (state.first_add is None or part.added < state.first_add):
                state.first_add = part.added
        if self.config.adaptive and rtt_ms is not None:
            self._adapt(state, rtt_ms, ok)

    # -- adaptive mode -----------------------------------------------------------------------------
    def _adapt(self, state: _Broker, rtt_ms: float, ok: bool) -> None:
        """The seed's AIMD on the RTT EMA: on congestion halve the effective max wait and min
        partitions; when healthy add 1 ms and 10 partitions back."""
        now = self._clock()
        state.rtt_ema_ms = (
            rtt_ms
            if state.rtt_ema_ms is None
            else state.rtt_ema_ms + ADAPTIVE_EMA_WEIGHT * (rtt_ms - state.rtt_ema_ms)
        )
        state.rtt_base_ms = rtt_ms if state.rtt_base_ms is None else min(state.rtt_base_ms, rtt_ms)
        ema, base = state.rtt_ema_ms, state.rtt_base_ms
        wait_floor, wait_cap = self._wait_bounds()
        partitions_cap = self._partition_cap()
        if not ok or ema > ADAPTIVE_CONGESTED_RATIO * base + ADAPTIVE_RTT_SLACK_MS:
            # At most one decrease per RTT, like TCP's once per window: one congestion episode
            # reported by five in-flight responses must not cut the values by 32x.
            if (now - state.last_decrease) * 1000.0 >= ema:
                state.linger_ms = max(wait_floor, state.linger_ms * ADAPTIVE_DECREASE)
                state.min_partitions = max(ADAPTIVE_PARTITIONS_FLOOR, int(state.min_partitions * ADAPTIVE_DECREASE))
                state.last_decrease = now
                self._adaptive_decreases += 1
        elif ema < ADAPTIVE_HEALTHY_RATIO * base + ADAPTIVE_RTT_SLACK_MS and (
            state.linger_ms < wait_cap or state.min_partitions < partitions_cap
        ):
            state.linger_ms = min(wait_cap, state.linger_ms + ADAPTIVE_WAIT_STEP_MS)
            state.min_partitions = min(partitions_cap, state.min_partitions + ADAPTIVE_PARTITIONS_STEP)
            self._adaptive_increases += 1

    def effective_linger_ms(self, broker: Hashable) -> float:
        """The linger (max wait) the broker uses now: broker.linger.ms unless adaptive mode moved it."""
        state = self._brokers.get(broker) or self._new_broker()
        return state.linger_ms

    def effective_min_partitions(self, broker: Hashable) -> int:
        """The partition count that sends early (-1: off): broker.batch.max.partitions, or adaptive mode's."""
        state = self._brokers.get(broker) or self._new_broker()
        return state.min_partitions

    # -- introspection -----------------------------------------------------------------------------
    def next_deadline(self) -> float | None:
        """Clock time of the earliest linger expiry among idle, non-empty brokers; None if none pending.

        Due-but-held brokers are not listed: they wake up on `complete`, not on the clock; nor are
        partitions in flight (they rejoin on `complete`).
        """
        best: float | None = None
        legacy = self.config.legacy_linger_ms
        for state in self._brokers.values():
            if not state.parts or state.due_reason is not None:
                continue
            if legacy is not None:
                busy = state.busy
                free = [part.added for p, part in state.parts.items() if p not in busy]
                if not free:
                    continue
                deadline = min(free) + legacy / 1000.0
            elif state.first_add is not None:
                deadline = state.first_add + state.linger_ms / 1000.0
            else:
                continue
            if best is None or deadline < best:
                best = deadline
        return best

    def pending(self, broker: Hashable | None = None) -> int:
        """Partitions waiting in the collector (for one broker, or all)."""
        if broker is not None:
            state = self._brokers.get(broker)
            return len(state.parts) if state else 0
        return sum(len(s.parts) for s in self._brokers.values())

    def pending_bytes(self, broker: Hashable) -> int:
        state = self._brokers.get(broker)
        return state.total_bytes if state else 0

    def in_flight(self, broker: Hashable | None = None) -> int:
        if broker is not None:
            state = self._brokers.get(broker)
            return len(state.in_flight) if state else 0
        return sum(len(s.in_flight) for s in self._brokers.values())

    def is_held(self, broker: Hashable) -> bool:
        """True while due partitions wait for an in-flight slot."""
        state = self._brokers.get(broker)
        return bool(state and state.held_since is not None)

    def stats(self) -> dict[str, object]:
        """Totals since the collector was made; every time in milliseconds. Keys:

        - ``sends``: requests planned (a `Send`: one ProduceRequest to one broker);
        - ``partitions_per_send_avg``, ``partitions_per_send_max``: partitions one send carried;
        - ``wait_ms_avg``, ``wait_ms_p99``: from a broker window's first ready partition to its send;
        - ``triggers_by_reason``: sends per reason (`flush`, `max_partitions`, `max_bytes`,
          `broker_linger`; `partition_linger` in legacy mode, listed once it happened);
        - ``in_flight``: sends whose response has not come back yet;
        - ``window_waits``, ``window_wait_ms_total``: sends held because `max.in.flight` requests
          were already out at their broker, and the milliseconds they were held in all;
        - ``split_sends``: extra sends made when one broker's due partitions did not fit one request
          (`max.request.size`);
        - ``adaptive_decreases``, ``adaptive_increases``: adaptive mode's cuts and raises of a
          broker's linger and minimum partitions;
        - ``effective_linger_ms``, ``effective_min_partitions``: per broker, the values in use now;
        - ``brokers``: per broker, `broker_stats(broker)` (the seed's `batch_collector_*` metrics).
        """
        sends = self._sends
        return {
            "sends": sends,
            "partitions_per_send_avg": self._partitions_sent / sends if sends else 0.0,
            "partitions_per_send_max": self._partitions_max,
            "wait_ms_avg": self._wait.mean(),
            "wait_ms_p99": self._wait.percentile(99),
            "triggers_by_reason": {k: v for k, v in self._triggers.items() if v or k != "partition_linger"},
            "in_flight": self.in_flight(),
            "window_waits": self._window_waits,
            "window_wait_ms_total": self._window_wait_ms,
            "split_sends": self._split_sends,
            "adaptive_decreases": self._adaptive_decreases,
            "adaptive_increases": self._adaptive_increases,
            "effective_linger_ms": {b: s.linger_ms for b, s in self._brokers.items()},
            "effective_min_partitions": {b: s.min_partitions for b, s in self._brokers.items()},
            "brokers": {b: self.broker_stats(b) for b in self._brokers},
        }

    def broker_stats(self, broker: Hashable) -> dict[str, object]:
        """The seed's per-broker metrics (`batch_collector_*`), plus in-flight waits and the linger in use."""
        state = self._brokers.get(broker) or self._new_broker()
        sends = state.sends
        stats: dict[str, object] = {
            "batch_collector_sends": sends,
            "batch_collector_partitions_avg": state.partitions_sent / sends if sends else 0.0,
            "batch_collector_wait_ms_avg": state.wait_ms_total / sends if sends else 0.0,
        }
        for name, reasons in SEED_TRIGGERS.items():
            stats[name] = sum(state.triggers[r] for r in reasons)
        stats.update(
            {
                "batch_collector_partitions_sent": state.partitions_sent,
                "batch_collector_inflight_waits": state.window_waits,
                "batch_collector_inflight_wait_ms_total": state.window_wait_ms,
                "batch_collector_in_flight": len(state.in_flight),
                "batch_collector_pending_partitions": len(state.parts),
                "batch_collector_effective_linger_ms": state.linger_ms,
                "batch_collector_effective_min_partitions": state.min_partitions,
            }
        )
        return stats
