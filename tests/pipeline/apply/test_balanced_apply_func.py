"""Issue 42, items 25 to 27: balanced_apply takes the funcs applyInPandas takes, refuses the ones
it refuses, at the call, and keeps what the user needs to see when func fails.

- the iterator form (`Iterator[pd.DataFrame] -> Iterator[pd.DataFrame]`, with or without the key),
  decided by type hints as pyspark decides it, gets the rows in the batches applyInPandas gives;
- a func of another number of arguments is refused at the call (Spark's INVALID_PANDAS_UDF);
- an exception in func shows the user's file, line and function, and a value Arrow cannot convert
  keeps pyarrow's reason; the worker's logs from func are under func's name, as with applyInPandas.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import re
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from pyspark import cloudpickle

from rebalancer.pipeline import balanced_apply
from rebalancer.pipeline.apply import _call, _func

pytestmark = pytest.mark.spark
# Spark's Python workers cannot import this test module: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

BATCH_ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch"
BATCHES = "key string, dtypes string, n long, total double"
SCHEMA = "key string, n long"


def sorted_rows(df) -> list[tuple]:
    return sorted(tuple(row) for row in df.collect())


@pytest.fixture
def frame(spark):
    """Two keys of 7 and 2 rows; w has a null in a's first rows only, so its dtype differs by batch."""
    data = [("a" if i < 7 else "b", i if i != 1 else None, float(i)) for i in range(9)]
    return spark.createDataFrame(data, "key string, w int, v double")


# --- item 25: the iterator form -------------------------------------------------------------


def batches(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    for frame in frames:
        dtypes = ",".join(map(str, frame.dtypes))
        key = frame["key"].iloc[0]
        yield pd.DataFrame({"key": [key], "dtypes": [dtypes], "n": [len(frame)], "total": [frame["v"].sum()]})


def keyed_batches(key: tuple[Any, ...], frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    for out in batches(frames):
        yield out.assign(key=repr(key))


@pytest.mark.parametrize("func", [batches, keyed_batches])
@pytest.mark.parametrize("batch_rows", ["3", "10000"])
def test_the_iterator_form_gets_the_batches_applyinpandas_gives(frame, conf, func, batch_rows):
    conf(BATCH_ROWS, batch_rows)
    expected = sorted_rows(frame.groupBy("key").applyInPandas(func, BATCHES))
    got = sorted_rows(balanced_apply(frame, "key", func, BATCHES, partitions=2).frame)
    assert got == expected
    assert len(got) == (4 if batch_rows == "3" else 2)  # a: 3 + 3 + 1 rows, b: 2


def test_the_iterator_form_without_a_key_and_with_a_split_key(spark, frame, conf):
    conf(BATCH_ROWS, "2")
    expected = sorted_rows(frame.groupBy().applyInPandas(keyed_batches, BATCHES))
    assert sorted_rows(balanced_apply(frame, [], keyed_batches, BATCHES, partitions=2).frame) == expected

    def merge(parts: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame({"key": [parts["key"].iloc[0]], "n": [parts["n"].sum()]})

    def counts(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for part in frames:
            yield pd.DataFrame({"key": [part["key"].iloc[0]], "n": [len(part)]})

    hot = spark.createDataFrame([("hot", f"e{i % 6}") for i in range(60)] + [("cold", "e0")], "key string, e string")
    result = balanced_apply(hot, "key", counts, SCHEMA, partitions=3, split_by="e", combine=merge)
    assert result.plan.split == [("hot",)]
    assert sorted_rows(result.frame) == [("cold", 1), ("hot", 60)]


def partly_hinted(key, frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    yield from frames


def test_hints_that_cannot_be_read_warn_and_give_the_frame_form_as_applyinpandas(frame):
    with warnings.catch_warnings(record=True) as spark_warnings:
        warnings.simplefilter("always")
        spark_frame = frame.groupBy("key").applyInPandas(partly_hinted, "key string, w int, v double")
    with warnings.catch_warnings(record=True) as our_warnings:
        warnings.simplefilter("always")
        ours = balanced_apply(frame, "key", partly_hinted, "key string, w int, v double", partitions=2)
    assert [str(w.message) for w in our_warnings] == [str(w.message) for w in spark_warnings]
    assert str(our_warnings[0].message).startswith("Cannot infer the eval type from type hints: [TYPE_HINT_SHOULD_BE")
    for run in (spark_frame.collect, ours.frame.collect):  # both call it as a frame function
        with pytest.raises(Exception, match=r"\[UDF_RETURN_TYPE\] .* should be pandas\.DataFrame, but is generator"):
            run()


# --- item 26: the wrong number of arguments, refused at the call ----------------------------


def no_arguments() -> pd.DataFrame:
    return pd.DataFrame()


def three(key, frame, extra) -> pd.DataFrame:
    return frame


def only_varargs(*frames) -> pd.DataFrame:
    return frames[0]


def three_batches(key: Any, frames: Iterator[pd.DataFrame], extra: Any) -> Iterator[pd.DataFrame]:
    yield from frames


@pytest.mark.parametrize("func", [no_arguments, three, only_varargs, three_batches])
def test_a_func_of_the_wrong_number_of_arguments_is_refused_at_the_call(frame, monkeypatch, func):
    with pytest.raises(Exception) as spark_error:  # applyInPandas refuses it before any job
        frame.groupBy("key").applyInPandas(func, SCHEMA)
    detail = str(spark_error.value).strip().splitlines()[0]
    assert detail.startswith("[INVALID_PANDAS_UDF]"), detail
    monkeypatch.setattr(_call, "count_keys", None)  # refused before any job here too
    with pytest.raises(ValueError) as ours:
        balanced_apply(frame, "key", func, SCHEMA)
    assert str(ours.value) == f"func {_func.shown(func)}: {detail}"


def test_a_combine_that_cannot_take_one_argument_is_refused_at_the_call(frame, monkeypatch):
    def two(parts, extra):
        return parts

    monkeypatch.setattr(_call, "count_keys", None)
    with pytest.raises(ValueError) as refused:
        balanced_apply(frame, "key", no_arguments, SCHEMA, split_by="w", combine=two)
    # func is checked first: no_arguments is refused before combine is looked at
    assert str(refused.value).startswith(f"func {_func.shown(no_arguments)}: [INVALID_PANDAS_UDF]")
    with pytest.raises(ValueError) as refused:
        balanced_apply(frame, "key", batches, SCHEMA, split_by="w", combine=two)
    assert str(refused.value) == (
        "combine test_a_combine_that_cannot_take_one_argument_is_refused_at_the_call.<locals>.two(parts, extra) "
        "must take one argument (the partial rows of a split key)"
    )


def test_a_pipeline_handler_of_the_wrong_arguments_is_refused_when_registered():
    """The handler map runs each handler through balanced_apply: the same checks, at the decorator,
    not when a run gets to the handler."""
    from rebalancer.pipeline import Pipeline

    pipeline = Pipeline()
    with pytest.raises(ValueError) as refused:
        pipeline.handler("*", schema="type string, n long")(three)
    assert str(refused.value) == (
        f"handler {_func.shown(three)}: [INVALID_PANDAS_UDF] Invalid function: pandas_udfs with function type "
        "GROUPED_MAP or the function in groupby.applyInPandas must take either one argument (data) or two "
        "arguments (key, data)."
    )
    pattern = r"^combine .*\.two\(parts, extra\) must take one argument \(the partial rows of a split type\)$"
    with pytest.raises(ValueError, match=pattern):

        def two(parts, extra):
            return parts

        pipeline.handler("*", schema="type string, n long", split_by="entity", combine=two)
    assert pipeline.handlers == []


class Counter:
    def per_key(self, frame: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame({"key": [frame["key"].iloc[0]], "n": [len(frame)]})


class CallableCounter(Counter):
    def __call__(self, frame: pd.DataFrame) -> pd.DataFrame:
        return self.per_key(frame)


def test_func_forms_unit():
    """How each func is called, without Spark: the key by the arguments a call passes."""
    assert _func.func_form(batches) == _func.FuncForm(takes_key=False, iterator=True)
    assert _func.func_form(keyed_batches) == _func.FuncForm(takes_key=True, iterator=True)
    assert _func.func_form(lambda frame: frame) == _func.FuncForm(takes_key=False, iterator=False)
    assert _func.func_form(lambda key, frame: frame) == _func.FuncForm(takes_key=True, iterator=False)
    assert _func.func_form(Counter().per_key) == _func.FuncForm(takes_key=False, iterator=False)
    assert _func.func_form(CallableCounter()) == _func.FuncForm(takes_key=False, iterator=False)
    assert _func.func_form(functools.partial(three, None)) == _func.FuncForm(takes_key=True, iterator=False)
    with pytest.raises(ValueError, match=r"^func must be callable, got 3$"):
        _func.func_form(3)


# --- item 27: the cause is kept -------------------------------------------------------------


def fails_on_b(frame: pd.DataFrame) -> pd.DataFrame:
    if frame["key"].iloc[0] == "b":
        raise ZeroDivisionError("no rate for b")
    return pd.DataFrame({"key": [frame["key"].iloc[0]], "n": [len(frame)]})


def _users_traceback(text: str) -> str:
    """Spark's traceback of the task from the user's frame to the exception line."""
    frame_line = r'  File "[^"]*test_balanced_apply_func\.py", line \d+, in fails_on_b\n'
    found = re.search(frame_line + r"(.*\n)*?ZeroDivisionError: no rate for b", text)
    assert found, text[-3000:]
    return found.group(0)


def test_an_exception_in_func_shows_the_users_file_line_and_function(frame):
    with pytest.raises(Exception) as spark_error:
        frame.groupBy("key").applyInPandas(fails_on_b, SCHEMA).collect()
    with pytest.raises(Exception) as ours:
        balanced_apply(frame, "key", fails_on_b, SCHEMA, partitions=2).frame.collect()
    users = _users_traceback(str(spark_error.value))
    assert users + "\nbalanced_apply: func failed on key ('b',)" in str(ours.value)
    # Finding: our task function's frame was named fails_on_b, and passed for the user's code.
    frames = re.findall(r'  File "([^"]*)", line \d+, in (.*)\n', str(ours.value))
    assert [name for path, name in frames if name == "fails_on_b"] == ["fails_on_b"], frames
    assert [Path(path).name for path, name in frames if name == "fails_on_b"] == ["test_balanced_apply_func.py"]
    assert ("_grouped.py", "balanced_apply[fails_on_b]") in [(Path(path).name, name) for path, name in frames], frames


def test_an_exception_in_combine_shows_the_users_function_and_the_split_key(spark):
    def merge_fails(parts: pd.DataFrame) -> pd.DataFrame:
        raise KeyError("no such partial")

    hot = spark.createDataFrame([("hot", f"e{i % 6}") for i in range(60)] + [("cold", "e0")], "key string, e string")
    result = balanced_apply(hot, "key", fails_on_b, SCHEMA, partitions=3, split_by="e", combine=merge_fails)
    with pytest.raises(Exception) as ours:
        result.frame.collect()
    assert re.search(
        r', line \d+, in merge_fails\n    raise KeyError\("no such partial"\)\n(.*\n)*'
        r"KeyError: 'no such partial'\nbalanced_apply: combine failed on split key \('hot',\)",
        str(ours.value),
    ), str(ours.value)[-3000:]
    frames = re.findall(r'  File "([^"]*)", line \d+, in (.*)\n', str(ours.value))
    assert [Path(path).name for path, name in frames if name == "merge_fails"] == ["test_balanced_apply_func.py"]


def dated(frame: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"key": [frame["key"].iloc[0]], "n": [dt.date(2026, 1, 2)]})


def test_a_value_arrow_cannot_convert_keeps_pyarrows_reason(frame):
    """A date for a decimal: Spark's error says the column and types; pyarrow's, which Spark's
    traceback drops with the `__cause__`, says which value."""
    schema = "key string, n decimal(10,2)"
    with pytest.raises(pa.ArrowException) as arrow_error:
        pa.array([dt.date(2026, 1, 2)], type=pa.decimal128(10, 2))
    assert str(arrow_error.value) == "int or Decimal object expected, got datetime.date"
    with pytest.raises(Exception) as spark_error:
        frame.groupBy("key").applyInPandas(dated, schema).collect()
    sparks = re.search(r"PySparkTypeError: (Cannot convert the output value of the column 'n'.*)", str(spark_error.value))
    assert sparks, str(spark_error.value)[-3000:]
    with pytest.raises(Exception) as ours:
        balanced_apply(frame, "key", dated, schema, partitions=2).frame.collect()
    assert re.search(
        r"RuntimeError: balanced_apply: func's output for key \('[ab]',\) does not fit the schema: PySparkTypeError: "
        + re.escape(f"{sparks.group(1)} (from ArrowTypeError: {arrow_error.value})"),
        str(ours.value),
    ), str(ours.value)[-3000:]


def logs_and_counts(frame: pd.DataFrame) -> pd.DataFrame:
    logging.getLogger("user").warning("logged by %s for %s", frame["run"].iloc[0], frame["key"].iloc[0])
    print("printed by", frame["run"].iloc[0])
    return pd.DataFrame({"key": [frame["key"].iloc[0]], "n": [len(frame)]})


def test_the_workers_logs_from_func_are_under_funcs_name(spark, conf):
    from pyspark.sql import functions as F

    conf("spark.sql.pyspark.worker.logging.enabled", "true")
    df = spark.createDataFrame([("a", 1.0), ("b", 2.0)], "key string, v double")
    df.withColumn("run", F.lit("spark")).groupBy("key").applyInPandas(logs_and_counts, SCHEMA).collect()
    balanced_apply(df.withColumn("run", F.lit("ours")), "key", logs_and_counts, SCHEMA, partitions=2).frame.collect()
    logs = spark.tvf.python_worker_logs().select("msg", "context", "logger").collect()
    contexts: dict[str, set[str]] = {}
    for row in logs:
        for run in ("spark", "ours"):
            if f"by {run}" in row["msg"]:
                contexts.setdefault(run, set()).add(f"{row['logger']}: {sorted(row['context'].items())}")
    # As applyInPandas, func's name; in a frame named as ours (a traceback shows the same frame).
    assert contexts["ours"] == {text.replace("'logs_and_counts'", "'balanced_apply[logs_and_counts]'")
                                for text in contexts["spark"]}
    assert "user: [('func_name', 'balanced_apply[logs_and_counts]')]" in contexts["ours"]


def test_reasons_and_code_names_unit():
    try:
        try:
            raise ValueError("inner")
        except ValueError as exc:
            raise TypeError("outer") from exc
    except TypeError as exc:
        assert _func.reasons(exc) == "TypeError: outer (from ValueError: inner)"
    assert _func.code_name(fails_on_b) == "fails_on_b"
    assert _func.code_name(functools.partial(three, None)) == "three"
    assert _func.code_name(Counter().per_key) == "per_key"
    assert _func.code_name(CallableCounter()) == "__call__"

    def generator(batches: Iterator[int]) -> Iterator[int]:
        yield from batches

    named = _func.renamed(generator, "users_function")
    assert named.__code__.co_name == "users_function" and list(named(iter([1, 2]))) == [1, 2]


WRONG_ARGUMENTS = """
from rebalancer.pipeline import Pipeline
pipeline = Pipeline()

@pipeline.handler("*", schema="type string, n long")
def three(key, frame, extra):
    return frame
"""


def test_a_handlers_file_with_a_handler_of_the_wrong_arguments_is_one_line_and_exit_2(tmp_path):
    """The CLI, as a user runs it: refused while the handlers file loads, before Spark starts."""
    import subprocess

    handlers = tmp_path / "handlers.py"
    handlers.write_text(WRONG_ARGUMENTS)
    out = tmp_path / "out"
    cli = [sys.executable, "-m", "rebalancer.cli"]
    done = subprocess.run(
        [*cli, "pipeline", "run", "--input", str(tmp_path), "--output", str(out), "--handlers", str(handlers)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"rebalancer: error: handlers: {handlers}: handler three(key, frame, extra): [INVALID_PANDAS_UDF] "
        "Invalid function: pandas_udfs with function type GROUPED_MAP or the function in groupby.applyInPandas "
        "must take either one argument (data) or two arguments (key, data).\n"
    )
    assert not out.exists()
