"""PostgreSQL's errors as the package reports them: fit to show, with their outcome and fix.

* :func:`describe_database_error`: a driver error on one line, with no secret and no piece
  of one (libpq quotes pieces of a bad connection string).
* :func:`commit_or_unknown`: a COMMIT whose answer was lost is reported as of unknown
  outcome (:class:`CommitOutcomeUnknownError`), never as rolled back.
* :func:`fix_for`: what to do about a failed statement of an offset store or a table, by
  its SQLSTATE; :func:`database_error`: a failure of the structured sink as
  :class:`~kafka_direct.errors.SinkWriteError`, with the grant to give when a privilege is
  missing.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from kafka_direct.errors import SinkWriteError
from kafka_direct.redaction import REDACTED, redact_dsn_pieces

__all__ = [
    "CommitOutcomeUnknownError",
    "Describes",
    "commit_or_unknown",
    "database_error",
    "describe_database_error",
    "fix_for",
]

# libpq's complaints about a connection string quote pieces of it, and a piece may be part
# of a password (``missing "=" after "secret"``): every quoted piece but the "=" goes.
_DSN_COMPLAINT = re.compile(r"^(invalid dsn|invalid connection option|invalid uri|"
                            r"invalid integer value|missing \"=\")", re.IGNORECASE)
_QUOTED = re.compile(r'"([^"]*)"')
# libpq's refusals at connection time carry no SQLSTATE in psycopg2.
_LOGIN_REFUSED = re.compile(r"password authentication failed|no password supplied|"
                            r"authentication failed for user|role \S+ does not exist")


class Describes(Protocol):
    """What shows a driver error without the secrets it knows (a ``Database``)."""

    def describe(self, error: BaseException) -> str:
        """``error`` on one line, with no piece of a password."""


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


def database_error(error: BaseException, database: Describes, *, doing: str, table: str,
                   grants: str = "") -> SinkWriteError:
    """``error`` (a driver error, or an unknown COMMIT outcome) as a SinkWriteError.

    Args:
        error: What the driver raised (or CommitOutcomeUnknownError).
        database: The database, so that no piece of its password shows.
        doing: What was being done ("committing batch 3 of query ..."), for the message.
        table: The target table (schema-qualified), for the message and the attribute.
        grants: The privileges the work needs, named in the fix of a 42501 error.
    """
    if isinstance(error, CommitOutcomeUnknownError):
        return SinkWriteError(
            f"{doing} into {table}: the connection broke during COMMIT ({error.cause}), so "
            "the outcome is unknown: the transaction may have committed. Restart the query "
            "from its checkpoint: the batch runs again and the sink's commit record decides "
            "(committed before: nothing is written again; else: it is written once)",
            table=table, topic=None, partition=None, fromOffset=None, untilOffset=None,
            cause=error.cause, outcome="unknown")
    cause = database.describe(error)
    code = str(getattr(error, "pgcode", "") or "")
    if code == "42501":
        fix = (f"The database role lacks a privilege: {grants}" if grants else
               "The database role lacks a privilege: grant it and run again")
    elif code.startswith("28") or _LOGIN_REFUSED.search(cause):
        fix = "The database refused the login: check the user and password"
    elif code in ("3D000", "3F000", "42P01", "42703"):
        fix = f"Something named is missing ({code}): check the database, schema and table"
    elif code.startswith(("22", "23")) or code == "42804":
        # Data exceptions, constraint violations, a datatype mismatch: the rows themselves
        # cannot be written, and running the batch again would fail the same way.
        fix = (f"Nothing was committed. A row cannot be written as it is ({code}): change "
               "the query's output (or the table's column types) to fit, then restart")
    else:
        fix = "Nothing was committed; the query can run the batch again once the database answers"
    return SinkWriteError(
        f"{doing} into {table} failed and was rolled back: {cause}. {fix}",
        table=table, topic=None, partition=None, fromOffset=None, untilOffset=None,
        cause=cause, outcome="rolled back")
