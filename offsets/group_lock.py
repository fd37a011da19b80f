"""GroupLock: one running job per consumer group, and the process's register of held locks.

:meth:`PostgresOffsetStore.lockGroup <offsets.postgres_offset_store.PostgresOffsetStore.lockGroup>`
takes a :class:`GroupLock` (a session-level advisory lock, and a bumped *generation* in
``<table>_locks``) and registers it here; every store of the same offsets table in the same
database finds it with :func:`find_held`, so the sinks verify and fence with it even when
their store was made differently: another spelling of the DSN (keys in another order, another
user or password) or a ``connect`` function. A held lock is found

1. by the store that took it;
2. by a store whose normalised DSN (:func:`normalised_dsn`: parsed, sorted, without the
   password) is the lock store's;
3. else by the database a connection of the store reaches (:func:`database_of`: host, port
   and database name as libpq resolved them), asked once per store and only while the
   process holds a lock of the same group and offsets table.

A store that reaches another database than every such lock logs one warning: its writes are
not fenced by that lock. Connection strings and passwords are never logged.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any, Protocol

from kafka_direct import GroupBusyError, OffsetStoreError
from kafka_direct.postgres.advisory_lock import lock_session
from kafka_direct.postgres.errors import describe_database_error

__all__ = [
    "DATABASE_DOWN_FIX",
    "DatabaseIdentity",
    "GroupLock",
    "LockingStore",
    "database_of",
    "find_held",
    "normalised_dsn",
    "register",
    "unregister",
]

logger = logging.getLogger(__name__)

#: What to do when the group's database does not answer while its lock is taken.
DATABASE_DOWN_FIX = ("check that PostgreSQL answers at the store's DSN, then start the job "
                     "again: it resumes from the stored offsets")

LOCK_SPACE = 0x6B64  # first key of the store's advisory locks, apart from other users'
# The connection parameters that name a database (a lock is per database, whoever connects).
_DATABASE_KEYS = ("host", "hostaddr", "port", "dbname")
_held: dict[tuple[str, str, str], list[GroupLock]] = {}  # (schema, table, group) -> locks
_held_mutex = threading.Lock()

#: Which database a DSN or a connection reaches: its sorted connection parameters.
DatabaseIdentity = tuple[tuple[str, str], ...]


class LockingStore(Protocol):
    """What a group lock asks of the offset store that takes it and of those that find it.

    :class:`~offsets.postgres_offset_store.PostgresOffsetStore` is one; typed so, the lock
    and the store each import nothing of the other.
    """

    schema: str
    table: str
    _dsn: str | None

    def connect(self) -> Any:
        """A new connection to the store's database."""

    def _locks(self) -> Any:
        """The ``<table>_locks`` table, as a ``psycopg2.sql`` identifier."""

    def normalisedDsn(self) -> DatabaseIdentity | None:
        """The store's DSN, parsed and sorted without password (None: no DSN)."""

    def database(self) -> DatabaseIdentity | None:
        """The database a connection of the store reaches (asked once)."""

    def warnOnce(self, group: str) -> bool:
        """Whether to warn about ``group`` now (True once per store and group)."""


def normalised_dsn(dsn: str) -> DatabaseIdentity | None:
    """``dsn``'s parameters, sorted, without the password; None for an unparsable DSN.

    Two spellings of one connection string (keys in another order, other spacing, URI or
    key=value) give the same value. The result holds no password, but other parameters of
    the DSN: never log it.
    """
    import psycopg2
    from psycopg2.extensions import parse_dsn

    try:
        parsed = parse_dsn(dsn)
    except psycopg2.Error:
        return None  # connecting reports it, redacted
    return tuple(sorted((k, str(v)) for k, v in parsed.items() if k != "password"))


def database_of(connection: Any) -> DatabaseIdentity | None:
    """Host, host address, port and database name of a connection, as libpq resolved them.

    Returns:
        The sorted parameters, or None when the connection cannot tell (not a psycopg2
        connection, or closed).
    """
    try:
        parameters = connection.get_dsn_parameters()
    except Exception as error:  # any connection-like object: finding the lock then fails
        logger.debug("a connection did not tell its parameters: %s", type(error).__name__)
        return None
    return tuple(sorted((k, str(v)) for k, v in parameters.items()
                        if k in _DATABASE_KEYS and v))


def register(lock: GroupLock) -> None:
    """Make ``lock`` findable by every store of its offsets table (see :func:`find_held`)."""
    with _held_mutex:
        _held.setdefault(_slot(lock.store, lock.group), []).append(lock)


def unregister(lock: GroupLock) -> None:
    """Forget ``lock`` (released)."""
    key = _slot(lock.store, lock.group)
    with _held_mutex:
        locks = [held for held in _held.get(key, []) if held is not lock]
        if locks:
            _held[key] = locks
        else:
            _held.pop(key, None)


def find_held(store: LockingStore, group: str) -> GroupLock | None:
    """The lock of ``group`` this process holds in ``store``'s offsets table and database.

    Connects (once per store) only when the process holds a lock of the group and table
    that neither the store itself nor its DSN identifies.

    Returns:
        The held lock, or None: this process holds no lock of the group in that table of
        that database (a warning is logged, once per store and group, when it holds one
        in a database the store does not reach).

    Raises:
        OffsetStoreError: The store's database had to be asked and did not answer.
    """
    with _held_mutex:
        locks = list(_held.get(_slot(store, group), ()))
    if not locks:
        return None  # the common case: no lock of this group, nothing to ask
    for lock in locks:
        if lock.store is store:
            return lock
    dsn = store.normalisedDsn()
    for lock in locks:
        if dsn is not None and lock.store.normalisedDsn() == dsn:
            return lock
    database = store.database()
    for lock in locks:
        if database is not None and lock.database == database:
            return lock
    if store.warnOnce(group):
        logger.warning(
            "this process holds the lock of consumer group %r in %s.%s of another database "
            "than %r connects to (or one it reaches under another host name or port): that "
            "store's writes are not verified nor fenced with the lock. Give it the same "
            "host, port and dbname as the store that took the lock", group, store.schema,
            store.table, store)
    return None


def _slot(store: LockingStore, group: str) -> tuple[str, str, str]:
    return (store.schema, store.table, group)


class GroupLock:
    """A held consumer-group lock (see :meth:`PostgresOffsetStore.lockGroup`).

    Attributes:
        store: The store that took it.
        group: The consumer group.
        generation: This job's generation of the group (bumped by every job taking it);
            transactions fenced with it fail once another job has taken the group.
    """

    def __init__(self, store: LockingStore, group: str) -> None:
        self.store = store
        self.group = group
        self.generation = 0
        self._connection: Any = None
        self._mutex = threading.Lock()
        self.released = False
        #: Why this job stopped holding the group for good (another job held or took it
        #: while this job's lock was lost), or None: asked again, the lock would give an
        #: answer that depends on when the other job's session ended.
        self.stopped: str | None = None
        #: Host, port and database of the lock's session: where the lock is (see
        #: :func:`database_of`), to find it from stores configured differently.
        self.database: tuple[tuple[str, str], ...] | None = None

    def __repr__(self) -> str:
        return f"GroupLock({self.group!r}, generation={self.generation}, store={self.store!r})"

    def _take(self, first: bool) -> None:
        """Take the advisory lock on a new session; bump or check the generation."""
        import psycopg2
        from psycopg2 import sql

        store, group = self.store, self.group
        connection = None
        try:
            connection = lock_session(store.connect, LOCK_SPACE,
                                      f"{store.schema}.{store.table}/{group}")
            if connection is None:
                if not first:
                    self.stopped = (
                        f"consumer group {group!r} was taken by another job while this job's "
                        "lock was lost; this job stopped then: restart it to resume from "
                        "the stored offsets")
                raise GroupBusyError(
                    f"consumer group {group!r} is held by another running job (its lock "
                    f"in {store.schema}.{store.table}'s database)"
                    + ("" if first else ", after this job's lock was lost (its database "
                       "session ended); this job stops so that two jobs never write the "
                       "group at once")
                    + "; stop that job or use another group", group=group)
            with connection.cursor() as cursor:
                if first:
                    # Under the advisory lock: no other job bumps the generation meanwhile.
                    cursor.execute(sql.SQL(
                        "INSERT INTO {} AS l (group_id, generation) VALUES (%s, 1) "
                        "ON CONFLICT (group_id) DO UPDATE SET generation = l.generation + 1, "
                        "taken_at = now() RETURNING generation").format(store._locks()),
                        (group,))
                    self.generation = int(cursor.fetchone()[0])
                else:
                    cursor.execute(sql.SQL("SELECT generation FROM {} WHERE group_id = %s"
                                           ).format(store._locks()), (group,))
                    row = cursor.fetchone()
                    now = None if row is None else int(row[0])
                    if now != self.generation:
                        self.stopped = (
                            f"consumer group {group!r} was taken by another job while this "
                            f"job's lock was lost (generation {self.generation}, now {now}); "
                            "this job stops: restart it to resume from the stored offsets")
                        raise GroupBusyError(self.stopped, group=group)
        except psycopg2.Error as error:
            if connection is not None:
                connection.close()
            cause = describe_database_error(error, store._dsn)
            raise OffsetStoreError(
                f"taking consumer group {group!r} in {store!r} "
                + ("" if first else "again, after its lock was lost, ") + f"failed: {cause} "
                f"({DATABASE_DOWN_FIX})",
                store=repr(store), cause=cause, group=group) from error
        except BaseException:
            if connection is not None:
                connection.close()
            raise
        self.database = database_of(connection)
        self._connection = connection

    def verify(self) -> int:
        """Make sure the lock is still held, or take it again; returns the generation.

        A live session still holds its advisory lock. A broken one (PostgreSQL restarted,
        the session was terminated) lost it: the lock is taken again on a new session if
        the group's generation shows no other job took it in between.

        Raises:
            GroupBusyError: Another job holds the group now, or held it in between.
            OffsetStoreError: The lock was lost and the database does not answer.
        """
        import psycopg2

        with self._mutex:
            if self.released:
                raise GroupBusyError(f"the lock of consumer group {self.group!r} was "
                                     "released: this job no longer holds the group",
                                     group=self.group)
            if self.stopped is not None:
                raise GroupBusyError(self.stopped, group=self.group)
            try:
                with self._connection.cursor() as cursor:
                    cursor.execute("SELECT 1")
                    cursor.fetchone()
                return self.generation
            except psycopg2.Error as error:
                logger.warning("the lock of consumer group %r was lost (%s); taking it again",
                               self.group, describe_database_error(error))
            with contextlib.suppress(Exception):
                self._connection.close()
            self._take(first=False)
            logger.info("holding consumer group %r again (generation %d)", self.group,
                        self.generation)
            return self.generation

    def release(self) -> None:
        """Let go of the group (ends the lock's session)."""
        with self._mutex:
            self.released = True
            if self._connection is not None:
                with contextlib.suppress(Exception):
                    self._connection.close()
