"""A KafkaRDD as a DataFrame with the schema of Spark's Kafka source."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from kafka_direct.consumer_record import ConsumerRecord
from kafka_direct.errors import ConfigurationError, RecordError
from kafka_direct.task_errors import carry_errors

__all__ = ["KAFKA_SOURCE_COLUMNS", "MAX_TIMESTAMP_MS", "MIN_TIMESTAMP_MS", "kafka_source_schema",
           "record_to_row", "records_to_dataframe", "timestamp_error"]

#: The largest and smallest Kafka timestamps (ms) whose microseconds fit Spark's timestamp
#: (an int64 of microseconds), as Spark's source converts them with ``Math.multiplyExact``.
MAX_TIMESTAMP_MS = (2**63 - 1) // 1000
MIN_TIMESTAMP_MS = -(2**63 // 1000)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: Column order of Spark's Kafka source (``spark.read.format("kafka")``).
KAFKA_SOURCE_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp",
                        "timestampType", "headers")


def kafka_source_schema() -> Any:
    """The StructType of Spark's Kafka source, headers included."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    header = StructType([StructField("key", StringType(), True),
                         StructField("value", BinaryType(), True)])
    return StructType([
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
        StructField("headers", ArrayType(header, True), True),
    ])


def timestamp_error(topic: str, partition: int, offset: int, millis: int,
                    limit: str = "Spark's timestamp (microseconds in 64 bits)") -> RecordError:
    """The error of a record whose timestamp (ms) cannot become a row's ``timestamp``.

    Args:
        topic: The record's topic.
        partition: The record's partition.
        offset: The record's offset.
        millis: Its timestamp as Kafka gave it.
        limit: What cannot hold it (for the message).
    """
    cause = (f"its timestamp {millis} is beyond what {limit} holds as milliseconds since "
             f"the epoch; Kafka timestamps are milliseconds, so it was likely written in "
             f"nanoseconds or microseconds")
    return RecordError(
        f"record {topic}-{partition} at offset {offset}: {cause}. Fix the producer to send "
        f"milliseconds (e.g. int(time.time() * 1000)); to read on without that record, start "
        f"after it (startingOffsets {{\"{topic}\": {{\"{partition}\": {offset + 1}}}}})",
        topic=topic, partition=partition, offset=offset, cause=cause, timestamp=millis)


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
            timestamp, record.timestampType, [tuple(h) for h in record.headers])


def _rows(records: Any) -> Any:
    # Our errors (a record's timestamp) reach the driver with their type, as data.
    return carry_errors(map(record_to_row, records))


def records_to_dataframe(rdd: Any, settings: Any, spark: Any = None) -> Any:
    """The records of a KafkaRDD as a DataFrame (needs raw bytes keys and values)."""
    if (settings.keyDeserializer is not None or settings.valueDeserializer is not None
            or settings.messageHandler is not None):
        raise ConfigurationError(
            "toDF() needs raw records: build the KafkaRDD without keyDeserializer, "
            "valueDeserializer and messageHandler, then decode columns in Spark SQL"
        )
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.getOrCreate()
    return spark.createDataFrame(rdd.mapPartitions(_rows), kafka_source_schema())
