"""Writing a KafkaRDD's rows into PostgreSQL from executors: COPY, its errors, the sink base.

* :func:`copy_rows` streams rows with ``COPY ... FROM STDIN`` (PostgreSQL's text format),
  the fastest way in; identifiers are quoted with ``psycopg2.sql``.
* :func:`database_errors` turns a driver error in a task's transaction into
  :class:`~kafka_direct.errors.SinkWriteError`, with its outcome.
* :class:`KafkaRDDSink`: what the sinks share.

The tasks' transactions run on each Python worker's one connection per database
(:func:`kafka_direct.postgres.connection.transaction`; workers outlive tasks).
"""

from __future__ import annotations

import contextlib
import datetime
import io
from collections.abc import Callable, Iterable, Iterator, Sequence
from decimal import Decimal
from typing import Any

from kafka_direct.errors import ConfigurationError, KafkaDirectError, SinkWriteError
from kafka_direct.task_errors import user_failure

__all__ = [
    "KafkaRDDSink",
    "copy_rows",
    "database_errors",
    "encode_copy_value",
    "user_rows",
]

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


def user_rows(row: Callable[[Any], Sequence[Any]], records: Iterable[Any],
              offsetRange: Any, table: str, columns: Sequence[str]
              ) -> Iterator[Sequence[Any]]:
    """``row(record)`` for each record; a failure is one typed error naming the record.

    A user's row function that raises on an executor would reach the driver as Spark's
    untyped error; here it becomes a :class:`SinkWriteError` naming the function, the
    target table, topic, partition and offset, with the user's exception type and message
    (shortened), never the record's key or value. A row of another width than ``columns``
    is a :class:`ConfigurationError` naming the function, both counts and the columns.
    Raised inside the range's transaction, so nothing of the range is committed; carried
    from the executor as data.

    Args:
        row: The user's row function.
        records: The range's records.
        offsetRange: The range, or the ranges of a grouped KafkaRDD's partition (a tuple,
            one per Kafka partition: a failing record's own is named).
        table: The target table (schema-qualified), for the errors.
        columns: The target columns the rows fill.
    """
    width = len(columns)
    for record in records:
        # Only the function's own failure is the function's: a read that fails (data loss,
        # carried from the records' iterator) keeps its own type.
        try:
            values = row(record)
            count = len(values)
        except KafkaDirectError:
            raise
        except Exception as error:
            raise _row_failure(row, error, _range_of(offsetRange, record), record.offset,
                               table) from None
        if count != width:
            offsetRange = _range_of(offsetRange, record)
            raise ConfigurationError(
                f"row function {_name(row)} returned {count} values for the {width} columns "
                f"{list(columns)} of table {table} (record {offsetRange.topic}-"
                f"{offsetRange.partition} at offset {record.offset}); return one value per "
                "column, in their order, or give the sink the columns the function fills. "
                "Nothing of the range was committed",
                table=table, topic=offsetRange.topic, partition=offsetRange.partition,
                offset=record.offset, function="row", values=count, columns=width)
        yield values


def _range_of(offsetRange: Any, record: Any) -> Any:
    """The range of ``record`` among a task's ranges (a tuple), or the one range given."""
    if not isinstance(offsetRange, tuple | list):
        return offsetRange
    key = (getattr(record, "topic", None), getattr(record, "partition", None))
    return next((r for r in offsetRange if (r.topic, r.partition) == key), offsetRange[0])


def _name(row: Callable[[Any], Sequence[Any]]) -> str:
    return getattr(row, "__qualname__", None) or type(row).__qualname__


def _row_failure(row: Callable[[Any], Sequence[Any]], error: Exception, offsetRange: Any,
                 offset: int, table: str) -> SinkWriteError:
    """The SinkWriteError of ``row`` failing on the record at ``offset``."""
    kind, text = user_failure(error)
    where = f"{offsetRange.topic}-{offsetRange.partition}"
    return SinkWriteError(
        f"row function {_name(row)} failed on {where} at offset {offset} (range "
        f"[{offsetRange.fromOffset}, {offsetRange.untilOffset})), a row of table {table}: "
        f"{kind}: {text}. "
        "Nothing of the range was committed; fix the function (or the record) and run again",
        table=table, topic=offsetRange.topic, partition=offsetRange.partition,
        fromOffset=offsetRange.fromOffset, untilOffset=offsetRange.untilOffset,
        offset=offset, function="row", errorType=kind, errorMessage=text,
        cause=f"{kind}: {text}", outcome="rolled back")


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
            raise ConfigurationError(
                f"a row has {len(row)} values for the {width} columns {list(columns)}; "
                "give one value per column, in their order")
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
        offsetRange: The range being written, the ranges of a grouped KafkaRDD's
            partition (a tuple), or None for a whole batch.
        dsn: The connection string, so that no piece of its password shows in the error.
    """
    import psycopg2

    from kafka_direct.errors import SinkWriteError
    from kafka_direct.postgres.errors import CommitOutcomeUnknownError, describe_database_error

    what = "the batch"
    if isinstance(offsetRange, tuple | list):  # a grouped KafkaRDD's partition: its ranges
        if len(offsetRange) > 1:
            first, last = offsetRange[0], offsetRange[-1]
            what = (f"{len(offsetRange)} ranges of one task, {first.topic}-{first.partition} "
                    f"to {last.topic}-{last.partition},")
        offsetRange = offsetRange[0] if len(offsetRange) == 1 else None
    if offsetRange is not None:
        what = (f"{offsetRange.topic}-{offsetRange.partition} "
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
