"""Issue 42, D2's pattern in streams: a stream numbers its batches from its checkpoint, so a stream
with *another* checkpoint, or with its checkpoint removed, starts again at batch_id=0 and, appended
into an output holding a stream's batches, replaced them (seen: `--checkpoint c2 --mode append`
rewrote c1's batch_id=0 and 1). The output's manifest names the checkpoint that numbers its batches,
and an append from another, or from one holding no state, is refused before any work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from output_safety_runs import tree

from rebalancer.pipeline.generate import GenerateConfig, generate
from rebalancer.pipeline.outputs.fs import location_key
from rebalancer.pipeline.resolved import RunRequest
from rebalancer.pipeline.runner import run

EXE = str(Path(sys.executable).with_name("rebalancer"))


def checkpoint_with_state(where: Path) -> Path:
    """A checkpoint a stream wrote: Spark's query/metadata."""
    (where / "query").mkdir(parents=True)
    (where / "query" / "metadata").write_text('{"id":"q"}')
    return where


def stream_output(out: Path, batches: str | None) -> dict[str, str]:
    """A stream's output: batch_id=0, and a manifest naming whose batches they are (None: older, unnamed)."""
    (out / "metrics" / "batch_id=0").mkdir(parents=True)
    (out / "metrics" / "batch_id=0" / "part-0.parquet").write_text("theirs")
    (out / "summary.json").write_text(json.dumps({"batches": 1}))
    manifest: dict[str, object] = {"version": 1, "run": "t0", "entries": ["metrics", "summary.json"], "role": "output"}
    if batches is not None:
        manifest["batches"] = batches
    (out / "_manifest.json").write_text(json.dumps(manifest))
    return tree(out)


def stream(out: Path, checkpoint: Path | None = None, mode: str = "append") -> RunRequest:
    return RunRequest(input="data", output=out, stream=True, checkpoint=checkpoint, mode=mode)


def test_a_stream_never_appends_over_another_checkpoints_batches(tmp_path: Path) -> None:
    c1, c2 = checkpoint_with_state(tmp_path / "c1"), checkpoint_with_state(tmp_path / "c2")
    out = tmp_path / "out"
    before = stream_output(out, f"the stream checkpointed in {location_key(c1)}")
    with pytest.raises(ValueError) as caught:
        stream(out, c2).check_output()
    assert str(caught.value) == (
        f"output {out} holds the batches of the stream checkpointed in {c1}; --mode append would number "
        f"this run's (the stream checkpointed in {c2}) over them: give another --output, or --mode overwrite"
    )
    with pytest.raises(ValueError) as caught:
        stream(out).check_output()  # the output's own checkpoint is another one too
    assert "number this run's (the stream checkpointed in OUTPUT/_checkpoint) over them" in str(caught.value)
    stream(out, c1).check_output()  # its own checkpoint resumes
    stream(out, c2, mode="overwrite").check_output()  # overwrite starts afresh
    assert tree(out) == before


@pytest.mark.parametrize("recorded", ["the stream checkpointed in OUTPUT/_checkpoint", "a stream", None])
def test_a_stream_whose_checkpoint_holds_no_state_never_appends_over_batches(
    tmp_path: Path, recorded: str | None
) -> None:
    """The checkpoint removed (or never there): the stream would start again at batch_id=0. Older
    manifests ("a stream", or none) are refused alike."""
    out = tmp_path / "out"
    before = stream_output(out, recorded)
    with pytest.raises(ValueError) as caught:
        stream(out).check_output()
    assert str(caught.value) == (
        f"output {out} holds a stream's batches, and checkpoint {out / '_checkpoint'} holds no stream's state (no "
        "query/metadata, no rebalancer/state.json): this stream would start again at batch_id=0 and --mode "
        "append would write over them: give the checkpoint the stream wrote, another --output, or --mode overwrite"
    )
    assert tree(out) == before
    checkpoint_with_state(out / "_checkpoint")  # the stream's own state, listed as its run wrote it
    manifest = json.loads((out / "_manifest.json").read_text())
    (out / "_manifest.json").write_text(json.dumps({**manifest, "entries": [*manifest["entries"], "_checkpoint"]}))
    stream(out).check_output()  # with its state, it resumes


def test_the_cli_refuses_another_checkpoint_in_one_line_before_spark(tmp_path: Path) -> None:
    c1, c2 = checkpoint_with_state(tmp_path / "c1"), checkpoint_with_state(tmp_path / "c2")
    before = stream_output(tmp_path / "out", f"the stream checkpointed in {location_key(c1)}")
    generate(GenerateConfig(events=100, types=3, entities=2, format="parquet", seed=1, files=1), tmp_path / "data")
    args = [EXE, "pipeline", "run", "--stream", "--input", "data", "--output", "out", "--checkpoint", "c2",
            "--mode", "append"]  # fmt: skip
    result = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", (
        f"rebalancer: error: output out holds the batches of the stream checkpointed in {c1}; --mode append "
        f"would number this run's (the stream checkpointed in {c2}) over them: give another --output, or --mode "
        "overwrite\n"
    ))  # fmt: skip
    assert tree(tmp_path / "out") == before


@pytest.mark.spark
def test_a_real_streams_output_names_its_checkpoint_and_refuses_another(spark, tmp_path: Path) -> None:
    generate(GenerateConfig(events=600, types=6, entities=3, bad_rate=0.0, format="parquet", seed=3, files=2), tmp_path / "in")
    out, c1, c2 = tmp_path / "out", tmp_path / "c1", tmp_path / "c2"
    first = RunRequest(input=tmp_path / "in", output=out, stream=True, available_now=True, checkpoint=c1, partitions=2)
    run(first, spark=spark)
    assert json.loads((out / "_manifest.json").read_text())["batches"] == f"the stream checkpointed in {c1}"
    before = tree(out)
    with pytest.raises(ValueError) as caught:
        run(RunRequest(input=tmp_path / "in", output=out, stream=True, available_now=True, checkpoint=c2,
                       partitions=2, mode="append"), spark=spark)  # fmt: skip
    assert str(caught.value).startswith(f"output {out} holds the batches of the stream checkpointed in {c1};")
    assert tree(out) == before and not c2.exists()
