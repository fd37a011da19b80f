"""A KafkaRDD as a DataFrame with the schema of Spark's Kafka source.

``KafkaRDD.toDF()`` reads its ranges as Arrow record batches, with the reader the Structured
Streaming source uses (:mod:`kafka_direct.rdd.arrow_reader`: the native columnar one where it
applies), inside ``mapInArrow`` over a DataFrame of the ranges, one Spark partition per
range placed as the KafkaRDD's: no Python object per record, and the batches go to the JVM
as they are. Timestamps are those Spark's own source holds (microseconds in 64 bits).

:func:`record_to_row` remains for rows built in Python (``createDataFrame`` over records of
any RDD), where timestamps are Python datetimes (years 1 to 9999).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from kafka_direct.consumer_record import ConsumerRecord
from kafka_direct.errors import ConfigurationError
from kafka_direct.offset_range import OffsetRange
from kafka_direct.rdd.arrow_reader import PartitionReadSettings, driver_impl, read_task
from kafka_direct.rdd.kafka_schema import (
    KAFKA_SOURCE_COLUMNS,
    MAX_TIMESTAMP_MS,
    MIN_TIMESTAMP_MS,
    kafka_source_schema,
    timestamp_error,
)
from kafka_direct.rdd.read_settings import ReadSettings
from kafka_direct.task_errors import carry_errors

__all__ = ["KAFKA_SOURCE_COLUMNS", "MAX_TIMESTAMP_MS", "MIN_TIMESTAMP_MS", "kafka_source_schema",
           "record_to_row", "records_to_dataframe", "timestamp_error"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def record_to_row(record: ConsumerRecord) -> tuple[Any, ...]:
    """One record as a row of :func:`kafka_source_schema` (timestamps as UTC datetimes).

    Raises:
        RecordError: A timestamp beyond Python's datetime (years 1 to 9999), which
            ``createDataFrame`` takes timestamps as.
    """
    timestamp = None
    if record.timestamp >= 0:
        try:
            # Exact integer milliseconds (a float division would round large ones).
            timestamp = _EPOCH + timedelta(milliseconds=record.timestamp)
        except OverflowError:
            raise timestamp_error(record.topic, record.partition, record.offset,
                                  record.timestamp, "Python's datetime (years 1 to 9999)"
                                  ) from None
    return (record.key, record.value, record.topic, record.partition, record.offset,
            timestamp, record.timestampType,
            # Null for a record without headers, as Spark's source and the Arrow path.
            [tuple(h) for h in record.headers] or None)


def _rows(records: Any) -> Any:
    # Our errors (a record's timestamp) reach the driver with their type, as data.
    return carry_errors(map(record_to_row, records))


#: The DataFrame of ranges ``toDF`` reads: one row, and one Spark partition, per range.
_RANGE_SCHEMA = "topic string, partition int, fromOffset long, untilOffset long"


def _range_rows(element: Any) -> list[tuple[str, int, int, int]]:
    # A grouped KafkaRDD's parent holds a list of range tuples per Spark partition
    # (kafka_rdd.group_element): a row each, in the partition of its group.
    if type(element) is list:
        return [_range_row(part) for part in element]
    return [_range_row(element)]


def _range_row(element: Any) -> tuple[str, int, int, int]:
    # A KafkaRDD's parent holds range tuples (kafka_rdd.range_element); one built by hand
    # may hold OffsetRanges.
    if isinstance(element, OffsetRange):
        element = (element.topic, element.partition, element.fromOffset,
                   element.untilOffset)
    topic, partition, fromOffset, untilOffset = element
    return (topic, partition, fromOffset, untilOffset)


class _ReadRanges:
    """The ``mapInArrow`` function of ``toDF``: batches of ranges -> their records' batches."""

    def __init__(self, settings: PartitionReadSettings) -> None:
        self.settings = settings

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            for topic, partition, fromOffset, untilOffset in zip(
                    *(batch.column(i).to_pylist() for i in range(4)), strict=True):
                yield from read_task(OffsetRange(topic, partition, fromOffset, untilOffset),
                                     self.settings)


def records_to_dataframe(rdd: Any, settings: ReadSettings, spark: Any = None) -> Any:
    """The records of a KafkaRDD as a DataFrame (needs raw bytes keys and values).

    A KafkaRDD is read as Arrow batches (see the module's docstring); a persisted or
    checkpointed one, and any other RDD of
    :class:`~kafka_direct.consumer_record.ConsumerRecord`, goes through :func:`record_to_row`.

    Raises:
        ConfigurationError: The KafkaRDD has a deserializer or a message handler.
    """
    if (settings.keyDeserializer is not None or settings.valueDeserializer is not None
            or settings.messageHandler is not None):
        raise ConfigurationError(
            "toDF() needs raw records: build the KafkaRDD without keyDeserializer, "
            "valueDeserializer and messageHandler, then decode columns in Spark SQL"
        )
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.getOrCreate()
    ranges = getattr(rdd, "_ranges_rdd", None)
    if ranges is None:
        return spark.createDataFrame(rdd.mapPartitions(_rows), kafka_source_schema())
    if rdd.holdsRecords():
        # Records Spark keeps: rows from them, so that the view shows what the RDD's other
        # actions show (Kafka may have deleted them since).
        return spark.createDataFrame(rdd.keptRecords().mapPartitions(_rows),
                                     kafka_source_schema())
    schema = kafka_source_schema()
    if not rdd.offsetRanges():
        return spark.createDataFrame([], schema)
    read = _ReadRanges(PartitionReadSettings(settings, includeHeaders=True,
                                             impl=driver_impl(), planned=False))
    return spark.createDataFrame(ranges.flatMap(_range_rows), _RANGE_SCHEMA).mapInArrow(
        read, schema)
