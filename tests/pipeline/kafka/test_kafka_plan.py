"""The Kafka source's pure parts: option checking, input-task planning, the per-trigger limit."""

from __future__ import annotations

import statistics

import pytest

from rebalancer.pipeline.kafka._options import KafkaOptions, parse_options
from rebalancer.pipeline.kafka.datasource import _prorate
from rebalancer.pipeline.kafka.tasks import OffsetRange, plan_input_tasks

BASE = {"bootstrap.servers": "127.0.0.1:9092", "topic": "telemetry"}


def covered(tasks: list[list[OffsetRange]]) -> list[tuple[int, int]]:
    return sorted((r.partition, offset) for task in tasks for r in task for offset in range(r.start, r.end))


def test_a_hot_partition_is_cut_into_tasks_of_at_most_max_records():
    tasks = plan_input_tasks([OffsetRange(0, 0, 10_000)], max_records_per_task=1000)
    assert len(tasks) == 10
    assert [sum(r.size for r in task) for task in tasks] == [1000] * 10
    assert covered(tasks) == [(0, o) for o in range(10_000)]
    assert all(len(task) == 1 for task in tasks)  # one contiguous range each


def test_small_ranges_are_packed_and_a_hot_one_split_into_near_equal_tasks():
    # 24 partitions, one holding 40% of the records: the benchmark's shape.
    hot = 40_000
    ranges = [OffsetRange(0, 100, 100 + hot)] + [OffsetRange(p, 0, 2609) for p in range(1, 24)]
    total = hot + 23 * 2609
    tasks = plan_input_tasks(ranges, max_records_per_task=-(-total // 24))
    sizes = [sum(r.size for r in task) for task in tasks]
    assert len(tasks) == 24
    assert sum(sizes) == total
    assert max(sizes) <= -(-total // 24) + 1
    assert max(sizes) / statistics.median(sizes) <= 1.2
    expected = sorted((r.partition, o) for r in ranges for o in range(r.start, r.end))
    assert covered(tasks) == expected


def test_unplanned_is_one_task_per_partition_and_skips_empty_ranges():
    ranges = [OffsetRange(1, 0, 50), OffsetRange(0, 10, 5000), OffsetRange(2, 7, 7)]
    tasks = plan_input_tasks(ranges, max_records_per_task=100, plan_tasks=False)
    assert tasks == [[OffsetRange(0, 10, 5000)], [OffsetRange(1, 0, 50)]]


def test_min_partitions_splits_below_the_record_limit():
    tasks = plan_input_tasks([OffsetRange(0, 0, 90), OffsetRange(1, 0, 10)], max_records_per_task=1000, min_partitions=4)
    assert len(tasks) == 4
    assert [sum(r.size for r in t) for t in tasks] == [25, 25, 25, 25]
    assert len(covered(tasks)) == 100


def test_no_more_tasks_than_records_and_none_for_nothing():
    assert len(plan_input_tasks([OffsetRange(0, 0, 3)], max_records_per_task=1, min_partitions=10)) == 3
    assert plan_input_tasks([OffsetRange(0, 5, 5)]) == []


def test_prorate_splits_the_trigger_limit_exactly_by_backlog():
    assert _prorate({0: 900, 1: 100, 2: 0}, 500) == {0: 450, 1: 50, 2: 0}
    grant = _prorate({0: 1, 1: 1, 2: 1}, 2)
    assert sum(grant.values()) == 2 and max(grant.values()) == 1
    assert _prorate({0: 10, 1: 5}, 100) == {0: 10, 1: 5}


def test_parse_options_defaults_and_json_offsets():
    options = parse_options({**BASE, "startingOffsets": '{"telemetry": {"0": 5, "1": -2}}', "MINPARTITIONS": "3"})
    assert options.starting == {0: 5, 1: -2}
    assert options.ending == "latest"
    assert options.min_partitions == 3
    assert options.max_records_per_task == 1_000_000
    assert options.plan_tasks is True and options.fail_on_data_loss is True


def test_consumer_secrets_stay_out_of_repr():
    options = parse_options({**BASE, "kafka.sasl.password": "hunter2", "kafka.security.protocol": "SASL_SSL"})
    assert options.consumer_conf("x")["sasl.password"] == "hunter2"
    assert "hunter2" not in repr(options)
    assert isinstance(options, KafkaOptions)


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"topic": "telemetry"}, False, "bootstrap.servers is required"),
        ({"bootstrap.servers": "h:1"}, False, "option topic is required"),
        ({**BASE, "maxRecordsPerTask": "lots"}, False, "maxRecordsPerTask must be a positive integer, got 'lots'"),
        ({**BASE, "maxRecordsPerTask": "0"}, False, "maxRecordsPerTask must be a positive integer, got '0'"),
        ({**BASE, "minPartitions": "-1"}, False, "minPartitions must be a positive integer"),
        ({**BASE, "maxOffsetsPerTrigger": "x"}, True, "maxOffsetsPerTrigger must be a positive integer"),
        ({**BASE, "maxOffsetsPerTrigger": "10"}, False, "maxOffsetsPerTrigger is for streaming reads"),
        ({**BASE, "endingOffsets": "latest"}, True, "endingOffsets is for batch reads"),
        ({**BASE, "startingOffsets": "{not json"}, False, "startingOffsets must be earliest or JSON"),
        ({**BASE, "startingOffsets": '{"other": {"0": 1}}'}, False, "startingOffsets JSON must be an object with the one key 'telemetry'"),
        ({**BASE, "startingOffsets": '{"telemetry": {"x": 1}}'}, False, "startingOffsets: partition 'x' is not a number"),
        ({**BASE, "startingOffsets": '{"telemetry": {"0": -3}}'}, False, "startingOffsets: offset of partition 0 must be an int >= -2"),
        ({**BASE, "startingOffsets": "latest"}, False, "startingOffsets cannot be latest here"),
        ({**BASE, "endingOffsets": "earliest"}, False, "endingOffsets cannot be earliest here"),
        ({**BASE, "endingOffsets": '{"telemetry": {"0": -2}}'}, False, "endingOffsets: -2 (earliest) is not an end offset"),
        ({**BASE, "planTasks": "maybe"}, False, "planTasks must be true or false, got 'maybe'"),
        ({**BASE, "failOnDataLoss": "1"}, False, "failOnDataLoss must be true or false"),
        ({**BASE, "topic": "a,b"}, False, "option topic names one topic"),
        ({**BASE, "kafka.group.id": "g"}, False, "option kafka.group.id is set by the reader itself"),
        ({**BASE, "maxRecords": "5"}, False, "unknown option 'maxRecords'"),
    ],
)
def test_bad_options_raise_value_error_naming_the_option(options, streaming, message):
    with pytest.raises(ValueError) as info:
        parse_options(options, streaming=streaming)
    assert message in str(info.value)
