"""The former home of :mod:`kafka_direct.rdd.dataframe`, kept so user imports still work.

A KafkaRDD's DataFrame view (``KafkaRDD.toDF``) needs no Structured Streaming support, so it
lives beside KafkaRDD now.
"""

from kafka_direct.rdd.dataframe import (
    KAFKA_SOURCE_COLUMNS,
    MAX_TIMESTAMP_MS,
    MIN_TIMESTAMP_MS,
    kafka_source_schema,
    record_to_row,
    records_to_dataframe,
    timestamp_error,
)

__all__ = ["KAFKA_SOURCE_COLUMNS", "MAX_TIMESTAMP_MS", "MIN_TIMESTAMP_MS", "kafka_source_schema",
           "record_to_row", "records_to_dataframe", "timestamp_error"]
