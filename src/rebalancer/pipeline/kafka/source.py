"""Kafka in: a PySpark Python data source, `rebalancer-kafka`, that reads a topic with confluent-kafka.

Spark's own Kafka connector is a Maven jar; this source needs only the wheels. The reader owns the
offsets, as Spark's Kafka source does: no consumer group (option `group` only picks a batch read's
start from a group's committed offsets; the caller commits), each executor task `assign()`s its offset
ranges, reads exactly `[start, end)` with `isolation.level=read_committed` (so aborted records and
transaction markers never show, and offsets need not be consecutive) and closes its consumer.

Input tasks are a balancing problem: one task per topic partition makes a hot partition a straggler.
Here ranges larger than the per-task target are cut into near-equal pieces and the pieces are packed
into near-equal tasks with `rebalancer.balance.plan_rebalance` (`planTasks=false`: one task per
partition, the baseline). Streaming offsets are Spark-Kafka JSON (`{"topic": {"0": 42}}`) and live in
the query's checkpoint.

The code lives in private modules (`_options`, `_plan`, `_topic`, `_read`, `_datasource`); this
module keeps the names importable where they always were.
"""

from rebalancer.pipeline.kafka._datasource import (
    KafkaBatchReader,
    KafkaDataSource,
    KafkaStreamReader,
    _offset_dict,
    _offset_json,
    _prorate,
    register_kafka_source,
)
from rebalancer.pipeline.kafka._options import (
    DEFAULT_MAX_RECORDS_PER_TASK,
    DEFAULT_METADATA_TIMEOUT_MS,
    EARLIEST,
    KAFKA_PREFIX,
    LATEST,
    OPTIONS,
    ROWS_PER_BATCH,
    SCHEMA,
    SOURCE_NAME,
    KafkaOptions,
    LibrdkafkaLog,
    parse_options,
    shown_topic,
)
from rebalancer.pipeline.kafka._plan import DataLossError, KafkaTask, OffsetRange, plan_input_tasks
from rebalancer.pipeline.kafka._read import read_task, spark_schema
from rebalancer.pipeline.kafka._topic import (
    FAILOVER_ATTEMPTS,
    FAILOVER_BACKOFF_S,
    TopicView,
    _retrying,
    commit_group_offsets,
    group_offsets,
    plan_group_range,
    plan_group_read,
)

__all__ = [
    "DEFAULT_MAX_RECORDS_PER_TASK",
    "DEFAULT_METADATA_TIMEOUT_MS",
    "EARLIEST",
    "FAILOVER_ATTEMPTS",
    "FAILOVER_BACKOFF_S",
    "KAFKA_PREFIX",
    "LATEST",
    "OPTIONS",
    "ROWS_PER_BATCH",
    "SCHEMA",
    "SOURCE_NAME",
    "DataLossError",
    "KafkaBatchReader",
    "KafkaDataSource",
    "KafkaOptions",
    "KafkaStreamReader",
    "KafkaTask",
    "LibrdkafkaLog",
    "OffsetRange",
    "TopicView",
    "_offset_dict",
    "_offset_json",
    "_prorate",
    "_retrying",
    "commit_group_offsets",
    "group_offsets",
    "parse_options",
    "plan_group_range",
    "plan_group_read",
    "plan_input_tasks",
    "read_task",
    "register_kafka_source",
    "shown_topic",
    "spark_schema",
]
