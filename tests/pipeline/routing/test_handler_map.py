"""The handler map: first match wins, the default, unhandled types counted, per-handler outputs, bad files."""

from __future__ import annotations

import json
import textwrap

import pandas as pd
import pytest
from pipeline_data import good_frame

from rebalancer.cli import main
from rebalancer.pipeline import Pipeline
from rebalancer.pipeline.routing.handler_map import load_handlers


def _noop(frame: pd.DataFrame) -> pd.DataFrame:
    return frame


def test_first_registered_match_wins_then_the_default_then_unhandled():
    pipeline = Pipeline()
    pipeline.handler("http.latency", schema="n long")(_noop)
    pipeline.handler("http.*", schema="n long", name="http")(_noop)
    pipeline.handler(("errors.*", "panic"), schema="n long", name="errors")(_noop)
    types = ["http.latency", "http.status", "errors.db", "panic", "cpu", "http"]
    routed, unhandled = pipeline.route(types)
    assert routed == {"_noop": ["http.latency"], "http": ["http.status"], "errors": ["errors.db", "panic"]}
    assert unhandled == ["cpu", "http"]  # no default: counted, never dropped
    pipeline.default("metrics")
    routed, unhandled = pipeline.route(types)
    assert routed["metrics"] == ["cpu", "http"] and unhandled == []
    pipeline.default("http")  # a registered handler may be the default
    assert pipeline.route(["cpu"]) == ({"http": ["cpu"]}, [])


@pytest.mark.parametrize(
    ("register", "message"),
    [
        (lambda p: p.handler("a", schema="n long", name="metrics")(_noop), "is taken by the run's own outputs"),
        (lambda p: p.handler("a", schema="n long", name="quarantine")(_noop), "is taken by the run's own outputs"),
        (lambda p: p.handler("a", schema="n long", name="a/b")(_noop), "handler name must be letters"),
        (lambda p: p.handler("", schema="n long")(_noop), "pattern must be a non-empty string"),
        (lambda p: p.handler("a", schema="")(_noop), "schema must be a DDL string"),
        (lambda p: p.handler("a", schema="n long", split_by="host")(_noop), "split_by must be one of ts, type"),
        (lambda p: p.default("nothing"), "default must be 'metrics', a registered handler's name or None"),
    ],
)
def test_bad_registrations_raise_value_errors_naming_the_field(register, message):
    with pytest.raises(ValueError, match=message):
        register(Pipeline())


def test_a_name_registered_twice_is_refused():
    pipeline = Pipeline()
    pipeline.handler("a", schema="n long")(_noop)
    with pytest.raises(ValueError, match="handler name '_noop' is registered twice"):
        pipeline.handler("b", schema="n long")(_noop)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (None, "handlers: no such file"),
        ("x = 1\n", "defines no rebalancer.pipeline.Pipeline"),
        ("import no_such_module_here\n", "failed to import: ModuleNotFoundError"),
        (
            "from rebalancer.pipeline import Pipeline\na = Pipeline()\nb = Pipeline()\n",
            "defines 2 Pipelines; keep one",
        ),
    ],
)
def test_a_bad_handlers_file_exits_2_with_one_line(tmp_path, capsys, source, message):
    path = tmp_path / "handlers.py"
    if source is not None:
        path.write_text(source)
    with pytest.raises(ValueError, match=message):
        load_handlers(path)
    out = tmp_path / "out"
    assert main(["pipeline", "run", "--input", str(tmp_path), "--output", str(out), "--handlers", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()


HANDLERS = '''
import pandas as pd
from rebalancer.pipeline import Pipeline

pipeline = Pipeline()

@pipeline.handler("metric_0000", schema="type string, entity string, minute timestamp, n long, total double",
                  split_by="entity")
def top(frame):
    out = frame.groupby(["type", "entity", "minute"], as_index=False).agg(n=("value", "size"), total=("value", "sum"))
    return out[["type", "entity", "minute", "n", "total"]]

@pipeline.handler("metric_000*", schema="type string, n long")
def rest(frame):
    return pd.DataFrame({"type": [frame["type"].iloc[0]], "n": [len(frame)]})
'''


def _write_input(tmp_path, events: int = 3000):
    good = good_frame(events=events, seed=7)
    source = tmp_path / "input"
    source.mkdir()
    good.astype({"value": "float64"}).to_csv(source / "good.csv", index=False)
    return source, good


@pytest.mark.spark
def test_a_run_with_handlers_writes_each_handlers_output_and_counts_the_unhandled(spark, tmp_path, capsys):
    source, good = _write_input(tmp_path)
    handlers = tmp_path / "handlers.py"
    handlers.write_text(textwrap.dedent(HANDLERS))
    out = tmp_path / "out"
    argv = ["pipeline", "run", "--input", str(source), "--output", str(out), "--partitions", "3"]
    assert main([*argv, "--handlers", str(handlers), "--no-report"]) == 0
    printed = capsys.readouterr().out
    assert "top: 1 types" in printed and "unhandled: " in printed

    summary = json.loads((out / "summary.json").read_text())
    per_type = good["type"].value_counts().to_dict()
    unhandled = {t: n for t, n in per_type.items() if not t.startswith("metric_000")}
    assert unhandled  # the data has types no pattern matches (metric_0010, metric_0011)
    assert summary["unhandled_types"] == dict(sorted(unhandled.items(), key=lambda kv: (-kv[1], kv[0])))
    assert summary["accepted"] == len(good) == summary["handled"] + summary["unhandled"]
    assert set(summary["handlers"]) == {"top", "rest"}  # no default: the built-in ran nothing
    top = summary["handlers"]["top"]
    assert top["types"] == 1 and top["rows"] == per_type["metric_0000"]
    assert top["split_types"] == ["metric_0000"] and sum(top["task_rows"]) == per_type["metric_0000"]
    assert top["calls"] > 1  # a split type: one call per shard

    # First match wins: metric_0000 went to `top` only; `rest` got the other metric_000* types, once each.
    written = pd.read_parquet(out / "top")
    assert set(written["type"]) == {"metric_0000"} and written["n"].sum() == per_type["metric_0000"]
    assert not written.duplicated(["entity", "minute"]).any()  # split-safe by entity: no partial rows
    assert sorted(p.name for p in (out / "top").iterdir() if p.is_dir()) == ["date=2026-01-01"]
    rest = pd.read_parquet(out / "rest").set_index("type")["n"].to_dict()
    assert rest == {t: n for t, n in per_type.items() if t.startswith("metric_000") and t != "metric_0000"}

    # Re-running is idempotent, and with a default the unhandled types go to the built-in metrics.
    # The output as a file: URI this time: the plan stores are still kept, on its local path.
    handlers.write_text(textwrap.dedent(HANDLERS) + '\npipeline.default("metrics")\n')
    as_uri = [out.as_uri() if arg == str(out) else arg for arg in argv]
    # --mode append: the rerun adds to the first run's output, whose plan stores hold the seconds measured.
    assert main([*as_uri, "--handlers", str(handlers), "--cost", "seconds", "--mode", "append"]) == 0
    stored = json.loads((out / "_plans" / "top" / "plan.json").read_text())
    assert stored["cost"] == "seconds" and sum(row["rows"] for row in stored["measured"]) == per_type["metric_0000"]
    again = json.loads((out / "summary.json").read_text())
    report = (out / "report.html").read_text()
    assert "<h2>Handlers</h2>" in report and "<td>top</td>" in report and "Every accepted row went to a handler" in report
    assert again["unhandled"] == 0 and again["handlers"]["metrics"]["rows"] == sum(unhandled.values())
    assert pd.read_parquet(out / "top")["n"].sum() == per_type["metric_0000"]
    assert pd.read_parquet(out / "metrics")["count"].sum() == sum(unhandled.values())


@pytest.mark.spark
def test_a_handler_whose_output_does_not_match_its_schema_exits_2(spark, tmp_path, capsys):
    source, _ = _write_input(tmp_path, events=300)
    handlers = tmp_path / "handlers.py"
    handlers.write_text(
        textwrap.dedent(
            """
            import pandas as pd
            from rebalancer.pipeline import Pipeline
            pipeline = Pipeline()

            @pipeline.handler("*", schema="type string, n long")
            def wrong(frame):
                return pd.DataFrame({"kind": [frame["type"].iloc[0]], "n": [len(frame)]})
            """
        )
    )
    argv = ["pipeline", "run", "--input", str(source), "--output", str(tmp_path / "out"), "--partitions", "2"]
    assert main([*argv, "--handlers", str(handlers), "--no-report"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: handler 'wrong' failed") or "handler 'wrong' failed" in err, err
    assert "kind" in err  # Spark's own reason: the column it did not expect


@pytest.mark.spark
def test_a_stream_run_takes_handlers_and_writes_them_per_batch(spark, tmp_path):
    from rebalancer.pipeline.generate import write_frame
    from rebalancer.pipeline.ingest.inspect import inspect_input
    from rebalancer.pipeline.stream.driver import run_stream
    from rebalancer.pipeline.stream.state import StreamConfig

    good = good_frame(events=1200, seed=5)
    source = tmp_path / "input"
    write_frame(good, source, "parquet", 2)
    module = tmp_path / "handlers.py"
    module.write_text(textwrap.dedent(HANDLERS))
    pipeline = load_handlers(module)
    out = tmp_path / "out"
    summary = run_stream(
        spark,
        inspect_input(source),
        out,
        StreamConfig(partitions=2, available_now=True),
        handlers=pipeline,
    )
    per_type = good["type"].value_counts().to_dict()
    assert summary["batches"] == 2
    assert sorted(p.name for p in (out / "top").iterdir()) == ["batch_id=0", "batch_id=1"]
    assert pd.read_parquet(out / "top")["n"].sum() == per_type["metric_0000"]
    assert summary["accepted"] == summary["handled"] + summary["unhandled"] == len(good)
    assert summary["unhandled_types"] == {
        t: n for t, n in per_type.items() if not t.startswith("metric_000")
    }
    assert summary["handlers"]["top"]["rows"] == per_type["metric_0000"]


@pytest.mark.spark
@pytest.mark.postgres
def test_each_handler_gets_its_own_table_in_the_database_sink(spark, tmp_path, postgres, pg_schema, pg_connect):
    from rebalancer.pipeline.batch import run_batch
    from rebalancer.pipeline.ingest.inspect import inspect_input
    from rebalancer.pipeline.sinks import open_sink, prepare_sink

    source, good = _write_input(tmp_path, events=1500)
    module = tmp_path / "handlers.py"
    module.write_text(textwrap.dedent(HANDLERS))
    pipeline = load_handlers(module)
    sink = open_sink(postgres.url, pg_schema)
    prepare_sink(sink, spark, handlers=pipeline)
    out = tmp_path / "out"
    for _ in range(2):  # a re-run upserts the same rows: nothing doubles
        summary = run_batch(spark, inspect_input(source), out, partitions=2, report=False, sink=sink, handlers=pipeline)
    per_type = good["type"].value_counts().to_dict()
    keys = {
        table: [r[0] for r in pg_connect.execute(
            "SELECT a.attname FROM pg_index i JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(n, o) ON true "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n "
            "WHERE i.indrelid = %s::regclass AND i.indisprimary ORDER BY k.o",
            (f"{pg_schema}.{table}",),
        ).fetchall()]
        for table in ("top", "rest")
    }
    assert keys == {"top": ["type", "entity", "minute", "date"], "rest": ["type"]}
    top_rows = pg_connect.execute(f"SELECT count(*), sum(n) FROM {pg_schema}.top").fetchone()
    assert top_rows == (len(pd.read_parquet(out / "top")), per_type["metric_0000"])
    rest = dict(pg_connect.execute(f"SELECT type, n FROM {pg_schema}.rest").fetchall())
    assert rest == {t: n for t, n in per_type.items() if t.startswith("metric_000") and t != "metric_0000"}
    assert summary["sink"]["tables"]["top"]["rows"] == top_rows[0]
