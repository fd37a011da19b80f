"""PostgreSQL plumbing shared by the store and the sinks: errors fit to show, COMMIT outcomes.

* :func:`describe_database_error`: a driver error on one line, with no secret and no piece
  of one (libpq quotes pieces of a bad connection string).
* :func:`commit_or_unknown`: a COMMIT whose answer was lost is reported as of unknown
  outcome, never as rolled back.
* :func:`schema_exists`, :func:`table_exists`: asked before creating anything, so a role
  without CREATE privileges works where the objects exist.
"""

from __future__ import annotations

import re
from typing import Any

from kafka_direct.redaction import REDACTED, redact_dsn_pieces

__all__ = [
    "CommitOutcomeUnknownError",
    "commit_or_unknown",
    "connect",
    "describe_database_error",
    "fix_for",
    "schema_exists",
    "table_exists",
]

# libpq's complaints about a connection string quote pieces of it, and a piece may be part
# of a password (``missing "=" after "secret"``): every quoted piece but the "=" goes.
_DSN_COMPLAINT = re.compile(r"^(invalid dsn|invalid connection option|invalid uri|"
                            r"invalid integer value|missing \"=\")", re.IGNORECASE)
_QUOTED = re.compile(r'"([^"]*)"')


def describe_database_error(error: BaseException, dsn: str | None = None) -> str:
    """A database driver error on one line, fit to show: no secret and no piece of one.

    Passwords, tokens and URIs with credentials go through the one redaction
    (:func:`kafka_direct.redaction.redact_text`); a complaint about the connection string
    itself keeps its words but none of the string's pieces.
    """
    text = " ".join(str(error).split())
    if _DSN_COMPLAINT.match(text):
        text = _QUOTED.sub(lambda m: m.group(0) if m.group(1) == "=" else REDACTED, text)
    return redact_dsn_pieces(text, dsn) or type(error).__name__


def connect(dsn: str, **kwargs: Any) -> Any:
    """A new psycopg2 connection to ``dsn``; a failure carries no piece of the DSN.

    libpq quotes a connection string it cannot parse (a bad %-escape, an unquoted space),
    password included, and every error raised ``from`` the driver's would carry that along:
    the driver's error class is raised again with the text redacted and no chain.
    """
    import psycopg2

    try:
        return psycopg2.connect(dsn, **kwargs)
    except psycopg2.Error as error:
        raise type(error)(describe_database_error(error, dsn)) from None


def schema_exists(cursor: Any, schema: str) -> bool:
    """Whether ``schema`` exists (asked first: CREATE ... IF NOT EXISTS needs CREATE rights)."""
    cursor.execute("SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = %s", (schema,))
    return cursor.fetchone() is not None


def table_exists(cursor: Any, schema: str, table: str) -> bool:
    """Whether ``schema.table`` exists (a table, view or partitioned table)."""
    cursor.execute("SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
                   "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
                   (schema, table))
    return cursor.fetchone() is not None


class CommitOutcomeUnknownError(Exception):
    """COMMIT failed without a clear answer: the transaction may or may not have committed.

    Internal: callers turn it into the typed error of their layer (``SinkWriteError`` or
    ``OffsetStoreError`` with ``outcome="unknown"``).

    Attributes:
        cause: The database driver's message (no connection string).
    """

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


def commit_or_unknown(connection: Any) -> None:
    """``connection.commit()``, a failure of unknown outcome raised as CommitOutcomeUnknownError.

    The outcome is known (rolled back) only when the server answered the COMMIT with an
    error and the session lives on (a deferred constraint, a serialization failure). A
    broken connection, or a server that is going away (SQLSTATE classes 08 and 57), may
    have written the commit record before the answer was lost.

    Raises:
        CommitOutcomeUnknownError: See above.
        psycopg2.Error: The server refused the commit; it was rolled back.
    """
    import psycopg2

    try:
        connection.commit()
    except psycopg2.Error as error:
        code = getattr(error, "pgcode", None) or ""
        if code and not code.startswith(("08", "57")) and not connection.closed:
            raise
        raise CommitOutcomeUnknownError(describe_database_error(error)) from error


# Group locks this process holds, by (store identity, group): sinks and stores built apart
# from the one that took the lock (same database and table) find and verify it.


def fix_for(error: BaseException, schema: str, table: str) -> str:
    """What to do about a failed store or sink statement, judged by its SQLSTATE."""
    code = str(getattr(error, "pgcode", "") or "")
    if code == "42501":
        return (f"The database role lacks a privilege: grant it USAGE on schema {schema!r} "
                f"and SELECT, INSERT, UPDATE on {table!r} (and {table + '_locks'!r} for an "
                "offset store), or have an administrator create them first")
    if code.startswith("28"):
        return "The database refused the login: check the user and password of the DSN"
    if code in ("3D000", "3F000", "42P01"):
        return (f"Something named is missing ({code}): check the database, schema "
                f"{schema!r} and table {table!r}")
    return "Run again once the database answers"
