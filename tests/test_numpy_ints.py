"""Finding: `RunRequest(partitions=np.int64(5))` was refused (`partitions must be an int in 1..10000,
got np.int64(5)`), and so was every integer of StreamConfig, GenerateConfig, balanced_apply's
checks, ProducerConfig's integer keys and the test clusters' checks. numpy's integers are integers:
one rule (`rebalancer.balance.checks.is_int`) accepts them everywhere and each is stored as a plain int;
a bool, numpy's included, stays refused. No Spark, no broker: the checks alone.
"""

from __future__ import annotations

import numpy as np
import pytest

from rebalancer.balance.checks import is_int
from rebalancer.pipeline.checks import check_int, check_partitions, check_seconds
from rebalancer.pipeline.generate import GenerateConfig
from rebalancer.pipeline.resolved import RunRequest
from rebalancer.pipeline.stream.state import StreamConfig

NUMPY_INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
# RunRequest's integer fields, with what makes them apply (a stream's only in a stream).
RUN_INTS = {
    "partitions": ({}, 5),
    "rebalance_every": ({"stream": True}, 3),
    "max_moves": ({"stream": True}, 2),
    "max_batches": ({"stream": True}, 4),
    "files_per_batch": ({"stream": True}, 2),
    "group_cost": ({}, 7),
}


def _plain(value: object, expected: int) -> None:
    assert value == expected and type(value) is int, repr(value)


def test_the_rule_takes_numpys_ints_and_no_bool() -> None:
    assert all(is_int(kind(3)) for kind in NUMPY_INTS) and is_int(3)
    assert not any(is_int(v) for v in (True, np.bool_(True), 3.0, np.float64(3), "3", None))


@pytest.mark.parametrize("kind", NUMPY_INTS, ids=lambda k: k.__name__)
@pytest.mark.parametrize("name", list(RUN_INTS))
def test_run_request_takes_a_numpy_int_and_holds_a_plain_int(name: str, kind: type) -> None:
    extra, value = RUN_INTS[name]
    request = RunRequest(input="data", **extra, **{name: kind(value)})  # type: ignore[arg-type]
    _plain(getattr(request, name), value)
    assert f"{name}={value}," in repr(request)


def test_run_request_still_refuses_a_bool_and_a_float_by_name() -> None:
    for value, shown in ((np.bool_(True), "np.True_"), (True, "True"), (np.float64(5.0), "np.float64(5.0)")):
        with pytest.raises(ValueError) as refused:
            RunRequest(input="data", partitions=value)  # type: ignore[arg-type]
        assert str(refused.value) == f"partitions must be an int in 1..10000, got {shown}"


def test_run_request_takes_numpys_floats_as_seconds() -> None:
    request = RunRequest(input="kafka://127.0.0.1:9092/t", kafka_timeout=np.float32(2.5))
    assert request.kafka_timeout == 2.5 and type(request.kafka_timeout) is float
    request = RunRequest(input="kafka://127.0.0.1:9092/t", kafka_timeout=np.int64(3))
    _plain(request.kafka_timeout, 3)


def test_the_pipelines_checks_return_plain_ints() -> None:
    _plain(check_partitions(np.int64(8)), 8)
    _plain(check_int(np.uint16(0), "max_moves", 0, 10), 0)  # balanced_apply's max_moves check
    assert check_seconds(np.int32(2), "timeout") == 2.0
    with pytest.raises(ValueError, match=r"^partitions must be an int in 1..10000, got np.True_$"):
        check_partitions(np.bool_(True))


def test_stream_and_generate_configs_take_numpy_ints_as_plain_ints() -> None:
    config = StreamConfig(partitions=np.int64(4), rebalance_every=np.int32(2), max_moves=np.int64(1),  # type: ignore[arg-type]
                          max_batches=np.uint8(3), files_per_batch=np.int16(2))  # type: ignore[arg-type]
    config.validate()
    for name, value in (("partitions", 4), ("rebalance_every", 2), ("max_moves", 1), ("max_batches", 3),
                        ("files_per_batch", 2)):
        _plain(getattr(config, name), value)
    generate = GenerateConfig(events=np.int64(100), types=np.int32(3), files=np.uint8(2), seed=np.int64(5))  # type: ignore[arg-type]
    generate.validate()
    for name, value in (("events", 100), ("types", 3), ("files", 2), ("seed", 5)):
        _plain(getattr(generate, name), value)
    with pytest.raises(ValueError, match=r"^files must be an int in 1..10000, got np.True_$"):
        GenerateConfig(files=np.bool_(True)).validate()  # type: ignore[arg-type]


def test_producer_config_takes_numpy_numbers_for_its_numeric_keys() -> None:
    pytest.importorskip("aiokafka")
    from rebalancer.produce.config import ProducerConfig

    config = ProducerConfig.from_dict({
        "bootstrap.servers": "127.0.0.1:9092", "request.timeout.ms": np.int64(5000), "acks": np.int64(-1),
        "batch.size": np.uint32(1000), "linger.ms": np.float32(5.0), "broker.batch.max.partitions": np.int64(8),
    })
    _plain(config.request_timeout_ms, 5000)
    _plain(config.batch_size, 1000)
    assert config.acks == -1 and config.collector.batch_max_partitions == 8
    with pytest.raises(ValueError, match=r"^request.timeout.ms must be an integer in 1..900000, got np.True_"):
        ProducerConfig.from_dict({"bootstrap.servers": "127.0.0.1:9092", "request.timeout.ms": np.bool_(True)})


def test_the_test_clusters_checks_take_numpy_ints_as_plain_ints() -> None:
    from rebalancer.testing._checks import check_broker_id, check_brokers, check_topic

    _plain(check_brokers(np.int64(3)), 3)
    _plain(check_broker_id(np.int32(2), 3), 2)
    partitions, replication = check_topic("t", np.int64(6), np.uint8(1), 3)
    _plain(partitions, 6)
    _plain(replication, 1)
    with pytest.raises(ValueError, match=r"^brokers must be an int in 1..100, got np.True_ \(bool\)$"):
        check_brokers(np.bool_(True))
