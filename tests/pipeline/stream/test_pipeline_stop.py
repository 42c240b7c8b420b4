"""Stream mode for a person at a terminal: one progress line per micro-batch, and Ctrl-C stops the query
cleanly (no Py4J traceback), prints the summary and exits 130."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

import pytest
from pipeline_data import good_frame
from stop_helpers import LINE, assert_stopped_by_ctrl_c, interrupt_after_first_line

from rebalancer.cli import main
from rebalancer.pipeline.generate import write_frame

pytestmark = pytest.mark.spark
CLI = [sys.executable, "-m", "rebalancer.cli"]
FILES = 3
# A JVM start and a first micro-batch on a loaded 2-core machine; the test waits for events, not time.


@pytest.fixture(scope="module")
def stream_input(tmp_path_factory: pytest.TempPathFactory) -> Path:
    input_dir = tmp_path_factory.mktemp("stream") / "input"
    write_frame(good_frame(events=1500, seed=5), input_dir, "parquet", FILES)
    return input_dir


def test_cli_prints_one_line_per_micro_batch(spark, stream_input, tmp_path, capsys):
    """Each batch once, in order, as it is applied: its rows add up to the summary's, and the batches
    that re-plan (every 2nd here) say so."""
    out = tmp_path / "out"
    argv = ["pipeline", "run", "--stream", "--available-now", "--input", str(stream_input), "--out", str(out),
            "--partitions", "2", "--rebalance-every", "2"]
    assert main(argv) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("batch ")]
    matches = [LINE.match(line) for line in lines]
    assert all(matches), lines
    assert [int(m.group(1)) for m in matches if m] == list(range(FILES))
    assert ["re-planned" in line for line in lines] == [True, False, True]
    assert all(m.group(4) != "n/a" for m in matches if m)
    summary = json.loads((out / "summary.json").read_text())
    assert sum(int(m.group(2).replace(",", "")) for m in matches if m) == summary["ingested"] == 1500
    assert summary["batches"] == FILES and "interrupted" not in summary


@pytest.mark.timeout(1200)  # a JVM's start and a first micro-batch, then the stop, on a loaded 2-core box
def test_ctrl_c_stops_the_stream_prints_the_summary_and_exits_130(stream_input, tmp_path):
    out = tmp_path / "out"
    # A trigger every 2 s over one file per batch: the query is still running when the signal comes.
    command = [*CLI, "pipeline", "run", "--stream", "--input", str(stream_input), "--out", str(out),
               "--partitions", "2"]
    assert_stopped_by_ctrl_c(*interrupt_after_first_line(command, tmp_path), out, FILES)


class _QueryUntilStopped:
    """A streaming query that runs until `stop()`."""

    def __init__(self) -> None:
        self.stopped = threading.Event()

    def awaitTermination(self) -> None:
        self.stopped.wait()

    def stop(self) -> None:
        self.stopped.set()


def _asleep_in_the_wait(thread: threading.Thread) -> bool:
    """`thread` is inside `_QueryWaiter.wait` and asleep in the kernel (Linux's /proc task state)."""
    frame = sys._current_frames().get(thread.ident or -1)
    names = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    stat = Path(f"/proc/self/task/{thread.native_id}/stat").read_text()
    return "wait" in names and stat.rsplit(")", 1)[1].split()[0] == "S"


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads thread states from Linux's /proc")
def test_ctrl_c_ends_the_wait_whichever_thread_the_kernel_hands_it_to():
    """The kernel may deliver SIGINT to any thread (on Spark Connect, often one of gRPC's). A signal
    taken by another thread does not wake a thread asleep on a lock: the main thread's wait must
    still end at once, and report the interrupt, rather than sleep until the query ends."""
    from rebalancer.pipeline.stream.query import _QueryWaiter

    handler_before = signal.getsignal(signal.SIGINT)
    wakeup_before = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(wakeup_before)
    query = _QueryUntilStopped()
    returned = threading.Event()

    def interrupt_from_another_thread() -> None:
        # Once the main thread sleeps in its wait, only a wake-up reaches it (not the eval loop).
        for _ in range(12_000):  # at most 60 s
            if _asleep_in_the_wait(threading.main_thread()):
                break
            returned.wait(0.005)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # taken by this thread, not main
        if not returned.wait(60):  # the bug: the main thread sleeps on; end the test instead
            query.stop()

    waiter = _QueryWaiter(query)
    threading.Thread(target=interrupt_from_another_thread, daemon=True).start()
    try:
        interrupted = waiter.wait()
        woken_by_the_query_end = query.stopped.is_set()
    finally:
        returned.set()
        query.stop()
    assert interrupted is True and not woken_by_the_query_end
    assert waiter.ended.wait(60)  # the watcher ends once the query stops; then the pipe can go
    waiter.close()
    assert signal.getsignal(signal.SIGINT) is handler_before
    assert signal.set_wakeup_fd(wakeup_before) == wakeup_before  # the wakeup fd was given back


class _QueryThatEnds:
    """A streaming query that has ended by the time anyone waits for it."""

    def awaitTermination(self) -> None:
        return None


def test_a_query_that_ends_always_ends_the_wait():
    """The watcher's wake-up byte must never be read before its `ended` is set, or the main thread
    would go back to sleep with no byte to come. Many waits on queries ending at once, each with a
    guard that wakes a stuck wait (and counts it) after 60 s."""
    from rebalancer.pipeline.stream.query import _QueryWaiter

    stuck = 0
    for _ in range(300):
        waiter = _QueryWaiter(_QueryThatEnds())
        returned = threading.Event()

        def guard(waiter: _QueryWaiter = waiter, returned: threading.Event = returned) -> None:
            nonlocal stuck
            if not returned.wait(60):
                stuck += 1
                os.write(waiter._write_fd, b"\0")

        watch = threading.Thread(target=guard, daemon=True)
        watch.start()
        interrupted = waiter.wait()
        returned.set()
        watch.join()
        assert interrupted is False and waiter.failure is None
        waiter.close()
    assert stuck == 0
