"""ConsumerRecord: one Kafka record as a task sees it."""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = [
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "NO_TIMESTAMP_TYPE",
    "ConsumerRecord",
    "timestamp_type_name",
]

#: Timestamp types as Kafka's Java client and Spark's Kafka source number them.
NO_TIMESTAMP_TYPE = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1

_TYPE_NAMES = {NO_TIMESTAMP_TYPE: "NoTimestampType", CREATE_TIME: "CreateTime",
               LOG_APPEND_TIME: "LogAppendTime"}


def timestamp_type_name(timestampType: int) -> str:
    """Kafka's name of a timestamp type (``CreateTime``, ``LogAppendTime``...)."""
    return _TYPE_NAMES.get(timestampType, f"Unknown({timestampType})")


class ConsumerRecord(NamedTuple):
    """A Kafka record: where it is (topic, partition, offset) and what it holds.

    A named tuple, so it is small, fast to build on executors, and pickles compactly when
    records are collected or shuffled.

    Attributes:
        topic: Topic name.
        partition: Partition number.
        offset: The record's offset in its partition.
        timestamp: Milliseconds since the epoch, or -1 when the record has none.
        timestampType: :data:`CREATE_TIME`, :data:`LOG_APPEND_TIME` or
            :data:`NO_TIMESTAMP_TYPE` (Kafka's Java numbering, as Spark's Kafka source).
        key: The key: raw bytes, or what the key deserializer made of them; None if absent.
        value: The value: raw bytes, or what the value deserializer made of them; None for a
            tombstone.
        headers: ``(name, value bytes)`` pairs, or an empty tuple.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestampType: int
    key: Any
    value: Any
    headers: tuple[tuple[str, bytes | None], ...] = ()
