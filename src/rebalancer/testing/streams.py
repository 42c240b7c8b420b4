"""A streaming `rebalancer pipeline run` as a child process, driven by its own progress lines.

A test or benchmark that makes something happen to a running stream (a broker crash, more events)
must wait until the stream has applied what came before, never for a fixed time: `StreamRun`
reads the run's `batch N: R rows …` lines on a thread and `wait_rows` blocks until they add up.
`stream_through_leader_crash` is the broker-restart scenario of tests/pipeline/
test_pipeline_kafka_faults.py and benchmarks/kafka_faults.py, written once.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rebalancer._watchdog import Watchdog

if TYPE_CHECKING:
    from rebalancer.testing.kafka_cluster import KafkaCluster

__all__ = ["CrashedStream", "StreamRun", "stream_through_leader_crash"]

# The stream's progress line for each micro-batch it applied.
BATCH_LINE = re.compile(r"^batch (\d+): ([\d,]+) rows")


class StreamRun:
    """`command` in its own process group (so a signal reaches Spark's JVM too), its stdout read
    line by line on a thread. `rows` and `batches` add up the progress lines seen so far.

    If this process dies before the run has ended, a watchdog kills the run's group: a stream reads
    no stdin and runs until stopped, and a child this process had forked kept its stdout pipe open."""

    def __init__(self, command: Sequence[str], cwd: str | Path) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env=env,
            start_new_session=True,
        )  # fmt: skip
        self._watchdog = Watchdog(kill_groups=[self.process.pid])
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self.rows = 0
        self.batches: list[int] = []
        self._reader = threading.Thread(target=self._read, name="stream-stdout", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def wait_rows(self, rows: int, deadline_s: float) -> None:
        """Until the progress lines add up to at least `rows` rows. RuntimeError, with what the run
        printed, if `deadline_s` passes first or the run ends first."""
        deadline = time.monotonic() + deadline_s
        while self.rows < rows:
            try:
                line = self._lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"the stream applied {self.rows} of {rows} rows in {deadline_s:g} s:\n{self.text()}") from None
            if line is None:
                self.process.wait()
                self._watchdog.stop()
                stderr = self.process.stderr.read() if self.process.stderr else ""
                raise RuntimeError(
                    f"the stream exited ({self.process.returncode}) at {self.rows} of {rows} rows:\n"
                    f"{self.text()}\nstderr:\n{stderr}"
                )
            self.seen.append(line)
            match = BATCH_LINE.match(line)
            if match:
                self.batches.append(int(match.group(1)))
                self.rows += int(match.group(2).replace(",", ""))

    def interrupt(self, timeout_s: float = 300.0) -> tuple[int, str]:
        """Ctrl-C, as a person stops a stream: its exit code and its stderr."""
        os.killpg(self.process.pid, signal.SIGINT)
        code = self.process.wait(timeout=timeout_s)
        self._watchdog.stop()
        return code, self.process.stderr.read() if self.process.stderr else ""

    def kill(self) -> None:
        """SIGKILL to the whole group, if the run is still there (a failed step's cleanup)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self._watchdog.stop()

    def text(self) -> str:
        """Everything the run printed on stdout, once it has ended (the reader's last lines too)."""
        if self.process.poll() is not None:
            self._reader.join(timeout=60)
            while not self._lines.empty():
                line = self._lines.get()
                if line is not None:
                    self.seen.append(line)
        return "".join(self.seen)


@dataclass
class CrashedStream:
    """What `stream_through_leader_crash` saw: the run's exit code and stderr after Ctrl-C, the rows
    and batches its progress lines reported, and the broker it killed (with how many leaders)."""

    returncode: int
    stderr: str
    rows: int
    batches: list[int]
    printed: str
    victim: int
    victim_leaders: int


def stream_through_leader_crash(
    cluster: KafkaCluster,
    topic: str,
    command: Sequence[str],
    cwd: str | Path,
    parts: Sequence[Any],
    send: Callable[[Any], None],
    first_deadline_s: float,
    deadline_s: float,
) -> CrashedStream:
    """Three parts of events through a stream while the broker leading most of `topic` crashes.

    `send(parts[0])`, start the run, wait until it applied them; SIGKILL the leader of most
    partitions; `send(parts[1])` and wait until applied, with the broker down; restart it and wait
    until in sync; `send(parts[2])`, wait; Ctrl-C. Each wait ends on the run's progress, so nothing
    races a clock. The broker is always brought back and the run always stopped, also on failure.
    """
    sizes = [len(part) for part in parts]
    send(parts[0])
    run = StreamRun(command, cwd)
    victim, leaders = -1, 0
    try:
        run.wait_rows(sizes[0], first_deadline_s)
        counts = Counter(cluster.partition_leaders(topic).values())
        victim = max(sorted(counts), key=lambda broker: counts[broker])
        leaders = counts[victim]
        cluster.set_down(victim)  # SIGKILL, while the stream polls the topic
        send(parts[1])  # acked once the crashed broker is fenced and leaders moved
        run.wait_rows(sizes[0] + sizes[1], deadline_s)  # read while the broker is down
        cluster.set_up(victim)
        cluster.wait_until_in_sync(timeout_s=120)
        send(parts[2])
        run.wait_rows(sum(sizes), deadline_s)
        returncode, stderr = run.interrupt(deadline_s)
    finally:
        run.kill()
        if victim >= 0 and not cluster.is_up(victim):
            cluster.set_up(victim)
        cluster.wait_until_in_sync(timeout_s=120)
    return CrashedStream(returncode, stderr, run.rows, run.batches, run.text(), victim, leaders)
