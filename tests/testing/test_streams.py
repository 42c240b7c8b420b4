"""StreamRun: a stream's progress lines add up to rows; a run that ends early or misses its deadline
fails with what it printed; Ctrl-C reaches the child's whole process group."""

from __future__ import annotations

import sys
import textwrap

import pytest

from process_helpers import killed_owner, wait_gone
from rebalancer.testing.streams import StreamRun

pytestmark = pytest.mark.timeout(120)


def _script(body: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(body)]


def test_wait_rows_adds_up_the_batch_lines_and_ignores_other_lines(tmp_path):
    run = StreamRun(
        _script(
            """
            import sys
            print("stage: read")
            print("batch 0: 1,500 rows (0 quarantined)")
            print("batch 1: 700 rows (3 quarantined)")
            print("batch 3: 800 rows (0 quarantined)")
            """
        ),
        tmp_path,
    )
    run.wait_rows(2_200, deadline_s=60)
    assert (run.rows, run.batches) == (2_200, [0, 1])
    run.wait_rows(3_000, deadline_s=60)
    assert (run.rows, run.batches) == (3_000, [0, 1, 3])
    assert run.process.wait(timeout=60) == 0
    assert run.text() == (
        "stage: read\nbatch 0: 1,500 rows (0 quarantined)\nbatch 1: 700 rows (3 quarantined)\n"
        "batch 3: 800 rows (0 quarantined)\n"
    )


def test_a_run_that_ends_before_its_rows_fails_with_its_exit_code_and_stderr(tmp_path):
    run = StreamRun(
        _script(
            """
            import sys
            print("batch 0: 10 rows (0 quarantined)")
            print("input: no such topic", file=sys.stderr)
            sys.exit(2)
            """
        ),
        tmp_path,
    )
    with pytest.raises(RuntimeError) as error:
        run.wait_rows(20, deadline_s=60)
    message = str(error.value)
    assert message.startswith("the stream exited (2) at 10 of 20 rows:\nbatch 0: 10 rows (0 quarantined)\n")
    assert message.endswith("stderr:\ninput: no such topic\n")


def test_a_run_that_prints_nothing_more_fails_at_its_deadline_and_kill_stops_it(tmp_path):
    run = StreamRun(_script("import time\nprint('batch 0: 5 rows (0 quarantined)', flush=True)\ntime.sleep(600)"), tmp_path)
    run.wait_rows(5, deadline_s=60)  # the first line, however slow the machine
    with pytest.raises(RuntimeError) as error:
        run.wait_rows(6, deadline_s=1)
    assert str(error.value) == "the stream applied 5 of 6 rows in 1 s:\nbatch 0: 5 rows (0 quarantined)\n"
    run.kill()
    assert run.process.returncode == -9


def test_interrupt_is_ctrl_c_and_returns_the_exit_code_and_stderr(tmp_path):
    run = StreamRun(
        _script(
            """
            import signal, sys, time
            def stop(*_):
                print("stopped by Ctrl-C", file=sys.stderr)
                sys.exit(130)
            signal.signal(signal.SIGINT, stop)
            print("batch 0: 1 rows (0 quarantined)", flush=True)
            time.sleep(600)
            """
        ),
        tmp_path,
    )
    run.wait_rows(1, deadline_s=60)
    assert run.interrupt(timeout_s=60) == (130, "stopped by Ctrl-C\n")


# -- issue 42 item 11's pattern: a run does not outlive a SIGKILLed owner, even one with a forked child --
_OWN_A_STREAM = """
import sys, tempfile
from rebalancer.testing.streams import StreamRun
body = (
    "import subprocess, time\\n"
    "jvm = subprocess.Popen(['sleep', '600'])\\n"  # as Spark's JVM: a child in the run's group
    "print(f'batch 0: 1 rows (0 quarantined) jvm={jvm.pid}', flush=True)\\n"
    "time.sleep(600)\\n"
)
run = StreamRun([sys.executable, "-c", body], tempfile.gettempdir())
run.wait_rows(1, deadline_s=60)
jvm = int(run.seen[0].rsplit("=", 1)[1])
report = {"run": run.process.pid, "jvm": jvm, "groups": [run.process.pid], "pids": [jvm]}
"""


def test_a_killed_owner_with_a_live_forked_child_leaves_no_stream_behind():
    with killed_owner(_OWN_A_STREAM) as info:
        # Before, the run had no watchdog: it ran on, and the child kept its stdout pipe open.
        assert wait_gone([info["run"], info["jvm"]], timeout_s=60) == []


def test_a_run_that_ended_stops_its_watchdog(tmp_path):
    run = StreamRun(_script("print('batch 0: 1 rows (0 quarantined)')"), tmp_path)
    with pytest.raises(RuntimeError, match=r"^the stream exited \(0\) at 1 of 2 rows:"):
        run.wait_rows(2, deadline_s=60)
    assert run._watchdog.process.returncode == -9  # stopped, not left to kill a group that is gone
