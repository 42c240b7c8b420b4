"""The input contract every reader meets: the four columns, the file formats, the quarantine reasons.

A leaf module (it imports nothing of the pipeline), so the file reader (`ingest`), the Kafka reader
(`kafka.telemetry`) and the generator (`generate`) can all share it without importing one another.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

REQUIRED_COLUMNS = ("ts", "type", "entity", "value")
FORMATS = ("parquet", "csv", "jsonl")
# Checked in this order; a row gets the first reason that applies.
REASONS = (
    "value_not_json",  # Kafka input only: the message is not a JSON object
    "ts_missing",
    "ts_unparseable",
    "ts_out_of_range",
    "type_missing",
    "entity_missing",
    "value_missing",
    "value_not_numeric",
    "value_not_finite",
)
# Skew ratios (`balance.metrics.max_over_median`) in summaries and reports are rounded to this.
SKEW_DIGITS = 4
# Set by a Kafka input (rebalancer.pipeline.kafka.telemetry) on messages that are not JSON objects.
NOT_JSON_COLUMN = "_value_not_json"


@dataclass
class RowCounts:
    """Rows read, accepted and quarantined (by reason): one pass's, or a stream's over every batch.

    The counts every summary reconciles (ingested == accepted + quarantined); `ordered` is the one
    place a summary's reasons are put in REASONS order."""

    ingested: int = 0
    accepted: int = 0
    quarantined: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    def add(self, counts: RowCounts) -> None:
        """Adds another pass's counts (a stream's next batch) to these."""
        self.ingested += counts.ingested
        self.accepted += counts.accepted
        self.quarantined += counts.quarantined
        for reason, count in counts.reasons.items():
            self.reasons[reason] = self.reasons.get(reason, 0) + count

    def ordered(self) -> RowCounts:
        """These counts, as a summary shows them: the reasons in REASONS order (the order a row is
        checked in), any other after them."""
        reasons = {reason: self.reasons[reason] for reason in REASONS if reason in self.reasons}
        reasons.update((reason, count) for reason, count in self.reasons.items() if reason not in reasons)
        return RowCounts(self.ingested, self.accepted, self.quarantined, reasons)

    def to_json(self) -> dict[str, int | dict[str, int]]:
        """As a stream's state.json keeps its totals."""
        return {
            "ingested": self.ingested,
            "accepted": self.accepted,
            "quarantined": self.quarantined,
            "reasons": self.reasons,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RowCounts:
        return cls(data["ingested"], data["accepted"], data["quarantined"], dict(data.get("reasons", {})))


def column_mapping(columns: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every contract column -> its name in the source; unmapped columns keep their own name."""
    given = dict(columns or {})
    unknown = [name for name in given if name not in REQUIRED_COLUMNS]
    if unknown:
        raise ValueError(
            f"columns: unknown column {unknown[0]!r} (the columns are {', '.join(REQUIRED_COLUMNS)})"
        )
    full = {name: given.get(name, name) for name in REQUIRED_COLUMNS}
    seen: dict[str, str] = {}
    for name, source in full.items():
        if not source:
            raise ValueError(f"columns: the source name for {name!r} is empty")
        if source in seen:
            raise ValueError(f"columns: {source!r} is mapped twice ({seen[source]} and {name})")
        seen[source] = name
    return full


def text_schema(names: tuple[str, ...] | list[str] = REQUIRED_COLUMNS) -> StructType:
    """Columns as strings: CSV and JSON values are kept exactly as written."""
    from pyspark.sql.types import StringType, StructField, StructType

    return StructType([StructField(name, StringType(), True) for name in names])


@runtime_checkable
class Input(Protocol):
    """What the run drivers use of an input, files (`ingest.InputSpec`) or a topic
    (`kafka.telemetry.KafkaInput`): the drivers never ask which one they hold (`RunRequest` asks
    only whether a value is one: isinstance checks that it has every member)."""

    @property
    def format(self) -> str: ...

    @property
    def files(self) -> tuple[Any, ...]: ...

    @property
    def columns(self) -> Mapping[str, str]: ...

    def describe(self) -> str:
        """The input as summaries and errors show it (secrets masked)."""
        ...

    def read_batch(self, spark: SparkSession) -> DataFrame:
        """The rows as they are now, with the four contract columns in their source types."""
        ...

    def read_stream(self, spark: SparkSession, files_per_batch: int) -> DataFrame:
        """A streaming DataFrame of the same columns."""
        ...

    def group_run(self) -> Any:
        """A batch run's exact range and the commit that ends it (a Kafka consumer group's
        `GroupRead`), or None: files have no committed position."""
        ...
