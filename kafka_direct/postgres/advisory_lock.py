"""A database session of its own holding a session-level advisory lock.

Two holders keep one: an offset store's consumer-group lock
(:class:`offsets.group_lock.GroupLock`: one running job per group, fenced by a generation)
and the offset link's store lock (:class:`kafka_direct.sql.link.store_lock.StoreLock`: one
running query per store). Each decides what being refused means and how a lost session is
taken again; both take the lock here, the same way: on a new autocommit session (the lock
lives as long as the session, never inside a transaction the holder's work could end),
asked at once or waited for up to a bound.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

__all__ = ["lock_session"]


def lock_session(connect: Callable[[], Any], space: int, text: str, *,
                 waitMs: int | None = None) -> Any | None:
    """A new session holding ``pg_advisory_lock(space, hashtext(text))``, or None if busy.

    Args:
        connect: Makes a new psycopg2 connection (the session).
        space: The lock's first key: which kind of lock (apart from other users').
        text: Hashed into the lock's second key: which one.
        waitMs: Wait up to this long for a session that holds the lock to let go; None
            asks once (``pg_try_advisory_lock``).

    Returns:
        The connection (autocommit) holding the lock; None when another session holds it.
        A session refused or failing is closed.

    Raises:
        psycopg2.Error: Connecting or asking failed.
    """
    import psycopg2

    connection = connect()
    try:
        connection.autocommit = True
        with connection.cursor() as cursor:
            if waitMs is None:
                cursor.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", (space, text))
                held = bool(cursor.fetchone()[0])
            else:
                cursor.execute("SET lock_timeout = %s", (int(waitMs),))
                try:
                    cursor.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (space, text))
                    held = True
                except psycopg2.errors.LockNotAvailable:
                    held = False
                if held:
                    # The session's later statements (the holder's work) must not time out
                    # on the locks they take.
                    cursor.execute("SET lock_timeout = 0")
    except BaseException:
        with contextlib.suppress(Exception):
            connection.close()
        raise
    if not held:
        with contextlib.suppress(Exception):
            connection.close()
        return None
    return connection
