"""IdempotentPostgresSink: upserts keyed by the record, offsets committed after the write.

Each task COPYs its range's rows into a temporary table and moves them into the target with
``INSERT ... ON CONFLICT (key) DO NOTHING`` (or ``DO UPDATE``), in one transaction. Offsets
are committed afterwards, to an offset store or to the stream's Kafka group: a crash between
the two re-delivers records already written, and the unique key turns the second write into
a no-op. At-least-once delivery, effectively once in the table.

Records sharing a key within one range (a changelog topic) are reduced to one row per key
before the upsert: with ``DO NOTHING`` the first of them (lowest offset), with ``DO UPDATE``
the last (highest offset), so "latest" follows the partition's order. Kafka orders records
within a partition only: when one key appears in several partitions of a batch, each
partition's range is its own transaction, and the value of the transaction that commits
last stays (batches themselves are written in order).

The temporary table holds only the columns the rows provide, so the target's own defaults,
identity and serial columns fill the others.

With an offset store, the ranges are checked against the stored offsets *before* anything
is written: a gap or an overlap raises :class:`~kafka_direct.errors.OffsetMismatchError`
and writes nothing. The store checks again when it commits.

Choose it when rows have a natural unique key and writing twice is harmless; choose
``TransactionalPostgresSink`` when the results must move with the offsets (aggregates,
appends without a key).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from kafka_direct import CanCommitOffsets, ConfigurationError, OffsetRange
from kafka_direct.task_errors import carry_errors, typed_errors
from offsets.offset_store import OffsetStore, check_commit
from sinks.postgres_writer import (
    KafkaRDDSink,
    copy_rows,
    database_errors,
    worker_transaction,
)
from sinks.transactional_postgres_sink import DEFAULT_COLUMNS, RowFunction, default_row

__all__ = ["IdempotentPostgresSink"]

logger = logging.getLogger(__name__)

DEFAULT_KEY = ("topic", "kafka_partition", "kafka_offset")
_STAGE = "kafka_direct_upsert"
_ORDINAL = "kafka_direct_ordinal"  # a record's place in its range, which is offset order


@dataclass(frozen=True)
class _Upserter:
    """What each task runs (holds the DSN, never shows it)."""

    dsn: str
    table: str
    schema: str
    columns: tuple[str, ...]
    keyColumns: tuple[str, ...]
    update: bool
    row: RowFunction
    statementTimeoutMs: int | None
    ranges: tuple[Any, ...] = ()

    def __repr__(self) -> str:
        return f"_Upserter({self.schema}.{self.table})"

    def __call__(self, index: int, records: Iterator[Any]) -> Iterator[tuple[int, int]]:
        return carry_errors(self._write(index, records))

    def _statement(self) -> Any:
        from psycopg2 import sql

        columns = sql.SQL(", ").join(sql.Identifier(c) for c in self.columns)
        keys = sql.SQL(", ").join(sql.Identifier(c) for c in self.keyColumns)
        others = [c for c in self.columns if c not in self.keyColumns]
        if self.update and others:
            action = sql.SQL("DO UPDATE SET ") + sql.SQL(", ").join(
                sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c))
                for c in others)
        else:
            action = sql.SQL("DO NOTHING")
        # One row per key: ON CONFLICT cannot touch a row twice in one statement, and the
        # row that stays must be the partition's latest (update) or first (nothing) record.
        # Rows with a NULL in the key never conflict, so all of them go in, as before.
        order = sql.SQL("DESC" if self.update else "ASC")
        anyNull = sql.SQL(" OR ").join(sql.SQL("{} IS NULL").format(sql.Identifier(c))
                                       for c in self.keyColumns)
        return sql.SQL(
            "INSERT INTO {} ({}) SELECT {} FROM (SELECT *, row_number() OVER "
            "(PARTITION BY {} ORDER BY {} {}) AS kafka_direct_rank FROM {}) AS ranked "
            "WHERE kafka_direct_rank = 1 OR {} ON CONFLICT ({}) ").format(
            sql.Identifier(self.schema, self.table), columns, columns, keys,
            sql.Identifier(_ORDINAL), order, sql.Identifier(_STAGE), anyNull, keys) + action

    def _stage(self) -> Any:
        from psycopg2 import sql

        # Only the columns the rows provide, with the target's types: the target's
        # defaults, identity and serial columns then fill the rest on INSERT.
        return sql.SQL(
            "CREATE TEMP TABLE {} ON COMMIT DROP AS SELECT {}, 0::bigint AS {} FROM {} "
            "WITH NO DATA").format(
            sql.Identifier(_STAGE), sql.SQL(", ").join(sql.Identifier(c) for c in self.columns),
            sql.Identifier(_ORDINAL), sql.Identifier(self.schema, self.table))

    def _write(self, index: int, records: Iterator[Any]) -> Iterator[tuple[int, int]]:
        from psycopg2 import sql

        with database_errors(f"{self.schema}.{self.table}", self.ranges[index]), \
                worker_transaction(self.dsn, self.statementTimeoutMs) as cursor:
            cursor.execute(self._stage())
            rows = ((*self.row(r), ordinal) for ordinal, r in enumerate(records))
            copied = copy_rows(cursor, sql.Identifier(_STAGE), (*self.columns, _ORDINAL),
                               rows)
            cursor.execute(self._statement())
            inserted = cursor.rowcount
        yield (copied, inserted)


class IdempotentPostgresSink(KafkaRDDSink):
    """Upsert KafkaRDD records on a unique key, then commit their offsets.

    Args:
        dsn: libpq connection string (never logged).
        table: Target table, with a unique constraint on ``keyColumns``.
        columns: Target columns (default: topic, kafka_partition, kafka_offset, key, value).
        row: Record -> values for ``columns``.
        keyColumns: The unique key (default: topic, kafka_partition, kafka_offset).
        onConflict: ``"nothing"`` keeps the first write; ``"update"`` takes the new values.
        schema: Schema of ``table``.
        offsetStore: Where to commit offsets after the write (with ``group``), or None.
            The batch's ranges are checked against it before anything is written.
        group: Consumer group for ``offsetStore``.
        stream: A direct stream to ``commitAsync`` the ranges to instead (its Kafka group).
        statementTimeoutMs: ``statement_timeout`` of the writing transactions.
    """

    def __init__(self, dsn: str, table: str, columns: Sequence[str] = DEFAULT_COLUMNS,
                 row: RowFunction = default_row, keyColumns: Sequence[str] = DEFAULT_KEY,
                 onConflict: str = "nothing", schema: str = "public",
                 offsetStore: OffsetStore | None = None, group: str | None = None,
                 stream: CanCommitOffsets | None = None,
                 statementTimeoutMs: int | None = None) -> None:
        if onConflict not in ("nothing", "update"):
            raise ConfigurationError(f"onConflict must be 'nothing' or 'update', got "
                                     f"{onConflict!r}")
        missing = [k for k in keyColumns if k not in columns]
        if not keyColumns or missing:
            raise ConfigurationError(f"keyColumns {list(keyColumns)} must be among the columns "
                                     f"{list(columns)}")
        if offsetStore is not None and not group:
            raise ConfigurationError("an offsetStore needs the group to store offsets under")
        self._upserter = _Upserter(dsn, table, schema, tuple(columns), tuple(keyColumns),
                                   onConflict == "update", row, statementTimeoutMs)
        self.offsetStore = offsetStore
        self.group = group
        self.stream = stream

    def __repr__(self) -> str:
        return f"IdempotentPostgresSink({self._upserter.schema}.{self._upserter.table})"

    def write(self, rdd: Any) -> dict[str, int]:
        """Upsert the RDD's records, then commit its offsets; returns row counts.

        Raises:
            OffsetMismatchError: With an offset store, a range neither continues nor repeats
                its partition's stored offset; checked before writing, so nothing is written.
            SinkWriteError: The database failed; see its ``outcome``.
        """
        offsetRanges = self.offsetRangesOf(rdd)
        if not any(r.count() for r in offsetRanges):
            return {"rows": 0, "upserted": 0}  # an idle batch needs no Spark job
        if self.offsetStore is not None and self.group:
            self._checkStored(self.offsetStore, self.group, offsetRanges)
        with typed_errors():
            upserter = dataclasses.replace(self._upserter, ranges=tuple(offsetRanges))
            outcomes = rdd.mapPartitionsWithIndex(upserter).collect()
        if self.offsetStore is not None and self.group:
            self.offsetStore.commit(self.group, offsetRanges)
        if self.stream is not None:
            self.stream.commitAsync(offsetRanges)
        copied = sum(c for c, _ in outcomes)
        inserted = sum(i for _, i in outcomes)
        logger.info("%r received %d rows, %d new or updated", self, copied, inserted)
        return {"rows": copied, "upserted": inserted}

    def _checkStored(self, store: OffsetStore, group: str,
                     offsetRanges: Sequence[OffsetRange]) -> None:
        """Refuse a batch that does not fit the stored offsets before it is written."""
        store.verifyLock(group)  # a job that lost its group's lock stops before writing
        # Partitions new to the store start where this batch starts.
        store.seed(group, {r.topicPartition(): r.fromOffset for r in offsetRanges})
        stored = store.load(group, sorted({r.topic for r in offsetRanges}))
        check_commit(group, offsetRanges, stored)
