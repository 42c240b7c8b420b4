"""Issue 42 item 5: two overlapping `?group=` runs moved the committed offsets backward and counted
events twice (400 in the output for 300 produced). A group's offsets never go backward, and runs of a
group into one output never overlap: the second is refused in one line, naming the group.

The overlap is made with events, never a sleep: run A waits in the hook between its outputs and its
offset commit until the test releases it. The waits' timeouts only guard against a hang."""

from __future__ import annotations

import itertools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from kafka_fixtures import all_at_once, assert_same_totals, batches_folded, produce

from rebalancer.pipeline import batch
from rebalancer.pipeline.batch import run_batch
from rebalancer.pipeline.generate import GenerateConfig, make_frame
from rebalancer.pipeline.kafka._options import parse_options
from rebalancer.pipeline.kafka._topic import plan_group_read
from rebalancer.pipeline.kafka.telemetry import encode_events, parse_kafka_url, plan_group_run
from rebalancer.pipeline.resolved import RunRequest
from rebalancer.pipeline.runner import run

_groups = itertools.count()
GUARD_S = 300  # a hang guard, never a timing assertion
HOST = socket.gethostname()


def produce_per_partition(bootstrap: str, topic: str, per_partition: int, partitions: int, seed: int) -> None:
    """`per_partition` good events to each partition, by explicit partition (no bad rows: every
    event is counted in the metrics)."""
    frame = make_frame(
        GenerateConfig(events=per_partition * partitions, types=6, entities=4, bad_rate=0.0, format="jsonl", seed=seed)
    )
    keys, values = encode_events(frame)
    produce(bootstrap, topic, [(k, v, i % partitions) for i, (k, v) in enumerate(zip(keys, values))])


def committed(bootstrap: str, topic: str, group: str) -> dict[int, int]:
    options = parse_options({"bootstrap.servers": bootstrap, "topic": topic, "group": group, "metadataTimeoutMs": "30000"})
    return plan_group_read(options)[0]


def busy(out: Path, group: str, holder: str, pid: int) -> str:
    return (
        f"group {group!r}: another run is writing to {out} (group {holder!r}, pid {pid} on {HOST}); one output "
        f"takes one group run at a time: run this one again once it has finished"
    )


def test_a_commit_never_lowers_the_group_offsets(any_kafka_cluster, any_kafka_topic, caplog) -> None:
    """The issue's commits, without the claim (as two outputs, or two machines, would have them):
    A plans 0-100, B plans 0-150 and commits 150, then A commits: the group stays at 150."""
    bootstrap, topic, group = any_kafka_cluster.bootstrap_servers, any_kafka_topic(2), f"overlap-{next(_groups)}"
    spec = parse_kafka_url(f"kafka://{bootstrap}/{topic}?group={group}&metadataTimeoutMs=30000")
    produce_per_partition(bootstrap, topic, 100, 2, seed=1)
    run_a = plan_group_run(spec)
    produce_per_partition(bootstrap, topic, 50, 2, seed=2)
    run_b = plan_group_run(spec)
    assert run_a is not None and run_b is not None
    assert (run_a.start, run_a.end, run_b.start, run_b.end) == ({0: 0, 1: 0}, {0: 100, 1: 100}, {0: 0, 1: 0}, {0: 150, 1: 150})
    run_b.commit()
    with caplog.at_level(logging.WARNING, logger="rebalancer.pipeline.kafka.source"):
        run_a.commit()
    assert committed(bootstrap, topic, group) == {0: 150, 1: 150}
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"group {group!r}: topic {topic!r}: another run committed past this run's end meanwhile; offsets never go "
        "backward, so partition 0 stays at 150 (this run's end 100), partition 1 stays at 150 (this run's end 100)"
    ]


@pytest.mark.spark
@pytest.mark.kafka
def test_overlapping_runs_of_a_group_count_each_event_once(spark, kafka_cluster, kafka_topic, tmp_path, monkeypatch) -> None:
    """A reads 0-100 per partition and is held between its outputs and its commit; B, meanwhile, is
    refused (through `run` with overwrite, which must not clear A's outputs, and through `run_batch`);
    A is released and commits 100; the next run reads 100-150. 300 produced, 300 counted."""
    bootstrap, topic, group = kafka_cluster.bootstrap_servers, kafka_topic(2), f"overlap-{next(_groups)}"
    url = f"kafka://{bootstrap}/{topic}?group={group}"
    out = tmp_path / "out"
    produce_per_partition(bootstrap, topic, 100, 2, seed=3)

    at_commit, release = threading.Event(), threading.Event()

    def held() -> None:
        if threading.current_thread().name != "group-run-a":
            return  # only A is held (before the fix, B ran here to its commit)
        at_commit.set()
        assert release.wait(GUARD_S), "the test never released run A"

    monkeypatch.setattr(batch, "before_offset_commit", held)
    outcome: dict[str, Any] = {}

    def run_a() -> None:
        try:
            outcome["summary"] = run_batch(spark, parse_kafka_url(url), out, partitions=2, report=False)
        except BaseException as exc:  # re-raised in the test's thread
            outcome["error"] = exc

    thread = threading.Thread(target=run_a, name="group-run-a")
    thread.start()
    try:
        assert at_commit.wait(GUARD_S), outcome.get("error")
        assert committed(bootstrap, topic, group) == {0: 0, 1: 0}  # A's outputs are written, its offsets not
        produce_per_partition(bootstrap, topic, 50, 2, seed=4)
        with pytest.raises(ValueError) as refused:
            run(RunRequest(input=url, output=out, partitions=2, mode="overwrite", report=False), spark=spark)
        assert str(refused.value) == busy(out, group, group, os.getpid())
        assert sorted(p.name for p in (out / "metrics").iterdir() if p.is_dir()) == ["batch_id=0"]  # not cleared
        with pytest.raises(ValueError) as refused_again:
            run_batch(spark, parse_kafka_url(url), out, partitions=2, report=False)
        assert str(refused_again.value) == busy(out, group, group, os.getpid())
    finally:
        release.set()
        thread.join(GUARD_S)
    assert not thread.is_alive()
    if "error" in outcome:
        raise outcome["error"]
    monkeypatch.setattr(batch, "before_offset_commit", None)
    first = outcome["summary"]
    assert (first["ingested"], first["kafka_group"]["end"]) == (200, {"0": 100, "1": 100})
    assert committed(bootstrap, topic, group) == {0: 100, 1: 100}

    second = run_batch(spark, parse_kafka_url(url), out, partitions=2, report=False)
    assert second["ingested"] == 100
    assert (second["kafka_group"]["start"], second["kafka_group"]["end"]) == ({"0": 100, "1": 100}, {"0": 150, "1": 150})
    assert committed(bootstrap, topic, group) == {0: 150, 1: 150}
    folded = batches_folded(out)
    assert int(folded["count"].sum()) == 300  # 300 produced, 300 counted (400 before the fix)
    assert_same_totals(folded, all_at_once(spark, f"kafka://{bootstrap}/{topic}", tmp_path / "whole"))


def test_cli_refuses_a_second_run_of_the_group_in_one_line(kafka_cluster, kafka_topic, tmp_path) -> None:
    """Exit 2, one line naming the group and the holder, before Spark starts (no spark.log of its own)."""
    from rebalancer.pipeline.outputs.claim import claim_output

    bootstrap, topic, group = kafka_cluster.bootstrap_servers, kafka_topic(2), f"overlap-{next(_groups)}"
    out = tmp_path / "out"
    with claim_output(out, "etl"):
        result = subprocess.run(
            [sys.executable, "-m", "rebalancer.cli", "pipeline", "run", "--input",
             f"kafka://{bootstrap}/{topic}?group={group}", "--output", str(out), "--mode", "append", "--no-report"],
            capture_output=True, text=True, timeout=GUARD_S, cwd=tmp_path,
        )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.splitlines() == [f"rebalancer: error: {busy(out, group, 'etl', os.getpid())}"]
    assert sorted(p.name for p in out.iterdir()) == ["_kafka_group.lock"]


_HOLDER = """
import os, sys, time
from rebalancer.pipeline.outputs.claim import claim_output
with claim_output(sys.argv[1], "etl"):
    child = os.fork()
    if child == 0:  # a child that outlives its SIGKILLed parent, as a forked worker may
        # fork() returns here only after the at-fork hooks ran (the claim's copy closed): say so
        # from here, not from the parent, which may print before the child has run at all.
        print(os.getpid(), flush=True)
        os.read(0, 1)
        os._exit(0)
    os.read(0, 1)
"""


def test_a_killed_holder_leaves_no_claim_behind_even_with_a_forked_child_alive(tmp_path: Path) -> None:
    """The kernel drops the flock when its holder dies; a forked child closed its copy at the fork."""
    from rebalancer.pipeline.outputs.claim import GroupBusyError, claim_output

    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdin is not None
    child = int(holder.stdout.readline())
    try:
        with pytest.raises(GroupBusyError) as refused:
            with claim_output(out, "other"):
                pass
        assert str(refused.value) == busy(out, "other", "etl", holder.pid)
        holder.send_signal(signal.SIGKILL)
        assert holder.wait(GUARD_S) == -signal.SIGKILL
        with claim_output(out, "other"):  # free, though the child still runs
            os.kill(child, 0)  # still alive: it holds no copy of the lock
            note = json.loads((out / "_kafka_group.lock").read_text())
            assert note == {"group": "other", "pid": os.getpid(), "host": HOST}
    finally:
        holder.stdin.close()  # the child reads EOF and exits
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert (out / "_kafka_group.lock").read_text() == ""  # released: no holder named


def test_the_claim_is_reentrant_in_its_thread_and_refuses_any_other(tmp_path: Path) -> None:
    """`run` holds it around `run_batch` in one thread; another thread of the process is refused."""
    from rebalancer.pipeline.outputs.claim import GroupBusyError, claim_output

    out = tmp_path / "out"
    errors: list[str] = []

    def other() -> None:
        try:
            with claim_output(out, "other"):
                errors.append("taken")
        except GroupBusyError as exc:
            errors.append(str(exc))

    with claim_output(out, "etl"), claim_output(out, "etl"):
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(GUARD_S)
    assert errors == [busy(out, "other", "etl", os.getpid())]
    with claim_output(out, "other"):  # released when the outer hold ends, not the inner
        pass
