"""Exactly-once writers into PostgreSQL: idempotent and transactional sinks.

A sink persists a batch's results together with the batch's offsets, so a stream that
restarts from the stored offsets neither loses nor repeats a record.
"""

from __future__ import annotations

from sinks.idempotent_postgres_sink import IdempotentPostgresSink
from sinks.transactional_postgres_sink import TransactionalPostgresSink

__all__ = ["IdempotentPostgresSink", "TransactionalPostgresSink"]
