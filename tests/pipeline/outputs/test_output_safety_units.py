"""Overwrite safety without Spark: the real checks, manifests, staging and swap, with the engine
replaced by a few files (`output_safety_runs.fake_run`), and runs stopped by real signals.

Issue 42's cases: `--mode overwrite` deleted `out/shedding/` (never the pipeline's), a `--checkpoint`
directory holding a thesis and no checkpoint, and, on Ctrl-C, the previous run with no complete new
one in its place, the half run then refused by the next default run.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from output_safety_runs import RUN_FILES, fake_run, held_child, tree, wait_ready

import rebalancer.pipeline.outputs.recover as _output_recover
import rebalancer.pipeline.outputs.swap as _output_swap
from rebalancer.pipeline.generate import GenerateConfig, generate
from rebalancer.pipeline.outputs.mode import OUTPUT_MODES, check_run_outputs, claim_spark_log
from rebalancer.pipeline.resolved import RunRequest

HERE = Path(__file__).parent.parent  # the helpers sit in tests/pipeline
EXE = str(Path(sys.executable).with_name("rebalancer"))
BATCH_ENTRIES = ["metrics", "plan.json", "quarantine", "report.html", "summary.json"]
WAIT_S = 120.0  # for a child to reach its point: a bound for a stuck child, never a synchronisation


def _request(out: Path, **fields: object) -> RunRequest:
    return RunRequest(input="data", output=out, **fields)  # type: ignore[arg-type]


def _texts(root: Path) -> dict[str, str]:
    """The text of each run file present under `root`: which run each comes from."""
    return {name: (root / name).read_text() for name in RUN_FILES if (root / name).exists()}


def _visible(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def _with_shedding(out: Path) -> Path:
    """What `rebalancer shedding compare --out out/shedding` leaves: no run's, never to be removed."""
    (out / "shedding").mkdir(parents=True)
    (out / "shedding" / "avgshedder.png").write_bytes(b"\x89PNG plot")
    return out


def test_a_run_lists_in_its_manifest_exactly_the_entries_it_wrote(tmp_path: Path) -> None:
    out = tmp_path / "out"
    fake_run(_request(out), "first")
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["entries"] == BATCH_ENTRIES
    assert manifest["version"] == 1 and manifest["written_by"].startswith("rebalancer ")
    assert _visible(out) == ["_manifest.json", *BATCH_ENTRIES]  # no staging left behind


def test_overwrite_replaces_only_what_the_previous_runs_manifest_lists(tmp_path: Path) -> None:
    out = tmp_path / "out"
    fake_run(_request(out), "first")
    _with_shedding(out)
    (out / "notes.txt").write_text("mine")
    kept = {**tree(out / "shedding"), "notes": (out / "notes.txt").read_text()}
    fake_run(_request(out, mode="overwrite"), "second")
    fake_run(_request(out, mode="overwrite"), "third")  # `make run` twice
    assert {**tree(out / "shedding"), "notes": (out / "notes.txt").read_text()} == kept
    assert set(_texts(out).values()) == {"third"} and len(_texts(out)) == len(RUN_FILES)
    assert json.loads((out / "_manifest.json").read_text())["entries"] == BATCH_ENTRIES
    assert _visible(out) == sorted(["_manifest.json", *BATCH_ENTRIES, "notes.txt", "shedding"])


def test_overwrite_refuses_a_name_it_writes_that_no_run_wrote(tmp_path: Path) -> None:
    out = tmp_path / "out"
    fake_run(_request(out, report=False), "first")  # its manifest has no report.html
    (out / "report.html").write_text("my own report")
    before = tree(out)
    for mode in OUTPUT_MODES:
        with pytest.raises(ValueError) as caught:
            fake_run(_request(out, mode=mode), "second")
        assert str(caught.value) == (
            f"output {out} holds report.html, which this run writes but no run of this pipeline wrote "
            "(not in its _manifest.json): move it away or give another --output"
        )
    assert tree(out) == before
    fake_run(_request(out, mode="overwrite", report=False), "second")  # not writing it: fine, and it stays
    assert (out / "report.html").read_text() == "my own report"


def test_an_output_from_before_manifests_counts_as_the_runs_only_the_names_a_run_writes(tmp_path: Path) -> None:
    """An older rebalancer wrote no manifest: its run's names (and the handler folders its summary
    names) are replaced, any other name is left; a _checkpoint without a checkpoint in it is not a run's."""
    out = tmp_path / "out"
    fake_run(_request(out), "old")
    (out / "_manifest.json").unlink()
    (out / "summary.json").write_text(json.dumps({"handlers": {"metrics": {}, "top": {}}}))
    (out / "top" / "date=2026-01-01").mkdir(parents=True)  # the old run's handler output
    (out / "_checkpoint").mkdir()
    (out / "_checkpoint" / "thesis.tex").write_text("years of work")
    _with_shedding(out)
    with pytest.raises(ValueError) as caught:
        fake_run(_request(out), "new")
    assert str(caught.value) == (
        f"output {out} already holds a run's outputs (metrics, plan.json, quarantine, …): "
        "--mode overwrite replaces them, --mode append adds this run to them"
    )
    fake_run(_request(out, mode="overwrite"), "new")
    assert _visible(out) == sorted(["_checkpoint", "_manifest.json", *BATCH_ENTRIES, "shedding"])
    assert (out / "_checkpoint" / "thesis.tex").read_text() == "years of work"
    assert set(_texts(out).values()) == {"new"}


def test_a_directory_holding_no_run_is_written_beside_never_cleared(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("years of work")
    for mode in ("error", "overwrite"):
        fake_run(_request(home, mode=mode), mode)
        assert (home / "thesis.tex").read_text() == "years of work"
    assert set(_texts(home).values()) == {"overwrite"}


def test_a_report_dir_keeps_what_no_run_wrote(tmp_path: Path) -> None:
    out, reports = tmp_path / "out", tmp_path / "reports"
    reports.mkdir()
    (reports / "notes.txt").write_text("mine")
    fake_run(_request(out, report_dir=reports), "first")
    assert json.loads((reports / "_manifest.json").read_text())["entries"] == ["plan.json", "report.html", "summary.json"]
    assert json.loads((out / "_manifest.json").read_text())["entries"] == ["metrics", "quarantine"]
    with pytest.raises(ValueError) as caught:
        _request(tmp_path / "new", report_dir=reports).check_output()
    assert str(caught.value) == (
        f"report-dir {reports} already holds a run's outputs (plan.json, report.html, summary.json): "
        "--mode overwrite replaces them, --mode append adds this run to them"
    )
    fake_run(_request(out, report_dir=reports, mode="overwrite"), "second")
    assert (reports / "notes.txt").read_text() == "mine" and (reports / "summary.json").read_text() == "second"
    assert _visible(reports) == ["_manifest.json", "notes.txt", "plan.json", "report.html", "summary.json"]


@pytest.mark.parametrize("mode", OUTPUT_MODES)
def test_a_checkpoint_directory_that_holds_no_checkpoint_is_refused(tmp_path: Path, mode: str) -> None:
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.txt").write_text("x")
    with pytest.raises(ValueError) as caught:
        fake_run(_request(tmp_path / "out", stream=True, checkpoint=precious, mode=mode), "run")
    assert str(caught.value) == (
        f"checkpoint {precious} holds no stream's checkpoint (no query/metadata, no rebalancer/state.json): "
        "--checkpoint takes a new or empty directory, or one a stream wrote"
    )
    assert tree(precious) == {"thesis.txt": tree(precious)["thesis.txt"]} and not (tmp_path / "out").exists()


def test_overwrite_of_a_checkpoint_replaces_the_checkpoint_and_keeps_a_users_file(tmp_path: Path) -> None:
    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    fake_run(_request(out, stream=True, checkpoint=checkpoint), "first")
    assert json.loads((checkpoint / "_manifest.json").read_text())["entries"] == ["query", "rebalancer"]
    (checkpoint / "thesis.txt").write_text("x")
    with pytest.raises(ValueError) as caught:
        _request(tmp_path / "other", stream=True, checkpoint=checkpoint).check_output()
    assert str(caught.value) == (
        f"checkpoint {checkpoint} already holds a stream's state: --mode append resumes from it, "
        "--mode overwrite starts afresh"
    )
    fake_run(_request(out, stream=True, checkpoint=checkpoint, mode="overwrite"), "second")
    assert (checkpoint / "query" / "metadata").read_text() == "second"
    (checkpoint / "_manifest.json").unlink()  # a checkpoint from before manifests: known by its layout
    fake_run(_request(out, stream=True, checkpoint=checkpoint, mode="overwrite"), "third")
    assert (checkpoint / "rebalancer" / "state.json").read_text() == "third"
    assert (checkpoint / "thesis.txt").read_text() == "x"
    assert _visible(checkpoint) == ["_manifest.json", "query", "rebalancer", "thesis.txt"]


def test_a_streams_default_checkpoint_is_one_of_the_outputs_entries(tmp_path: Path) -> None:
    out = tmp_path / "out"
    fake_run(_request(out, stream=True), "stream")
    assert json.loads((out / "_manifest.json").read_text())["entries"] == [
        "_checkpoint", "metrics", "plan.json", "quarantine", "summary.json"
    ]
    _with_shedding(out)
    fake_run(_request(out, mode="overwrite"), "batch")  # a batch run replaces the stream, checkpoint included
    assert _visible(out) == sorted(["_manifest.json", *BATCH_ENTRIES, "shedding"])


@pytest.mark.parametrize("point", ["stage:quarantine/part-0.parquet", "staged", "swap"])
def test_ctrl_c_before_the_commit_leaves_the_previous_run_exactly_as_it_was(
    tmp_path: Path, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _with_shedding(tmp_path / "out")
    fake_run(_request(out), "old")
    before = tree(out)

    def hold(name: str) -> None:
        if name == point:
            raise KeyboardInterrupt

    monkeypatch.setattr(_output_swap, "hold", hold)
    with pytest.raises(KeyboardInterrupt):
        fake_run(_request(out, mode="overwrite"), "new")
    assert tree(out) == before  # every file, hidden ones too: nothing moved, no staging left
    monkeypatch.setattr(_output_swap, "hold", None)
    with pytest.raises(ValueError, match=r"already holds a run's outputs \(metrics, plan.json, quarantine, …\)"):
        fake_run(_request(out), "next")
    fake_run(_request(out, mode="overwrite"), "next")
    assert set(_texts(out).values()) == {"next"}


def test_a_first_run_stopped_leaves_nothing_the_next_default_run_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"

    def hold(name: str) -> None:
        if name == "stage:summary.json":
            raise KeyboardInterrupt

    monkeypatch.setattr(_output_swap, "hold", hold)
    with pytest.raises(KeyboardInterrupt):
        fake_run(_request(out), "first")
    assert not out.exists()  # made by the run, and empty once its staging is gone
    monkeypatch.setattr(_output_swap, "hold", None)
    fake_run(_request(out), "second")
    assert set(_texts(out).values()) == {"second"}


# (where the run is stopped, whose run the output holds after the next run has looked at it)
POINTS = [("stage:quarantine/part-0.parquet", "old"), ("staged", "old"), ("swap", "old"), ("committed", "new")]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
@pytest.mark.parametrize(("point", "holds"), POINTS, ids=[p for p, _ in POINTS])
def test_an_overwrite_stopped_by_a_signal_leaves_one_whole_run(
    tmp_path: Path, point: str, holds: str, signum: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Stopped anywhere: before the commit point the previous run stays (put back by the next run
    after a SIGKILL mid-swap), after it the new one is in place; never a mix. The next run puts the
    stopped one right before any check, so an error-mode run that refuses leaves nothing behind."""
    out = _with_shedding(tmp_path / "out")
    fake_run(_request(out), "old")
    old, shedding = tree(out), tree(out / "shedding")
    with held_child(tmp_path, point, "fake", str(out), "new", "overwrite") as (child, ready, _go):
        assert wait_ready(ready, WAIT_S) == f"{point}\n"
        child.send_signal(signum)
        child.wait()
        assert child.returncode == -signum
    # The error-mode checks refuse for the previous run, having put the stopped one right first.
    with pytest.raises(ValueError, match=r"already holds a run's outputs \(metrics, plan.json, quarantine, …\)"):
        _request(out).check_output()
    assert not [name for name in os.listdir(out) if name.startswith(".rebalancer")]
    if holds == "old":
        assert tree(out) == old
    else:
        assert set(_texts(out).values()) == {"new"} and json.loads((out / "_manifest.json").read_text())[
            "entries"
        ] == BATCH_ENTRIES
    assert tree(out / "shedding") == shedding
    states = [s for s in check_run_outputs(_request(out, mode="overwrite")) if s is not None]
    assert _output_recover.recover(states, None) == 0  # nothing left to put right
    stopped_in_place = signum == signal.SIGINT and holds == "old"  # Ctrl-C undoes it at once
    messages = [r.getMessage() for r in caplog.records if r.name == "rebalancer.pipeline.outputs.swap"]
    if not stopped_in_place:
        expected = {
            "stage:quarantine/part-0.parquet": r"removed the staging directory of a run that was stopped",
            "staged": r"removed the staging directory of a run that was stopped",
            "swap": r"undid the swap of a run stopped midway \(.+\): the previous run is back",
            "committed": r"finished the swap of a run stopped after it was in place",
        }[point]
        assert len(messages) == 1 and re.search(f"^{re.escape(str(out))}: {expected}", messages[0]), messages
    fake_run(_request(out, mode="overwrite"), "next")
    assert set(_texts(out).values()) == {"next"} and tree(out / "shedding") == shedding


def test_a_cli_run_refused_after_a_killed_run_removes_that_runs_staging(tmp_path: Path) -> None:
    """Finding: after a SIGKILL while staged, `--mode error` refused without removing the killed run's
    staging (only an overwrite put it right). It is this pipeline's own writing: any mode removes it
    before refusing, and says so."""
    out = tmp_path / "out"
    fake_run(_request(out), "old")
    old = tree(out)
    with held_child(tmp_path, "staged", "fake", str(out), "new", "overwrite") as (child, ready, _go):
        assert wait_ready(ready, WAIT_S) == "staged\n"
        (stage,) = [name for name in os.listdir(out) if name.startswith(".rebalancer-staging-")]
        child.send_signal(signal.SIGKILL)
        child.wait()
    token = stage.removeprefix(".rebalancer-staging-")
    generate(GenerateConfig(events=200, types=3, files=1), tmp_path / "data")
    done = subprocess.run(
        [EXE, "pipeline", "run", "--input", "data", "--out", "out", "--mode", "error"],
        capture_output=True, text=True, cwd=tmp_path, timeout=WAIT_S,
    )  # fmt: skip
    refusal = (
        "output out already holds a run's outputs (metrics, plan.json, quarantine, …): --mode overwrite "
        "replaces them, --mode append adds this run to them"
    )
    warning, error = done.stderr.splitlines()
    assert done.returncode == 2 and error == f"rebalancer: error: {refusal}", done.stderr
    assert re.fullmatch(  # the log line's time first
        r"\S+ \S+ WARNING rebalancer\.pipeline\.outputs\.swap: out: removed the staging directory of a run that "
        rf"was stopped \({re.escape(token)}\)", warning
    ), done.stderr
    assert sorted(os.listdir(out)) == ["_manifest.json", *BATCH_ENTRIES] and tree(out) == old


def test_a_staging_directory_a_live_run_is_writing_is_never_touched(tmp_path: Path) -> None:
    out = tmp_path / "out"
    fake_run(_request(out), "old")
    with held_child(tmp_path, "staged", "fake", str(out), "new", "overwrite") as (child, ready, go):
        assert wait_ready(ready, WAIT_S) == "staged\n"
        (stage,) = [name for name in os.listdir(out) if name.startswith(".rebalancer-staging-")]
        with pytest.raises(ValueError) as caught:
            fake_run(_request(out, mode="overwrite"), "third")
        assert str(caught.value) == (
            f"output {out} is being written by another run (pid {child.pid} on this host, into {stage}): "
            "wait for it to end, or remove that directory if no run is going on"
        )
        os.write(go, b"g")
        assert child.wait() == 0, child.stderr.read() if child.stderr else ""
    assert set(_texts(out).values()) == {"new"}


def test_a_spark_log_no_run_wrote_is_refused_before_spark_starts(tmp_path: Path) -> None:
    out = tmp_path / "out"
    fake_run(_request(out), "first")
    (out / "spark.log").write_text("my notes on Spark")
    with pytest.raises(ValueError) as caught:
        claim_spark_log(out / "spark.log")
    assert str(caught.value) == (
        f"{out / 'spark.log'} is not a run's log (not in {out / '_manifest.json'}), and a run without -v "
        "writes Spark's log there: move it away, or run with -v"
    )
    generate(GenerateConfig(events=200, types=3, files=1), tmp_path / "data")
    done = subprocess.run(
        [EXE, "pipeline", "run", "--input", "data", "--out", "out", "--mode", "overwrite"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    assert done.returncode == 2 and done.stderr.splitlines() == [
        "rebalancer: error: out/spark.log is not a run's log (not in out/_manifest.json), and a run without -v "
        "writes Spark's log there: move it away, or run with -v"
    ], done.stderr
    assert (out / "spark.log").read_text() == "my notes on Spark"
    (out / "spark.log").unlink()  # a new log is listed before it is written: a run killed then leaves no stranger
    claim_spark_log(out / "spark.log")
    assert json.loads((out / "_manifest.json").read_text())["entries"] == sorted([*BATCH_ENTRIES, "spark.log"])
    (out / "spark.log").write_text("the run's log")
    claim_spark_log(out / "spark.log")
    (out / "_manifest.json").unlink()  # an output from before manifests: its spark.log is a run's
    claim_spark_log(out / "spark.log")


def test_a_damaged_manifest_is_refused_naming_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    fake_run(_request(out), "first")
    (out / "_manifest.json").write_text("[1, 2]")
    with pytest.raises(ValueError) as caught:
        _request(out, mode="overwrite").check_output()
    assert str(caught.value) == (
        f"{out / '_manifest.json'} is not a run's manifest ({{run, entries}}): restore it, or remove it"
    )


def test_append_lists_what_it_may_write_before_it_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stopped append leaves nothing that a later run would take for someone else's."""
    out = tmp_path / "out"
    fake_run(_request(out, report=False), "first")

    def hold(name: str) -> None:
        if name == "stage:metrics/date=2026-01-02/part-0.parquet":
            raise KeyboardInterrupt

    monkeypatch.setattr(_output_swap, "hold", hold)
    with pytest.raises(KeyboardInterrupt):
        fake_run(_request(out, mode="append"), "append")
    assert json.loads((out / "_manifest.json").read_text())["entries"] == BATCH_ENTRIES
    monkeypatch.setattr(_output_swap, "hold", None)
    fake_run(_request(out, mode="overwrite"), "next")
    assert set(_texts(out).values()) == {"next"}


def test_recovery_logs_nothing_when_nothing_was_left(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "out"
    caplog.set_level(logging.WARNING)
    fake_run(_request(out), "first")
    fake_run(_request(out, mode="overwrite"), "second")
    assert [r for r in caplog.records if r.name == "rebalancer.pipeline.outputs.swap"] == []


@pytest.mark.parametrize("name", ["_manifest.json", "spark.log", "_compare_hash"])
def test_a_handler_cannot_take_the_name_of_the_runs_manifest_log_or_scratch(name: str) -> None:
    """Its folder would be the manifest, the log, or the scratch --compare-hash removes."""
    from rebalancer.pipeline.routing.handler_map import Pipeline

    with pytest.raises(ValueError) as caught:
        Pipeline().handler("a", schema="n long", name=name)(lambda frame: frame)
    assert str(caught.value) == f"handler name {name!r} is taken by the run's own outputs"


def test_a_directory_that_cannot_be_made_is_refused_by_its_flag_and_leaves_no_staging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attack's `--checkpoint /sys/kernel/zz` as root: os.access lets it pass, mkdir says EPERM.
    The run stopped at its staging with an OSError that named no flag, and left the output's and the
    report-dir's staging (made before the checkpoint's) behind, and the directories it had created."""
    from rebalancer.pipeline.outputs.fs import RunFS

    refused = tmp_path / "sys" / "zz"
    made = RunFS.mkdir

    def mkdir(self: RunFS, where: str | Path) -> None:
        if str(where).startswith(str(refused)):
            raise PermissionError(1, "Operation not permitted", str(where))
        made(self, where)

    monkeypatch.setattr(RunFS, "mkdir", mkdir)
    request = _request(tmp_path / "out", stream=True, checkpoint=refused, report_dir=tmp_path / "reports")
    with pytest.raises(ValueError) as caught:
        fake_run(request, "new")
    assert str(caught.value) == f"checkpoint {refused}: cannot write there: Operation not permitted"
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # out/ and reports/ were this run's: removed


# The third attack: an append writes in place and left no mark, so two appends at once both ran
# (their Spark committers collided in out/quarantine/_temporary), and an overwrite started while an
# append was writing swapped the output under it. An append now marks the output while it lives.
def test_a_live_append_is_a_mark_every_other_run_is_refused_by(tmp_path: Path) -> None:
    out = tmp_path / "out"
    fake_run(_request(out), "old")
    point = f"stage:{RUN_FILES[0]}"
    with held_child(tmp_path, point, "fake", str(out), "new", "append") as (child, ready, go):
        assert wait_ready(ready, WAIT_S) == f"{point}\n"
        (stage,) = [name for name in os.listdir(out) if name.startswith(".rebalancer-staging-")]
        for mode in ("append", "overwrite", "error"):
            with pytest.raises(ValueError) as caught:
                fake_run(_request(out, mode=mode), "third")
            assert str(caught.value) == (
                f"output {out} is being written by another run (pid {child.pid} on this host, into {stage}): "
                "wait for it to end, or remove that directory if no run is going on"
            )
        os.write(go, b"g")
        assert child.wait() == 0, child.stderr.read() if child.stderr else ""
    assert not [name for name in os.listdir(out) if name.startswith(".")]  # its mark ended with it
    assert set(_texts(out).values()) == {"new"}


def test_a_killed_appends_mark_is_removed_by_the_next_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    fake_run(_request(out), "old")
    point = f"stage:{RUN_FILES[0]}"
    with held_child(tmp_path, point, "fake", str(out), "new", "append") as (child, ready, _go):
        assert wait_ready(ready, WAIT_S) == f"{point}\n"
        child.kill()
        child.wait()
    assert [name for name in os.listdir(out) if name.startswith(".rebalancer-staging-")]
    fake_run(_request(out, mode="append"), "next")
    assert not [name for name in os.listdir(out) if name.startswith(".")]


@pytest.mark.parametrize(("other", "refused"), [("20000101T000000-1-aaaaaa", True), ("29991231T000000-1-aaaaaa", False)])
def test_of_two_appends_started_at_once_the_later_yields(tmp_path: Path, other: str, refused: bool) -> None:
    """Both passed the checks before either's mark was there; the other's mark appears just then."""
    out = tmp_path / "out"
    fake_run(_request(out), "old")
    request = _request(out, mode="append")
    states = check_run_outputs(request, None)
    with subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE) as alive:
        mark = out / f".rebalancer-staging-{other}"
        mark.mkdir()
        (mark / "_staging.json").write_text(json.dumps({
            "token": other, "commit": str(out.resolve()), "pid": alive.pid, "host": socket.gethostname(),
            "role": "output", "mode": "append",
        }))  # fmt: skip
        opened = _output_swap.run_outputs([s for s in states if s is not None], "append", None)
        if refused:
            with pytest.raises(ValueError) as caught:
                opened.__enter__()
            assert str(caught.value).startswith(f"output {out} is being written by another run (pid {alive.pid} ")
        else:
            opened.__enter__()
            opened.__exit__(None, None, None)
        assert sorted(name for name in os.listdir(out) if name.startswith(".")) == [mark.name]  # ours is gone
        alive.stdin.close()  # type: ignore[union-attr]
