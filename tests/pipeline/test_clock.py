"""The task clock (`rebalancer.pipeline.clock`), shared by balanced_apply and the handlers: a task's
start when its function is unpickled, and own-clock seconds that stop while a thread waits for a CPU."""

from __future__ import annotations

import json
import logging
import math
import pickle
import threading
from collections.abc import Callable
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from pyspark import cloudpickle

import rebalancer.pipeline.handler.builtin as handler
from rebalancer.balance.metrics import max_over_mean, max_over_median
from rebalancer.pipeline import clock as clock_module
from rebalancer.pipeline.apply._items import ApplyItem
from rebalancer.pipeline.apply._key_plan import KeyCost, plan_keys
from rebalancer.pipeline.apply._result import wait_per_row


def _ticking(start: float, step: float) -> Callable[[], float]:
    """A clock reading `start`, then `step` more at each reading (a negative step: it goes back).
    A closure, so cloudpickle carries it (and its own copy of the readings) to a Spark worker."""
    readings = [start - step]

    def clock() -> float:
        readings[0] += step
        return readings[0]

    return clock


def test_the_task_clock_restarts_when_a_task_unpickles_it():
    clock = clock_module.TaskClock(_ticking(100.0, 50.0))
    assert clock.started == 100.0
    # Unpickled (in the worker, once per task), the clock carries its source and reads it afresh:
    # each copy with its own readings, as each worker has.
    assert cloudpickle.loads(cloudpickle.dumps(clock)).started == 150.0
    assert clock.now() == 150.0
    assert pickle.loads(pickle.dumps(clock_module.TaskClock())).now.source is clock_module.own_clock


def test_the_task_clock_reads_the_own_clock_as_named_when_it_is_built(monkeypatch):
    """How a test reaches the Spark workers' clock: the source is taken on the driver, and pickled."""
    monkeypatch.setattr(clock_module, "own_clock", lambda: 100.0)
    clock = clock_module.TaskClock()
    monkeypatch.setattr(clock_module, "own_clock", lambda: 250.0)
    assert cloudpickle.loads(cloudpickle.dumps(clock)).started == 100.0
    assert clock_module.TaskClock().started == 250.0


def test_a_task_begins_once_at_the_clocks_start():
    clock = clock_module.TaskClock(lambda: 100.0)
    assert clock.begin(3, 104.5) == 100.0  # task 3's first call: its time runs from 100
    assert clock.begin(3, 107.0) is None  # a later call of the same task
    assert clock.begin(4, 99.0) == 99.0  # never before the call itself
    assert cloudpickle.loads(cloudpickle.dumps(clock)).begin(3, 200.0) == 100.0  # a new task: afresh


def _in_a_new_thread(body: Callable[[], Any]) -> Any:
    """`body`'s result, run on a thread of its own: the schedstat reader's state is per thread."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(("ok", body()))
        except BaseException as exc:  # re-raised on the test's thread
            outcome.append(("error", exc))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    kind, value = outcome[0]
    if kind == "error":
        raise value
    return value


def test_the_own_clock_stops_while_the_thread_waits_for_a_cpu(monkeypatch, tmp_path):
    stat = tmp_path / "schedstat"
    monkeypatch.setattr(clock_module, "_SCHEDSTAT", str(stat))
    monkeypatch.setattr(clock_module.time, "monotonic", lambda: 1000.0)

    def readings() -> list[tuple[float, float]]:
        seen = []
        stat.write_text("5000000000 2500000000 17\n")  # 5 s on a CPU, 2.5 s queued for one
        seen.append((clock_module.queued_seconds(), clock_module.own_clock()))
        stat.write_text("5100000000 3000000000 18\n")  # the open file is read afresh
        seen.append((clock_module.queued_seconds(), clock_module.own_clock()))
        stat.write_text("garbled\n")  # a failed read keeps the last value: no jump of 3 s
        seen.append((clock_module.queued_seconds(), clock_module.own_clock()))
        return seen

    assert _in_a_new_thread(readings) == [(2.5, 997.5), (3.0, 997.0), (3.0, 997.0)]
    monkeypatch.setattr(clock_module, "_SCHEDSTAT", str(tmp_path / "absent"))  # no schedstat (not Linux)
    assert _in_a_new_thread(lambda: (clock_module.queued_seconds(), clock_module.own_clock())) == (0.0, 1000.0)


def test_the_handlers_time_their_calls_on_the_own_clock(monkeypatch):
    """The hash and weighted dispatch report seconds on the same clock as balanced_apply."""
    readings = iter([10.0, 12.5])
    monkeypatch.setattr(clock_module, "own_clock", lambda: next(readings))
    clock = clock_module.SteadyClock()  # what make_handler builds: own_clock, as named now
    out = handler._timed_call(len, pd.DataFrame({"v": [1, 2, 3]}), 3, None, lambda *args: args, clock)
    assert out == (3, -1, 3, 10.0, 12.5)  # (output, task: none outside Spark, rows, started, ended)


# -- issue 42, item 7: a measured time never fails a run ----------------------------------------------


def test_the_steady_clock_never_goes_back_and_holds_through_readings_that_are_not_finite():
    readings = iter([10.0, 9.5, 12.0, math.nan, math.inf, -math.inf, 11.0, 13.0])
    clock = clock_module.SteadyClock(lambda: next(readings))
    assert [clock() for _ in range(8)] == [10.0, 10.0, 12.0, 12.0, 12.0, 12.0, 12.0, 13.0]
    first = iter([math.nan, 5.0, 4.0])  # no good reading yet: the NaN passes, `elapsed` makes it 0.0
    clock = clock_module.SteadyClock(lambda: next(first))
    seen = [clock() for _ in range(3)]
    assert math.isnan(seen[0]) and seen[1:] == [5.0, 5.0]
    assert clock_module.elapsed(seen[0], seen[1]) == 0.0


def test_the_steady_clock_keeps_each_threads_readings_apart():
    """own_clock readings of two threads do not compare (each less its own queued time)."""
    clock = clock_module.SteadyClock(_ticking(100.0, -1.0))  # every reading lower than the last
    assert clock() == 100.0
    assert _in_a_new_thread(clock) == 99.0  # a new thread's first reading is its own
    assert clock() == 100.0  # this thread's last still holds


@pytest.mark.parametrize(
    ("start", "end", "seconds"),
    [
        (5.0, 7.5, 2.5),
        (5.0, 5.0, 0.0),
        (5.0, 4.9785, 0.0),  # the issue's -0.0215
        (math.nan, 5.0, 0.0),
        (5.0, math.nan, 0.0),
        (-math.inf, 5.0, 0.0),
        (5.0, math.inf, 0.0),
    ],
)
def test_a_duration_is_never_negative_nor_non_finite(start, end, seconds):
    assert clock_module.elapsed(start, end) == seconds


def test_the_own_clock_reads_the_queued_time_again_until_no_wait_fell_between_the_reads(monkeypatch):
    """A thread made to wait between reading monotonic time and its queued time read too low by the
    wait: 0.5 s here, more than the call it ended took."""
    queued = iter([1.0, 1.5, 1.5])  # before, after (a wait of 0.5 s came between), after again
    monotonic = iter([100.0, 100.6])
    monkeypatch.setattr(clock_module, "queued_seconds", lambda: next(queued))
    monkeypatch.setattr(clock_module.time, "monotonic", lambda: next(monotonic))
    assert clock_module.own_clock() == 100.6 - 1.5
    waits = iter([1.0, 1.5, 2.0, 2.5])  # never equal: READ_ATTEMPTS pairs, then the last is taken
    monotonic = iter([100.0, 100.6, 101.2])
    monkeypatch.setattr(clock_module, "queued_seconds", lambda: next(waits))
    assert clock_module.own_clock() == 101.2 - 2.5


def test_task_stats_clamp_a_task_whose_clock_went_back():
    """The reproducer of the issue: one task's end read 0.0215 s before its start."""
    raw = {0: [40, 10.0, 10.5, 0.5, 1], 1: [40, 20.0, 20.25, 0.25, 1], 2: [40, 5.0, 4.9785, -0.0215, 1]}
    rows, seconds = handler.task_stats(raw, 3)
    assert (rows, seconds) == ([40, 40, 40], [0.5, 0.25, 0.0])
    assert max_over_median(seconds, 4) == 2.0  # before: "loads[2] must be >= 0, got -0.0215"


def test_the_handlers_report_a_call_whose_clock_went_back_as_zero_seconds():
    added: list[dict[int, list[float]]] = []

    class Stats:
        def add(self, value: dict[int, list[float]]) -> None:
            added.append(value)

    clock = clock_module.SteadyClock(_ticking(10.0, -0.0215))
    out = handler._timed_call(len, pd.DataFrame({"v": [1, 2, 3]}), 3, Stats(), handler.with_stats_columns, clock)
    assert out == 3 and added == [{-1: [3, 10.0, 10.0, 0.0, 1]}]


def test_the_slot_handler_carries_an_injected_clock_to_the_worker(monkeypatch):
    """make_slot_handler takes own_clock on the driver; pickled as Spark pickles it, it times with it."""
    monkeypatch.setattr(clock_module, "own_clock", _ticking(-1.0, -0.5))  # negative, going back
    shipped = cloudpickle.loads(cloudpickle.dumps(handler.make_slot_handler(None)))
    monkeypatch.undo()  # the worker has its own module: only what was pickled reaches it
    table = pa.table({"type": ["a", "b"], "entity": ["e", "e"], "minute": [60, 60], "value": [1.0, 2.0]})
    (out,) = list(shipped(iter(table.to_batches())))
    stats = out.to_pydict()  # one call (two output rows): started and ended at its first reading
    assert stats["_stats_start"] == [-1.0, -1.0] and stats["_stats_end"] == [-1.0, -1.0]


def test_statistics_over_task_seconds_take_zeros_and_tiny_values():
    assert max_over_median([0.0, 0.0, 0.0]) is None  # all zeros: no ratio, not a failure
    assert max_over_median([0.0, 0.0, 1.5]) is None  # the median task measured nothing
    assert max_over_median([0.0, 0.0001, 0.0002], 4) == 2.0
    assert max_over_median([5e-324, 5e-324, 1.0]) is None  # the ratio overflows: no finite ratio
    assert max_over_mean([0.0, 0.0]) == 1.0 and max_over_mean([0.0, 5e-324]) == 2.0
    assert wait_per_row({0: 10, 1: 20, 2: 30}, {0: 0.0, 1: 0.0, 2: 0.0}) == 0.0


def test_a_plan_by_seconds_weighs_by_rows_when_the_last_run_measured_no_time(caplog):
    counts = {("a",): 300, ("b",): 100, ("c",): 100}
    measured = {key: KeyCost(rows, 0.0, 1) for key, rows in counts.items()}
    with caplog.at_level(logging.INFO, logger="rebalancer.pipeline.apply"):
        plan = plan_keys(counts, {}, 2, ["key"], cost="seconds", measured=measured)
    assert sorted(plan.load) == [200.0, 300.0] and plan.weights[ApplyItem(("a",))] == 300.0
    assert "the store's 3 keys took 0 s in all; weighing by rows" in caplog.text
    some = {("a",): KeyCost(300, 0.0, 1), ("b",): KeyCost(100, 0.003, 1)}  # zeros beside a time
    plan = plan_keys(counts, {}, 2, ["key"], cost="seconds", measured=some)
    assert plan.weights[ApplyItem(("a",))] == 0.0 and plan.weights[ApplyItem(("c",))] == 100 * 0.003 / 400


# -- whole runs on a clock that goes back: the run completes, every task's seconds are 0.0 ------------


@pytest.mark.spark
@pytest.mark.kafka
def test_a_kafka_run_on_a_clock_that_goes_back_completes_with_zero_seconds(spark, tmp_path, monkeypatch, capsys):
    """The issue's run: `pipeline run --input kafka://embedded/telemetry`, on a task clock that reads
    negative and lower at every reading (each Spark worker gets its own copy of it)."""
    from rebalancer.cli import main

    monkeypatch.setattr(clock_module, "own_clock", _ticking(-1.0, -0.0215))
    out = tmp_path / "out"
    argv = ["pipeline", "run", "--input", "kafka://embedded/telemetry?events=2000&partitions=3",
            "--output", str(out), "--partitions", "3"]
    assert main(argv) == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["task_seconds"] == [0.0, 0.0, 0.0]
    assert summary["seconds_skew_ratio"] is None  # the median task took 0.0 s: no ratio
    assert summary["handlers"]["metrics"]["task_seconds"] == [0.0, 0.0, 0.0]
    assert sum(summary["task_rows"]) == summary["accepted"] > 0
    assert "Seconds per task" in (out / "report.html").read_text()


@pytest.mark.spark
def test_a_files_run_by_seconds_on_a_clock_that_goes_back_completes_and_plans_by_rows(
    spark, dataset, tmp_path, monkeypatch
):
    """Handlers placed by `balanced_apply` with cost="seconds", twice: the second run plans from the
    first one's measurements, which are all 0.0."""
    from rebalancer.pipeline import Pipeline
    from rebalancer.pipeline.batch import run_batch
    from rebalancer.pipeline.ingest.inspect import inspect_input

    source, _ = dataset
    pipeline = Pipeline()

    def rows(frame: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame({"type": [frame["type"].iloc[0]], "n": [len(frame)]})

    pipeline.handler("metric_000*", schema="type string, n long", name="rows")(rows)
    monkeypatch.setattr(clock_module, "own_clock", _ticking(-1.0, -0.5))
    out = tmp_path / "out"
    for run in (1, 2):
        summary = run_batch(
            spark, inspect_input(source), out, partitions=3, handlers=pipeline, cost="seconds",
            output_mode="append" if run == 2 else None,
        )
        section = summary["handlers"]["rows"]
        assert section["task_seconds"] == [0.0, 0.0, 0.0], run
        assert section["seconds_skew_ratio"] is None and summary["seconds_skew_ratio"] is None
        assert summary["task_seconds"] == [0.0, 0.0, 0.0]
        stored = json.loads((out / "_plans" / "rows" / "plan.json").read_text())
        assert {row["seconds"] for row in stored["measured"]} == {0.0}
        assert sum(row["rows"] for row in stored["measured"]) == section["rows"] > 0
    assert (out / "report.html").exists()
