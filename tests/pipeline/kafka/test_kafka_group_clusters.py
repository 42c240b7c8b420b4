"""Issue 42, D2: a group run numbers its batches from its offsets (batch_id = the sum of its start
offsets), so the same group and topic read from *another Kafka cluster*, or from offsets that went
back (a reset, an expired or recreated group), started at batch_id=0 again and, appended into the
same output, replaced the first batch. The output's manifest now records the last group range and
its cluster's id; an append from another cluster, or from behind that range, is refused before any
read, and the output is left exactly as it was. A rerun from the same start (a run stopped before
its offset commit) is still allowed: it rewrites its own batch."""

from __future__ import annotations

import hashlib
import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka_fixtures import cluster_id

from rebalancer.pipeline import batch
from rebalancer.pipeline.generate import GenerateConfig, make_frame
from rebalancer.pipeline.kafka._options import parse_options
from rebalancer.pipeline.kafka._topic import plan_group_read
from rebalancer.pipeline.kafka.telemetry import encode_events, produce_events
from rebalancer.pipeline.resolved import RunRequest
from rebalancer.pipeline.runner import run
from rebalancer.testing import MockKafkaCluster

_groups = itertools.count()
EXE = str(Path(sys.executable).with_name("rebalancer"))
TOPIC = "telemetry-d2"


def produce_sample(bootstrap: str, topic: str, events: int, seed: int) -> None:
    frame = make_frame(GenerateConfig(events=events, types=8, entities=4, bad_rate=0.0, format="jsonl", seed=seed))
    keys, values = encode_events(frame)
    produce_events(bootstrap, topic, keys, values)


def tree_hashes(root: Path) -> dict[str, str]:
    """Every file under `root` (hidden ones too) and its content's hash; the manifest's without the
    token of the run that wrote it (an append names itself there before it reads anything)."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            if path.name == "_manifest.json":
                data = json.dumps({k: v for k, v in json.loads(data).items() if k != "run"}, sort_keys=True).encode()
            found[str(path.relative_to(root))] = hashlib.sha256(data).hexdigest()
    return found


@pytest.fixture
def two_clusters() -> Iterator[tuple[str, str]]:
    """Two mock clusters, each with TOPIC (2 partitions) holding its own 300 events."""
    with MockKafkaCluster(brokers=1) as first, MockKafkaCluster(brokers=1) as second:
        for seed, cluster in enumerate((first, second)):
            cluster.create_topic(TOPIC, partitions=2)
            produce_sample(cluster.bootstrap_servers, TOPIC, 300, seed=seed)
        yield first.bootstrap_servers, second.bootstrap_servers


def request(bootstrap: str, group: str, out: Path, mode: str = "append") -> RunRequest:
    return RunRequest(input=f"kafka://{bootstrap}/{TOPIC}?group={group}", output=out, partitions=2, report=False, mode=mode)


@pytest.mark.spark
@pytest.mark.kafka
def test_the_same_group_on_another_cluster_is_refused_and_the_first_batch_kept(spark, two_clusters, tmp_path):
    first, second = two_clusters
    group, out = f"d2-{next(_groups)}", tmp_path / "out"
    done = run(request(first, group, out), spark=spark)
    assert done.ingested == 300
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["group"] == {"cluster": cluster_id(first), "start": {"0": 0, "1": 0},
                                 "end": manifest["group"]["end"]}  # fmt: skip
    assert sum(manifest["group"]["end"].values()) == 300
    before = tree_hashes(out)

    with pytest.raises(ValueError) as caught:
        run(request(second, group, out), spark=spark)
    assert str(caught.value) == (
        f"output {out} holds the batches of group {group!r} on topic {TOPIC!r} from Kafka cluster "
        f"{cluster_id(first)!r}, and this run reads cluster {cluster_id(second)!r}: its batch ids count from that "
        "cluster's offsets, and --mode append would number its batches over them: give another --output, or "
        "--mode overwrite"
    )
    assert tree_hashes(out) == before  # batch_id=0 of the first cluster, whole
    options = parse_options({"bootstrap.servers": second, "topic": TOPIC, "group": group})
    assert sum(plan_group_read(options)[0].values()) == 0  # the refused run committed nothing

    replaced = run(request(second, group, out, mode="overwrite"), spark=spark)  # overwrite may
    assert replaced.ingested == 300
    assert json.loads((out / "_manifest.json").read_text())["group"]["cluster"] == cluster_id(second)


@pytest.mark.spark
@pytest.mark.kafka
def test_the_cli_refuses_another_cluster_in_one_line(spark, two_clusters, tmp_path):
    first, second = two_clusters
    group, out = f"d2-{next(_groups)}", tmp_path / "out"
    run(request(first, group, out), spark=spark)
    before = tree_hashes(out)
    args = [EXE, "pipeline", "run", "--input", f"kafka://{second}/{TOPIC}?group={group}", "--output", str(out),
            "--partitions", "2", "--no-report", "--mode", "append"]  # fmt: skip
    result = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(f"rebalancer: error: output {out} holds the batches of group {group!r}"), result.stderr
    assert f"this run reads cluster {cluster_id(second)!r}" in lines[-1]
    assert "Traceback" not in result.stderr
    quiet = ("spark.log", "_manifest.json")  # the CLI's Spark log, which the manifest lists once written
    assert {k: v for k, v in tree_hashes(out).items() if k not in quiet} == {
        k: v for k, v in before.items() if k not in quiet
    }
    assert json.loads((out / "_manifest.json").read_text())["group"]["cluster"] == cluster_id(first)


@pytest.mark.spark
@pytest.mark.kafka
def test_an_append_after_the_groups_offsets_went_back_is_refused(spark, kafka_mock_cluster, tmp_path):
    """A reset (as `kafka-consumer-groups --reset-offsets --to-earliest` does) moves the group back:
    its next run would start at batch_id=0 again, over the first batch."""
    from confluent_kafka import Consumer, TopicPartition

    bootstrap, group, out = kafka_mock_cluster.bootstrap_servers, f"d2-{next(_groups)}", tmp_path / "out"
    topic = f"{TOPIC}-{group}"
    kafka_mock_cluster.create_topic(topic, partitions=2)
    produce_sample(bootstrap, topic, 200, seed=7)
    make = lambda: RunRequest(  # noqa: E731
        input=f"kafka://{bootstrap}/{topic}?group={group}", output=out, partitions=2, report=False, mode="append"
    )
    assert run(make(), spark=spark).ingested == 200
    produce_sample(bootstrap, topic, 100, seed=8)
    assert run(make(), spark=spark).ingested == 100
    end = json.loads((out / "_manifest.json").read_text())["group"]["end"]
    assert sum(end.values()) == 300
    before = tree_hashes(out)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.commit(offsets=[TopicPartition(topic, p, 0) for p in (0, 1)], asynchronous=False)
    consumer.close()
    with pytest.raises(ValueError) as caught:
        run(make(), spark=spark)
    again = ", ".join(f"partition {p} from 0" for p, o in sorted((int(p), o) for p, o in end.items()) if o > 0)
    shown = "{" + ", ".join(f"{p}: {o}" for p, o in sorted((int(p), o) for p, o in end.items())) + "}"
    assert str(caught.value) == (
        f"output {out} holds the batches of group {group!r} on topic {topic!r} up to offsets {shown}, and the group "
        "now starts at {0: 0, 1: 0}: its offsets went back (the group was reset, expired or recreated), so --mode "
        f"append would count again records the output holds ({again}), and could "
        "write batch_id=0 over an earlier batch: give another --output, or --mode overwrite"
    )
    assert tree_hashes(out) == before


@pytest.mark.spark
@pytest.mark.kafka
def test_a_rerun_from_the_same_start_still_rewrites_its_own_batch(spark, kafka_mock_cluster, tmp_path, monkeypatch):
    """A run stopped between its outputs and its offset commit: the group did not move, and the next
    append starts where it started, so it is not refused: it rewrites batch 0 with every record."""
    bootstrap, group, out = kafka_mock_cluster.bootstrap_servers, f"d2-{next(_groups)}", tmp_path / "out"
    topic = f"{TOPIC}-{group}"
    kafka_mock_cluster.create_topic(topic, partitions=2)
    produce_sample(bootstrap, topic, 200, seed=9)
    make = lambda: RunRequest(  # noqa: E731
        input=f"kafka://{bootstrap}/{topic}?group={group}", output=out, partitions=2, report=False, mode="append"
    )

    def stopped() -> None:
        raise KeyboardInterrupt("stopped between the outputs and the offset commit")

    monkeypatch.setattr(batch, "before_offset_commit", stopped)
    with pytest.raises(KeyboardInterrupt):
        run(make(), spark=spark)
    monkeypatch.setattr(batch, "before_offset_commit", None)
    assert json.loads((out / "_manifest.json").read_text())["group"]["start"] == {"0": 0, "1": 0}
    produce_sample(bootstrap, topic, 50, seed=10)
    rerun = run(make(), spark=spark)
    assert rerun.ingested == 250
    import pandas as pd

    metrics = pd.read_parquet(out / "metrics")
    assert sorted(metrics["batch_id"].astype(int).unique()) == [0]
    assert int(metrics["count"].sum()) == rerun.accepted == 250


def test_a_manifests_group_record_round_trips_and_a_bad_one_is_refused(tmp_path):
    """The record survives a SIGKILL's recovery too: a committed leftover's manifest comes from its
    staging info, group included."""
    from rebalancer.pipeline.outputs.fs import RunFS
    from rebalancer.pipeline.outputs.manifest import GroupRange, Manifest, read_manifest
    from rebalancer.pipeline.outputs.mode import Leftover

    group = GroupRange("mockCluster1", {0: 5, 1: 7}, {0: 9, 1: 7})
    manifest = Manifest("t1", frozenset({"metrics"}), "output", "group 'g' on topic 't'", group)
    (tmp_path / "_manifest.json").write_text(json.dumps(manifest.to_json()))
    assert read_manifest(RunFS(tmp_path, None), tmp_path) == manifest
    assert group.batch_id == 12

    info = {"token": "t2", "role": "output", "batches": "group 'g' on topic 't'", "entries": ["metrics"],
            "manifest": ["metrics"], "group": group.to_json()}  # fmt: skip
    leftover = Leftover("t2", "s", "a", (), (), True, False, info, True)
    assert leftover.record == Manifest("t2", frozenset({"metrics"}), "output", "group 'g' on topic 't'", group)

    for bad in ({"cluster": 3, "start": {}, "end": {}}, {"cluster": None, "start": {"x": 1}, "end": {}},
                {"cluster": None, "start": {"0": -1}, "end": {}}, "g"):  # fmt: skip
        (tmp_path / "_manifest.json").write_text(json.dumps({**manifest.to_json(), "group": bad}))
        with pytest.raises(ValueError) as caught:
            read_manifest(RunFS(tmp_path, None), tmp_path)
        assert str(caught.value) == (
            f"{tmp_path / '_manifest.json'}: its group record is not a Kafka group run's range ({{cluster, start, "
            "end}, each offset an int >= 0): restore it, or remove it"
        )
