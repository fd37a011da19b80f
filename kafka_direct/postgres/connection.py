"""Where to connect, and this process's one connection per database, in transactions.

* :class:`Database`: a DSN plus an optional separate password (Spark redacts option keys
  holding "password" in its plans, never a password inside a DSN), connected with libpq,
  so the environment (``PGHOST``, ``PGPASSWORD``, ...) and ``~/.pgpass`` work too. Its repr
  shows nothing of the DSN.
* :func:`connect`: a new connection to a DSN, failing with no piece of it.
* :func:`cached_connection`: one connection per database in each Python process (Spark's
  Python workers outlive tasks and jobs), forgotten after a failure. The structured sink,
  the offset link and the DStream sinks all keep theirs here.
* :func:`transaction`: a cursor in a transaction on that connection, committed at the end
  (a COMMIT whose answer was lost is reported as such); :func:`retry_broken`: whether a
  failed one may run once more on a new connection.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kafka_direct.postgres.errors import (
    CommitOutcomeUnknownError,
    commit_or_unknown,
    describe_database_error,
)
from kafka_direct.redaction import REDACTED, redact_dsn_pieces

__all__ = [
    "Database",
    "cached_connection",
    "connect",
    "drop_cached",
    "retry_broken",
    "transaction",
]

logger = logging.getLogger(__name__)

_connections: dict[Database, Any] = {}
_mutex = threading.Lock()


@dataclass(frozen=True, slots=True)
class Database:
    """Where to connect: a libpq DSN (may be empty: libpq's environment) and a password.

    Attributes:
        dsn: A libpq connection string or URI; "" uses libpq's defaults and environment.
        password: A password given apart from the DSN, or None (libpq then looks in the
            DSN, ``PGPASSWORD`` and ``~/.pgpass``).
    """

    dsn: str
    password: str | None = field(default=None)

    def __post_init__(self) -> None:
        from kafka_direct.errors import ConfigurationError

        if not isinstance(self.dsn, str):
            raise ConfigurationError(f"a DSN must be text, got {type(self.dsn).__name__}")
        if self.password is not None and not isinstance(self.password, str):
            raise ConfigurationError(
                f"a password must be text, got {type(self.password).__name__}")

    def __repr__(self) -> str:
        return "Database([redacted])"

    def effective_dsn(self) -> str:
        """The DSN with the separate password merged in (secret: never show it)."""
        if not self.password:
            return self.dsn
        from psycopg2.extensions import make_dsn

        return str(make_dsn(self.dsn, password=self.password))

    def connect(self) -> Any:
        """A new psycopg2 connection (errors are the driver's: see :func:`database_error`).

        A connection that fails raises the driver's error class with the text redacted
        (:meth:`describe`) and no chain: libpq quotes a DSN it cannot parse, password
        included, and every error raised above this one would carry it along.
        """
        import psycopg2

        try:
            if self.password:
                return psycopg2.connect(self.dsn, password=self.password)
            return psycopg2.connect(self.dsn)
        except psycopg2.Error as error:
            shown = self.describe(error)
            raise type(error)(shown) from None

    def describe(self, error: BaseException) -> str:
        """A driver error on one line, with no piece of the DSN's or the option's password.

        Never raises: a DSN libpq cannot merge with the password is redacted as it is. The
        pieces of both the DSN as given and the merged one are redacted: merging rewrites a
        URI, whose unencoded ``@`` in a password then reads as part of the host.
        """
        try:
            merged = self.effective_dsn()
        except Exception:  # make_dsn refuses the DSN; its own error would quote it
            merged = self.dsn
        shown = redact_dsn_pieces(describe_database_error(error, merged), self.dsn)
        return shown.replace(self.password, REDACTED) if self.password else shown


def connect(dsn: str) -> Any:
    """A new psycopg2 connection to ``dsn``; a failure carries no piece of the DSN.

    libpq quotes a connection string it cannot parse (a bad %-escape, an unquoted space),
    password included: :meth:`Database.connect` raises the driver's error class again with
    the text redacted and no chain.
    """
    return Database(dsn).connect()


def cached_connection(database: Database) -> Any:
    """This process's connection to ``database`` (made on first use, or after a failure)."""
    with _mutex:
        connection = _connections.get(database)
        if connection is None or connection.closed:
            connection = database.connect()
            _connections[database] = connection
        return connection


def drop_cached(database: Database) -> None:
    """Close and forget this process's connection to ``database``."""
    with _mutex:
        connection = _connections.pop(database, None)
    if connection is not None:
        with contextlib.suppress(Exception):
            connection.close()


def _broken(error: BaseException) -> bool:
    """Whether a driver error means the connection itself is gone (retry on a new one)."""
    import psycopg2

    if isinstance(error, psycopg2.InterfaceError):
        return True
    code = getattr(error, "pgcode", None) or ""
    return isinstance(error, psycopg2.OperationalError) and (not code or code.startswith(
        ("08", "57P")))


@contextlib.contextmanager
def transaction(database: Database, statementTimeoutMs: int | None = None
                ) -> Iterator[Any]:
    """A cursor in a transaction on this process's cached connection; committed at the end.

    Rolled back when the block raises; a connection that broke is dropped, so the next
    transaction connects afresh.

    Raises:
        CommitOutcomeUnknownError: The COMMIT failed with the connection: it may have
            committed.
        psycopg2.Error: The database failed; nothing was committed.
    """
    connection = cached_connection(database)
    try:
        with connection.cursor() as cursor:
            if statementTimeoutMs:
                cursor.execute("SET LOCAL statement_timeout = %s", (int(statementTimeoutMs),))
            yield cursor
    except BaseException as error:
        try:
            connection.rollback()
        except Exception:
            drop_cached(database)
        else:
            if _broken(error):
                drop_cached(database)
        raise
    try:
        commit_or_unknown(connection)
    except CommitOutcomeUnknownError:
        drop_cached(database)
        raise
    except BaseException:
        with contextlib.suppress(Exception):
            connection.rollback()
        raise


def retry_broken(database: Database, first: BaseException) -> bool:
    """Whether a transaction that failed with ``first`` may run once more on a new connection.

    Only a connection that broke before COMMIT qualifies (a cached connection the server
    closed while idle): nothing was committed, so running the transaction again is safe.
    """
    if isinstance(first, CommitOutcomeUnknownError):
        return False
    return _broken(first)
