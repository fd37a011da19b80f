"""A KafkaRDD as a DataFrame with the schema of Spark's Kafka source."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kafka_direct.consumer_record import ConsumerRecord
from kafka_direct.errors import ConfigurationError

__all__ = ["KAFKA_SOURCE_COLUMNS", "kafka_source_schema", "record_to_row", "records_to_dataframe"]

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


def record_to_row(record: ConsumerRecord) -> tuple[Any, ...]:
    """One record as a row of :func:`kafka_source_schema` (timestamps as UTC datetimes)."""
    timestamp = (datetime.fromtimestamp(record.timestamp / 1000.0, tz=UTC)
                 if record.timestamp >= 0 else None)
    return (record.key, record.value, record.topic, record.partition, record.offset,
            timestamp, record.timestampType, [tuple(h) for h in record.headers])


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
    return spark.createDataFrame(rdd.map(record_to_row), kafka_source_schema())
