"""Kafka in (issue 13): the `rebalancer-kafka` Spark data source, and telemetry to and from a topic.

`source` is the data source (it imports PySpark's data source API); `telemetry` produces the
pipeline's events to a topic and turns a topic back into the pipeline's four columns.
"""

from rebalancer.pipeline.kafka._options import (
    DEFAULT_MAX_RECORDS_PER_TASK,
    SCHEMA,
    SOURCE_NAME,
    KafkaOptions,
    parse_options,
)
from rebalancer.pipeline.kafka.datasource import KafkaDataSource, KafkaStreamReader, register_kafka_source
from rebalancer.pipeline.kafka.tasks import DataLossError, KafkaTask, OffsetRange, plan_input_tasks

__all__ = [
    "DEFAULT_MAX_RECORDS_PER_TASK",
    "SCHEMA",
    "SOURCE_NAME",
    "DataLossError",
    "KafkaDataSource",
    "KafkaOptions",
    "KafkaStreamReader",
    "KafkaTask",
    "OffsetRange",
    "parse_options",
    "plan_input_tasks",
    "register_kafka_source",
]
