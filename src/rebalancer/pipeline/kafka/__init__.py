"""Kafka in (issue 13): the `rebalancer-kafka` Spark data source, and telemetry to and from a topic.

`datasource` is the data source (it imports PySpark's data source API), `tasks` plans its input
tasks, `telemetry` produces the
pipeline's events to a topic and turns a topic back into the pipeline's four columns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rebalancer._lazy import lazy_exports

if TYPE_CHECKING:
    from rebalancer.pipeline.kafka._options import (
        DEFAULT_MAX_RECORDS_PER_TASK,
        SCHEMA,
        SOURCE_NAME,
        KafkaOptions,
        parse_options,
    )
    from rebalancer.pipeline.kafka.datasource import KafkaDataSource, KafkaStreamReader, register_kafka_source
    from rebalancer.pipeline.kafka.tasks import DataLossError, KafkaTask, OffsetRange, plan_input_tasks

_HOMES = {
    "DEFAULT_MAX_RECORDS_PER_TASK": "rebalancer.pipeline.kafka._options",
    "DataLossError": "rebalancer.pipeline.kafka.tasks",
    "KafkaDataSource": "rebalancer.pipeline.kafka.datasource",
    "KafkaOptions": "rebalancer.pipeline.kafka._options",
    "KafkaStreamReader": "rebalancer.pipeline.kafka.datasource",
    "KafkaTask": "rebalancer.pipeline.kafka.tasks",
    "OffsetRange": "rebalancer.pipeline.kafka.tasks",
    "SCHEMA": "rebalancer.pipeline.kafka._options",
    "SOURCE_NAME": "rebalancer.pipeline.kafka._options",
    "parse_options": "rebalancer.pipeline.kafka._options",
    "plan_input_tasks": "rebalancer.pipeline.kafka.tasks",
    "register_kafka_source": "rebalancer.pipeline.kafka.datasource",
}
__all__ = ["DEFAULT_MAX_RECORDS_PER_TASK", "SCHEMA", "SOURCE_NAME", "DataLossError", "KafkaDataSource", "KafkaOptions", "KafkaStreamReader", "KafkaTask", "OffsetRange", "parse_options", "plan_input_tasks", "register_kafka_source"]
__getattr__, __dir__ = lazy_exports("rebalancer.pipeline.kafka", _HOMES)
