"""Options of the `rebalancer-kafka` source: parsed and checked on the driver, before any task."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rebalancer._json import DuplicateKeyError, loads_unique
from rebalancer._kafka_names import check_topic_name
from rebalancer._librdkafka import LibrdkafkaLog
from rebalancer._numbers import parse_int, shown
from rebalancer._secrets import MASK, is_secret_key, masked_pairs, refuse_servers_login
from rebalancer.pipeline.checks import COUNT_MAX, PARTITIONS_MAX, SECONDS_MAX

if TYPE_CHECKING:
    from collections.abc import Callable

    from confluent_kafka import Consumer

def shown_topic(name: str) -> str:
    """A topic as an error quotes it: a bounded repr, any secret `key=value` pair in it as *** (a
    topic holds no '=': one there is an option whose '?' was forgotten or mistyped)."""
    return shown(masked_pairs(name))


SOURCE_NAME = "rebalancer-kafka"
SCHEMA = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
DEFAULT_MAX_RECORDS_PER_TASK = 1_000_000
EARLIEST = -2  # in JSON offsets, as in Spark's Kafka source
LATEST = -1
ROWS_PER_BATCH = 20_000  # Arrow batch handed to Spark; also the consume() batch size
OPTIONS = (
    "bootstrap.servers",
    "topic",
    "startingOffsets",
    "endingOffsets",
    "maxRecordsPerTask",
    "minPartitions",
    "planTasks",
    "maxOffsetsPerTrigger",
    "failOnDataLoss",
    "pollTimeoutMs",
    "metadataTimeoutMs",
    "group",
)
DEFAULT_METADATA_TIMEOUT_MS = 10_000
KAFKA_PREFIX = "kafka."  # kafka.<librdkafka property> is passed to the consumers (security settings...)
# Set by the reader itself; a user value would break exactly-once reads.
_RESERVED = ("group.id", "enable.auto.commit", "isolation.level", "auto.offset.reset", "enable.partition.eof")


# -- options --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KafkaOptions:
    """Validated options. `consumer_config` may hold secrets: it is left out of repr."""

    bootstrap_servers: str
    topic: str
    starting: str | dict[int, int] = "earliest"
    ending: str | dict[int, int] = "latest"
    max_records_per_task: int = DEFAULT_MAX_RECORDS_PER_TASK
    min_partitions: int | None = None
    plan_tasks: bool = True
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = 120_000
    metadata_timeout_ms: int = DEFAULT_METADATA_TIMEOUT_MS
    # a consumer group whose committed offsets a batch read starts from (and the run commits to)
    group: str | None = None
    consumer_config: Mapping[str, str] = field(default_factory=dict, repr=False)
    # which options the user gave (so batch/stream-only ones can be refused where they mean nothing)
    given: frozenset[str] = field(default_factory=frozenset, repr=False)

    def consumer_conf(self, client: str) -> dict[str, Any]:
        """The client's configuration; librdkafka's log lines go to the `rebalancer` logger, at INFO
        (shown with -v), never straight to stderr: a refused connection is logged every backoff."""
        conf: dict[str, Any] = dict(self.consumer_config)
        conf.update(
            {
                "bootstrap.servers": self.bootstrap_servers,
                "group.id": f"rebalancer-kafka-{client}",  # required by the client; never joined or committed
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": "error",
                "enable.partition.eof": True,
                "client.id": f"rebalancer-kafka-{client}",
            }
        )
        conf.setdefault("log_level", 3)
        conf["logger"] = LibrdkafkaLog()
        return conf

    def consumer(self, client: str, group: str | None = None, error_cb: Callable[[Any], None] | None = None) -> Consumer:
        """A consumer of `consumer_conf(client)` (naming `group`, never joining it). A `kafka.*` option
        librdkafka refuses (an unknown name: they are case-sensitive; a bad value) is a ValueError
        naming it, with any secret option's value as ***: it was reported as brokers not reached."""
        from confluent_kafka import Consumer, KafkaException

        conf = self.consumer_conf(client)
        if group is not None:
            conf["group.id"] = group
        if error_cb is not None:
            conf["error_cb"] = error_cb
        try:
            return Consumer(conf)
        except KafkaException as exc:
            text = exc.args[0].str() if hasattr(exc.args[0], "str") else str(exc)
            for key, value in self.consumer_config.items():
                if value and is_secret_key(key):
                    text = text.replace(value, MASK)
            raise ValueError(f"a kafka.* option is refused by the Kafka client: {text}") from None


# Each numeric option's upper bound (pipeline/_checks.py's): tasks as a run's partitions, a wait at
# most a day in milliseconds, record counts as any other count. 10**30 reached the reader unchecked.
_MAXIMA = {
    "minPartitions": PARTITIONS_MAX,
    "pollTimeoutMs": SECONDS_MAX * 1000,
    "metadataTimeoutMs": SECONDS_MAX * 1000,
    "maxRecordsPerTask": COUNT_MAX,
    "maxOffsetsPerTrigger": COUNT_MAX,
}


def _positive_int(name: str, text: str) -> int:
    """ASCII digits only: `int()` would also take `1_0` and `٣` (see rebalancer._numbers); at most
    the option's bound in _MAXIMA."""
    try:
        value = parse_int(str(text), field=name)
    except ValueError:
        raise ValueError(f"{name} must be a positive integer, got {text!r}") from None
    if value < 1:
        raise ValueError(f"{name} must be a positive integer, got {text!r}")
    if value > _MAXIMA[name]:
        raise ValueError(f"{name} must be at most {_MAXIMA[name]}, got {text!r}")
    return value


def _bool(name: str, text: str) -> bool:
    lowered = str(text).strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"{name} must be true or false, got {text!r}")
    return lowered == "true"


def _offsets(name: str, text: str, topic: str, allowed: tuple[str, ...]) -> str | dict[int, int]:
    """`earliest`, `latest` or Spark-Kafka JSON `{"topic": {"0": 23, "1": -2}}` (-2 earliest, -1 latest)."""
    stripped = str(text).strip()
    if stripped.lower() in allowed:
        return stripped.lower()
    if stripped.lower() in ("earliest", "latest"):
        raise ValueError(
            f"{name} cannot be {stripped.lower()} here (allowed: {', '.join(allowed)} or JSON), got {text!r}"
        )
    try:
        parsed = loads_unique(stripped)
    except DuplicateKeyError as exc:  # json.loads would keep the last of the two values without a word
        raise ValueError(f"{name}: the key {exc.key!r} is given twice, in {text!r}") from None
    except ValueError:
        raise ValueError(
            f'{name} must be {" or ".join(allowed)} or JSON like {{"{topic}": {{"0": 42}}}}, got {text!r}'
        ) from None
    if not isinstance(parsed, dict) or set(parsed) != {topic} or not isinstance(parsed[topic], dict):
        raise ValueError(
            f"{name} JSON must be an object with the one key {topic!r} holding partition offsets, got {text!r}"
        )
    offsets: dict[int, int] = {}
    keys: dict[int, str] = {}
    for partition, offset in parsed[topic].items():
        try:
            number = parse_int(partition, field=f"{name}: partition")
        except ValueError:
            raise ValueError(f"{name}: partition {partition!r} is not a number, in {text!r}") from None
        if number < 0 or isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
            raise ValueError(f"{name}: offset of partition {partition} must be an int >= -2, got {offset!r}")
        if number in keys:  # "0" and "00": one offset would silently replace the other
            raise ValueError(
                f"{name}: partition {number} is given twice ({keys[number]!r} and {partition!r}), in {text!r}"
            )
        keys[number] = partition
        offsets[number] = offset
    return offsets


def parse_options(options: Mapping[str, str], streaming: bool | None = False) -> KafkaOptions:
    """Validate the reader options; a bad one raises ValueError naming it. Keys are case-insensitive.

    `streaming=None` (the mode is not known yet) skips the checks of batch-only and stream-only options.
    """
    lowered = {str(k).lower(): (str(k), v) for k, v in options.items()}
    known = {name.lower(): name for name in OPTIONS}
    consumer_config: dict[str, str] = {}
    given: set[str] = set()
    for key, (original, value) in lowered.items():
        if key in known:
            given.add(known[key])
        elif key.startswith(KAFKA_PREFIX):
            prop = original[len(KAFKA_PREFIX) :]
            if prop.lower() in _RESERVED or prop.lower() == "bootstrap.servers":
                raise ValueError(f"option {original} is set by the reader itself and cannot be given")
            consumer_config[prop] = value
        elif key != "path":
            raise ValueError(
                f"unknown option {original!r} (options: {', '.join(OPTIONS)}, or kafka.<consumer property>)"
            )

    def get(name: str) -> str | None:
        found = lowered.get(name.lower())
        return None if found is None else str(found[1])

    servers = (get("bootstrap.servers") or "").strip()
    if not servers:
        raise ValueError("option bootstrap.servers is required (host:port[,host:port])")
    refuse_servers_login(servers, "option bootstrap.servers")
    topic = (get("topic") or "").strip()
    if not topic:
        raise ValueError("option topic is required")
    if "," in topic:
        raise ValueError(f"option topic names one topic, got {shown_topic(topic)}")
    check_topic_name(topic, field="option topic", show=shown_topic)  # here, not at the broker
    if streaming is True and "endingOffsets" in given:
        raise ValueError("option endingOffsets is for batch reads; a stream reads on as data arrives")
    if streaming is False and "maxOffsetsPerTrigger" in given:
        raise ValueError("option maxOffsetsPerTrigger is for streaming reads")
    group = get("group")
    if group is not None and not group.strip():
        raise ValueError("option group must name a consumer group, got an empty string")
    if streaming is True and group is not None:
        raise ValueError("option group is for batch reads; a stream keeps its offsets in its checkpoint")
    if group is not None and ("startingOffsets" in given or "endingOffsets" in given):
        raise ValueError(
            "option group reads from the group's committed offsets to the latest: "
            "it takes no startingOffsets or endingOffsets"
        )
    starting_allowed = ("earliest",) if streaming is False else ("earliest", "latest")
    starting = _offsets("startingOffsets", get("startingOffsets") or "earliest", topic, starting_allowed)
    ending = _offsets("endingOffsets", get("endingOffsets") or "latest", topic, ("latest",))
    if isinstance(ending, dict) and any(offset == EARLIEST for offset in ending.values()):
        raise ValueError("endingOffsets: -2 (earliest) is not an end offset")
    if (
        isinstance(starting, dict)
        and streaming is False
        and any(offset == LATEST for offset in starting.values())
    ):
        raise ValueError("startingOffsets: -1 (latest) reads nothing in a batch read")
    min_partitions = get("minPartitions")
    max_per_trigger = get("maxOffsetsPerTrigger")
    return KafkaOptions(
        bootstrap_servers=servers,
        topic=topic,
        starting=starting,
        ending=ending,
        max_records_per_task=_positive_int(
            "maxRecordsPerTask", get("maxRecordsPerTask") or str(DEFAULT_MAX_RECORDS_PER_TASK)
        ),
        min_partitions=None if min_partitions is None else _positive_int("minPartitions", min_partitions),
        plan_tasks=_bool("planTasks", get("planTasks") or "true"),
        max_offsets_per_trigger=None
        if max_per_trigger is None
        else _positive_int("maxOffsetsPerTrigger", max_per_trigger),
        fail_on_data_loss=_bool("failOnDataLoss", get("failOnDataLoss") or "true"),
        poll_timeout_ms=_positive_int("pollTimeoutMs", get("pollTimeoutMs") or "120000"),
        metadata_timeout_ms=_positive_int(
            "metadataTimeoutMs", get("metadataTimeoutMs") or str(DEFAULT_METADATA_TIMEOUT_MS)
        ),
        group=None if group is None else group.strip(),
        consumer_config=consumer_config,
        given=frozenset(given),
    )
