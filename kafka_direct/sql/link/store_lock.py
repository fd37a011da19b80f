"""A source's hold on its offset store: one session per store holding the store's lock.

The source of a query takes the store's session-level advisory lock with its first plan
and keeps it while it runs, so a second query on the same store fails instead of
interleaving its plans (why: :mod:`kafka_direct.sql.link`). This process keeps that
session per store, and the source records its plans through it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kafka_direct.errors import GroupBusyError, OffsetStoreError
from kafka_direct.postgres.advisory_lock import lock_session
from kafka_direct.postgres.connection import Database, retry_broken
from kafka_direct.sql.link.tables import grant_fix, lock_key

__all__ = ["LOCK_WAIT_MS", "HeldSession", "StoreLock"]

logger = logging.getLogger(__name__)

#: How long a source waits for a store another session holds (a query stopping) before
#: it gives up with GroupBusyError.
LOCK_WAIT_MS = 10_000

_T = TypeVar("_T")


class HeldSession:
    """The session holding a store's advisory lock in this process (plans go through it)."""

    def __init__(self) -> None:
        self.connection: Any = None
        self.mutex = threading.Lock()
        self.tablesReady = False


_holders: dict[tuple[Database, str, str], HeldSession] = {}
_holders_mutex = threading.Lock()


@dataclass(frozen=True, slots=True)
class StoreLock:
    """This process's hold on one offset store (built from a validated source link).

    Attributes:
        database: The database of the store.
        schema: Schema of the link's tables.
        store: The offset store's name.
    """

    database: Database
    schema: str
    store: str

    def _holder(self) -> HeldSession:
        key = (self.database, self.schema, self.store)
        with _holders_mutex:
            holder = _holders.get(key)
            if holder is None:
                holder = _holders[key] = HeldSession()
            return holder

    def _take(self, holder: HeldSession) -> None:
        """Open the holder's session and take the store's lock (waits up to LOCK_WAIT_MS)."""
        space, text = lock_key(self.schema, self.store)
        connection = lock_session(self.database.connect, space, text, waitMs=LOCK_WAIT_MS)
        if connection is None:
            raise GroupBusyError(
                f"offset store {self.store!r} (schema {self.schema!r}) is used by "
                f"another running query (it holds the store's lock, waited "
                f"{LOCK_WAIT_MS} ms): one query per store. Stop that query, or give "
                "this one another offsetStore.name. (Or by another source of the same "
                "query: two load() calls joined or unioned are two sources; link "
                "one of them only, or load once and use that DataFrame twice)",
                group=self.store)
        holder.connection = connection
        logger.info("holding offset store %r (schema %r)", self.store, self.schema)

    def run(self, what: str, owner: str, work: Callable[[Any, HeldSession], _T]) -> _T:
        """Run ``work(cursor, holder)`` on the held session, taking the lock first.

        A session that broke (the lock went with it) is replaced once: the lock is taken
        again on a new one.

        Args:
            what: What ``work`` does, for the error ("recording a plan").
            owner: Who holds the store, as the error's ``store`` (no DSN in it).
            work: Runs on a cursor of the held session (autocommit).

        Raises:
            GroupBusyError: Another running query holds the store.
            OffsetStoreError: The database failed.
        """
        import psycopg2

        holder = self._holder()
        with holder.mutex:
            for attempt in (1, 2):
                try:
                    if holder.connection is None or holder.connection.closed:
                        holder.connection = None
                        self._take(holder)
                    with holder.connection.cursor() as cursor:
                        return work(cursor, holder)
                except psycopg2.Error as error:
                    if attempt == 1 and retry_broken(self.database, error):
                        logger.warning("the session holding offset store %r broke (%s); "
                                       "taking the store again", self.store,
                                       self.database.describe(error))
                        with contextlib.suppress(Exception):
                            holder.connection.close()
                        holder.connection = None
                        continue
                    cause = self.database.describe(error)
                    raise OffsetStoreError(
                        f"{what} of offset store {self.store!r} (schema {self.schema!r}) "
                        f"failed: {cause}. {grant_fix(error, self.schema, 'source')}",
                        store=owner, cause=cause) from error
        raise AssertionError("unreachable")  # pragma: no cover

    def release(self) -> None:
        """Let go of the store (ends the session holding its lock)."""
        key = (self.database, self.schema, self.store)
        with _holders_mutex:
            holder = _holders.pop(key, None)
        if holder is not None:
            with holder.mutex:
                if holder.connection is not None:
                    with contextlib.suppress(Exception):
                        holder.connection.close()
                    holder.connection = None
