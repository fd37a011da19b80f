"""A sink's store finds the group lock the process holds, however its database is named."""

import logging

import psycopg2
from psycopg2.extensions import make_dsn

from offsets import PostgresOffsetStore
from offsets.postgres_offset_store import GroupLock
from sinks import TransactionalPostgresSink


def test_a_lock_taken_through_a_connect_function_is_found_by_a_dsn_store(postgres, pg_schema):
    dsn = postgres.dsn
    store = PostgresOffsetStore(connect=lambda: psycopg2.connect(dsn), schema=pg_schema)
    sink = TransactionalPostgresSink(dsn, "events", "g", schema=pg_schema)
    with store.lockGroup("g") as lock:
        assert isinstance(lock, GroupLock)
        assert sink.store.verifyLock("g") == lock.generation
    assert sink.store.verifyLock("g") is None  # released: nothing held any more


def test_a_dsn_with_its_keys_in_another_order_finds_the_lock(postgres, pg_schema):
    reordered = " ".join(reversed(postgres.dsn.split()))
    assert reordered != postgres.dsn
    store = PostgresOffsetStore(postgres.dsn, schema=pg_schema)
    sink = TransactionalPostgresSink(reordered, "events", "g", schema=pg_schema)
    with store.lockGroup("g") as lock:
        assert sink.store.verifyLock("g") == lock.generation
        # and the other way round: a connect= store finds a lock taken through a DSN
        other = PostgresOffsetStore(connect=lambda: psycopg2.connect(reordered),
                                    schema=pg_schema)
        assert other.verifyLock("g") == lock.generation


def test_a_store_on_another_database_does_not_take_the_lock_and_warns(
        postgres, pg_schema, caplog):
    store = PostgresOffsetStore(postgres.dsn, schema=pg_schema)
    elsewhere = PostgresOffsetStore(make_dsn(postgres.dsn, dbname="template1"),
                                    schema=pg_schema)
    with store.lockGroup("g"), caplog.at_level(logging.WARNING):
        assert elsewhere.verifyLock("g") is None
        assert elsewhere.verifyLock("g") is None
    warnings = [r for r in caplog.records if "fenced" in r.getMessage()]
    assert len(warnings) == 1, caplog.text
    assert "password" not in caplog.text.lower()
