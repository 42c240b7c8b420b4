"""BrokerBatchCollector: every trigger and its priority, timing, ordering, splitting, fairness, in-flight."""

from __future__ import annotations

import re
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rebalancer.produce import BrokerBatchCollector, CollectorConfig


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, ms: float) -> None:
        self.now += ms / 1000.0


def make(config: dict | None = None) -> tuple[BrokerBatchCollector, FakeClock]:
    clock = FakeClock()
    return BrokerBatchCollector(config or {}, clock=clock), clock


# -- configuration ---------------------------------------------------------------------------------
def test_defaults_match_the_issue():
    cfg = CollectorConfig.from_dict({})
    assert (cfg.broker_linger_ms, cfg.batch_max_partitions, cfg.batch_max_bytes) == (5.0, -1, -1)
    # message.max.bytes is librdkafka's 1,000,000; max.in.flight stays 5 (docs/produce.md says why)
    assert (cfg.max_request_size, cfg.max_in_flight, cfg.adaptive, cfg.legacy) == (1_000_000, 5, False, False)


def test_unknown_key_lists_valid_keys():
    with pytest.raises(ValueError, match=r"unknown config key\(s\) 'broker.lingr.ms'.*valid keys: .*broker.linger.ms"):
        BrokerBatchCollector({"broker.lingr.ms": 5})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("broker.linger.ms", "soon", "broker.linger.ms must be a number of milliseconds in 0..900000, got 'soon'"),
        ("broker.linger.ms", None, "broker.linger.ms must be a number of milliseconds in 0..900000, got None"),
        ("broker.linger.ms", True, "broker.linger.ms must be a number of milliseconds in 0..900000, got True"),
        ("broker.linger.ms", -1, "broker.linger.ms must be a number of milliseconds in 0..900000, got -1"),
        ("broker.batch.max.bytes", "x", "broker.batch.max.bytes must be an integer in 1..2147483647 (or <= 0: off), got 'x'"),
        ("broker.batch.max.partitions", 1.5, "broker.batch.max.partitions must be an integer in 1..2147483647 (or <= 0: off), got 1.5"),
        ("max.request.size", -5, "max.request.size must be an integer in 1..2147483647, got -5"),
        ("max.in.flight.requests.per.connection", 0, "max.in.flight.requests.per.connection must be an integer in 1..1000000, got 0"),
        ("broker.adaptive", "maybe", "broker.adaptive must be true or false, got 'maybe'"),
    ],
)
def test_bad_values_name_the_field_and_value(key, value, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        BrokerBatchCollector({key: value})


def test_numeric_strings_are_accepted_like_librdkafka():
    cfg = CollectorConfig.from_dict({"broker.linger.ms": "500", "broker.batch.max.bytes": "10000000"})
    assert (cfg.broker_linger_ms, cfg.batch_max_bytes) == (500.0, 10_000_000)


def test_only_linger_ms_keeps_legacy_behaviour_with_deprecation_warning():
    with pytest.warns(DeprecationWarning, match="linger.ms is deprecated"):
        cfg = CollectorConfig.from_dict({"linger.ms": 100})
    assert cfg.legacy and cfg.legacy_linger_ms == 100.0


def test_both_lingers_set_broker_linger_wins_with_warning():
    with pytest.warns(UserWarning, match="broker.linger.ms wins") as record:
        cfg = CollectorConfig.from_dict({"linger.ms": 100, "broker.linger.ms": 500})
    assert not any(issubclass(w.category, DeprecationWarning) for w in record)
    assert not cfg.legacy and cfg.broker_linger_ms == 500.0


def test_no_linger_ms_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CollectorConfig.from_dict({"broker.linger.ms": 50})


# -- the linger window -----------------------------------------------------------------------------
def test_window_starts_at_first_add_and_fires_at_linger():
    c, clock = make({"broker.linger.ms": 500})
    assert c.add(1, "p0", 100) is True  # opened a window: the driver must schedule it
    assert c.next_deadline() == pytest.approx(clock.now + 0.5)
    clock.advance(300)
    assert c.add(1, "p1", 100) is False  # same window
    clock.advance(199)
    assert c.poll() == []
    clock.advance(1)
    (send,) = c.poll()
    assert send.reason == "broker_linger"
    assert set(send.partitions) == {"p0", "p1"}
    assert send.wait_ms == pytest.approx(500.0)
    assert c.pending() == 0 and c.next_deadline() is None


def test_already_old_messages_do_not_fire_the_window_immediately():
    c, clock = make({"broker.linger.ms": 500})
    c.add(1, "p0", 100, oldest=clock.now - 10.0)  # its oldest message waited 10 s upstream
    assert c.poll() == []
    clock.advance(499)
    assert c.poll() == []
    clock.advance(1)
    assert [s.reason for s in c.poll()] == ["broker_linger"]


def test_brokers_have_independent_windows():
    c, clock = make({"broker.linger.ms": 100})
    c.add(1, "a", 10)
    clock.advance(60)
    c.add(2, "b", 10)
    clock.advance(40)
    assert [(s.broker, s.partitions) for s in c.poll()] == [(1, ("a",))]
    clock.advance(60)
    assert [(s.broker, s.partitions) for s in c.poll()] == [(2, ("b",))]


def test_new_window_opens_after_a_send():
    c, clock = make({"broker.linger.ms": 100})
    c.add(1, "a", 10)
    clock.advance(100)
    (first,) = c.poll()
    c.complete(first)
    clock.advance(5)
    assert c.add(1, "a", 10) is True
    clock.advance(99)
    assert c.poll() == []
    clock.advance(1)
    assert len(c.poll()) == 1


# -- triggers and their priority -------------------------------------------------------------------
def test_max_partitions_fires_early():
    c, _ = make({"broker.linger.ms": 10_000, "broker.batch.max.partitions": 3})
    assert c.add(1, "a", 1) is True  # window opened
    assert c.add(1, "b", 1) is False
    assert c.add(1, "c", 1) is True  # cap reached
    (send,) = c.poll()
    assert send.reason == "max_partitions" and len(send.partitions) == 3


def test_max_bytes_fires_early():
    c, _ = make({"broker.linger.ms": 10_000, "broker.batch.max.bytes": 1000})
    c.add(1, "a", 600)
    assert c.add(1, "a", 300) is False
    assert c.add(1, "b", 100) is True
    (send,) = c.poll()
    assert send.reason == "max_bytes" and send.nbytes == 1000


def test_flush_sends_at_once_and_stops_when_cleared():
    c, clock = make({"broker.linger.ms": 10_000})
    c.add(1, "a", 1)
    c.set_flushing(True)
    (send,) = c.poll()
    assert send.reason == "flush" and send.wait_ms == 0.0
    c.complete(send)
    c.set_flushing(False)
    c.add(1, "b", 1)
    clock.advance(9_999)
    assert c.poll() == []


@pytest.mark.parametrize(
    ("flushing", "max_partitions", "max_bytes", "expected"),
    [
        (True, 2, 100, "flush"),
        (False, 2, 100, "max_partitions"),
        (False, -1, 100, "max_bytes"),
        (False, -1, -1, "broker_linger"),
    ],
)
def test_priority_when_several_triggers_hold(flushing, max_partitions, max_bytes, expected):
    # Every enabled trigger is met at once: two partitions, 200 bytes, linger expired.
    c, clock = make(
        {"broker.linger.ms": 50, "broker.batch.max.partitions": max_partitions, "broker.batch.max.bytes": max_bytes}
    )
    c.add(1, "a", 100)
    clock.advance(50)
    c.add(1, "b", 100)
    c.set_flushing(flushing)
    (send,) = c.poll()
    assert send.reason == expected
    assert c.stats()["triggers_by_reason"][expected] == 1


# -- ordering, splitting, fairness -----------------------------------------------------------------
def test_partitions_go_oldest_first():
    c, clock = make({"broker.linger.ms": 100})
    ages = {"p3": 30, "p1": 10, "p4": 40, "p0": 0, "p2": 20}  # seconds ago
    for p, age in ages.items():
        c.add(1, p, 10, oldest=clock.now - age)
    clock.advance(100)
    (send,) = c.poll()
    assert send.partitions == ("p4", "p3", "p2", "p1", "p0")


def test_request_stops_at_max_request_size_and_rest_goes_next():
    c, clock = make({"broker.linger.ms": 100, "max.request.size": 1000})
    for i in range(5):
        c.add(1, f"p{i}", 400, oldest=clock.now + i * 1e-6)
    clock.advance(100)
    sends = c.poll()
    assert [s.partitions for s in sends] == [("p0", "p1"), ("p2", "p3"), ("p4",)]
    assert [s.nbytes for s in sends] == [800, 800, 400]
    assert all(s.nbytes <= 1000 for s in sends)
    assert {s.reason for s in sends} == {"broker_linger"}
    assert c.stats()["split_sends"] == 2


def test_oversized_partition_goes_alone():
    c, clock = make({"broker.linger.ms": 100, "max.request.size": 1000})
    c.add(1, "big", 5000, oldest=clock.now)
    c.add(1, "small", 10, oldest=clock.now + 1e-6)
    clock.advance(100)
    assert [s.partitions for s in c.poll()] == [("big",), ("small",)]


def test_resume_pointer_rotates_equal_aged_partitions():
    # Frozen clock: every partition is always ready and equally old; one request fits two of ten.
    c, _ = make({"broker.linger.ms": 0, "max.request.size": 20, "max.in.flight.requests.per.connection": 1})
    partitions = [f"p{i}" for i in range(10)]
    for p in partitions:
        c.add(1, p, 10)
    sent: list[str] = []
    for _ in range(5):
        (send,) = c.poll()
        sent.extend(send.partitions)
        c.complete(send)
        for p in send.partitions:  # they got more data at once: still tied on age with the rest
            c.add(1, p, 10)
    assert sorted(sent) == partitions  # each exactly once in five rounds: nobody starves


def test_no_partition_starves_under_a_hot_steady_load():
    # 50 partitions always have data; each send fits 5; the window allows one in flight.
    c, clock = make({"broker.linger.ms": 1, "max.request.size": 50, "max.in.flight.requests.per.connection": 1})
    last_sent = dict.fromkeys(range(50), 0)
    for p in range(50):
        c.add(1, p, 10)
    for round_no in range(1, 201):
        clock.advance(1)
        for send in c.poll():
            for p in send.partitions:
                last_sent[p] = round_no
            c.complete(send, rtt_ms=0.1)
            for p in send.partitions:
                c.add(1, p, 10)
        # no partition waits more than one full rotation (10 sends) plus slack
        assert all(round_no - r <= 12 for r in last_sent.values()), last_sent


# -- the in-flight window --------------------------------------------------------------------------
def test_full_window_holds_sends_and_counts_the_wait():
    c, clock = make({"broker.linger.ms": 10, "max.request.size": 100, "max.in.flight.requests.per.connection": 2})
    for i in range(4):
        c.add(1, f"p{i}", 100, oldest=clock.now + i * 1e-6)
    clock.advance(10)
    first = c.poll()
    assert [s.partitions for s in first] == [("p0",), ("p1",)]
    assert c.in_flight(1) == 2 and c.is_held(1) and c.pending(1) == 2
    clock.advance(30)
    assert c.poll() == []  # still held: no slot
    c.complete(first[0])
    (third,) = c.poll()
    assert third.partitions == ("p2",) and third.reason == "broker_linger"
    assert third.held_ms == pytest.approx(30.0)
    assert third.wait_ms == pytest.approx(40.0)
    stats = c.stats()
    assert stats["window_waits"] == 1 and stats["window_wait_ms_total"] == pytest.approx(30.0)
    assert stats["in_flight"] == 2
    c.complete(first[1])
    (fourth,) = c.poll()
    assert fourth.partitions == ("p3",)


def test_partition_in_flight_is_not_sent_again_until_complete():
    c, clock = make({"broker.linger.ms": 10})
    c.add(1, "a", 10)
    clock.advance(10)
    (first,) = c.poll()
    c.add(1, "a", 10)  # more data while its request is in flight
    c.set_flushing(True)
    assert c.poll() == []
    c.complete(first)
    (second,) = c.poll()
    assert second.partitions == ("a",) and second.reason == "flush"


def test_a_partition_in_flight_waits_one_rtt_not_a_fresh_window():
    """C15: no message waits longer than broker.linger.ms plus one RTT, even when its partition has a
    request in flight (the fork restarted the window for it: linger + RTT + linger)."""
    c, clock = make({"broker.linger.ms": 100})
    c.add(1, "a", 10)
    clock.advance(100)
    (first,) = c.poll()  # t=100: a in flight
    clock.advance(10)
    c.add(1, "a", 10)  # t=110: a new message for a, which has a request in flight
    assert c.next_deadline() is None  # it joins the window when the response frees a
    clock.advance(100)  # t=210: its linger has passed, a is still in flight
    assert c.poll() == [] and c.next_deadline() is None
    clock.advance(30)
    assert c.add(1, "b", 10) is True  # t=240: another partition opens a window
    assert c.next_deadline() == pytest.approx(clock.now + 0.100)
    c.complete(first, rtt_ms=140)  # a rejoins as of t=110: the window is due now
    (second,) = c.poll()  # at once: linger + the rest of one RTT
    assert second.partitions == ("a", "b") and second.reason == "broker_linger"
    assert second.wait_ms == pytest.approx(130.0)
    c.complete(second, rtt_ms=1)
    assert c.pending() == 0 and c.next_deadline() is None


def test_a_partition_added_while_its_broker_waits_on_one_in_flight_goes_at_its_own_linger():
    c, clock = make({"broker.linger.ms": 100})
    c.add(1, "a", 10)
    clock.advance(100)
    (first,) = c.poll()  # t=100: a in flight
    c.add(1, "a", 10)
    clock.advance(100)  # t=200: a's second message is due, a still in flight
    assert c.poll() == [] and c.next_deadline() is None
    clock.advance(20)
    c.add(1, "b", 10)  # t=220: b must not wait for a's response (which may take request.timeout.ms)
    assert c.next_deadline() == pytest.approx(clock.now + 0.100)
    clock.advance(100)
    (second,) = c.poll()  # t=320: b at its own linger; a still waits for its response
    assert second.partitions == ("b",) and second.wait_ms == pytest.approx(100.0)
    c.complete(first, rtt_ms=220)
    (third,) = c.poll()
    assert third.partitions == ("a",)


def test_data_left_behind_by_a_send_keeps_its_add_time():
    c, clock = make({"broker.linger.ms": 100})
    c.add(1, "a", 10)
    clock.advance(100)
    (first,) = c.poll()  # t=100: a in flight
    clock.advance(10)
    c.add(1, "a", 10)  # t=110: a's next message
    clock.advance(40)
    c.add(1, "b", 10)  # t=150: b opens the window; a's message does not shorten it
    assert c.next_deadline() == pytest.approx(clock.now + 0.100)
    clock.advance(100)  # t=250
    (second,) = c.poll()
    assert second.partitions == ("b",) and second.wait_ms == pytest.approx(100.0)
    clock.advance(10)
    c.complete(first, rtt_ms=160)  # t=260: a's request is back; its message is 150 ms old
    (third,) = c.poll()
    assert third.partitions == ("a",) and third.wait_ms == pytest.approx(150.0)


@pytest.mark.parametrize("off", [0, -1, -5, "0", " -2 "])
def test_thresholds_at_or_below_zero_are_off(off):
    """C6: the seed applies broker.batch.max.partitions and broker.batch.max.bytes "if > 0"."""
    c, clock = make({"broker.linger.ms": 10, "broker.batch.max.partitions": off, "broker.batch.max.bytes": off})
    assert (c.config.batch_max_partitions, c.config.batch_max_bytes) == (-1, -1)
    for p in range(50):
        c.add(1, f"p{p}", 1000)
    assert c.poll() == []  # neither the partition count nor the bytes send early
    clock.advance(10)
    (send,) = c.poll()
    assert send.reason == "broker_linger" and len(send.partitions) == 50


def test_complete_twice_raises():
    c, _ = make({"broker.linger.ms": 0})
    c.add(1, "a", 1)
    (send,) = c.poll()
    c.complete(send)
    with pytest.raises(ValueError, match="is not in flight"):
        c.complete(send)


def test_negative_bytes_raise():
    c, _ = make()
    with pytest.raises(ValueError, match="nbytes must be >= 0, got -3"):
        c.add(1, "a", -3)


def test_discard_forgets_a_partition():
    c, clock = make({"broker.linger.ms": 10})
    c.add(1, "a", 7)
    assert c.discard(1, "a") == 7 and c.pending() == 0 and c.next_deadline() is None
    clock.advance(10)
    assert c.poll() == []


# -- legacy per-partition linger -------------------------------------------------------------------
def test_legacy_mode_lingers_per_partition():
    with pytest.warns(DeprecationWarning):
        c, clock = make({"linger.ms": 100})
    c.add(1, "a", 10)
    clock.advance(50)
    c.add(1, "b", 10)
    clock.advance(50)
    (send,) = c.poll()
    assert send.partitions == ("a",) and send.reason == "partition_linger"
    assert c.next_deadline() == pytest.approx(clock.now + 0.05)
    clock.advance(50)
    (send,) = c.poll()
    assert send.partitions == ("b",)


# -- adaptive mode ---------------------------------------------------------------------------------
def adaptive_roundtrips(c: BrokerBatchCollector, clock: FakeClock):
    def roundtrip(rtt_ms: float, ok: bool = True) -> None:
        c.add(1, "a", 10)
        c.set_flushing(True)
        (send,) = c.poll()
        c.set_flushing(False)
        clock.advance(rtt_ms)
        c.complete(send, rtt_ms=rtt_ms, ok=ok)

    return roundtrip


def test_adaptive_is_the_seeds_aimd_on_max_wait_and_min_partitions():
    """C23/C24: halve both on congestion, +1 ms and +10 partitions when healthy, within the seed's bounds."""
    c, clock = make({"broker.linger.ms": 80, "broker.adaptive": True})
    roundtrip = adaptive_roundtrips(c, clock)
    assert (c.effective_linger_ms(1), c.effective_min_partitions(1)) == (80.0, 1000)  # start at the caps
    for _ in range(5):
        roundtrip(10)
    assert (c.effective_linger_ms(1), c.effective_min_partitions(1)) == (80.0, 1000)
    roundtrip(200)  # ema 10 + 190/8 = 33.75 > 1.5 * 10 + 5 ms slack: congested
    assert (c.effective_linger_ms(1), c.effective_min_partitions(1)) == (40.0, 500)
    for _ in range(30):
        roundtrip(200)
    assert (c.effective_linger_ms(1), c.effective_min_partitions(1)) == (1.0, 1)  # the seed's floors
    while c.stats()["adaptive_increases"] == 0:  # the EMA decays back towards the 10 ms baseline
        assert (c.effective_linger_ms(1), c.effective_min_partitions(1)) == (1.0, 1)
        roundtrip(10)
    assert (c.effective_linger_ms(1), c.effective_min_partitions(1)) == (2.0, 11)  # +1 ms, +10
    for _ in range(200):
        roundtrip(10)
    assert (c.effective_linger_ms(1), c.effective_min_partitions(1)) == (80.0, 1000)  # capped again
    # the next window uses the effective max wait
    c.add(1, "b", 10)
    assert c.next_deadline() == pytest.approx(clock.now + 0.080)
    assert c.stats()["effective_min_partitions"] == {1: 1000}
    assert c.broker_stats(1)["batch_collector_effective_min_partitions"] == 1000


def test_adaptive_max_wait_is_capped_at_the_seeds_100_ms_and_min_partitions_at_the_configured_cap():
    c, clock = make({"broker.linger.ms": 500, "broker.batch.max.partitions": 40, "broker.adaptive": True})
    assert (c.effective_linger_ms(1), c.effective_min_partitions(1)) == (100.0, 40)
    roundtrip = adaptive_roundtrips(c, clock)
    roundtrip(10)
    roundtrip(400, ok=False)  # a failed request is congestion whatever the RTT
    assert (c.effective_linger_ms(1), c.effective_min_partitions(1)) == (50.0, 20)


def test_adaptive_min_partitions_sends_early():
    c, clock = make({"broker.linger.ms": 50, "broker.batch.max.partitions": 8, "broker.adaptive": True})
    roundtrip = adaptive_roundtrips(c, clock)
    roundtrip(10)
    roundtrip(10, ok=False)  # min partitions 8 -> 4
    assert c.effective_min_partitions(1) == 4
    for p in range(3):
        assert c.add(1, f"p{p}", 10) is (p == 0)  # only the window's first add asks for a poll
    assert c.poll() == []
    assert c.add(1, "p3", 10) is True  # the fourth partition reaches the effective min partitions
    (send,) = c.poll()
    assert send.reason == "max_partitions" and len(send.partitions) == 4


def test_adaptive_decreases_at_most_once_per_rtt():
    c, clock = make({"broker.linger.ms": 400, "broker.adaptive": True, "max.request.size": 10})
    for p in range(5):
        c.add(1, f"p{p}", 10)
    c.set_flushing(True)
    sends = c.poll()
    c.set_flushing(False)
    assert len(sends) == 5
    c.complete(sends[0], rtt_ms=10)  # baseline
    clock.advance(1)
    for send in sends[1:]:  # four congested responses arriving within one RTT
        c.complete(send, rtt_ms=500, ok=False)
    assert c.effective_linger_ms(1) == 50.0  # 400 ms capped at the seed's 100 ms, halved once
    assert c.stats()["adaptive_decreases"] == 1


def test_adaptive_off_ignores_rtt():
    c, clock = make({"broker.linger.ms": 100})
    c.add(1, "a", 1)
    clock.advance(100)
    (send,) = c.poll()
    c.complete(send, rtt_ms=10_000, ok=False)
    assert c.effective_linger_ms(1) == 100.0


@settings(max_examples=80, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["add", "add", "tick", "complete"]), st.integers(0, 7), st.integers(1, 150)),
        max_size=100,
    )
)
def test_no_message_waits_past_the_linger_unless_its_partition_is_in_flight(ops):
    """C15 as a property: after each poll (the driver polls at every deadline and every response), no
    partition without a request in flight holds data older than broker.linger.ms."""
    linger_ms = 50
    c, clock = make({"broker.linger.ms": linger_ms, "max.in.flight.requests.per.connection": 1000})
    added: dict[str, float] = {}  # partition -> when its oldest unsent data arrived
    in_flight: list = []
    for op, n, ms in ops:
        partition = f"p{n}"
        if op == "add":
            c.add(1, partition, 10)
            added.setdefault(partition, clock.now)
        elif op == "tick":
            deadline = c.next_deadline()
            if deadline is not None and deadline < clock.now + ms / 1000:
                clock.now = deadline  # the driver's timer fires at the deadline
            else:
                clock.advance(ms)
        elif in_flight:
            c.complete(in_flight.pop(n % len(in_flight)))
        for send in c.poll():
            for p in send.partitions:
                del added[p]
            in_flight.append(send)
        busy = {p for send in in_flight for p in send.partitions}
        waited = {p: (clock.now - t) * 1000 for p, t in added.items() if p not in busy}
        assert all(ms_waited < linger_ms for ms_waited in waited.values()), waited


# -- invariants under random operation sequences ---------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["add", "tick", "poll", "complete", "flush"]), st.integers(0, 11), st.integers(1, 400)),
        max_size=120,
    ),
    max_in_flight=st.integers(1, 3),
)
def test_invariants_hold_for_any_sequence(ops, max_in_flight):
    c, clock = make(
        {"broker.linger.ms": 20, "max.request.size": 600, "max.in.flight.requests.per.connection": max_in_flight}
    )
    added: dict[tuple[int, int], int] = {}
    sent: dict[tuple[int, int], int] = {}
    in_flight: list = []
    for op, n, size in ops:
        broker, part = n % 3, n
        if op == "add":
            c.add(broker, part, size)
            added[(broker, part)] = added.get((broker, part), 0) + size
        elif op == "tick":
            clock.advance(size / 10)
        elif op == "flush":
            c.set_flushing(not c.flushing)
        elif op == "complete" and in_flight:
            c.complete(in_flight.pop(n % len(in_flight)))
        else:
            for send in c.poll():
                busy = {(s.broker, p) for s in in_flight for p in s.partitions}
                assert not busy & {(send.broker, p) for p in send.partitions}  # never two in flight
                in_flight.append(send)
                for p in send.partitions:
                    sent[(send.broker, p)] = sent.get((send.broker, p), 0) + 1
            for b in range(3):
                assert c.in_flight(b) <= max_in_flight
    # drain: flush and complete everything; every byte added is sent, none twice-counted
    c.set_flushing(True)
    for _ in range(200):
        for send in in_flight:
            c.complete(send)
        in_flight = c.poll()
        for send in in_flight:
            for p in send.partitions:
                sent[(send.broker, p)] = sent.get((send.broker, p), 0) + 1
        if not in_flight and c.pending() == 0:
            break
    assert c.pending() == 0 and c.in_flight() == 0
    assert set(sent) == set(added)  # every partition with data was sent, nothing invented


# -- issue 16: the seed's per-broker metrics and the per-send debug line ---------------------------
def test_per_broker_seed_metrics_count_each_send_by_reason(caplog):
    import logging

    c, clock = make({"broker.linger.ms": 100, "broker.batch.max.partitions": 3, "broker.batch.max.bytes": 1000})
    with caplog.at_level(logging.DEBUG, logger="rebalancer.produce.collector"):
        for i in range(3):  # broker 1: three partitions -> max_partitions at once
            c.add(1, f"a{i}", 10, oldest=clock.now - 0.005 * i)
        (s1,) = c.poll()
        c.add(2, "b0", 1200)  # broker 2: bytes -> max_bytes
        (s2,) = c.poll()
        c.add(1, "a9", 5)
        clock.advance(100)  # broker 1: the window expires -> broker_linger
        (s3,) = c.poll()
        c.add(2, "b1", 5)
        c.set_flushing(True)
        (s4,) = c.poll()
    assert [s.reason for s in (s1, s2, s3, s4)] == ["max_partitions", "max_bytes", "broker_linger", "flush"]
    b1, b2 = c.broker_stats(1), c.broker_stats(2)
    assert (b1["batch_collector_sends"], b2["batch_collector_sends"]) == (2, 2)
    assert b1["batch_collector_partitions_avg"] == 2.0 and b2["batch_collector_partitions_avg"] == 1.0
    assert b1["batch_collector_wait_ms_avg"] == pytest.approx(50.0)  # (0 + 100) / 2
    assert (b1["batch_collector_trigger_partition_threshold"], b1["batch_collector_trigger_time_threshold"]) == (1, 1)
    assert (b2["batch_collector_trigger_size_threshold"], b2["batch_collector_trigger_flush"]) == (1, 1)
    assert b1["batch_collector_trigger_size_threshold"] == b2["batch_collector_trigger_partition_threshold"] == 0
    assert b1["batch_collector_effective_linger_ms"] == 100.0 and b1["batch_collector_in_flight"] == 2
    totals = c.stats()
    assert totals["brokers"] == {1: b1, 2: b2}
    assert sum(b["batch_collector_sends"] for b in (b1, b2)) == totals["sends"] == 4
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "sending batch to broker 1: 3 partitions, 30 bytes, oldest 10.0 ms, reason=max_partitions",
        "sending batch to broker 2: 1 partitions, 1200 bytes, oldest 0.0 ms, reason=max_bytes",
        "sending batch to broker 1: 1 partitions, 5 bytes, oldest 100.0 ms, reason=broker_linger",
        "sending batch to broker 2: 1 partitions, 5 bytes, oldest 0.0 ms, reason=flush",
    ]
    assert c.broker_stats(7)["batch_collector_sends"] == 0  # an unknown broker reads as empty


def test_discard_partition_finds_it_on_any_broker():
    c, clock = make({"broker.linger.ms": 10})
    c.add(1, "a", 7)
    c.add(2, "b", 5)
    assert c.discard_partition("b") == 5 and c.pending(2) == 0 and c.pending(1) == 1
    assert c.discard_partition("nowhere") == 0
    clock.advance(10)
    assert [s.partitions for s in c.poll()] == [("a",)]
