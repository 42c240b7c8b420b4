"""The task clock (`rebalancer.pipeline.clock`), shared by balanced_apply and the handlers: a task's
start when its function is unpickled, and own-clock seconds that stop while a thread waits for a CPU."""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable
from typing import Any

import pandas as pd
from pyspark import cloudpickle

from rebalancer.pipeline import clock as clock_module
from rebalancer.pipeline import handler


def test_the_task_clock_restarts_when_a_task_unpickles_it(monkeypatch):
    monkeypatch.setattr(clock_module, "own_clock", lambda: 100.0)
    clock = clock_module.TaskClock()
    monkeypatch.setattr(clock_module, "own_clock", lambda: 250.0)
    assert clock.started == 100.0
    assert cloudpickle.loads(cloudpickle.dumps(clock)).started == 250.0
    assert pickle.loads(pickle.dumps(clock)).started == 250.0


def test_a_task_begins_once_at_the_clocks_start(monkeypatch):
    monkeypatch.setattr(clock_module, "own_clock", lambda: 100.0)
    clock = clock_module.TaskClock()
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
    monkeypatch.setattr(handler, "own_clock", lambda: next(readings))
    out = handler._timed_call(len, pd.DataFrame({"v": [1, 2, 3]}), 3, None, lambda *args: args)
    assert out == (3, -1, 3, 10.0, 12.5)  # (output, task: none outside Spark, rows, started, ended)
