"""benchmarks/linger.py and benchmarks/kafka_source.py on real brokers (`--cluster real`,
`--against spark-kafka`): what they refuse, before any broker, JVM or Spark session starts.

The runs themselves take minutes and are the benchmarks' business; here only the arguments and the
missing-jars errors (one line on stderr, exit 2, no traceback)."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys
from types import ModuleType

import pytest

BENCHMARKS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark_args", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def kafka_source() -> ModuleType:
    return load("kafka_source")


@pytest.fixture(scope="module")
def linger() -> ModuleType:
    return load("linger")


def refused(main, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cluster", "real", "--bootstrap", "127.0.0.1:9"], "--bootstrap names a running cluster; --cluster real"),
        (["--against", "spark-kafka"], "--against spark-kafka needs real brokers: give --cluster real or --bootstrap"),
        (["--cluster", "real", "--rounds", "0"], "--rounds must be >= 1, got 0"),
        (["--cluster", "real", "--partitions", "0"], "--partitions must be >= 1, got 0"),
        (["--hot-share", "1.5"], "--hot-share must be in [0, 1], got 1.5"),
        (["--cluster", "real", "--events", "8"], "--events must be >= --partitions, got 8"),
        (["--cluster", "docker"], "argument --cluster: invalid choice: 'docker'"),
        (["--against", "flink"], "argument --against: invalid choice: 'flink'"),
    ],
)
def test_kafka_source_refuses_bad_arguments(kafka_source, capsys, argv, message):
    assert message in refused(kafka_source.main, argv, capsys)


def test_kafka_source_without_the_connector_says_how_to_fetch_it(kafka_source, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # an empty cache: no connector
    assert kafka_source.main(["--cluster", "real", "--against", "spark-kafka"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    version = kafka_source.spark_kafka_jars.__globals__["SPARK_KAFKA_POM"].read_text()
    assert len(err) == 1 and "Traceback" not in err[0]
    assert err[0].startswith("kafka_source: Spark's Kafka connector ")
    assert err[0].endswith(": run `make spark-kafka`")
    assert err[0].split()[4] in version  # the version the pom pins


def test_both_sources_get_the_same_offsets(kafka_source):
    from rebalancer.pipeline.kafka._options import parse_options

    text = kafka_source.offsets_json("t", {1: 5, 0: 0, 10: 7})
    assert json.loads(text) == {"t": {"0": 0, "1": 5, "10": 7}}  # Spark-Kafka JSON, as Spark's connector takes it
    options = parse_options({"bootstrap.servers": "h:1", "topic": "t", "startingOffsets": text, "endingOffsets": text})
    assert options.starting == options.ending == {0: 0, 1: 5, 10: 7}


def test_spark_connector_candidates_cover_its_splitting_options(kafka_source):
    sizes = [800_000] + [80_000] * 15
    candidates = kafka_source.spark_kafka_candidates(16, sizes)
    assert candidates == [
        {},
        {"minPartitions": "32"},
        {"minPartitions": "64"},
        {"maxRecordsPerPartition": "80000"},
    ]


@pytest.mark.parametrize("extra", [["--sweep"], ["--ceiling"], ["--row", "ours"]])
def test_linger_real_runs_the_headline_row_only(linger, capsys, extra):
    message = refused(linger.main, ["--cluster", "real", *extra], capsys)
    assert message.endswith("--cluster real runs the headline row only: it takes no --sweep, --ceiling or --row")


def test_linger_refuses_an_unknown_cluster_and_a_bad_window(linger, capsys):
    assert "argument --cluster: invalid choice: 'docker'" in refused(linger.main, ["--cluster", "docker"], capsys)
    assert "--seconds must be > 0, got -1.0" in refused(linger.main, ["--cluster", "real", "--seconds", "-1"], capsys)


def test_linger_real_without_kafka_jars_is_one_line(linger, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("REBALANCER_KAFKA_LIB", str(tmp_path))  # no kafka_2.13-*.jar there
    assert linger.main(["--cluster", "real", "--seconds", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("linger: no Apache Kafka jars (kafka_2.13-*.jar) in ")
    assert "make kafka" in err[0]
