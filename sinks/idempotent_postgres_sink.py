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
is written or seeded: a gap or an overlap raises
:class:`~kafka_direct.errors.OffsetMismatchError` and writes nothing. Partitions new to the
store are then seeded at the batch's lowest ``fromOffset`` of each (several ranges of one
partition are chained). The store checks again when it commits.

When the job holds the group's lock (``PostgresOffsetStore.lockGroup``), each batch verifies
it first, and every upsert transaction is fenced with the lock's generation: once another
job has taken the group, no upsert of this one commits. The fence reads the lock table in
the sink's database, so the offset store must live there.

Batch order: with ``spark.streaming.concurrentJobs`` above 1, batches finish in any order.
An offset store's commits would then pass a batch still running (a restart skips its
records), and ``onConflict="update"`` could leave an earlier batch's value over a later
one's. The sink refuses both with a :class:`~kafka_direct.errors.ConfigurationError` at its
first write, before anything is written; ``onConflict="nothing"`` with ``stream=`` works
with concurrent jobs (``commitAsync`` commits batches in order, and the first write of a key
stays whatever the order).

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
from kafka_direct.postgres.connection import Database, cached_connection, transaction
from kafka_direct.task_errors import carry_errors, typed_errors
from offsets.offset_store import OffsetStore, check_and_seed
from offsets.postgres_offset_store import PostgresOffsetStore
from sinks.postgres_writer import (
    KafkaRDDSink,
    copy_rows,
    database_errors,
    user_rows,
)
from sinks.transactional_postgres_sink import (
    DEFAULT_COLUMNS,
    RowFunction,
    default_row,
    refuse_concurrent_batches,
)

__all__ = ["IdempotentPostgresSink"]

logger = logging.getLogger(__name__)

DEFAULT_KEY = ("topic", "kafka_partition", "kafka_offset")
_STAGE = "kafka_direct_upsert"
_ORDINAL = "kafka_direct_ordinal"  # a record's place in its range, which is offset order
_STORE_ORDER = ("seeds, checks and commits its offset store per batch, in the order batches "
                "finish, and cannot run with {setting}={jobs}: a batch finishing early would "
                "commit offsets past an earlier one still writing, and a restart after that "
                "one failed would skip its records")
_UPDATE_ORDER = ("upserts with onConflict='update' and cannot run with {setting}={jobs}: an "
                 "earlier batch finishing last would overwrite a later batch's newer values")
_ORDER_FIX = ("Set {setting} to 1 (the default), or write with onConflict='nothing' and "
              "stream= (commitAsync commits to the stream's Kafka group in batch order), "
              "which works with concurrent jobs")


@dataclass(frozen=True)
class _Upserter:
    """What each task runs (holds the DSN, never shows it).

    With a ``generation``, each transaction is fenced (``PostgresOffsetStore.fence`` on the
    lock table ``fenceSchema.fenceTable_locks`` of the sink's database) before its upsert.
    """

    dsn: str
    table: str
    schema: str
    columns: tuple[str, ...]
    keyColumns: tuple[str, ...]
    update: bool
    row: RowFunction
    statementTimeoutMs: int | None
    ranges: tuple[Any, ...] = ()
    #: The ranges of each Spark partition of a grouped KafkaRDD, in partition order; empty:
    #: one range per partition (``ranges``).
    groups: tuple[tuple[Any, ...], ...] = ()
    group: str | None = None
    generation: int | None = None
    fenceTable: str = "kafka_offsets"
    fenceSchema: str = "public"

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

    def _fence(self, cursor: Any) -> None:
        """Fail the transaction unless the job still holds its group (with a generation).

        Right before the upsert rather than at the start: a job taking the group waits for
        this transaction from here to its commit only, not for the COPY of its rows; a
        generation bumped before fails it, one bumped after waits for its commit.

        Raises:
            GroupBusyError: Another job took the group; nothing of the range commits.
        """
        if self.generation is None or self.group is None:
            return
        store = PostgresOffsetStore(table=self.fenceTable, schema=self.fenceSchema,
                                    connect=lambda: cached_connection(Database(self.dsn)))
        store.fence(cursor, self.group, self.generation)

    def _write(self, index: int, records: Iterator[Any]) -> Iterator[tuple[int, int]]:
        from psycopg2 import sql

        # Task ``index`` upserts the records of ``groups[index]``: one range, or a grouped
        # KafkaRDD's several, in one transaction.
        group = self.groups[index] if self.groups else self.ranges[index]
        with database_errors(f"{self.schema}.{self.table}", group, self.dsn), \
                transaction(Database(self.dsn), self.statementTimeoutMs) as cursor:
            cursor.execute(self._stage())
            rows = ((*values, ordinal) for ordinal, values in
                    enumerate(user_rows(self.row, records, group,
                                        f"{self.schema}.{self.table}", self.columns)))
            copied = copy_rows(cursor, sql.Identifier(_STAGE), (*self.columns, _ORDINAL),
                               rows)
            self._fence(cursor)
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
        onConflict: ``"nothing"`` keeps the first write; ``"update"`` takes the new values
            (not with ``spark.streaming.concurrentJobs`` above 1: refused at the first write).
        schema: Schema of ``table``.
        offsetStore: Where to commit offsets after the write (with ``group``), or None.
            The batch's ranges are checked against it before anything is written. Not with
            ``spark.streaming.concurrentJobs`` above 1 (refused at the first write). A
            :class:`PostgresOffsetStore` whose group lock the job holds fences the upserts:
            it must be in the sink's database.
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
        fence = ((offsetStore.table, offsetStore.schema)
                 if isinstance(offsetStore, PostgresOffsetStore) else ("kafka_offsets", "public"))
        self._upserter = _Upserter(dsn, table, schema, tuple(columns), tuple(keyColumns),
                                   onConflict == "update", row, statementTimeoutMs,
                                   group=group, fenceTable=fence[0], fenceSchema=fence[1])
        self.offsetStore = offsetStore
        self.group = group
        self.stream = stream

    def __repr__(self) -> str:
        return f"IdempotentPostgresSink({self._upserter.schema}.{self._upserter.table})"

    def write(self, rdd: Any) -> dict[str, int]:
        """Upsert the RDD's records, then commit its offsets; returns row counts.

        Raises:
            ConfigurationError: The running stream has ``spark.streaming.concurrentJobs``
                above 1 while the sink has an offset store or ``onConflict="update"``
                (checked before anything is written).
            OffsetMismatchError: With an offset store, a range neither continues nor repeats
                its partition's stored offset, or ranges of a partition do not chain;
                checked before writing, so nothing is written nor seeded.
            GroupBusyError: The job's lock of the group was lost to another job; an upsert
                fenced out by it rolled back.
            SinkWriteError: The database failed; see its ``outcome``.
        """
        if self.offsetStore is not None:
            self.refuseOnce(lambda: refuse_concurrent_batches(self, _STORE_ORDER, _ORDER_FIX))
        if self._upserter.update:
            self.refuseOnce(lambda: refuse_concurrent_batches(self, _UPDATE_ORDER, _ORDER_FIX))
        offsetRanges = self.offsetRangesOf(rdd)
        if not any(r.count() for r in offsetRanges):
            return {"rows": 0, "upserted": 0}  # an idle batch needs no Spark job
        generation = None
        if self.offsetStore is not None and self.group:
            generation = self._checkStored(self.offsetStore, self.group, offsetRanges)
        with typed_errors():
            groups = tuple(rdd.rangeGroups()) if getattr(rdd, "isGrouped", bool)() else ()
            upserter = dataclasses.replace(self._upserter, ranges=tuple(offsetRanges),
                                           groups=groups, generation=generation)
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
                     offsetRanges: Sequence[OffsetRange]) -> int | None:
        """Refuse a batch that does not fit the stored offsets before it is written.

        Returns:
            The generation of the group's lock to fence the upserts with, or None.
        """
        generation = store.verifyLock(group)  # a job that lost its lock stops before writing
        # Checked, then partitions new to the store start where this batch's chain starts.
        check_and_seed(store, group, offsetRanges)
        return generation
