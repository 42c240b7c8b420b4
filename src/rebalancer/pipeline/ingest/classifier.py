"""Sorting rows into accepted and quarantined, with one reason per bad row."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rebalancer.pipeline.ingest.contract import NOT_JSON_COLUMN, REQUIRED_COLUMNS
from rebalancer.pipeline.ingest.contract import (
    REASONS as REASONS,
)
from rebalancer.pipeline.ingest.files import (
    EPOCH_MS_PATTERN,
    TS_MAX_MICROS,
    TS_MAX_MS,
    TS_MIN_MICROS,
    TS_MIN_MS,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


# Intermediate columns of `classify`, each computed once per row and dropped at the end.
_TS_TEXT, _TS_EPOCH, _TS_NUMBER, _TS_ISO, _TS_OUT = (
    "__ts_text",
    "__ts_epoch",
    "__ts_number",
    "__ts_iso",
    "__ts_out_of_range",
)


def _parse_ts(frame: DataFrame) -> DataFrame:
    """`frame` plus `ts_parsed` (null unless parseable and in range) and `_TS_OUT` (parsed, but out of range).

    Epoch milliseconds are range-checked as numbers before they become timestamps, so a huge one
    never overflows. Text without an offset is UTC (the pipeline pins the session zone to UTC).
    The trimmed text and each parse are columns of their own: as nested expressions Spark would
    evaluate them once per reference, and this pass is most of the pipeline's first read.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType, NumericType, StringType, TimestampNTZType, TimestampType

    kind = frame.schema["ts"].dataType
    ts = F.col("ts")

    def epoch_in_range(number: Column) -> Column:
        return number.between(F.lit(TS_MIN_MS), F.lit(TS_MAX_MS))

    def epoch_out_of_range(number: Column) -> Column:
        return number.isNotNull() & ~F.isnan(number) & ~epoch_in_range(number)

    def instant_in_range(parsed: Column) -> Column:
        return F.unix_micros(parsed).between(F.lit(TS_MIN_MICROS), F.lit(TS_MAX_MICROS))

    if isinstance(kind, TimestampType | TimestampNTZType | DateType):
        frame = frame.withColumn(_TS_ISO, ts.cast("timestamp"))
        iso = F.col(_TS_ISO)
        return frame.withColumn("ts_parsed", F.when(instant_in_range(iso), iso)).withColumn(
            _TS_OUT, iso.isNotNull() & ~instant_in_range(iso)
        )
    if isinstance(kind, NumericType):
        frame = frame.withColumn(_TS_NUMBER, ts.try_cast("double"))
        number = F.col(_TS_NUMBER)
        return frame.withColumn(
            "ts_parsed", F.when(epoch_in_range(number), F.timestamp_millis(ts.try_cast("bigint")))
        ).withColumn(_TS_OUT, epoch_out_of_range(number))
    text = F.trim(ts.cast("string") if not isinstance(kind, StringType) else ts)
    frame = frame.withColumn(_TS_TEXT, text).withColumn(_TS_EPOCH, F.col(_TS_TEXT).rlike(EPOCH_MS_PATTERN))
    epoch = F.col(_TS_EPOCH)
    frame = frame.withColumn(_TS_NUMBER, F.when(epoch, F.col(_TS_TEXT).try_cast("double"))).withColumn(
        _TS_ISO, F.when(~epoch, F.try_to_timestamp(F.col(_TS_TEXT)))
    )
    number, iso = F.col(_TS_NUMBER), F.col(_TS_ISO)
    parsed = F.when(
        epoch, F.when(epoch_in_range(number), F.timestamp_millis(F.col(_TS_TEXT).try_cast("bigint")))
    )
    out_of_range = F.when(epoch, epoch_out_of_range(number)).otherwise(
        iso.isNotNull() & ~instant_in_range(iso)
    )
    return frame.withColumn("ts_parsed", parsed.otherwise(F.when(instant_in_range(iso), iso))).withColumn(
        _TS_OUT, out_of_range
    )


def classify(frame: DataFrame) -> DataFrame:
    """Adds the parsed columns (`ts_parsed`, `value_num`) and `reason` (null for a good row)."""
    from pyspark.sql import functions as F

    frame = _parse_ts(frame).withColumn("value_num", F.col("value").try_cast("double"))
    value_text = F.col("value").cast("string")
    reason = (
        F.when(F.col("ts").isNull(), F.lit("ts_missing"))
        .when(F.col(_TS_OUT), F.lit("ts_out_of_range"))
        .when(F.col("ts_parsed").isNull(), F.lit("ts_unparseable"))
        .when(F.col("type").isNull() | (F.trim(F.col("type").cast("string")) == ""), F.lit("type_missing"))
        .when(F.col("entity").isNull(), F.lit("entity_missing"))
        .when(F.col("value").isNull() | (F.trim(value_text) == ""), F.lit("value_missing"))
        .when(F.col("value_num").isNull(), F.lit("value_not_numeric"))
        .when(F.isnan("value_num") | (F.abs(F.col("value_num")) == float("inf")), F.lit("value_not_finite"))
    )
    if NOT_JSON_COLUMN in frame.columns:
        reason = F.when(F.col(NOT_JSON_COLUMN), F.lit("value_not_json")).otherwise(reason)
    helpers = [name for name in (_TS_TEXT, _TS_EPOCH, _TS_NUMBER, _TS_ISO, _TS_OUT) if name in frame.columns]
    return frame.withColumn("reason", reason).drop(*helpers)


def cacheable_rows(classified: DataFrame) -> DataFrame:
    """`classified` as a run caches it for its later passes: a good row's raw `ts` and `value` are
    null (it goes on as `ts_parsed` and `value_num`); a quarantined row keeps its text for
    OUT/quarantine/. The raw timestamp text was the largest part of the cache and of its cost.
    """
    from pyspark.sql import functions as F

    quarantined = F.col("reason").isNotNull()
    columns = [
        F.when(quarantined, F.col(name)).alias(name) if name in ("ts", "value") else F.col(name)
        for name in classified.columns
    ]
    return classified.select(*columns)


def quarantine_rows(classified: DataFrame) -> DataFrame:
    """Bad rows: the original values as strings and the reason."""
    from pyspark.sql import functions as F

    return classified.filter(F.col("reason").isNotNull()).select(
        *[F.col(name).cast("string").alias(name) for name in REQUIRED_COLUMNS], "reason"
    )


def accepted_rows(classified: DataFrame) -> DataFrame:
    """Good rows in the dispatch shape: type, entity, minute (epoch seconds, UTC floor), value."""
    from pyspark.sql import functions as F

    minute = (F.floor(F.unix_micros(F.col("ts_parsed")) / F.lit(60_000_000)) * 60).cast("bigint")
    return classified.filter(F.col("reason").isNull()).select(
        F.col("type").cast("string").alias("type"),
        F.col("entity").cast("string").alias("entity"),
        minute.alias("minute"),
        F.col("value_num").alias("value"),
    )
