"""The schema of Spark's Kafka source, and the timestamps it can hold.

What every DataFrame of records shares: KafkaRDD's DataFrame view and the Structured
Streaming source build their rows and Arrow batches to this schema, and name a record
whose timestamp it cannot hold with :func:`timestamp_error`.
"""

from __future__ import annotations

from typing import Any

from kafka_direct.errors import RecordError

__all__ = ["KAFKA_SOURCE_COLUMNS", "MAX_TIMESTAMP_MS", "MIN_TIMESTAMP_MS", "kafka_source_schema",
           "timestamp_error"]

#: The largest and smallest Kafka timestamps (ms) whose microseconds fit Spark's timestamp
#: (an int64 of microseconds), as Spark's source converts them with ``Math.multiplyExact``.
MAX_TIMESTAMP_MS = (2**63 - 1) // 1000
MIN_TIMESTAMP_MS = -(2**63 // 1000)

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
        f"after it (the source's startingOffsets {{\"{topic}\": {{\"{partition}\": "
        f"{offset + 1}}}}}, or an OffsetRange from {offset + 1})",
        topic=topic, partition=partition, offset=offset, cause=cause, timestamp=millis)
