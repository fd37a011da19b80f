"""Checking a user's PostgreSQL connection string before the job starts, without showing it.

libpq quotes pieces of a connection string in its errors (``missing "=" after "..."``,
``invalid connection option "..."``): a mistyped DSN can put its password on the screen.
An invalid DSN is therefore reported without libpq's text; a connection failure with it,
redacted and with the password's own text removed wherever it appears.
"""

from __future__ import annotations

import re

from kafka_direct.errors import ConfigurationError, OffsetStoreError
from kafka_direct.redaction import redact_dsn_pieces

__all__ = ["CONNECT_TIMEOUT_S", "check_dsn", "scrub"]

#: How long a connection attempt may take when the DSN sets no connect_timeout.
CONNECT_TIMEOUT_S = 10

# libpq's answers to a parameter with a bad value (sslmode=bogus, port=abc): a mistake in
# the DSN, not a database that does not answer.
_BAD_PARAMETER = re.compile(r"invalid (?:\w+ value|integer value|port number|connection "
                            r"option)\b")


def scrub(text: str, dsn: str) -> str:
    """``text`` redacted, and without any piece of the DSN's password wherever it appears."""
    return redact_dsn_pieces(text, dsn)


def check_dsn(dsn: str, source: str = "--dsn") -> None:
    """Connect once to the database ``dsn`` names.

    Args:
        dsn: The connection string.
        source: Where it came from (``--dsn``, ``--dsn-file FILE``...), named in errors.

    Raises:
        ConfigurationError: ``dsn`` is not a connection string, or a parameter of it has a
            value libpq refuses.
        OffsetStoreError: The database does not answer or refuses the connection.
    """
    import psycopg2
    from psycopg2.extensions import parse_dsn

    try:
        settings = parse_dsn(dsn)
    except psycopg2.Error:
        raise ConfigurationError(
            f"{source} is not a valid libpq connection string (key=value pairs such as "
            "'host=db dbname=app user=loader', or a postgresql:// URI); it is not shown "
            "because it may hold a password") from None  # the driver's text quotes it
    extra = {} if "connect_timeout" in settings else {"connect_timeout": CONNECT_TIMEOUT_S}
    try:
        connection = psycopg2.connect(dsn, **extra)
    except psycopg2.Error as error:
        cause = scrub(" ".join(str(error).split()), dsn)
        if getattr(error, "pgcode", None) is None and _BAD_PARAMETER.search(cause):
            raise ConfigurationError(f"{source} has a parameter libpq refuses: {cause}"
                                     ) from None
        raise OffsetStoreError(f"cannot connect to PostgreSQL with the DSN from {source}: "
                               f"{cause}", store=f"PostgreSQL ({source})",
                               cause=cause) from None
    connection.close()
