"""SheddingWatch against a fake admin API (tests/shedding/live_fakes.py): what it reads, what it
records, the strategies' state across cycles, and one warning per bad answer."""

from __future__ import annotations

import json
import logging

import pytest
from live_fakes import FakePulsar

from rebalancer.shedding import AvgShedder, BundleLoad, ShedderConfig
from rebalancer.shedding.live import (
    AdminOptions,
    AdminResponseError,
    AdminUnreachableError,
    Move,
    SheddingWatch,
    read_decisions,
)
from rebalancer.shedding.reports import load_report, load_reports, replay
from rebalancer.shedding.sim import combination

LOGGER = "rebalancer.shedding.live"
START = 1_700_000_000.0


class FakeTime:
    """Time that passes only when the watch sleeps between cycles (or a test says so)."""

    def __init__(self) -> None:
        self.now = START

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def timed(**kwargs):
    """A watch's keywords for fake time: 20 s between cycles."""
    t = FakeTime()
    return {"clock": t.clock, "sleep": t.sleep, "interval_s": 20.0, **kwargs}


def bundle_name(i: int, namespace: str = "public/t") -> str:
    return f"{namespace}/0x{i:08x}_0x{i + 1:08x}"


def skewed(fake: FakePulsar) -> list[str]:
    """Broker 0 at 87.5% CPU with 8 bundles of 500..1200 msg/s; broker 1 at 10% with one of 10 msg/s."""
    names = [bundle_name(i) for i in range(8)]
    for i, name in enumerate(names):
        fake.put_bundle(0, name, 500 + 100 * i)
    fake.put_bundle(1, "public/t/0xf0000000_0xffffffff", 10)
    fake.brokers[0].cpu = (700.0, 800.0)
    fake.brokers[1].cpu = (80.0, 800.0)
    return names


@pytest.fixture
def fake():
    with FakePulsar(2) as f:
        yield f


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]


def test_a_cycle_reads_the_brokers_reports_and_builds_the_leaders_view(fake):
    fake.put_bundle(0, "public/t/0x00000000_0x80000000", 100, 50)
    fake.put_bundle(0, "public/t/0x80000000_0xffffffff", 10)
    fake.put_bundle(1, "other/ns/0x00000000_0xffffffff", 1, 2, size=10)
    fake.brokers[0].cpu = (400.0, 800.0)
    fake.brokers[0].bandwidth_in = (25_000.0, 100_000.0)
    b0, b1 = fake.brokers[0].id, fake.brokers[1].id
    with SheddingWatch(fake.admin_url, "AvgShedder", **timed()) as watch:
        assert watch.connect() == "fake"
        cycle = watch.poll()
    assert (cycle.index, cycle.timestamp, cycle.brokers) == (0, START, (b0, b1))
    snapshot = cycle.snapshot
    assert snapshot is not None
    first = snapshot.brokers[b0]
    assert (first.cpu, first.memory, first.direct_memory, first.bandwidth_in, first.bandwidth_out) == (
        50.0, 12.5, 0.0, 25.0, 0.0
    )
    assert (first.msg_rate_in, first.msg_rate_out, first.msg_throughput_in, first.msg_throughput_out) == (
        110.0, 50.0, 110_000.0, 50_000.0
    )
    assert first.bundles == ("public/t/0x00000000_0x80000000", "public/t/0x80000000_0xffffffff")
    assert snapshot.bundles["public/t/0x00000000_0x80000000"] == BundleLoad(100.0, 50.0, 100_000.0, 50_000.0)
    assert snapshot.bundles["other/ns/0x00000000_0xffffffff"] == BundleLoad(1.0, 2.0, 10.0, 20.0)
    assert snapshot.limits[b0] == {"cpu": 800.0, "memory": 8192.0, "directMemory": 4096.0,
                                   "bandwidthIn": 100_000.0, "bandwidthOut": 100_000.0}
    # usage: the weighted max the modular strategies compare (cpu 50, bandwidth in 25; heap left out)
    assert cycle.usage == {b0: 50.0, b1: 12.5} and cycle.spread == 37.5
    assert cycle.warnings == () and cycle.applied == () and cycle.path is None


def test_bundle_data_is_the_leaders_time_average_10_and_1000_samples(fake, tmp_path):
    name = "public/t/0x00000000_0xffffffff"
    fake.put_bundle(0, name, 100)
    with SheddingWatch(fake.admin_url, "AvgShedder", **timed(record=tmp_path)) as watch:
        for _ in range(10):
            watch.poll()
        fake.put_bundle(0, name, 1200)
        last = watch.poll()
    assert last.snapshot is not None
    data = last.snapshot.bundles[name]
    # short term: 10 samples at most, ((10 - 1) * 100 + 1200) / 10; long term: 11 samples, (10 * 100 + 1200) / 11
    assert (data.msg_rate_in, data.long_term_msg_rate_in) == (210.0, 200.0)
    recorded = json.loads((tmp_path / "snapshot-000010.json").read_text())["bundles"][name]
    assert recorded["shortTermData"]["numSamples"] == 10 and recorded["shortTermData"]["maxSamples"] == 10
    assert recorded["longTermData"]["numSamples"] == 11 and recorded["longTermData"]["maxSamples"] == 1000
    assert recorded["topics"] == 2


def test_the_recording_is_what_load_reports_and_replay_read(fake, tmp_path):
    skewed(fake)
    with SheddingWatch(fake.admin_url, "AvgShedder,BalancedShedder", **timed(record=tmp_path)) as watch:
        cycles = list(watch.run(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "decisions.jsonl", "snapshot-000000.json", "snapshot-000001.json", "snapshot-000002.json"
    ]
    assert [c.path for c in cycles] == [tmp_path / f"snapshot-00000{i}.json" for i in range(3)]
    assert load_reports(tmp_path) == [c.snapshot for c in cycles]
    lines = read_decisions(tmp_path)
    assert [(line["cycle"], line["file"], line["timestamp"]) for line in lines] == [
        (i, f"snapshot-00000{i}.json", round((START + 20 * i) * 1000)) for i in range(3)
    ]
    assert [line["decisions"] for line in lines] == [
        {name: [list(m) for m in c.decisions[name]] for name in ("AvgShedder", "BalancedShedder")} for c in cycles
    ]
    result = replay(load_reports(tmp_path), combination("AvgShedder"))
    assert len(result.minutes) == 3
    # A later watch on the same directory numbers its snapshots after the earlier ones.
    with SheddingWatch(fake.admin_url, "AvgShedder", **timed(record=tmp_path)) as watch:
        assert watch.poll().path == tmp_path / "snapshot-000003.json"
    assert len(load_reports(tmp_path)) == 4


def test_each_strategy_keeps_its_state_from_cycle_to_cycle(fake):
    names = skewed(fake)
    b0, b1 = fake.brokers[0].id, fake.brokers[1].id
    with SheddingWatch(fake.admin_url, "AvgShedder,BalancedShedder", **timed()) as watch:
        first, second = watch.run(2)
    # AvgShedder unloads after two cycles 40 points apart (hit count high threshold 2), not one.
    assert first.decisions["AvgShedder"] == ()
    assert second.decisions["AvgShedder"] == (Move(names[7], b0, b1), Move(names[6], b0, b1), Move(names[5], b0, b1))
    assert second.unloads["AvgShedder"] == ((names[7], b0), (names[6], b0), (names[5], b0))
    assert second.snapshot is not None
    fresh = AvgShedder(seed=0).find_bundles_for_unloading(second.snapshot.cluster(), ShedderConfig(max_unload_percentage=0.5))
    assert fresh == {}  # the same snapshot, seen once
    assert first.decisions["BalancedShedder"] == () and len(second.decisions["BalancedShedder"]) == 2


def test_an_html_page_truncated_json_and_a_500_are_one_warning_each_and_the_cycle_goes_on(fake, caplog):
    skewed(fake)
    b0, b1 = fake.brokers[0].id, fake.brokers[1].id
    fake.fault(1, "/admin/v2/broker-stats/load-report", "html", "truncated", "500", "404")
    caplog.set_level(logging.WARNING, LOGGER)
    report = "GET /admin/v2/broker-stats/load-report"
    with SheddingWatch(fake.admin_url, "AvgShedder", **timed()) as watch:
        cycles = list(watch.run(5))
    assert [c.warnings for c in cycles] == [
        (f"broker {b1}: {report}: an HTML page (text/html), not JSON; left out of this cycle",),
        (f"broker {b1}: {report}: truncated or malformed JSON (Expecting ':' delimiter at byte 30 of 30); "
         "left out of this cycle",),
        (f"broker {b1}: {report}: HTTP 500: Internal error: boom; left out of this cycle",),
        (f"broker {b1}: {report}: HTTP 404: Not found; left out of this cycle",),  # listed, then gone
        (),
    ]
    assert warnings_of(caplog) == [w for c in cycles for w in c.warnings]
    assert [c.brokers for c in cycles] == [(b0,)] * 4 + [(b0, b1)]


def test_a_bad_broker_list_falls_back_on_another_broker_then_on_the_last_list(fake, caplog):
    skewed(fake)
    b0, b1 = fake.brokers[0].id, fake.brokers[1].id
    caplog.set_level(logging.WARNING, LOGGER)
    with SheddingWatch(fake.admin_url, "AvgShedder", **timed()) as watch:
        watch.connect()
        fake.fault(0, "/admin/v2/brokers/fake", "500")
        asked_other = watch.poll()
        fake.fault(0, "/admin/v2/brokers/fake", "truncated")
        fake.fault(1, "/admin/v2/brokers/fake", "html")
        last_list = watch.poll()
    listing = "GET /admin/v2/brokers/fake"
    assert asked_other.warnings == (f"admin {fake.admin_url}: {listing}: HTTP 500: Internal error: boom",)
    assert asked_other.brokers == (b0, b1)
    assert last_list.warnings == (
        f"admin {fake.admin_url}: {listing}: truncated or malformed JSON (Expecting ':' delimiter at byte 30 of 30)",
        f"broker {b1}: {listing}: an HTML page (text/html), not JSON",
        "no broker listed the cluster's brokers; using the last list (2)",
    )
    assert last_list.brokers == (b0, b1)
    assert len(warnings_of(caplog)) == 4


def test_a_killed_broker_is_reported_once_and_the_watch_goes_on(fake, caplog):
    skewed(fake)
    b0, b1 = fake.brokers[0].id, fake.brokers[1].id
    caplog.set_level(logging.WARNING, LOGGER)
    with SheddingWatch(fake.admin_url, "AvgShedder,BalancedShedder", **timed()) as watch:
        watch.poll()
        fake.stop(1)
        down = [watch.poll() for _ in range(3)]
        fake.unlisted.add(b1)  # its session expired: no longer listed
        gone = watch.poll()
    assert warnings_of(caplog) == [
        f"broker {b1}: GET /admin/v2/broker-stats/load-report: cannot connect: Connection refused; "
        "left out until it answers"
    ]
    assert [c.brokers for c in [*down, gone]] == [(b0,)] * 4
    assert all(c.snapshot is not None for c in [*down, gone])


def test_a_broker_that_leaves_the_list_is_reported(fake, caplog):
    skewed(fake)
    b1 = fake.brokers[1].id
    caplog.set_level(logging.WARNING, LOGGER)
    with SheddingWatch(fake.admin_url, "AvgShedder", **timed()) as watch:
        watch.poll()
        fake.unlisted.add(b1)
        watch.poll()
        watch.poll()
    assert warnings_of(caplog) == [f"broker {b1} left the cluster (no longer listed as active)"]


def test_when_the_admin_brokers_dies_the_others_answer_and_it_is_reported_once(fake, caplog):
    skewed(fake)
    b0, b1 = fake.brokers[0].id, fake.brokers[1].id
    caplog.set_level(logging.WARNING, LOGGER)
    with SheddingWatch(fake.admin_url, "AvgShedder", **timed()) as watch:
        watch.poll()
        fake.stop(0)
        cycles = [watch.poll() for _ in range(3)]
    assert warnings_of(caplog) == [
        f"admin {fake.admin_url}: GET /admin/v2/brokers/fake: cannot connect: Connection refused; asking another broker"
    ]
    assert [c.brokers for c in cycles] == [(b1,)] * 3
    assert b0 not in (cycles[-1].snapshot.brokers if cycles[-1].snapshot else {})


def test_a_bundle_two_reports_list_goes_to_the_broker_read_last(fake):
    name = "public/t/0x00000000_0xffffffff"
    fake.put_bundle(0, name, 100)
    fake.brokers[1].bundles.append(name)  # moved between the two reads
    with SheddingWatch(fake.admin_url, "AvgShedder", **timed()) as watch:
        cycle = watch.poll()
    assert cycle.snapshot is not None
    assert [b.bundles for b in cycle.snapshot.brokers.values()] == [(), (name,)]


def test_a_negative_usage_is_pulsars_failed_reading_taken_as_0(fake):
    fake.brokers[1].cpu = (-1.0, 800.0)
    with SheddingWatch(fake.admin_url, "AvgShedder", **timed()) as watch:
        cycle = watch.poll()
    b1 = fake.brokers[1].id
    assert cycle.warnings == (f"broker {b1}: load report: cpu usage -1.0 (a failed reading); taken as 0",)
    assert cycle.snapshot is not None and cycle.snapshot.brokers[b1].cpu == 0.0


def test_connect_raises_one_clear_error_for_a_wrong_or_unreachable_url(fake):
    fake.fault(0, "/admin/v2/clusters", "html")
    with pytest.raises(AdminResponseError) as wrong:
        SheddingWatch(fake.admin_url, "AvgShedder").connect()
    assert str(wrong.value) == (
        f"admin_url {fake.admin_url!r}: GET /admin/v2/clusters: an HTML page (text/html), not JSON "
        "(is it a Pulsar broker's admin API?)"
    )
    fake.stop(1)
    url = fake.brokers[1].url
    with pytest.raises(AdminUnreachableError) as unreachable:
        SheddingWatch(url, "AvgShedder", admin=AdminOptions(timeout_s=2)).connect()
    assert str(unreachable.value) == f"admin_url {url!r}: GET /admin/v2/clusters: cannot connect: Connection refused"
    assert isinstance(unreachable.value, ConnectionError)


def test_several_clusters_need_a_name(fake):
    fake.clusters = ["fake", "other", "global"]
    with pytest.raises(AdminResponseError) as err:
        SheddingWatch(fake.admin_url, "AvgShedder").connect()
    assert str(err.value) == (
        f"admin_url {fake.admin_url!r}: GET /admin/v2/clusters: 2 clusters (fake, other); "
        "name the one to watch (cluster=)"
    )
    with SheddingWatch(fake.admin_url, "AvgShedder", cluster="fake") as watch:
        assert watch.connect() == "fake"


def test_the_cluster_settings_are_read_from_a_brokers_runtime_configuration(fake):
    skewed(fake)
    for broker in fake.brokers:
        broker.runtime.update({"loadBalancerAvgShedderHitCountHighThreshold": "1", "maxUnloadPercentage": "0.5",
                               "loadBalancerLoadSheddingStrategy": "com.example.OurOwnShedder"})
    with SheddingWatch(fake.admin_url, "AvgShedder", "cluster", **timed()) as watch:
        first = watch.poll()
    assert len(first.decisions["AvgShedder"]) == 3  # one hit is enough here


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"admin_url": "ftp://h/x"}, "admin_url must be an http:// or https:// URL with a host, got 'ftp://h/x'"),
        ({"admin_url": "http://u:pw@h:1?x=1"}, "admin_url takes no query or fragment, got 'http://***@h:1?x=1'"),
        ({"admin_url": "http://h:port"}, "admin_url is not a URL: 'http://h:port'"),
        ({"strategies": ""}, "strategies must name at least one strategy, got ''"),
        ({"strategies": "AvgShedder,AvgShedder"}, "strategies names one strategy twice: AvgShedder, AvgShedder"),
        ({"interval_s": 0}, "interval_s must be a number > 0 and <= 86400, got 0 (int)"),
        ({"config": "mine"}, "config must be a ShedderConfig, 'cluster' or None, got 'mine'"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, message):
    args = {"admin_url": "http://127.0.0.1:1", "strategies": "AvgShedder", **kwargs}
    with pytest.raises(ValueError) as err:
        SheddingWatch(args.pop("admin_url"), args.pop("strategies"), **args)
    assert str(err.value) == message


def test_an_unknown_strategy_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"^unknown strategy 'Nope'; choose one of: ThresholdShedder"):
        SheddingWatch("http://127.0.0.1:1", "AvgShedder,Nope")


def test_bandwidth_from_throughput_is_each_brokers_own_throughput_against_its_nic(fake, tmp_path):
    fake.put_bundle(0, "public/t/0x00000000_0xffffffff", 1000, 250, size=1000)  # 1,000,000 B/s in, 250,000 out
    fake.brokers[0].bandwidth_in = (90_000.0, 100_000.0)  # the host's NIC: the same on every broker
    fake.brokers[1].bandwidth_in = (90_000.0, 100_000.0)
    for broker in fake.brokers:
        broker.cpu = (0.0, 800.0)
    b0, b1 = fake.brokers[0].id, fake.brokers[1].id
    with SheddingWatch(fake.admin_url, "AvgShedder", bandwidth_from_throughput=True, **timed(record=tmp_path)) as watch:
        cycle = watch.poll()
    assert cycle.snapshot is not None
    # bytes/s as Pulsar's kbit/s (x 8 / 1024) over the 100,000 kbit/s limit reported
    first = cycle.snapshot.brokers[b0]
    assert (first.bandwidth_in, first.bandwidth_out) == (7.8125, 1.953125)
    assert (cycle.snapshot.brokers[b1].bandwidth_in, cycle.usage) == (0.0, {b0: 7.8125, b1: 0.0})
    recorded = json.loads((tmp_path / "snapshot-000000.json").read_text())["brokers"][b0]["bandwidthIn"]
    assert recorded == {"usage": 7812.5, "limit": 100_000.0}
    assert load_report(tmp_path / "snapshot-000000.json") == cycle.snapshot
