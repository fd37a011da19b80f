"""A COMMIT that fails with the connection has an unknown outcome, and says so."""

import psycopg2
import pytest

from kafka_direct import OffsetRange, SinkWriteError
from kafka_direct.postgres import connection as connections
from kafka_direct.postgres.connection import Database, transaction
from sinks.postgres_writer import database_errors

DSN = "host=db password=hunter2"
DATABASE = Database(DSN)


class FakeCursor:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def execute(self, *args):
        pass


class FakeConnection:
    def __init__(self, failure, closes):
        self.failure, self.closes = failure, closes
        self.closed = 0
        self.rolled_back = False

    def cursor(self):
        return FakeCursor()

    def commit(self):
        if self.closes:
            self.closed = 2
        raise self.failure

    def rollback(self):
        self.rolled_back = True

    def close(self):
        self.closed = 1


def write_with(connection):
    connections._connections[DATABASE] = connection
    try:
        with database_errors("s.events", OffsetRange("t", 0, 10, 20)), \
                transaction(DATABASE) as cursor:
            cursor.execute("INSERT ...")
    finally:
        connections._connections.pop(DATABASE, None)


def test_a_connection_lost_during_commit_is_outcome_unknown():
    connection = FakeConnection(psycopg2.OperationalError(
        "server closed the connection unexpectedly password=hunter2"), closes=True)
    with pytest.raises(SinkWriteError, match="may have committed") as info:
        write_with(connection)
    error = info.value
    assert error.outcome == "unknown" and "rolled back" not in str(error)
    assert (error.topic, error.partition, error.fromOffset, error.untilOffset) == (
        "t", 0, 10, 20)
    assert "hunter2" not in str(error) and "stored offsets tell" in str(error)
    assert DATABASE not in connections._connections  # the next task connects afresh


class Refused(psycopg2.errors.SerializationFailure):
    pgcode = "40001"  # what the server sends; a driver error made here has none


def test_a_commit_the_server_refused_was_rolled_back():
    refused = Refused("could not serialize access")
    connection = FakeConnection(refused, closes=False)
    with pytest.raises(SinkWriteError, match="was rolled back") as info:
        write_with(connection)
    assert info.value.outcome == "rolled back" and connection.rolled_back
