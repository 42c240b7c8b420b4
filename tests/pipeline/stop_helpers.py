"""Stopping a stream with Ctrl-C, shared by the stream and Spark Connect tests: run the CLI, send SIGINT
to its process group after its first progress line, and check what a stopped run leaves."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import threading
from pathlib import Path

LINE = re.compile(r"^batch (\d+): ([\d,]+) rows \(([\d,]+) quarantined\) in [\d.]+ s, skew (\d+\.\d\d|n/a)")
FIRST_LINE_DEADLINE_S = 600
EXIT_DEADLINE_S = 300


def _read_lines(stream, lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def interrupt_after_first_line(command: list[str], cwd: Path) -> tuple[int, str, str]:
    """Run `command`, send SIGINT to its whole process group (as a terminal's Ctrl-C does: the JVM and
    Python workers too) once it prints its first progress line; (exit code, stdout, stderr)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                           env=env, start_new_session=True)
    stdout: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=_read_lines, args=(run.stdout, stdout), daemon=True)
    reader.start()
    try:
        seen: list[str] = []
        while True:
            line = stdout.get(timeout=FIRST_LINE_DEADLINE_S)
            assert line is not None, "the run ended before its first progress line:\n" + "".join(seen)
            seen.append(line)
            if LINE.match(line):
                break
        os.killpg(run.pid, signal.SIGINT)
        returncode = run.wait(timeout=EXIT_DEADLINE_S)
        stderr = run.stderr.read() if run.stderr else ""
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    reader.join(timeout=60)
    rest = []
    while not stdout.empty():
        item = stdout.get()
        if item is not None:
            rest.append(item)
    return returncode, "".join(seen + rest), stderr


def assert_stopped_by_ctrl_c(returncode: int, printed: str, stderr: str, out: Path, files: int) -> None:
    """Exit 130 with no traceback, the summary printed and written, and only whole batches counted."""
    assert returncode == 130, stderr + printed
    assert "Traceback" not in stderr and "Py4J" not in stderr, stderr
    assert "rebalancer pipeline" in printed and "micro-batches" in printed  # the summary table
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert 1 <= summary["batches"] <= files
    assert f"stopped by Ctrl-C after {summary['batches']} micro-batches" in printed
    # Only whole batches are counted: the state agrees with the progress lines printed.
    batch_lines = [LINE.match(line) for line in printed.splitlines() if LINE.match(line)]
    assert len(batch_lines) == summary["batches"]
    assert sum(int(m.group(2).replace(",", "")) for m in batch_lines if m) == summary["ingested"]
