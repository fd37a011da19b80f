"""Offset stores: where a stream resumes from (PostgreSQL, the Kafka consumer group, a checkpoint).

An offset store keeps, per (group, topic, partition), the *next offset to read*: the
``untilOffset`` of the last range whose results were committed.
"""

from __future__ import annotations

__all__: list[str] = []
