"""A malformed DSN never carries its password into an exception's text or chain.

libpq quotes the piece of a connection string it cannot parse (``invalid percent-encoded
token: "s3cr%zzet"``), and an error raised ``from`` the driver's would carry that piece along.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

import pytest

PASSWORD = "s3cr%zzet"
MALFORMED = [
    "postgresql://loader:s3cr%zzet@127.0.0.1:1/db",           # a bad %-escape
    "host=127.0.0.1 port=1 password=s3cr%zzet oops dbname=x",  # an unquoted space
    "host=127.0.0.1 port=1 password='s3cr%zzet dbname=x",     # an unterminated quote
]


def _store(dsn: str) -> Any:
    from offsets import PostgresOffsetStore

    return PostgresOffsetStore(dsn).ensure_schema()


def _store_load(dsn: str) -> Any:
    from offsets import PostgresOffsetStore

    return PostgresOffsetStore(dsn).load("g")


def _check(dsn: str) -> Any:
    from kafka_direct.app.dsn_check import check_dsn

    return check_dsn(dsn, "--dsn")


def _worker(dsn: str) -> Any:
    from kafka_direct.postgres.connection import Database, cached_connection

    return cached_connection(Database(dsn))


def _table(dsn: str) -> Any:
    from kafka_direct.app.ingest_table import ensure_table

    return ensure_table(dsn, "public", "events")


@pytest.mark.parametrize("dsn", MALFORMED)
@pytest.mark.parametrize("call", [_store, _store_load, _check, _worker, _table])
def test_no_piece_of_the_password_in_the_error_or_its_chain(call: Callable[[str], Any],
                                                            dsn: str) -> None:
    with pytest.raises(Exception) as info:
        call(dsn)
    text = "".join(traceback.format_exception(info.value))
    assert "s3cr" not in text and "zzet" not in text, text
