"""Offset stores: where a stream resumes from (PostgreSQL, the Kafka consumer group, a checkpoint).

An offset store keeps, per (group, topic, partition), the *next offset to read*: the
``untilOffset`` of the last range whose results were committed.
"""

from __future__ import annotations

from offsets.checkpoint_offset_store import CheckpointOffsetStore
from offsets.from_store import createDirectStreamFromStore, offsetRangesFromStore
from offsets.kafka_offset_store import KafkaOffsetStore
from offsets.offset_store import OffsetStore
from offsets.postgres_offset_store import PostgresOffsetStore

__all__ = [
    "CheckpointOffsetStore",
    "KafkaOffsetStore",
    "OffsetStore",
    "PostgresOffsetStore",
    "createDirectStreamFromStore",
    "offsetRangesFromStore",
]
