"""PostgresOffsetStore: offsets in a PostgreSQL table, committed in the results' transaction.

One row per (group, topic, partition) holds the next offset to read and when it changed.
:meth:`PostgresOffsetStore.claim` and :meth:`PostgresOffsetStore.advance` work inside a
transaction the caller owns, so a sink writes a range's results and moves its offset in the
same transaction; :meth:`commit` does both steps for several ranges in a transaction of its
own. The row lock taken by ``claim`` (``SELECT ... FOR UPDATE``) makes concurrent writers of
the same partition wait for each other; the one that comes second finds the offset moved on:
its range is already applied (a duplicate, which writes nothing) or it is an
:class:`~kafka_direct.errors.OffsetMismatchError`.

Identifiers are always quoted with ``psycopg2.sql``; connection strings never appear in logs
or errors.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from kafka_direct import (
    ConfigurationError,
    GroupBusyError,
    OffsetRange,
    OffsetStoreError,
    TopicPartition,
)
from offsets.offset_store import OffsetStore, check_range

__all__ = ["PostgresOffsetStore", "describe_database_error"]

logger = logging.getLogger(__name__)

_LOCK_SPACE = 0x6B64  # first key of the store's advisory locks, apart from other users'
_SECRET = re.compile(r"(password\s*=\s*)(\S+)", re.IGNORECASE)


def describe_database_error(error: BaseException) -> str:
    """A database driver error on one line, any password in it masked."""
    return _SECRET.sub(r"\1***", " ".join(str(error).split())) or type(error).__name__


class PostgresOffsetStore(OffsetStore):
    """Offsets in ``schema.table`` of a PostgreSQL database.

    Args:
        dsn: A libpq connection string, or None when ``connect`` is given.
        table: Table name (created by :meth:`ensure_schema`, or on first use).
        schema: Schema of the table.
        connect: A function returning a new psycopg2 connection (instead of ``dsn``).
    """

    def __init__(self, dsn: str | None = None, table: str = "kafka_offsets",
                 schema: str = "public", connect: Callable[[], Any] | None = None) -> None:
        if (dsn is None) == (connect is None):
            raise ConfigurationError("PostgresOffsetStore needs a dsn or a connect function "
                                     "(one of them)")
        for name, value in (("table", table), ("schema", schema)):
            if not isinstance(value, str) or not value:
                raise ConfigurationError(f"PostgresOffsetStore {name} must be a non-empty "
                                         f"name, got {value!r}")
        self._dsn = dsn
        self._connect = connect
        self.table = table
        self.schema = schema
        self._ready = False

    def __repr__(self) -> str:
        return f"PostgresOffsetStore(table={self.schema}.{self.table})"  # no credentials

    def connect(self) -> Any:
        """A new connection to the store's database."""
        if self._connect is not None:
            return self._connect()
        import psycopg2

        return psycopg2.connect(self._dsn)

    def _identifier(self) -> Any:
        from psycopg2 import sql

        return sql.Identifier(self.schema, self.table)

    def ensure_schema(self, cursor: Any = None) -> None:
        """Create the schema and table if they do not exist (safe to repeat)."""
        from psycopg2 import sql

        statements = [
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)),
            sql.SQL("CREATE TABLE IF NOT EXISTS {} ("
                    "group_id text NOT NULL, topic text NOT NULL, "
                    "kafka_partition integer NOT NULL CHECK (kafka_partition >= 0), "
                    "next_offset bigint NOT NULL CHECK (next_offset >= 0), "
                    "updated_at timestamptz NOT NULL DEFAULT now(), "
                    "PRIMARY KEY (group_id, topic, kafka_partition))").format(self._identifier()),
        ]
        if cursor is not None:
            for statement in statements:
                cursor.execute(statement)
        else:
            with self._own("creating the offsets table") as own:
                for statement in statements:
                    own.execute(statement)
        self._ready = True

    @contextlib.contextmanager
    def transaction(self, statementTimeoutMs: int | None = None) -> Iterator[Any]:
        """A cursor in a transaction of its own: committed on success, else rolled back."""
        connection = self.connect()
        try:
            with connection, connection.cursor() as cursor:
                if statementTimeoutMs:
                    cursor.execute("SET LOCAL statement_timeout = %s", (int(statementTimeoutMs),))
                yield cursor
        finally:
            connection.close()

    @contextlib.contextmanager
    def _own(self, what: str) -> Iterator[Any]:
        """:meth:`transaction`, its database errors raised as :class:`OffsetStoreError`."""
        import psycopg2

        try:
            with self.transaction() as cursor:
                yield cursor
        except psycopg2.Error as error:
            cause = describe_database_error(error)
            raise OffsetStoreError(
                f"{what} in {self!r} failed and changed nothing: {cause}. Run again once "
                "the database answers; the stored offsets are as they were",
                store=repr(self), cause=cause) from error

    @contextlib.contextmanager
    def lockGroup(self, group: str) -> Iterator[None]:
        """Hold ``group`` for one running job, or fail at once if another job holds it.

        A session-level advisory lock on a connection of its own, held while the block runs.
        PostgreSQL releases it when that session ends, also when the job is killed, so a
        restarted job can take it straight away. Row locks keep commits safe without it;
        the lock makes a second job fail before it reads or writes anything.

        Raises:
            GroupBusyError: Another session holds the group's lock.
            OffsetStoreError: The database did not answer.
        """
        import psycopg2

        connection = None
        try:
            connection = self.connect()
            connection.autocommit = True
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))",
                               (_LOCK_SPACE, f"{self.schema}.{self.table}/{group}"))
                held = bool(cursor.fetchone()[0])
            if not held:
                raise GroupBusyError(
                    f"consumer group {group!r} is held by another running job (its lock in "
                    f"{self.schema}.{self.table}'s database); stop that job or use another "
                    "group", group=group)
        except psycopg2.Error as error:
            if connection is not None:
                connection.close()
            cause = describe_database_error(error)
            raise OffsetStoreError(f"taking consumer group {group!r} in {self!r} failed: "
                                   f"{cause}", store=repr(self), cause=cause) from error
        except BaseException:
            if connection is not None:
                connection.close()
            raise
        try:
            logger.info("holding consumer group %r", group)
            yield
        finally:
            connection.close()  # ends the session, which releases the lock

    def _ensure(self, cursor: Any = None) -> None:
        if not self._ready:
            self.ensure_schema(cursor)

    def load(self, group: str, topics: Iterable[str] | None = None
             ) -> dict[TopicPartition, int]:
        """The stored next offsets of ``group`` (of ``topics`` only, if given)."""
        from psycopg2 import sql

        self._ensure()
        query = sql.SQL("SELECT topic, kafka_partition, next_offset FROM {} "
                        "WHERE group_id = %s").format(self._identifier())
        params: list[Any] = [group]
        if topics is not None:
            query = query + sql.SQL(" AND topic = ANY(%s)")
            params.append(list(topics))
        with self._own("loading offsets") as cursor:
            cursor.execute(query, params)
            rows = cursor.fetchall()
        return {TopicPartition(topic, int(p)): int(offset) for topic, p, offset in rows}

    def seed(self, group: str, offsets: Mapping[TopicPartition, int],
             cursor: Any = None) -> None:
        """Insert starting offsets for partitions without a row; existing rows stay."""
        from psycopg2 import sql

        statement = sql.SQL("INSERT INTO {} (group_id, topic, kafka_partition, next_offset) "
                            "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING"
                            ).format(self._identifier())
        rows = [(group, tp.topic, tp.partition, int(offset))
                for tp, offset in sorted(offsets.items())]
        if cursor is not None:
            self._ensure(cursor)
            cursor.executemany(statement, rows)
            return
        self._ensure()
        with self._own("seeding offsets") as own:
            own.executemany(statement, rows)

    def claim(self, cursor: Any, group: str, offsetRange: OffsetRange) -> bool:
        """Lock the range's row in the caller's transaction and check it.

        Returns:
            True when the stored offset is the range's ``fromOffset`` (write the results,
            then :meth:`advance`); False when it is already ``untilOffset`` (the range was
            applied before: write nothing).

        Raises:
            OffsetMismatchError: Any other stored offset, or no row (seed it first).
        """
        from psycopg2 import sql

        cursor.execute(sql.SQL("SELECT next_offset FROM {} WHERE group_id = %s AND topic = %s "
                               "AND kafka_partition = %s FOR UPDATE").format(self._identifier()),
                       (group, offsetRange.topic, offsetRange.partition))
        row = cursor.fetchone()
        stored = None if row is None else int(row[0])
        fresh = check_range(group, offsetRange, stored)
        if not fresh and offsetRange.count():
            logger.info("range %s of group %s was applied before; skipped", offsetRange, group)
        return fresh

    def advance(self, cursor: Any, group: str, offsetRange: OffsetRange) -> None:
        """Set the range's partition to ``untilOffset`` (after a successful :meth:`claim`)."""
        from psycopg2 import sql

        cursor.execute(sql.SQL("UPDATE {} SET next_offset = %s, updated_at = now() "
                               "WHERE group_id = %s AND topic = %s AND kafka_partition = %s "
                               "AND next_offset = %s").format(self._identifier()),
                       (offsetRange.untilOffset, group, offsetRange.topic,
                        offsetRange.partition, offsetRange.fromOffset))

    def commit(self, group: str, offsetRanges: Sequence[OffsetRange],
               cursor: Any = None) -> None:
        """Advance every range, all or nothing (in ``cursor``'s transaction if given).

        Raises:
            OffsetMismatchError: A range does not continue from its stored offset.
        """
        ranges = sorted(offsetRanges, key=lambda r: (r.topic, r.partition))  # lock order
        if cursor is not None:
            self._apply(cursor, group, ranges)
            return
        self._ensure()
        with self._own("committing offsets") as own:
            self._apply(own, group, ranges)

    def _apply(self, cursor: Any, group: str, ranges: Sequence[OffsetRange]) -> None:
        for offsetRange in ranges:
            if self.claim(cursor, group, offsetRange):
                self.advance(cursor, group, offsetRange)
