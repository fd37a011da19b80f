"""The schema of Spark's Kafka source, and the timestamps it can hold.

What every DataFrame of records shares: KafkaRDD's DataFrame view and the Structured
Streaming source build their rows and Arrow batches to this schema, and name a record
whose timestamp it cannot hold with :func:`timestamp_error`.
"""

from __future__ import annotations

from typing import Any

from kafka_direct.errors import RecordError

__all__ = ["KAFKA_SOURCE_COLUMNS", "MAX_TIMESTAMP_MS", "MIN_TIMESTAMP_MS", "all_columns",
           "kafka_source_schema", "schema_columns", "select_columns", "timestamp_error"]

#: The largest and smallest Kafka timestamps (ms) whose microseconds fit Spark's timestamp
#: (an int64 of microseconds), as Spark's source converts them with ``Math.multiplyExact``.
MAX_TIMESTAMP_MS = (2**63 - 1) // 1000
MIN_TIMESTAMP_MS = -(2**63 // 1000)

#: Column order of Spark's Kafka source (``spark.read.format("kafka")``).
KAFKA_SOURCE_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp",
                        "timestampType", "headers")


def all_columns(includeHeaders: bool) -> tuple[str, ...]:
    """The source's columns when none are selected: ``headers`` only if included."""
    return KAFKA_SOURCE_COLUMNS if includeHeaders else KAFKA_SOURCE_COLUMNS[:7]


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


def select_columns(names: Any, includeHeaders: bool, what: str = "columns") -> tuple[str, ...]:
    """The Kafka columns a read builds, checked: a non-empty subset, each named once.

    Spark's Python data sources are not told which columns a query uses, so a reader that
    needs only some of them names them (the source's ``columns`` option or a ``.schema()``
    of some of its columns); the others are never built.

    Args:
        names: Column names of :data:`KAFKA_SOURCE_COLUMNS`, in the order the rows have them
            (a sequence of strings, or one comma-separated string).
        includeHeaders: Whether ``headers`` may be named.
        what: What gave the names (for messages).

    Raises:
        ConfigurationError: An unknown, repeated or missing name, or ``headers`` without
            ``includeHeaders``.
    """
    from kafka_direct.errors import ConfigurationError

    try:
        # An option's names may have spaces around the commas; a schema's are exact.
        chosen = (tuple(name.strip() for name in names.split(",")) if isinstance(names, str)
                  else tuple(str(name) for name in names))
    except TypeError:
        chosen = ()
    known = ", ".join(KAFKA_SOURCE_COLUMNS)
    if not chosen or "" in chosen:
        raise ConfigurationError(
            f"{what} must name one or more of the Kafka columns ({known}), comma-separated, "
            f"got {names!r}")
    for name in chosen:
        if name not in KAFKA_SOURCE_COLUMNS:
            raise ConfigurationError(
                f"{what} names {name!r}, which is not a Kafka column: use the exact names "
                f"{known}")
        if chosen.count(name) > 1:
            raise ConfigurationError(f"{what} names the column {name!r} twice")
    if "headers" in chosen and not includeHeaders:
        raise ConfigurationError(
            f"{what} names 'headers' but the source option includeHeaders is not true: set "
            "includeHeaders=true to read the headers")
    return chosen


def schema_columns(given: Any, includeHeaders: bool) -> tuple[str, ...] | None:
    """The columns a user's ``.schema(...)`` selects, or None for the whole schema.

    A schema of some of the Kafka columns, each with its Kafka type, selects them (in its
    order); the others are never built. Every Kafka column may be null to Spark (as Spark's
    source declares them), so a field declared NOT NULL, even inside ``headers``, is refused:
    Spark would fail the read, or drop a ``value IS NULL`` filter as always false.

    Raises:
        ConfigurationError: A field that is not a Kafka column, not of its type, or NOT NULL.
    """
    from kafka_direct.errors import ConfigurationError

    fields = getattr(given, "fields", None)
    if not isinstance(fields, list):
        raise ConfigurationError(f"the kafka-direct source reads with a StructType schema, "
                                 f"got {type(given).__name__}")
    full = kafka_source_schema()
    wanted = select_columns([f.name for f in fields], includeHeaders, "the schema given")
    for field_ in fields:
        expected = full[field_.name].dataType
        if field_.dataType.simpleString() == expected.simpleString() and (
                field_.dataType != expected or not field_.nullable):
            raise ConfigurationError(
                f"the schema given declares column {field_.name!r} (or a part of it) NOT "
                f"NULL, but Kafka's columns may be null: declare it nullable (drop NOT NULL, "
                f"or nullable=True / containsNull=True)")
        if field_.dataType != expected:
            raise ConfigurationError(
                f"the schema given types column {field_.name!r} as "
                f"{field_.dataType.simpleString()}, but Kafka's {field_.name!r} is "
                f"{expected.simpleString()}: give that type, and cast after load()")
    return None if wanted == all_columns(includeHeaders) else wanted


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
        f"{offset + 1}}}}}, or an OffsetRange from {offset + 1}), or read without the "
        f"timestamp column (the source's option columns, e.g. columns=key,value,offset)",
        topic=topic, partition=partition, offset=offset, cause=cause, timestamp=millis)
