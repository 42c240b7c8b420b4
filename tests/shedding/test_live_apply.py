"""`SheddingWatch(apply=...)` against the fake admin API: the refusal, the unloads with their planned
destination, the grace period, and the rule for a failed unload (retried once, then given up)."""

from __future__ import annotations

import logging

import pytest
from live_fakes import FakePulsar
from test_live_watch import LOGGER, skewed, timed, warnings_of

from rebalancer.shedding import ShedderConfig
from rebalancer.shedding.base import LoadSheddingStrategy, PlacementStrategy
from rebalancer.shedding.live import Action, Move, SheddingEnabledError, SheddingWatch, read_decisions
from rebalancer.shedding.model import ClusterLoad

GRACE_1_MIN = ShedderConfig(max_unload_percentage=0.5, shedding_grace_period_minutes=1)


@pytest.fixture
def fake():
    with FakePulsar(2) as f:
        yield f


def puts(fake: FakePulsar) -> list[tuple[str, str, str]]:
    """The unload calls the brokers received: (broker, path, destination)."""
    return [(r.broker, r.path, r.query.get("destinationBroker", "")) for r in fake.requests if r.method == "PUT"]


def unload_path(bundle: str) -> str:
    return f"/admin/v2/namespaces/{bundle}/unload"


def test_apply_unloads_the_planned_bundles_to_the_planned_broker(fake, tmp_path, caplog):
    names = skewed(fake)
    b0, b1 = fake.brokers[0].id, fake.brokers[1].id
    caplog.set_level(logging.INFO, LOGGER)
    with SheddingWatch(fake.admin_url, "BalancedShedder", apply="AvgShedder", **timed(record=tmp_path)) as watch:
        assert watch.strategies == ["BalancedShedder", "AvgShedder"]  # the applied one is watched too
        first, second, third = watch.run(3)
    moves = (Move(names[7], b0, b1), Move(names[6], b0, b1), Move(names[5], b0, b1))
    assert first.applied == ()
    assert second.decisions["AvgShedder"] == moves
    assert second.applied == tuple(Action(m, "unloaded") for m in moves)
    assert puts(fake) == [(b0, unload_path(m.bundle), b1) for m in moves]
    # the fake moved them: the next cycle sees them on their planned broker
    assert third.snapshot is not None
    assert set(third.snapshot.brokers[b1].bundles) >= {m.bundle for m in moves}
    logged = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert f"apply: unload {names[7]} from {b0} to {b1}: done" in logged
    assert "apply AvgShedder: 3 unloaded, 0 failed (retried next cycle), 0 gave up, 0 skipped" in logged
    applied = [line["applied"] for line in read_decisions(tmp_path)]
    assert applied[1] == [
        {"bundle": m.bundle, "source": b0, "destination": b1, "outcome": "unloaded", "reason": "", "retry": False}
        for m in moves
    ]
    assert read_decisions(tmp_path)[2]["recently_unloaded"] == {m.bundle: 1_700_000_020_000 for m in moves}


def test_an_unload_at_a_broker_that_does_not_own_the_bundle_follows_pulsars_redirect_with_the_token(fake):
    from rebalancer.shedding.live import AdminOptions

    b0, b1 = fake.brokers[0].id, fake.brokers[1].id
    moved = "public/t/0x80000000_0xffffffff"
    fake.brokers[1].cpu = (790.0, 800.0)  # broker 1 is the hot one: its bundle moves to broker 0
    fake.brokers[0].cpu = (10.0, 800.0)
    fake.put_bundle(1, "public/t/0x00000000_0x80000000", 3000)
    fake.put_bundle(1, moved, 1000)  # (4000 - 10) / 2 msg/s to move: this one
    fake.put_bundle(0, "public/u/0x00000000_0xffffffff", 10)
    options = AdminOptions(token="tok-123")
    with SheddingWatch(fake.admin_url, "AvgShedder", apply="AvgShedder", admin=options, **timed()) as watch:
        cycles = list(watch.run(2))
    assert cycles[1].applied == (Action(Move(moved, b1, b0), "unloaded"),)
    hops = [(r.broker, r.headers.get("Authorization")) for r in fake.requests if r.method == "PUT"]
    assert hops == [(b0, "Bearer tok-123"), (b1, "Bearer tok-123")]  # 307 from broker 0 to the owner


def test_no_bundle_is_unloaded_twice_within_the_grace_period(fake):
    """A shedder that wants the same bundle every cycle: the apply side holds it for the grace period."""
    names = skewed(fake)
    b0, b1 = fake.brokers[0].id, fake.brokers[1].id
    wanted = names[0]

    class Stubborn(LoadSheddingStrategy, PlacementStrategy):
        def find_bundles_for_unloading(self, cluster: ClusterLoad, conf: ShedderConfig) -> dict[str, list[str]]:
            owner = cluster.owner_of(wanted)
            return {} if owner is None else {owner: [wanted]}

        def select_broker(self, candidates: set[str], bundle: str, cluster: ClusterLoad,
                          conf: ShedderConfig) -> str | None:
            return b1

    with SheddingWatch(fake.admin_url, "AvgShedder", GRACE_1_MIN, apply="AvgShedder", **timed()) as watch:
        watch.connect()
        (runner,) = watch._runners
        runner.shedder = runner.placer = Stubborn()
        cycles = []
        for cycle in watch.run(6):
            cycles.append(cycle)
            fake.put_bundle(0, wanted, 500)  # someone moves it back each time
    outcomes = [(c.timestamp - 1_700_000_000, [(a.outcome, a.reason) for a in c.applied]) for c in cycles]
    assert outcomes == [
        (0.0, [("unloaded", "")]),
        (20.0, [("skipped", "unloaded 20 s ago, within the grace period (1 min)")]),
        (40.0, [("skipped", "unloaded 40 s ago, within the grace period (1 min)")]),
        (60.0, [("unloaded", "")]),
        (80.0, [("skipped", "unloaded 20 s ago, within the grace period (1 min)")]),
        (100.0, [("skipped", "unloaded 40 s ago, within the grace period (1 min)")]),
    ]
    assert puts(fake) == [(b0, unload_path(wanted), b1)] * 2


def test_the_strategies_see_what_was_unloaded_within_the_grace_period_and_skip_it(fake):
    names = skewed(fake)
    b0, b1 = fake.brokers[0].id, fake.brokers[1].id
    with SheddingWatch(fake.admin_url, "AvgShedder", GRACE_1_MIN, apply="AvgShedder", **timed()) as watch:
        cycles = []
        for cycle in watch.run(6):
            cycles.append(cycle)
            for name in names:  # every bundle back on broker 0, so the skew stays
                fake.put_bundle(0, name, 500 + 100 * names.index(name))
    unloaded = [(c.timestamp - 1_700_000_000, [a.move.bundle[-10:] for a in c.applied]) for c in cycles]
    # cycle 1 takes the three largest; two cycles later (hit counts again) the next four, leaving out
    # the first three, unloaded 40 s before; at 100 s they are free again
    assert unloaded == [
        (0.0, []),
        (20.0, ["0x00000008", "0x00000007", "0x00000006"]),
        (40.0, []),
        (60.0, ["0x00000005", "0x00000004", "0x00000003", "0x00000002"]),
        (80.0, []),
        (100.0, ["0x00000008", "0x00000007", "0x00000006"]),
    ]
    assert all(m.source == b0 and m.destination == b1 for c in cycles for m in c.decisions["AvgShedder"])


def test_a_failed_unload_is_retried_once_at_the_next_cycle(fake, caplog):
    names = skewed(fake)
    b0, b1 = fake.brokers[0].id, fake.brokers[1].id
    fake.fault(0, "/admin/v2/namespaces/", "500")
    caplog.set_level(logging.WARNING, LOGGER)
    with SheddingWatch(fake.admin_url, "AvgShedder", apply="AvgShedder", **timed()) as watch:
        cycles = list(watch.run(3))
    first = Move(names[7], b0, b1)
    assert cycles[1].applied == (
        Action(first, "failed", "apply: unload public/t/0x00000007_0x00000008 from "
               f"{b0} to {b1}: HTTP 500: Internal error: boom"),
        Action(Move(names[6], b0, b1), "unloaded"),
        Action(Move(names[5], b0, b1), "unloaded"),
    )
    assert cycles[2].applied == (Action(first, "unloaded", retry=True),)
    assert warnings_of(caplog) == [
        f"apply: unload {names[7]} from {b0} to {b1}: HTTP 500: Internal error: boom; retried at the next cycle"
    ]
    assert [p[1] for p in puts(fake)].count(unload_path(names[7])) == 2


def test_every_failed_unload_of_a_cycle_is_retried_at_the_next(fake, caplog):
    names = skewed(fake)
    fake.fault(0, "/admin/v2/namespaces/", "500", "500")
    caplog.set_level(logging.WARNING, LOGGER)
    with SheddingWatch(fake.admin_url, "AvgShedder", apply="AvgShedder", **timed()) as watch:
        cycles = list(watch.run(4))
    assert [(a.move.bundle, a.outcome) for a in cycles[1].applied] == [
        (names[7], "failed"), (names[6], "failed"), (names[5], "unloaded")
    ]
    assert [(a.move.bundle, a.outcome, a.retry) for a in cycles[2].applied] == [
        (names[7], "unloaded", True), (names[6], "unloaded", True)
    ]
    assert cycles[3].applied == ()
    assert [w.rsplit("; ", 1)[1] for w in warnings_of(caplog)] == ["retried at the next cycle"] * 2


def test_a_retry_that_fails_again_is_given_up(fake, caplog):
    names = skewed(fake)
    b0, b1 = fake.brokers[0].id, fake.brokers[1].id
    caplog.set_level(logging.WARNING, LOGGER)
    with SheddingWatch(fake.admin_url, "AvgShedder", apply="AvgShedder", **timed()) as watch:
        first = watch.poll()
        fake.fault(0, "/admin/v2/namespaces/", "500")
        watch._sleep(20)
        second = watch.poll()
        fake.fault(0, "/admin/v2/namespaces/", "500")
        watch._sleep(20)
        third = watch.poll()
    assert first.applied == ()
    assert [a.outcome for a in second.applied] == ["failed", "unloaded", "unloaded"]
    reason = f"apply: unload {names[7]} from {b0} to {b1}: HTTP 500: Internal error: boom"
    assert third.applied == (Action(Move(names[7], b0, b1), "gave up", reason, retry=True),)
    assert warnings_of(caplog)[-1] == f"{reason}; gave up after the retry"


def test_an_unload_that_failed_but_went_through_counts_as_done_at_the_retry(fake):
    names = skewed(fake)
    b0, b1 = fake.brokers[0].id, fake.brokers[1].id
    fake.fault(0, "/admin/v2/namespaces/", "move-then-500")
    with SheddingWatch(fake.admin_url, "AvgShedder", apply="AvgShedder", **timed()) as watch:
        cycles = list(watch.run(3))
    assert [a.outcome for a in cycles[1].applied] == ["failed", "unloaded", "unloaded"]
    assert cycles[2].applied == (
        Action(Move(names[7], b0, b1), "unloaded", "found on its destination at the retry", retry=True),
    )
    assert len(puts(fake)) == 3  # no second call


def test_apply_refuses_a_cluster_that_sheds_by_itself(fake):
    skewed(fake)
    b1 = fake.brokers[1].id
    fake.brokers[1].runtime["loadBalancerSheddingEnabled"] = "true"
    refusal = (
        f"refusing to apply AvgShedder: broker {b1} runs Pulsar's own load shedding "
        "(loadBalancerSheddingEnabled=true) and two load managers would fight; set it to false "
        "(pulsar-admin brokers update-dynamic-config --config loadBalancerSheddingEnabled --value false) "
        "or watch without apply"
    )
    with pytest.raises(SheddingEnabledError) as refused:
        SheddingWatch(fake.admin_url, "AvgShedder", apply="AvgShedder").connect()
    assert str(refused.value) == refusal
    # watching only is fine
    with SheddingWatch(fake.admin_url, "AvgShedder", **timed()) as watch:
        assert len(list(watch.run(2))) == 2
    # shedding switched on during a watch ends it before any unload
    fake.brokers[1].runtime["loadBalancerSheddingEnabled"] = "false"
    with SheddingWatch(fake.admin_url, "AvgShedder", apply="AvgShedder", **timed()) as watch:
        watch.poll()
        fake.brokers[1].runtime["loadBalancerSheddingEnabled"] = "true"
        with pytest.raises(SheddingEnabledError, match=r"^refusing to apply AvgShedder"):
            watch.poll()
    assert puts(fake) == []


def test_no_unload_when_the_shedding_setting_cannot_be_read(fake, caplog):
    skewed(fake)
    caplog.set_level(logging.WARNING, LOGGER)
    with SheddingWatch(fake.admin_url, "AvgShedder", apply="AvgShedder", **timed()) as watch:
        watch.poll()
        fake.fault(1, "/admin/v2/brokers/configuration/runtime", "500")
        watch._sleep(20)
        second = watch.poll()
    b1 = fake.brokers[1].id
    assert [a.outcome for a in second.applied] == ["skipped"] * 3
    assert {a.reason for a in second.applied} == {"the cluster's shedding setting could not be read"}
    assert warnings_of(caplog) == [
        f"cannot tell whether the cluster sheds by itself (broker {b1}: GET /admin/v2/brokers/configuration/"
        "runtime: HTTP 500: Internal error: boom); no unload this cycle"
    ]
    assert puts(fake) == []


def test_heartbeat_bundles_stay_on_their_broker(fake):
    b0, b1 = fake.brokers[0].id, fake.brokers[1].id
    heartbeat = f"pulsar/{b0}/0x00000000_0xffffffff"
    fake.put_bundle(0, heartbeat, 1000)  # (1000 + 2 x 600) / 2 msg/s to move: the heartbeat bundle alone
    for i in range(2):
        fake.put_bundle(0, f"public/t/0x{i:08x}_0x{i + 1:08x}", 600)
    fake.brokers[0].cpu = (700.0, 800.0)
    fake.brokers[1].cpu = (80.0, 800.0)
    with SheddingWatch(fake.admin_url, "AvgShedder", apply="AvgShedder", **timed()) as watch:
        cycles = list(watch.run(2))
    assert cycles[1].applied == (
        Action(Move(heartbeat, b0, b1), "skipped", "heartbeat namespace, pinned to its broker"),
    )
    assert puts(fake) == []
