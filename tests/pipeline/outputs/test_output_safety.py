"""Overwrite safety with Spark, on the library path (`run(RunRequest(...))`) and the CLI's: issue 42's
cases 1 to 3 as they were reported, and the same mistakes found elsewhere.

1. `run()` deleted its own input (inside the output) before the check that refuses it ran.
2. `--checkpoint DIR --mode overwrite` cleared a directory that held no checkpoint.
3. Overwrite deleted `out/shedding/` (written by `rebalancer shedding compare`), never the pipeline's.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from output_safety_runs import tree

from rebalancer.pipeline import RunRequest, run
from rebalancer.pipeline.generate import GenerateConfig, generate

EXE = str(Path(sys.executable).with_name("rebalancer"))
BATCH_ENTRIES = ["metrics", "quarantine", "plan.json", "report.html", "summary.json"]
_groups = itertools.count()


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, *args], capture_output=True, text=True, cwd=cwd, timeout=600)


def _manifest(where: Path) -> list[str]:
    return json.loads((where / "_manifest.json").read_text())["entries"]


@pytest.mark.spark
def test_run_refuses_an_input_inside_the_output_before_it_deletes_anything(
    spark, dataset: tuple[Path, pd.DataFrame], tmp_path: Path
) -> None:
    """The issue's reproducer: `out/raw`, the input, was gone when the refusal came."""
    data, _good = dataset
    out = tmp_path / "out"
    run(RunRequest(input=data, output=out, partitions=2, report=False), spark=spark)
    shutil.copytree(data, out / "raw")
    before = tree(out)
    with pytest.raises(ValueError) as caught:
        run(RunRequest(input=out / "raw", output=out, partitions=2, mode="overwrite"), spark=spark)
    assert str(caught.value) == f"input {out / 'raw'} is inside the output {out}; the run would overwrite what it reads"
    assert tree(out) == before
    # The CLI's path: the same refusal, in one line, before Spark starts.
    done = _cli("pipeline", "run", "--input", "out/raw", "--output", "out", "--mode", "overwrite", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.splitlines() == [
        "rebalancer: error: input out/raw is inside the output out; the run would overwrite what it reads"
    ], done.stderr
    assert tree(out) == before


@pytest.mark.spark
def test_a_stream_refuses_an_input_inside_its_checkpoint_before_it_deletes_anything(spark, tmp_path: Path) -> None:
    """The same mistake for the checkpoint: overwrite cleared a --checkpoint holding the input first."""
    checkpoint = tmp_path / "ck"
    (checkpoint / "rebalancer").mkdir(parents=True)
    (checkpoint / "rebalancer" / "state.json").write_text("{}")
    generate(GenerateConfig(events=300, types=4, files=2), checkpoint / "in")
    before = tree(checkpoint)
    request = RunRequest(
        input=checkpoint / "in", output=tmp_path / "out", partitions=2, stream=True, available_now=True,
        checkpoint=checkpoint, mode="overwrite",
    )
    with pytest.raises(ValueError) as caught:
        run(request, spark=spark)
    assert str(caught.value) == f"checkpoint {checkpoint} overlaps the input {checkpoint / 'in'}"
    assert tree(checkpoint) == before


@pytest.mark.spark
def test_a_checkpoint_that_holds_no_checkpoint_is_never_cleared(spark, tmp_path: Path) -> None:
    """The issue's `mkdir precious && echo x > precious/thesis.txt`, on both paths."""
    generate(GenerateConfig(events=300, types=4, files=2), tmp_path / "in")
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.txt").write_text("x\n")
    message = (
        f"checkpoint {precious} holds no stream's checkpoint (no query/metadata, no rebalancer/state.json): "
        "--checkpoint takes a new or empty directory, or one a stream wrote"
    )
    request = RunRequest(
        input=tmp_path / "in", output=tmp_path / "out", partitions=2, stream=True, available_now=True,
        checkpoint=precious, mode="overwrite",
    )
    with pytest.raises(ValueError) as caught:
        run(request, spark=spark)
    assert str(caught.value) == message
    done = _cli(
        "pipeline", "run", "--stream", "--available-now", "--input", "in", "--output", "out", "--checkpoint",
        "precious", "--mode", "overwrite", "--partitions", "2", cwd=tmp_path,
    )
    assert done.returncode == 2 and done.stderr.splitlines() == [
        f"rebalancer: error: {message.replace(str(precious), 'precious')}"
    ], done.stderr
    assert (precious / "thesis.txt").read_text() == "x\n" and sorted(p.name for p in precious.iterdir()) == ["thesis.txt"]
    assert not (tmp_path / "out").exists()


@pytest.mark.spark
@pytest.mark.timeout(900)
def test_overwrite_replaces_the_previous_run_and_nothing_else(
    spark, dataset: tuple[Path, pd.DataFrame], tmp_path: Path
) -> None:
    """`rebalancer shedding compare --out out/shedding`, then `make run` twice: the plots stay."""
    data, good = dataset
    out = tmp_path / "out"
    first = run(RunRequest(input=data, output=out, partitions=2), spark=spark)
    (out / "shedding").mkdir()
    for name in ("avgshedder.png", "thresholdshedder.png"):
        (out / "shedding" / name).write_bytes(b"\x89PNG " + name.encode())
    plots = tree(out / "shedding")
    for _ in range(2):
        again = run(RunRequest(input=data, output=out, partitions=2, mode="overwrite", compare_hash=True), spark=spark)
        assert tree(out / "shedding") == plots
        assert _manifest(out) == sorted(BATCH_ENTRIES)
        assert sorted(p.name for p in out.iterdir()) == sorted(["_manifest.json", *BATCH_ENTRIES, "shedding"])
        assert again.output == str(out) and again.accepted == first.accepted == len(good)
        assert json.loads((out / "summary.json").read_text())["output"] == str(out)  # not the staging directory
        assert int(pd.read_parquet(out / "metrics")["count"].sum()) == len(good)


@pytest.mark.spark
@pytest.mark.timeout(900)
def test_a_stream_overwrite_swaps_its_checkpoint_in_and_resumes_from_it(spark, tmp_path: Path) -> None:
    """A --checkpoint outside the output, with a user's file in it, and a report-dir with notes: only
    the runs' entries move; the checkpoint swapped in is where the next `--mode append` resumes."""
    source = tmp_path / "source"
    generate(GenerateConfig(events=600, types=5, files=3), source)
    inputs = tmp_path / "in"
    inputs.mkdir()
    for name in ("part-00000.parquet", "part-00001.parquet"):
        shutil.copy(source / name, inputs / name)
    out, checkpoint, reports = tmp_path / "out", tmp_path / "ck", tmp_path / "reports"

    def stream(mode: str) -> dict:
        request = RunRequest(
            input=inputs, output=out, partitions=2, stream=True, available_now=True, checkpoint=checkpoint,
            report_dir=reports, mode=mode,
        )
        return run(request, spark=spark).to_json()

    stream("error")
    (checkpoint / "thesis.txt").write_text("x")
    reports.joinpath("notes.txt").write_text("mine")
    replaced = stream("overwrite")  # afresh: both files again, one batch each
    assert (replaced["batches"], replaced["last_batch_id"]) == (2, 1)
    assert (checkpoint / "thesis.txt").read_text() == "x" and (reports / "notes.txt").read_text() == "mine"
    assert _manifest(checkpoint) == ["query", "rebalancer"]
    assert _manifest(reports) == ["plan.json", "summary.json"] and _manifest(out) == ["metrics", "quarantine"]
    assert not [p for p in (out, checkpoint, reports) for name in p.iterdir() if name.name.startswith(".rebalancer")]
    shutil.copy(source / "part-00002.parquet", inputs / "part-00002.parquet")
    resumed = stream("append")
    assert (resumed["batches"], resumed["last_batch_id"]) == (3, 2)  # only the new file, from the moved checkpoint
    metrics = pd.read_parquet(out / "metrics")
    assert sorted(metrics["batch_id"].astype(int).unique()) == [0, 1, 2]
    assert int(metrics["count"].sum()) == resumed["accepted"]


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.timeout(900)
def test_a_group_run_in_overwrite_mode_is_in_place_before_its_offsets_are_committed(
    spark, kafka_cluster, kafka_topic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A staged group run is swapped in first: stopped before the commit, the next run reads the
    same records and rewrites the same batch; the output never holds a batch the group is past."""
    from rebalancer.pipeline import batch
    from rebalancer.pipeline.generate import make_frame
    from rebalancer.pipeline.kafka.telemetry import encode_events, produce_events

    bootstrap, topic = kafka_cluster.bootstrap_servers, kafka_topic(2)
    frame = make_frame(GenerateConfig(events=2_000, types=6, entities=4, bad_rate=0.01, format="jsonl", seed=7))
    produce_events(bootstrap, topic, *encode_events(frame))
    url = f"kafka://{bootstrap}/{topic}?group=safety-{next(_groups)}"
    out = tmp_path / "out"
    (out / "shedding").mkdir(parents=True)
    (out / "shedding" / "plot.png").write_bytes(b"png")
    seen: list[list[str]] = []

    def stopped() -> None:
        seen.append(sorted(p.name for p in out.iterdir()))
        raise KeyboardInterrupt("stopped between the swap and the offset commit")

    monkeypatch.setattr(batch, "before_offset_commit", stopped)
    with pytest.raises(KeyboardInterrupt):
        run(RunRequest(input=url, output=out, partitions=2, report=False, mode="overwrite"), spark=spark)
    # The group claim (_kafka_group.lock) is held on the output itself while the run commits.
    assert seen == [["_kafka_group.lock", "_manifest.json", "metrics", "plan.json", "quarantine", "shedding", "summary.json"]]
    monkeypatch.setattr(batch, "before_offset_commit", None)
    rerun = run(RunRequest(input=url, output=out, partitions=2, report=False, mode="append"), spark=spark)
    assert rerun.details["kafka_group"]["batch_id"] == 0 and rerun.ingested == 2_000  # the same batch, rewritten
    metrics = pd.read_parquet(out / "metrics")
    assert sorted(metrics["batch_id"].astype(int).unique()) == [0]
    assert int(metrics["count"].sum()) == rerun.accepted
    assert (out / "shedding" / "plot.png").read_bytes() == b"png"


@pytest.mark.spark
@pytest.mark.timeout(900)
def test_a_remote_output_is_staged_and_swapped_through_hadoop(
    spark, dataset: tuple[Path, pd.DataFrame], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `file:` counted as remote, the staging, the swap and its undoing go through Spark's Hadoop
    FileSystem (whose local filesystem leaves a `.crc` beside each file it writes; Python's I/O does not)."""
    import rebalancer.pipeline.outputs.swap as _output_swap
    from rebalancer.pipeline import paths

    monkeypatch.setattr(paths, "LOCAL_SCHEMES", frozenset())
    data, good = dataset
    out = tmp_path / "out"
    uri = f"file://{out}"
    run(RunRequest(input=data, output=uri, partitions=2, report=False), spark=spark)
    assert (out / "._manifest.json.crc").exists() and _manifest(out) == ["metrics", "plan.json", "quarantine", "summary.json"]
    (out / "shedding").mkdir()
    (out / "shedding" / "plot.png").write_bytes(b"png")
    previous = tree(out)

    def stopped(point: str) -> None:
        if point == "swap":
            raise KeyboardInterrupt

    monkeypatch.setattr(_output_swap, "hold", stopped)
    with pytest.raises(KeyboardInterrupt):
        run(RunRequest(input=data, output=uri, partitions=2, mode="overwrite"), spark=spark)
    assert tree(out) == previous  # moved back through Hadoop, staging removed
    monkeypatch.setattr(_output_swap, "hold", None)
    replaced = run(RunRequest(input=data, output=uri, partitions=2, mode="overwrite"), spark=spark)
    assert replaced.output == uri and _manifest(out) == sorted(BATCH_ENTRIES)
    assert tree(out / "shedding") == {"plot.png": previous["shedding/plot.png"]}
    assert not [p.name for p in out.iterdir() if p.name.startswith(".rebalancer")]
    assert int(pd.read_parquet(out / "metrics")["count"].sum()) == len(good)
