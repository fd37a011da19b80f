"""PostgresOffsetStore: offsets in a PostgreSQL table, committed in the results' transaction.

One row per (group, topic, partition) holds the next offset to read and when it changed.
:meth:`PostgresOffsetStore.claim` and :meth:`PostgresOffsetStore.advance` work inside a
transaction the caller owns, so a sink writes a range's results and moves its offset in the
same transaction; :meth:`commit` does both steps for several ranges in a transaction of its
own. The row lock taken by ``claim`` (``SELECT ... FOR UPDATE``) makes concurrent writers of
the same partition wait for each other; the one that comes second finds the offset moved on:
its range is already applied (a duplicate, which writes nothing) or it is an
:class:`~kafka_direct.errors.OffsetMismatchError`.

:meth:`PostgresOffsetStore.lockGroup` keeps a second job of the group out, and keeps
holding on: a job whose lock was lost (PostgreSQL restarted, its session was terminated)
finds out before its next write (:meth:`PostgresOffsetStore.verifyLock`, which the sinks
call per batch) and either takes the lock again, when no other job held it in between, or
stops with :class:`~kafka_direct.errors.GroupBusyError`. Each taking of the lock bumps the
group's *generation* in ``<table>_locks``; writers fence their transactions with it, so
once a second job holds the group, no transaction of the first one commits. The lock itself,
:class:`~offsets.group_lock.GroupLock` (re-exported here), and how stores configured
differently find it live in :mod:`offsets.group_lock`.

A store made from a DSN keeps one connection between its own transactions (a connection
costs PostgreSQL a new backend process, and the client and server an authentication:
milliseconds, against a fraction of one for a transaction): those that run only the
store's statements (``load``, ``seed``, ``commit``), which leave nothing in the session.
A transaction handed to other code (a sink's batch, with the user's ``write`` function or
the target table's triggers; :meth:`PostgresOffsetStore.transaction`'s callers) gets a
connection of its own, closed after it: a ``SET``, a temporary table or a session lock of
one transaction never reaches the next. A transaction that finds the kept one in use
(another thread's) opens one of its own too. The kept connection is checked before each
use: a session the server ended while it was idle (a restart, a terminated backend) is
replaced, so the next transaction runs as on a new connection; one that broke or failed
to roll back in a transaction is dropped. A store made with a ``connect`` function opens
one per transaction, as that function decides.

A COMMIT that fails because the connection broke has an unknown outcome (the server may
have committed before the answer was lost): :class:`CommitOutcomeUnknownError` says so, and the
callers report it as such, never as "rolled back". A retry is exactly-once either way: the
offset check finds the range applied (skip) or not (write).

Identifiers are always quoted with ``psycopg2.sql``; connection strings never appear in logs
or errors.
"""

from __future__ import annotations

import contextlib
import logging
import select
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from kafka_direct import (
    ConfigurationError,
    GroupBusyError,
    OffsetRange,
    OffsetStoreError,
    TopicPartition,
)
from kafka_direct.postgres.catalog import ensure_tables, schema_exists, table_exists
from kafka_direct.postgres.errors import (
    CommitOutcomeUnknownError,
    commit_or_unknown,
    describe_database_error,
    fix_for,
)
from offsets.group_lock import (
    DATABASE_DOWN_FIX,
    DatabaseIdentity,
    GroupLock,
    database_of,
    find_held,
    normalised_dsn,
    register,
    unregister,
)
from offsets.kept import Kept
from offsets.offset_store import OffsetStore, chain_ranges, check_range

# The PostgreSQL helpers below the store (kafka_direct.postgres) stay importable from here,
# where they were public before that level existed.
__all__ = [
    "CommitOutcomeUnknownError",
    "GroupLock",
    "PostgresOffsetStore",
    "commit_or_unknown",
    "describe_database_error",
    "schema_exists",
    "table_exists",
]

logger = logging.getLogger(__name__)

def _close_connection(connection: Any) -> None:
    with contextlib.suppress(Exception):
        connection.close()


class PostgresOffsetStore(OffsetStore):
    """Offsets in ``schema.table`` of a PostgreSQL database.

    Args:
        dsn: A libpq connection string, or None when ``connect`` is given.
        table: Table name (created by :meth:`ensure_schema`, or on first use).
        schema: Schema of the table.
        connect: A function returning a new psycopg2 connection (instead of ``dsn``).
        prepared: The caller knows the tables exist (a Spark task of a batch whose driver
            prepared the store before the job): no catalog questions before first use.
    """

    def __init__(self, dsn: str | None = None, table: str = "kafka_offsets",
                 schema: str = "public", connect: Callable[[], Any] | None = None,
                 prepared: bool = False) -> None:
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
        self._ready = prepared
        self._normalisedDsn: DatabaseIdentity | None = None
        self._database: DatabaseIdentity | None = None
        self._warned: set[str] = set()
        # The connection kept between the store's own transactions (see ``transaction``).
        self._kept: Kept[Any] = Kept(_close_connection)

    def close(self) -> None:
        """Close the connection kept between transactions (the next one opens another)."""
        self._kept.close()

    def _reusable(self) -> bool:
        """Whether the kept connection can run the next transaction (claimed by the caller)."""
        kept = self._kept.value
        if kept is None or kept.closed:
            return False
        from psycopg2.extensions import TRANSACTION_STATUS_IDLE

        if kept.get_transaction_status() != TRANSACTION_STATUS_IDLE:
            return False
        # An idle session is sent nothing unasked: something to read is the server ending
        # it (its last message, or the connection's end). (poll, not select: a busy
        # process's descriptor may be past select's limit.)
        try:
            poller = select.poll()
            poller.register(kept.fileno(), select.POLLIN)
            return not poller.poll(0)
        except (OSError, ValueError):
            return False

    def __repr__(self) -> str:
        return f"PostgresOffsetStore(table={self.schema}.{self.table})"  # no credentials

    def connect(self) -> Any:
        """A new connection to the store's database."""
        if self._connect is not None:
            return self._connect()
        from kafka_direct.postgres.connection import connect

        return connect(str(self._dsn))  # __init__ took exactly one of dsn and connect

    def _identifier(self) -> Any:
        from psycopg2 import sql

        return sql.Identifier(self.schema, self.table)

    def ensure_schema(self, cursor: Any = None) -> None:
        """Create the schema and tables that do not exist (safe to repeat).

        Only what is missing is created, so a role without CREATE privileges works on a
        database where the tables exist (it needs USAGE on the schema and SELECT, INSERT,
        UPDATE on both tables).

        Args:
            cursor: Create in the caller's transaction (the tables then exist once it
                commits), instead of in a transaction of its own.
        """
        from psycopg2 import sql

        tables = {
            self.table: [sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} ("
                "group_id text NOT NULL, topic text NOT NULL, "
                "kafka_partition integer NOT NULL CHECK (kafka_partition >= 0), "
                "next_offset bigint NOT NULL CHECK (next_offset >= 0), "
                "updated_at timestamptz NOT NULL DEFAULT now(), "
                "PRIMARY KEY (group_id, topic, kafka_partition))").format(self._identifier())],
            f"{self.table}_locks": [sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (group_id text PRIMARY KEY, "
                "generation bigint NOT NULL, "
                "taken_at timestamptz NOT NULL DEFAULT now())").format(self._locks())],
        }

        if cursor is not None:
            # The caller's transaction may still roll back: not ready yet.
            ensure_tables(cursor, self.schema, tables)
            return
        with self._own("creating the offsets table") as own:
            ensure_tables(own, self.schema, tables)
        self._ready = True

    def _locks(self) -> Any:
        from psycopg2 import sql

        return sql.Identifier(self.schema, f"{self.table}_locks")

    def normalisedDsn(self) -> DatabaseIdentity | None:
        """The store's DSN parsed, sorted and without password (None with ``connect``).

        Identifies the store's database for :func:`~offsets.group_lock.find_held` without
        connecting; holds other DSN parameters, so it is never logged.
        """
        if self._connect is not None:
            return None
        if self._normalisedDsn is None and self._dsn is not None:
            self._normalisedDsn = normalised_dsn(self._dsn)
        return self._normalisedDsn

    def database(self) -> DatabaseIdentity | None:
        """Host, port and database name a connection of this store reaches (asked once).

        Raises:
            OffsetStoreError: The database did not answer.
        """
        import psycopg2

        if self._database is None:
            try:
                connection = self.connect()
            except psycopg2.Error as error:
                cause = describe_database_error(error, self._dsn)
                raise OffsetStoreError(
                    f"finding the consumer group lock this process holds for {self!r} "
                    f"failed: {cause}", store=repr(self), cause=cause) from error
            try:
                self._database = database_of(connection)
            finally:
                with contextlib.suppress(Exception):
                    connection.close()
        return self._database

    def warnOnce(self, group: str) -> bool:
        """Whether to warn that ``group``'s held lock is not this store's (first time only)."""
        first = group not in self._warned
        self._warned.add(group)
        return first

    @contextlib.contextmanager
    def transaction(self, statementTimeoutMs: int | None = None, *, kept: bool = False
                    ) -> Iterator[Any]:
        """A cursor in a transaction of its own: committed on success, else rolled back.

        Args:
            statementTimeoutMs: The transaction's ``statement_timeout`` (``SET LOCAL``).
            kept: Run it on the connection the store keeps between transactions (when no
                other transaction uses it). Only for statements that leave nothing in the
                session (no ``SET`` other than ``SET LOCAL``, no temporary table, no
                session lock or prepared statement): the next transaction gets the same
                session. Otherwise the transaction gets a connection of its own.

        Raises:
            CommitOutcomeUnknownError: The COMMIT failed with the connection: it may have
                committed.
        """
        kept = kept and self._connect is None and self._kept.claim()
        try:
            if not kept:
                connection = self.connect()
            elif self._reusable():
                connection = self._kept.value
            else:
                connection = self._kept.keep(self.connect())
        except BaseException:
            if kept:
                self._kept.release()
            raise
        healthy = False
        try:
            try:
                with connection.cursor() as cursor:
                    if statementTimeoutMs:
                        cursor.execute("SET LOCAL statement_timeout = %s",
                                       (int(statementTimeoutMs),))
                    yield cursor
            except BaseException:
                with contextlib.suppress(Exception):
                    connection.rollback()
                    healthy = True
                raise
            commit_or_unknown(connection)
            healthy = True
        finally:
            if not kept:
                connection.close()
            else:
                if not healthy:  # broke, or its COMMIT's outcome is unknown
                    self._kept.drop()
                self._kept.release()

    @contextlib.contextmanager
    def _own(self, what: str) -> Iterator[Any]:
        """:meth:`transaction`, its database errors raised as :class:`OffsetStoreError`."""
        import psycopg2

        try:
            with self.transaction(kept=True) as cursor:  # only the store's statements
                yield cursor
        except CommitOutcomeUnknownError as unknown:
            raise OffsetStoreError(
                f"{what} in {self!r}: the connection broke during COMMIT ({unknown.cause}), "
                "so the change may or may not have been committed. load() tells; running "
                "the same commit again is safe (a commit already applied changes nothing)",
                store=repr(self), cause=unknown.cause, outcome="unknown") from unknown
        except psycopg2.Error as error:
            cause = describe_database_error(error, self._dsn)
            raise OffsetStoreError(
                f"{what} in {self!r} failed and changed nothing: {cause}. "
                f"{fix_for(error, self.schema, self.table)}; the stored offsets are as "
                "they were", store=repr(self), cause=cause, outcome="rolled back") from error

    @contextlib.contextmanager
    def lockGroup(self, group: str) -> Iterator[GroupLock]:
        """Hold ``group`` for one running job, or fail at once if another job holds it.

        A session-level advisory lock on a connection of its own, held while the block runs.
        PostgreSQL releases it when that session ends, also when the job is killed, so a
        restarted job can take it straight away. Row locks keep commits safe without it;
        the lock makes a second job fail before it reads or writes anything.

        The session can end under a running job (PostgreSQL restarted, the session was
        terminated): :meth:`verifyLock`, which the sinks and :meth:`commit` call before
        writing, notices, and takes the lock again only if no other job took the group in
        between (its generation is unchanged); otherwise the job stops with
        :class:`GroupBusyError`.

        Yields:
            The held :class:`GroupLock`.

        Raises:
            GroupBusyError: Another session holds the group's lock.
            OffsetStoreError: The database did not answer.
        """
        try:
            self._ensure()
        except OffsetStoreError as error:  # before the lock: say which group waits for it
            raise OffsetStoreError(
                f"taking consumer group {group!r} failed: {error} ({DATABASE_DOWN_FIX})",
                group=group,
                **{k: v for k, v in error.context.items() if k != "group"}) from error
        lock = GroupLock(self, group)
        lock._take(first=True)
        register(lock)
        try:
            logger.info("holding consumer group %r (generation %d)", group, lock.generation)
            yield lock
        finally:
            unregister(lock)
            lock.release()  # ends the session, which releases the lock

    def heldLock(self, group: str) -> GroupLock | None:
        """The lock of ``group`` this process holds in this store's table, if any.

        Found whichever store took it, as long as it is the same table in the same database
        (see :func:`~offsets.group_lock.find_held`: the same store, the same DSN in any
        spelling, or the same host, port and database); a lock of the group held in
        another database is logged once as a warning and not returned.

        Raises:
            OffsetStoreError: The store's database had to be asked and did not answer.
        """
        return find_held(self, group)

    def verifyLock(self, group: str) -> int | None:
        """Before writing: check the group's lock if this process holds one.

        Returns:
            The lock's generation (to fence transactions with), or None when this process
            holds no lock of the group in this store's table and database (nothing to
            check; see :meth:`heldLock`).

        Raises:
            GroupBusyError: The lock was lost and another job holds or held the group.
            OffsetStoreError: The lock was lost and the database does not answer.
        """
        lock = self.heldLock(group)
        return None if lock is None else lock.verify()

    def fence(self, cursor: Any, group: str, generation: int | None) -> None:
        """In the caller's transaction: fail unless ``generation`` still holds the group.

        ``FOR SHARE`` makes a job taking the group (which bumps the generation) wait for
        this transaction, and this transaction fail once it has: two jobs never commit
        writes of one group side by side.

        Raises:
            GroupBusyError: Another job took the group.
        """
        if generation is None:
            return
        from psycopg2 import sql

        cursor.execute(sql.SQL("SELECT generation FROM {} WHERE group_id = %s FOR SHARE"
                               ).format(self._locks()), (group,))
        row = cursor.fetchone()
        now = None if row is None else int(row[0])
        if now != generation:
            raise GroupBusyError(
                f"consumer group {group!r} was taken by another job (generation {generation}, "
                f"now {now}); this job's write was rolled back and it stops", group=group)

    def prepare(self) -> None:
        """Create the missing tables on this store object's first use (then: nothing).

        Raises:
            OffsetStoreError: The database failed.
        """
        self._ensure()

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
        """Insert starting offsets for partitions without a row; existing rows stay.

        Args:
            group: The consumer group.
            offsets: Starting (next) offsets per partition.
            cursor: Seed in the caller's transaction (it rolls back with it), instead of
                in a transaction of its own.
        """
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

    def claim(self, cursor: Any, group: str, offsetRange: OffsetRange,
              chainEnd: int | None = None) -> bool:
        """Lock the range's row in the caller's transaction and check it.

        Args:
            cursor: A cursor in the caller's transaction.
            group: The consumer group.
            offsetRange: The range to claim.
            chainEnd: When the range is followed by others of its partition in the same
                batch, the end of that chain: a stored offset past ``untilOffset`` up to it
                means this range was applied (with later ones), not an overlap.

        Returns:
            True when the stored offset is the range's ``fromOffset`` (write the results,
            then :meth:`advance`); False when it is already ``untilOffset`` (or, with
            ``chainEnd``, past it within the chain): the range was applied before.

        Raises:
            OffsetMismatchError: Any other stored offset, or no row (seed it first).
        """
        from psycopg2 import sql

        cursor.execute(sql.SQL("SELECT next_offset FROM {} WHERE group_id = %s AND topic = %s "
                               "AND kafka_partition = %s FOR UPDATE").format(self._identifier()),
                       (group, offsetRange.topic, offsetRange.partition))
        row = cursor.fetchone()
        stored = None if row is None else int(row[0])
        if (chainEnd is not None and stored is not None
                and offsetRange.untilOffset < stored <= chainEnd):
            logger.info("range %s of group %s was applied before (stored %d); skipped",
                        offsetRange, group, stored)
            return False
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

        Consecutive ranges of one partition are chained (see ``chain_ranges``). In a
        transaction of its own, the group's lock is verified first if this process holds
        it (see :meth:`lockGroup`).

        Raises:
            OffsetMismatchError: A range does not continue from its stored offset, or ranges
                of a partition do not chain.
            GroupBusyError: This job's lock of the group was lost to another job.
        """
        ranges = chain_ranges(group, offsetRanges)  # sorted: the lock order
        if cursor is not None:
            self._apply(cursor, group, ranges)
            return
        generation = self.verifyLock(group)
        self._ensure()
        with self._own("committing offsets") as own:
            self.fence(own, group, generation)
            self._apply(own, group, ranges)

    def _apply(self, cursor: Any, group: str, ranges: Sequence[OffsetRange]) -> None:
        for offsetRange in ranges:
            if self.claim(cursor, group, offsetRange):
                self.advance(cursor, group, offsetRange)
