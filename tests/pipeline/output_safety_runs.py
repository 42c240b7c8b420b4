"""Runs for the output-safety tests: a run without Spark (the real checks, staging and swap, with the
engine replaced by a few files), a directory's contents as a comparable tree, and the hook that
stops a run at a named point until the test says go (a pipe each way: no sleeps).

`python output_safety_runs.py fake|cli ARGS` is the child a test signals: `fake OUT TAG MODE` is a
fake run into OUT; `cli ARGS…` is `rebalancer ARGS…`. Both stop at $HOLD_POINT: they write the
point to fd $HOLD_READY, then wait for a byte on fd $HOLD_GO.
"""

from __future__ import annotations

import hashlib
import os
import select
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rebalancer.pipeline.resolved import RunRequest

# What a batch run writes: each file's text is the run's tag, so a tree says which run it holds.
RUN_FILES = (
    "metrics/date=2026-01-01/part-0.parquet",
    "metrics/date=2026-01-02/part-0.parquet",
    "quarantine/part-0.parquet",
    "summary.json",
    "plan.json",
    "report.html",
)
CHECKPOINT_FILES = ("query/metadata", "query/offsets/0", "rebalancer/state.json")


def tree(root: Path) -> dict[str, str]:
    """Every file under `root` (hidden ones too), as relative path -> sha256 of its bytes."""
    if not root.exists():
        return {}
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def fake_run(request: RunRequest, tag: str, extra: Mapping[str, str] | None = None) -> None:
    """`run(request)` with the engine replaced by writing RUN_FILES (and a stream's checkpoint)."""
    import rebalancer.pipeline.outputs.swap as _output_swap
    from rebalancer.pipeline.outputs.mode import check_run_outputs

    states = check_run_outputs(request, None)
    with _output_swap.run_outputs([s for s in states if s is not None], request.mode, None) as outputs:
        out = Path(outputs.at(request.output))
        reports = Path(outputs.at(request.report_dir)) if request.report_dir is not None else out
        for name in RUN_FILES:
            if name == "report.html" and (request.stream or not request.report):
                continue
            target = (reports if "/" not in name else out) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(tag)
            _output_swap.held(f"stage:{name}")
        if request.stream:
            checkpoint = Path(outputs.at(request.checkpoint)) if request.checkpoint is not None else out / "_checkpoint"
            for name in CHECKPOINT_FILES:
                (checkpoint / name).parent.mkdir(parents=True, exist_ok=True)
                (checkpoint / name).write_text(tag)
        for name, text in (extra or {}).items():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            (out / name).write_text(text)


def install_hold() -> None:
    """Stop once at $HOLD_POINT: say so on fd $HOLD_READY, go on when fd $HOLD_GO has a byte.

    The points are `_output_swap`'s, and "stage:NAME" for each stage the CLI shows (held through
    its progress lines, so a rebalancer from before staging can be stopped there too)."""
    point, ready, go = os.environ["HOLD_POINT"], int(os.environ["HOLD_READY"]), int(os.environ["HOLD_GO"])
    reached: list[str] = []

    def hold(name: str) -> None:
        if name == point and not reached:
            reached.append(name)
            os.write(ready, f"{name}\n".encode())
            os.read(go, 1)  # a signal's handler raising (Ctrl-C) ends the wait too

    try:
        import rebalancer.pipeline.outputs.swap as _output_swap
    except ImportError:  # a rebalancer from before staging: only its stages can be held
        pass
    else:
        _output_swap.hold = hold
    from rebalancer.pipeline import commands

    shown = commands.stages

    @contextmanager
    def stages(console: Any, quiet: bool = False) -> Iterator[Callable[[str], None]]:
        with shown(console, quiet=quiet) as step:

            def held_step(stage: str) -> None:
                hold(f"stage:{stage}")
                step(stage)

            yield held_step

    commands.stages = stages  # type: ignore[assignment]


def wait_ready(fd: int, timeout: float) -> str:
    """The point the child reached (written to the pipe), or '' if it ended (or the wait ran out) first."""
    readable, _, _ = select.select([fd], [], [], timeout)
    return os.read(fd, 200).decode() if readable else ""


@contextmanager
def held_child(cwd: Path, point: str, *args: str) -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    """This file run as `ARGS`, stopping at `point`: (the process, its ready pipe, its go pipe).
    Killed, if still running, when the block ends."""
    ready_read, ready_write = os.pipe()
    go_read, go_write = os.pipe()
    env = {**os.environ, "HOLD_POINT": point, "HOLD_READY": str(ready_write), "HOLD_GO": str(go_read)}
    child = subprocess.Popen(
        [sys.executable, __file__, *args],
        env=env, pass_fds=(ready_write, go_read), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    os.close(ready_write)
    os.close(go_read)
    try:
        yield child, ready_read, go_write
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate()
        os.close(ready_read)
        os.close(go_write)


def main(argv: list[str]) -> int:
    install_hold()
    if argv[0] == "fake":
        out, tag, mode = Path(argv[1]), argv[2], argv[3]
        fake_run(RunRequest(input="data", output=out, mode=mode), tag)
        return 0
    from rebalancer.cli import main as cli

    return cli(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
