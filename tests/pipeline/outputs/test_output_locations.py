"""Where a run writes, against what is there and against each other, without Spark (the real checks,
manifests, staging and swap, the engine replaced by `output_safety_runs.fake_run`).

The attack on issue 42's fixes: `--report-dir OLD_OUTPUT --mode overwrite` deleted that run's
metrics/ and quarantine/ (F1); a report-dir or checkpoint inside the output failed only at the swap
(F5); a report-dir in the input was accepted (F6); a `file://u:PW@/x` report-dir was a relative path
and showed its password (F2).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from output_safety_runs import fake_run, tree

from rebalancer.pipeline.generate import GenerateConfig, generate
from rebalancer.pipeline.outputs.mode import OUTPUT_MODES
from rebalancer.pipeline.resolved import RunRequest

EXE = str(Path(sys.executable).with_name("rebalancer"))
OLD_OUTPUT = [
    "_manifest.json",
    "metrics/date=2026-01-01/part-0.parquet",
    "metrics/date=2026-01-02/part-0.parquet",
    "plan.json",
    "quarantine/part-0.parquet",
    "report.html",
    "summary.json",
]


def _cli_refused(cwd: Path, args: list[str], message: str) -> None:
    """`rebalancer pipeline run ARGS` in `cwd` is refused in one line on stderr, exit 2."""
    result = subprocess.run([EXE, "pipeline", "run", *args], capture_output=True, text=True, cwd=cwd, timeout=600)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", f"rebalancer: error: {message}\n")


def _request(out: Path, **fields: object) -> RunRequest:
    return RunRequest(input="data", output=out, **fields)  # type: ignore[arg-type]


def _old_output(tmp_path: Path) -> Path:
    """An older run's output: its data, its report, its manifest."""
    old = tmp_path / "old"
    fake_run(_request(old), "old")
    assert sorted(tree(old)) == OLD_OUTPUT
    assert json.loads((old / "_manifest.json").read_text())["role"] == "output"
    return old


@pytest.mark.parametrize("mode", OUTPUT_MODES)
def test_a_report_dir_that_is_an_older_runs_output_is_refused_and_kept(tmp_path: Path, mode: str) -> None:
    old = _old_output(tmp_path)
    before = tree(old)
    with pytest.raises(ValueError) as caught:
        fake_run(_request(tmp_path / "new", report_dir=old, mode=mode), "new")
    assert str(caught.value) == (
        f"report-dir {old} is a run's output directory (its _manifest.json says so), and only a run's "
        "output replaces it: give another --report-dir"
    )
    assert tree(old) == before  # metrics/ and quarantine/ too, every byte
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("manifest", ["without a role", "none"])
def test_an_older_output_without_a_role_in_its_manifest_is_known_by_its_entries(tmp_path: Path, manifest: str) -> None:
    old = _old_output(tmp_path)
    if manifest == "none":  # written before manifests
        (old / "_manifest.json").unlink()
        why = "it holds metrics, plan.json, quarantine, …"
    else:  # written before roles
        data = json.loads((old / "_manifest.json").read_text())
        (old / "_manifest.json").write_text(json.dumps({k: v for k, v in data.items() if k != "role"}))
        why = "its _manifest.json says so"
    before = tree(old)
    with pytest.raises(ValueError) as caught:
        fake_run(_request(tmp_path / "new", report_dir=old, mode="overwrite"), "new")
    assert str(caught.value) == (
        f"report-dir {old} is a run's output directory ({why}), and only a run's output replaces it: give another --report-dir"
    )
    assert tree(old) == before


def _refused_and_kept(kept: Path, request: RunRequest, message: str) -> None:
    """`request` is refused with `message`, and `kept` is as it was, every byte."""
    before = tree(kept)
    with pytest.raises(ValueError) as caught:
        fake_run(request, "new")
    assert str(caught.value) == message
    assert tree(kept) == before


def test_a_checkpoint_that_is_an_older_runs_output_is_refused_and_kept(tmp_path: Path) -> None:
    old = _old_output(tmp_path)
    _refused_and_kept(
        old,
        _request(tmp_path / "new", stream=True, checkpoint=old, mode="overwrite"),
        f"checkpoint {old} is a run's output directory (its _manifest.json says so), and only a run's "
        "output replaces it: give another --checkpoint",
    )


def test_an_output_that_is_a_streams_checkpoint_is_refused_and_kept(tmp_path: Path) -> None:
    checkpoint = tmp_path / "ck"
    fake_run(_request(tmp_path / "first", stream=True, checkpoint=checkpoint), "first")
    assert json.loads((checkpoint / "_manifest.json").read_text())["role"] == "checkpoint"
    _refused_and_kept(
        checkpoint,
        _request(checkpoint, mode="overwrite"),
        f"output {checkpoint} is a run's checkpoint directory (its _manifest.json says so), and only a run's "
        "checkpoint replaces it: give another --output",
    )


def test_a_report_dir_is_overwritten_as_a_report_dir(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    fake_run(_request(tmp_path / "out", report_dir=reports), "first")
    assert json.loads((reports / "_manifest.json").read_text())["role"] == "report-dir"
    fake_run(_request(tmp_path / "out", report_dir=reports, mode="overwrite"), "second")
    assert {name: (reports / name).read_text() for name in ("plan.json", "report.html", "summary.json")} == {
        "plan.json": "second", "report.html": "second", "summary.json": "second"
    }


def test_the_cli_refuses_an_older_output_as_report_dir_in_one_line(tmp_path: Path) -> None:
    generate(GenerateConfig(events=200, types=3, files=1), tmp_path / "data")
    old = _old_output(tmp_path)
    before = tree(old)
    _cli_refused(tmp_path, ["--input", "data", "--out", "new", "--report-dir", "old", "--mode", "overwrite"], (
        "report-dir old is a run's output directory (its _manifest.json says so), and only "
        "a run's output replaces it: give another --report-dir"
    ))
    assert tree(old) == before


@pytest.mark.parametrize("field", ["input", "output", "report_dir", "plan_from"])
def test_a_file_uri_with_a_user_is_refused_in_every_location_field_its_password_masked(field: str) -> None:
    fields: dict[str, object] = {"input": "data", "output": "out", field: "file://u:PW@/x"}
    with pytest.raises(ValueError) as caught:
        RunRequest(**fields)  # type: ignore[arg-type]
    label = field.replace("_", "-")
    assert str(caught.value) == f"{label}: a file: URI names a local path, got the host '***@' in file://***@/x"


def test_the_cli_refuses_a_report_dir_file_uri_with_a_password_and_creates_nothing(tmp_path: Path) -> None:
    generate(GenerateConfig(events=200, types=3, files=1), tmp_path / "data")
    _cli_refused(tmp_path, ["--input", "data", "--out", "out", "--report-dir", f"file://u:PW@{tmp_path}/r"], (
        f"report-dir: a file: URI names a local path, got the host '***@' in file://***@{tmp_path}/r"
    ))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]  # no ./file:/u:PW@/…


@pytest.mark.parametrize(
    ("args", "flag"),
    [(["pipeline", "generate", "--out"], "--out/--output"), (["shedding", "compare", "--out"], "--out")],
)
def test_a_local_path_flag_refuses_a_uri_its_password_masked(tmp_path: Path, args: list[str], flag: str) -> None:
    result = subprocess.run([EXE, *args, "file://u:PW@/x"], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines()[-1] == (
        f"rebalancer {' '.join(args[:2])}: error: argument {flag}: takes a local path, got the URI 'file://***@/x'"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"report_dir": "out/metrics"}, "report-dir {t}/out/metrics is inside the output {t}/out"),
        ({"report_dir": "out/x/y"}, "report-dir {t}/out/x/y is inside the output {t}/out"),
        ({"report_dir": "."}, "output {t}/out is inside the report-dir {t}"),
        ({"stream": True, "checkpoint": "out/x"}, "checkpoint {t}/out/x is inside the output {t}/out"),
        ({"stream": True, "checkpoint": "."}, "output {t}/out is inside the checkpoint {t}"),
        ({"stream": True, "checkpoint": "r/ck", "report_dir": "r"}, "checkpoint {t}/r/ck is inside the report-dir {t}/r"),
    ],
)
def test_nested_run_directories_are_refused_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fields: dict[str, object], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    located = {k: tmp_path / v if isinstance(v, str) else v for k, v in fields.items()}
    with pytest.raises(ValueError) as caught:
        fake_run(_request(tmp_path / "out", **located), "run")
    flag = message.split()[0]
    assert str(caught.value) == (
        message.format(t=tmp_path) + ": a run's directories (output, report-dir, checkpoint) must be apart: "
        f"give another --{flag}"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written, nothing staged


@pytest.mark.parametrize("other", ["out", "reports"])
def test_a_checkpoint_that_is_another_run_directory_is_refused(tmp_path: Path, other: str) -> None:
    out, reports = tmp_path / "out", tmp_path / "reports"
    with pytest.raises(ValueError) as caught:
        fake_run(_request(out, report_dir=reports, stream=True, checkpoint=tmp_path / other), "run")
    field = {"out": "output", "reports": "report-dir"}[other]
    assert str(caught.value) == (
        f"checkpoint {tmp_path / other} is the {field} too: a run's directories (output, report-dir, checkpoint) "
        "must be apart: give another --checkpoint"
    )
    assert list(tmp_path.iterdir()) == []


def test_the_cli_refuses_a_report_dir_inside_the_output_before_spark(tmp_path: Path) -> None:
    generate(GenerateConfig(events=200, types=3, files=1), tmp_path / "data")
    _cli_refused(tmp_path, ["--input", "data", "--out", "out", "--report-dir", "out/metrics"], (
        "report-dir out/metrics is inside the output out: a run's directories (output, "
        "report-dir, checkpoint) must be apart: give another --report-dir"
    ))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


@pytest.mark.parametrize("report_dir", ["data", "data/reports", "."])
def test_the_cli_refuses_a_report_dir_overlapping_the_input(tmp_path: Path, report_dir: str) -> None:
    generate(GenerateConfig(events=200, types=3, files=1), tmp_path / "data")
    before = tree(tmp_path / "data")
    _cli_refused(tmp_path, ["--input", "data", "--out", "out", "--report-dir", report_dir], f"report-dir {report_dir} overlaps the input data")
    assert tree(tmp_path / "data") == before and sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_the_library_checks_a_report_dir_against_the_input(tmp_path: Path) -> None:
    from rebalancer.pipeline.ingest.inspect import inspect_input
    from rebalancer.pipeline.outputs.check import check_output_location

    generate(GenerateConfig(events=200, types=3, files=1), tmp_path / "data")
    spec = inspect_input(tmp_path / "data")
    with pytest.raises(ValueError) as caught:
        check_output_location(tmp_path / "out", spec, report_dir=tmp_path / "data" / "r")
    assert str(caught.value) == f"report-dir {tmp_path / 'data' / 'r'} overlaps the input {tmp_path / 'data'}"
    check_output_location(tmp_path / "out", spec, report_dir=tmp_path / "reports")  # apart: fine


@pytest.mark.spark
@pytest.mark.parametrize("where", ["data", "data/store", "data/date=1"])
def test_balanced_apply_refuses_a_store_in_the_directory_it_reads(spark, tmp_path: Path, where: str) -> None:
    import pandas as pd

    from rebalancer.pipeline import balanced_apply

    data = tmp_path / "data"
    spark.createDataFrame([(1, "a"), (2, "b")], "date int, key string").write.partitionBy("date").parquet(str(data))
    before = tree(data)
    frame = spark.read.parquet(str(data))
    with pytest.raises(ValueError) as caught:
        balanced_apply(frame, "key", lambda p: pd.DataFrame({"n": [len(p)]}), "n long", partitions=2, store=tmp_path / where)
    assert str(caught.value) == (
        f"store {tmp_path / where} is in the input directory {data} that the frame reads: its plan.json would be "
        "read as data: give a store outside it"
    )
    assert tree(data) == before
    done = balanced_apply(frame, "key", lambda p: pd.DataFrame({"n": [len(p)]}), "n long", partitions=2, store=tmp_path / "s")
    assert sorted(done.frame.toPandas()["n"]) == [1, 1] and (tmp_path / "s" / "plan.json").exists()


def tree_empty() -> str:
    """sha256 of no bytes: an empty file in a `tree`."""
    import hashlib

    return hashlib.sha256(b"").hexdigest()


def _group_output(out: Path, summary: dict[str, object]) -> dict[str, str]:
    """A Kafka group run's (or a stream's) output: batch_id=0, and the summary naming its source."""
    (out / "metrics" / "batch_id=0").mkdir(parents=True)
    (out / "metrics" / "batch_id=0" / "part-0.parquet").write_text("theirs")
    (out / "summary.json").write_text(json.dumps(summary))
    entries = ["metrics", "summary.json"]
    (out / "_manifest.json").write_text(json.dumps({"version": 1, "run": "t0", "entries": entries, "role": "output"}))
    return tree(out)


def _group(group: str, topic: str | None = "t") -> dict[str, object]:
    named = {"group": group, "batch_id": 0, "start": {"0": 0}, "end": {"0": 5}}
    return {"kafka_group": {**named, "topic": topic} if topic is not None else named}


@pytest.mark.parametrize(
    ("theirs", "url", "shown"),
    [
        (_group("g1"), "kafka://embedded/t?group=g2", "group 'g1' on topic 't'"),
        (_group("g1"), "kafka://embedded/u?group=g1", "group 'g1' on topic 't'"),
        (_group("g1", topic=None), "kafka://embedded/t?group=g2", "group 'g1'"),  # a summary from before topics
        ({"batches": 3}, "kafka://embedded/t?group=g2", "a stream"),
    ],
)
def test_a_group_run_never_appends_over_another_sources_batches(
    tmp_path: Path, theirs: dict[str, object], url: str, shown: str
) -> None:
    out = tmp_path / "out"
    before = _group_output(out, theirs)
    ours = url.removeprefix("kafka://embedded/").split("?group=")
    with pytest.raises(ValueError) as caught:
        RunRequest(input=url, output=out, mode="append").check_output()
    assert str(caught.value) == (
        f"output {out} holds the batches of {shown}; --mode append would number this run's (group {ours[1]!r} on "
        f"topic {ours[0]!r}) over them: give another --output, or --mode overwrite"
    )
    RunRequest(input=url, output=out, mode="overwrite").check_output()  # replaces them: fine
    assert tree(out) == before


@pytest.mark.parametrize("topic", ["t", None])
def test_a_group_run_appends_to_its_own_groups_batches(tmp_path: Path, topic: str | None) -> None:
    out = tmp_path / "out"
    _group_output(out, _group("g1", topic))
    RunRequest(input="kafka://embedded/t?group=g1", output=out, mode="append").check_output()


def test_the_cli_refuses_another_groups_append_before_spark(tmp_path: Path) -> None:
    before = _group_output(tmp_path / "out", _group("g1"))
    _cli_refused(tmp_path, ["--input", "kafka://embedded/t?group=g2", "--out", "out", "--mode", "append"], (
        "output out holds the batches of group 'g1' on topic 't'; --mode append would number "
        "this run's (group 'g2' on topic 't') over them: give another --output, or --mode overwrite"
    ))
    after = tree(tmp_path / "out")
    assert after.pop("_kafka_group.lock") == tree_empty() and after == before  # the claim's file, kept by design


# The second attack: a directory with no manifest and no run's summary.json was cleared by overwrite
# (a user's quarantine/precious.csv, _plans/ and report.html), as if a run from before manifests were there.
def test_a_users_files_where_no_run_is_are_refused_in_overwrite_and_kept(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    (mine / "quarantine").mkdir(parents=True)
    (mine / "quarantine" / "precious.csv").write_text("MINE")
    (mine / "_plans").mkdir()
    (mine / "_plans" / "x").write_text("MINE")
    before = tree(mine)
    with pytest.raises(ValueError) as caught:
        fake_run(_request(mine, mode="overwrite"), "new")
    assert str(caught.value) == (
        f"output {mine} holds quarantine, which this run writes but no run of this pipeline wrote (it has no "
        "_manifest.json and the name is not a run's): move it away or give another --output"
    )
    assert tree(mine) == before


def test_a_users_report_where_no_run_is_stays_beside_a_run_that_writes_none(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.html").write_text("MINE")
    fake_run(_request(mine, mode="overwrite", report=False), "new")
    assert (mine / "report.html").read_text() == "MINE"
    assert "report.html" not in json.loads((mine / "_manifest.json").read_text())["entries"]


def test_a_users_plan_in_a_report_dir_where_no_run_is_is_refused_and_kept(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "plan.json").write_text("MINE")
    with pytest.raises(ValueError) as caught:
        fake_run(_request(tmp_path / "out", report_dir=reports, mode="overwrite"), "new")
    assert str(caught.value) == (
        f"report-dir {reports} holds plan.json, which this run writes but no run of this pipeline wrote (it has "
        "no _manifest.json and the name is not a run's): move it away or give another --report-dir"
    )
    assert (reports / "plan.json").read_text() == "MINE" and sorted(p.name for p in reports.iterdir()) == ["plan.json"]


# The second attack: a --report-dir old/metrics (or an --output old/metrics/x) was accepted: plan.json
# among old's Parquet files broke every read of them.
@pytest.mark.parametrize(("field", "where"), [("report_dir", "old/metrics"), ("output", "old/metrics/x"),
                                              ("report_dir", "old/quarantine/deeper/r")])
def test_a_run_never_writes_inside_another_runs_directory(tmp_path: Path, field: str, where: str) -> None:
    old = _old_output(tmp_path)
    before = tree(old)
    fields = {"output": tmp_path / "new", field: tmp_path / where}
    request = RunRequest(input="data", mode="overwrite", **fields)  # type: ignore[arg-type]
    with pytest.raises(ValueError) as caught:
        fake_run(request, "new")
    flag = field.replace("_", "-")
    assert str(caught.value) == (
        f"{flag} {tmp_path / where} is inside {old.resolve()}, a run's output (its _manifest.json says so): a run "
        f"never writes in another run's directory: give another --{flag}"
    )
    assert tree(old) == before


UNWRITABLE = Path("/proc/self")  # a directory nobody may create entries in, root included


@pytest.mark.skipif(not UNWRITABLE.is_dir(), reason="needs Linux's /proc")
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--report-dir", "/proc/self"], "report-dir /proc/self is not writable"),
        (["--report-dir", "/proc/self/reports"], "report-dir: cannot create /proc/self/reports: /proc/self is not writable"),
        (["--output", "/proc/self"], "output /proc/self is not writable"),
        (["--output", "/proc/self/out"], "output: cannot create /proc/self/out: /proc/self is not writable"),
        (["--stream", "--checkpoint", "/proc/self/cp"], "checkpoint: cannot create /proc/self/cp: /proc/self is not writable"),
    ],
)
def test_an_unwritable_location_is_refused_before_spark_starts(tmp_path: Path, flags: list[str], message: str) -> None:
    """Finding: `--report-dir /proc/self` failed only after Spark had started (and the run was done).
    Each local location a run writes is checked first, naming the flag and the value; nothing is
    created to check it, so a refused run leaves nothing (no output, no spark.log)."""
    generate(GenerateConfig(events=200, types=3, files=1), tmp_path / "data")
    args = ["--output", "out", *flags] if flags[0] != "--output" else flags
    _cli_refused(tmp_path, ["--input", "data", "--partitions", "2", *args], message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


@pytest.mark.skipif(not UNWRITABLE.is_dir(), reason="needs Linux's /proc")
def test_the_library_refuses_an_unwritable_location_before_the_run(tmp_path: Path) -> None:
    """`run()` checks through `check_output_location`, the CLI's check: the same words, before any work."""
    from rebalancer.pipeline.ingest.inspect import inspect_input
    from rebalancer.pipeline.outputs.check import check_output_location

    generate(GenerateConfig(events=200, types=3, files=1), tmp_path / "data")
    spec = inspect_input(tmp_path / "data")
    with pytest.raises(ValueError) as refused:
        check_output_location(tmp_path / "out", spec, report_dir=UNWRITABLE / "r")
    assert str(refused.value) == "report-dir: cannot create /proc/self/r: /proc/self is not writable"
    with pytest.raises(ValueError) as refused:
        check_output_location(tmp_path / "out", spec, tmp_path / "cp", report_dir=None)
        check_output_location(UNWRITABLE, spec)
    assert str(refused.value) == "output /proc/self is not writable"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]
