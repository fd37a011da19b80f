"""Checking a user's PostgreSQL connection string before the job starts, without showing it.

libpq quotes pieces of a connection string in its errors (``missing "=" after "..."``,
``invalid connection option "..."``): a mistyped DSN can put its password on the screen.
An invalid DSN is therefore reported without libpq's text; a connection failure with it,
redacted and with the password's own text removed wherever it appears.
"""

from __future__ import annotations

from kafka_direct.errors import ConfigurationError, OffsetStoreError
from kafka_direct.redaction import REDACTED, redact_text

__all__ = ["CONNECT_TIMEOUT_S", "check_dsn", "scrub"]

#: How long a connection attempt may take when the DSN sets no connect_timeout.
CONNECT_TIMEOUT_S = 10


def scrub(text: str, dsn: str) -> str:
    """``text`` redacted, and without the DSN's password wherever it appears."""
    from psycopg2.extensions import parse_dsn

    shown = redact_text(text)
    try:
        password = parse_dsn(dsn).get("password")
    except Exception:  # an unparsable DSN: its parts cannot be told apart, redact_text it is
        password = None
    if password:
        shown = shown.replace(password, REDACTED)
    return shown


def check_dsn(dsn: str) -> None:
    """Connect once to the database ``dsn`` names.

    Raises:
        ConfigurationError: ``dsn`` is not a connection string.
        OffsetStoreError: The database does not answer or refuses the connection.
    """
    import psycopg2
    from psycopg2.extensions import parse_dsn

    try:
        settings = parse_dsn(dsn)
    except psycopg2.Error as error:
        raise ConfigurationError(
            "--dsn is not a valid libpq connection string (key=value pairs such as "
            "'host=db dbname=app user=loader', or a postgresql:// URI); it is not shown "
            "because it may hold a password") from error
    extra = {} if "connect_timeout" in settings else {"connect_timeout": CONNECT_TIMEOUT_S}
    try:
        connection = psycopg2.connect(dsn, **extra)
    except psycopg2.Error as error:
        cause = scrub(" ".join(str(error).split()), dsn)
        raise OffsetStoreError(f"cannot connect to PostgreSQL with the given DSN: {cause}",
                               store="PostgreSQL (--dsn)", cause=cause) from error
    connection.close()
