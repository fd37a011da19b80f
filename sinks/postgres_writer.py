"""Writing rows into PostgreSQL from executors: COPY, quoting, connections per worker.

* :func:`copy_rows` streams rows with ``COPY ... FROM STDIN`` (PostgreSQL's text format),
  the fastest way in; identifiers are quoted with ``psycopg2.sql``.
* :func:`worker_connection` keeps one connection per DSN in each Python worker (workers
  outlive tasks), and :func:`drop_connection` forgets one after a failure so the next task
  connects afresh.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from decimal import Decimal
from typing import Any

from kafka_direct.errors import KafkaDirectError, SinkWriteError

__all__ = [
    "KafkaRDDSink",
    "copy_rows",
    "database_errors",
    "drop_connection",
    "encode_copy_value",
    "user_rows",
    "worker_connection",
    "worker_transaction",
]

logger = logging.getLogger(__name__)

_connections: dict[str, Any] = {}
_lock = threading.Lock()
_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def encode_copy_value(value: Any) -> str:
    r"""One value in COPY's text format (``\N`` for NULL, escapes for tabs and newlines)."""
    if value is None:
        return "\\N"
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, int | float | Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\\\x" + bytes(value).hex()
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    return str(value).translate(_ESCAPES)


#: How much of a user function's error message a SinkWriteError keeps.
_MAX_USER_MESSAGE = 500


def user_rows(row: Callable[[Any], Sequence[Any]], records: Iterable[Any],
              offsetRange: Any) -> Iterator[Sequence[Any]]:
    """``row(record)`` for each record; a failure is one typed error naming the record.

    A user's row function that raises on an executor would reach the driver as Spark's
    untyped error; here it becomes a :class:`SinkWriteError` naming the function, topic,
    partition and offset, with the user's exception type and message (shortened), never
    the record's key or value. Raised inside the range's transaction, so nothing of the
    range is committed.
    """
    offset = -1
    try:
        for record in records:
            offset = record.offset
            yield row(record)
    except KafkaDirectError:
        raise
    except Exception as error:
        name = getattr(row, "__qualname__", None) or type(row).__qualname__
        text = str(error)
        if len(text) > _MAX_USER_MESSAGE:
            text = text[:_MAX_USER_MESSAGE] + "..."
        kind = type(error).__qualname__
        where = f"{offsetRange.topic}-{offsetRange.partition}"
        raise SinkWriteError(
            f"row function {name} failed on {where} at offset {offset} (range "
            f"[{offsetRange.fromOffset}, {offsetRange.untilOffset})): {kind}: {text}. Nothing "
            "of the range was committed; fix the function (or the record) and run again",
            topic=offsetRange.topic, partition=offsetRange.partition,
            fromOffset=offsetRange.fromOffset, untilOffset=offsetRange.untilOffset,
            offset=offset, function="row", errorType=kind, errorMessage=text) from None


def copy_rows(cursor: Any, table: Any, columns: Sequence[str], rows: Iterable[Sequence[Any]],
              chunk_rows: int = 10_000) -> int:
    """COPY ``rows`` into ``table`` (a ``psycopg2.sql`` identifier); returns how many.

    Rows are sent in chunks, so memory does not grow with the number of rows.
    """
    from psycopg2 import sql

    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        table, sql.SQL(", ").join(sql.Identifier(c) for c in columns)).as_string(cursor)
    width = len(columns)
    count = 0
    buffer = io.StringIO()
    pending = 0
    for row in rows:
        if len(row) != width:
            raise ValueError(f"a row has {len(row)} values for {width} columns {list(columns)}")
        buffer.write("\t".join(map(encode_copy_value, row)))
        buffer.write("\n")
        pending += 1
        if pending >= chunk_rows:
            buffer.seek(0)
            cursor.copy_expert(statement, buffer)
            count += pending
            buffer, pending = io.StringIO(), 0
    if pending:
        buffer.seek(0)
        cursor.copy_expert(statement, buffer)
        count += pending
    return count


def worker_connection(dsn: str) -> Any:
    """This worker's connection to ``dsn`` (made on first use, or after a failure)."""
    from offsets.database import connect

    with _lock:
        connection = _connections.get(dsn)
        if connection is None or connection.closed:
            connection = connect(dsn)
            _connections[dsn] = connection
        return connection


def drop_connection(dsn: str) -> None:
    """Close and forget this worker's connection to ``dsn``."""
    with _lock:
        connection = _connections.pop(dsn, None)
    if connection is not None:
        try:
            connection.close()
        except Exception as error:
            logger.debug("closing a broken connection failed: %s", error)


@contextlib.contextmanager
def worker_transaction(dsn: str, statementTimeoutMs: int | None = None) -> Iterator[Any]:
    """A cursor in a transaction on this worker's connection.

    The transaction commits when the block ends and rolls back when it raises; a broken
    connection is dropped so the next task connects afresh.

    Raises:
        CommitOutcomeUnknownError: The COMMIT failed with the connection: it may have
            committed (see :func:`database_errors`).
    """
    from offsets.postgres_offset_store import CommitOutcomeUnknownError, commit_or_unknown

    connection = worker_connection(dsn)
    try:
        with connection.cursor() as cursor:
            if statementTimeoutMs:
                cursor.execute("SET LOCAL statement_timeout = %s", (int(statementTimeoutMs),))
            yield cursor
    except BaseException:
        _rollback_or_drop(connection, dsn)
        raise
    try:
        commit_or_unknown(connection)
    except CommitOutcomeUnknownError:
        drop_connection(dsn)
        raise
    except BaseException:
        _rollback_or_drop(connection, dsn)
        raise


def _rollback_or_drop(connection: Any, dsn: str) -> None:
    """Roll back; a connection that cannot even do that is not kept for the next task."""
    try:
        connection.rollback()
    except Exception:
        drop_connection(dsn)


@contextlib.contextmanager
def database_errors(table: str, offsetRange: Any = None, dsn: str | None = None
                    ) -> Iterator[None]:
    """Turn a database driver error in the block into :class:`SinkWriteError`.

    Its ``outcome`` is ``"rolled back"`` when nothing was committed, or ``"unknown"`` when
    the connection broke during COMMIT: the transaction may have committed, and the stored
    offsets tell. A retry is exactly-once either way (the offset check, or the unique key
    of an idempotent sink, makes a second write of what committed a no-op).

    Args:
        table: The target table, for the message.
        offsetRange: The range being written, or None for a whole batch.
        dsn: The connection string, so that no piece of its password shows in the error.
    """
    import psycopg2

    from kafka_direct.errors import SinkWriteError
    from offsets.postgres_offset_store import CommitOutcomeUnknownError, describe_database_error

    what = ("the batch" if offsetRange is None else
            f"{offsetRange.topic}-{offsetRange.partition} "
            f"[{offsetRange.fromOffset}, {offsetRange.untilOffset})")
    where = {"table": table,
             "topic": None if offsetRange is None else offsetRange.topic,
             "partition": None if offsetRange is None else offsetRange.partition,
             "fromOffset": None if offsetRange is None else offsetRange.fromOffset,
             "untilOffset": None if offsetRange is None else offsetRange.untilOffset}
    try:
        yield
    except CommitOutcomeUnknownError as unknown:
        raise SinkWriteError(
            f"committing {what} into {table}: the connection broke during COMMIT "
            f"({unknown.cause}), so the outcome is unknown: the transaction may have "
            "committed. The stored offsets tell (at the range's end: committed; at its "
            "start: not). A task retry or the restarted job is exactly-once either way: the "
            "offset check skips a range already applied", cause=unknown.cause,
            outcome="unknown", **where) from unknown
    except psycopg2.Error as error:
        cause = describe_database_error(error, dsn)
        raise SinkWriteError(
            f"writing {what} into {table} failed and was rolled back: {cause}. Nothing of it "
            "was committed; a task retry or the restarted job writes it again from the "
            "stored offset", cause=cause, outcome="rolled back", **where) from error


class KafkaRDDSink:
    """What the sinks share: ``foreachRDD(sink)``, the KafkaRDD check, a refusal that stays."""

    # Set by the first refused write: a batch still running when the refusal stopped the
    # stream finds no active context any more, and must be refused all the same.
    _refusal: Exception | None = None

    def refuseOnce(self, check: Callable[[], None]) -> None:
        """Run ``check`` (raising ConfigurationError to refuse); once refused, always refused.

        Raises:
            ConfigurationError: ``check`` refused this write or an earlier one.
        """
        from kafka_direct import ConfigurationError

        if self._refusal is not None:
            raise self._refusal
        try:
            check()
        except ConfigurationError as refusal:
            self._refusal = refusal
            raise

    def __call__(self, rdd: Any) -> None:
        """``stream.foreachRDD(sink)``."""
        self.write(rdd)

    def write(self, rdd: Any) -> dict[str, int]:
        """Write one batch."""
        raise NotImplementedError

    def offsetRangesOf(self, rdd: Any) -> list[Any]:
        """The RDD's offset ranges; a clear error for an RDD that is no KafkaRDD."""
        from kafka_direct import ConfigurationError

        ranges = getattr(rdd, "offsetRanges", None)
        if ranges is None:
            raise ConfigurationError(
                f"{type(self).__name__} writes KafkaRDDs (RDDs with offsetRanges()): apply it "
                "to the direct stream itself or to KafkaUtils.createRDD's result, and move "
                "transformations into its row function")
        return list(ranges())
