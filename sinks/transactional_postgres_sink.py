"""TransactionalPostgresSink: each partition's rows and its offset in one transaction.

Per Spark partition of a KafkaRDD (one offset range), one task, one PostgreSQL transaction:

1. lock the range's offset row (``PostgresOffsetStore.claim``);
2. stored offset == ``untilOffset``: the range was applied before (a retried task, a re-run
   batch) — write nothing;
3. stored offset == ``fromOffset``: COPY the range's rows into the table and advance the
   offset to ``untilOffset``, then commit — results and offset together, or neither;
4. anything else: a gap or an overlap — roll back and raise ``OffsetMismatchError``.

A task that dies anywhere before the commit leaves nothing behind; its retry starts over. A
stream restarted from ``store.load(group)`` resumes exactly after the last committed range.

Results of a shuffle (aggregations) no longer belong to one partition's range: for them,
:meth:`TransactionalPostgresSink.writeBatch` writes the batch's rows and *all* its ranges'
offsets in one transaction on the driver, with the same checks (:meth:`perBatch` makes the
``foreachRDD`` function).

Both paths need batches to reach PostgreSQL in order: with ``spark.streaming.concurrentJobs``
above 1, batch N+1 can claim its ranges before batch N committed and find a gap. The sink
refuses that setting with a :class:`~kafka_direct.errors.ConfigurationError` before its
first write, instead of stopping the stream later with an ``OffsetMismatchError``.

When the job holds the group's lock (``PostgresOffsetStore.lockGroup``), each batch
verifies it first and every transaction is fenced with the lock's generation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from kafka_direct import ConfigurationError, ConsumerRecord, OffsetMismatchError, OffsetRange
from kafka_direct.task_errors import carry_errors
from offsets.offset_store import chain_ranges
from offsets.postgres_offset_store import PostgresOffsetStore
from sinks.postgres_writer import (
    KafkaRDDSink,
    copy_rows,
    database_errors,
    worker_connection,
    worker_transaction,
)

__all__ = ["TransactionalPostgresSink"]

logger = logging.getLogger(__name__)

RowFunction = Callable[[ConsumerRecord], Sequence[Any]]


def default_row(record: ConsumerRecord) -> tuple[Any, ...]:
    """``(topic, partition, offset, key, value)`` of a record."""
    return (record.topic, record.partition, record.offset, record.key, record.value)


DEFAULT_COLUMNS = ("topic", "kafka_partition", "kafka_offset", "key", "value")
CONCURRENT_JOBS = "spark.streaming.concurrentJobs"


def refuse_concurrent_batches(sink: object) -> None:
    """Raise ConfigurationError when the running stream may run batches side by side.

    Offsets must move in batch order: batch N+1 claiming before batch N committed finds its
    stored offsets behind its ranges, a gap. Batch jobs outside a stream are not concerned.
    """
    from kafka_direct.streaming.context import StreamingContext

    ssc = StreamingContext.getActive()
    if ssc is None:
        return
    value = ssc.conf(CONCURRENT_JOBS, "1")
    try:
        jobs = int(value)
    except ValueError:
        return  # the scheduler reports the bad value itself
    if jobs > 1:
        raise ConfigurationError(
            f"{sink!r} writes offsets in batch order and cannot run with "
            f"{CONCURRENT_JOBS}={jobs}: a later batch could reach PostgreSQL before an "
            f"earlier one and find a gap. Set {CONCURRENT_JOBS} to 1 (the default); for "
            "throughput, give the topic more partitions (they are written in parallel) or "
            "raise maxRatePerPartition", setting=CONCURRENT_JOBS, value=jobs)


@dataclass(frozen=True)
class _PartitionWriter:
    """What each task runs (shipped to executors; holds the DSN, never logs it)."""

    dsn: str
    group: str
    table: str
    schema: str
    columns: tuple[str, ...]
    row: RowFunction
    ranges: tuple[OffsetRange, ...]
    offsetTable: str
    offsetSchema: str
    statementTimeoutMs: int | None
    generation: int | None = None

    def __repr__(self) -> str:
        return f"_PartitionWriter({self.schema}.{self.table}, group={self.group!r})"

    def __call__(self, index: int, records: Iterator[Any]) -> Iterator[tuple[str, int, int]]:
        return carry_errors(self._write(index, records))

    def _write(self, index: int, records: Iterator[Any]) -> Iterator[tuple[str, int, int]]:
        from psycopg2 import sql

        offsetRange = self.ranges[index]
        if not offsetRange.count():
            yield ("empty", index, 0)  # nothing to write, the offset stays
            return
        store = PostgresOffsetStore(table=self.offsetTable, schema=self.offsetSchema,
                                    connect=lambda: worker_connection(self.dsn))
        with database_errors(f"{self.schema}.{self.table}", offsetRange), \
                worker_transaction(self.dsn, self.statementTimeoutMs) as cursor:
            store.fence(cursor, self.group, self.generation)
            if not store.claim(cursor, self.group, offsetRange):
                written = -1  # applied before: the transaction ends with nothing written
            else:
                written = copy_rows(cursor, sql.Identifier(self.schema, self.table),
                                    self.columns, (self.row(r) for r in records))
                store.advance(cursor, self.group, offsetRange)
        if written < 0:
            yield ("skipped", index, 0)
            return
        yield ("written", index, written)


class TransactionalPostgresSink(KafkaRDDSink):
    """Write KafkaRDDs into a table exactly once, offsets in the same transactions.

    Use it directly as the function of ``foreachRDD`` (on the direct stream itself, whose
    RDDs know their offset ranges), or call :meth:`write` on a ``createRDD`` batch.

    Args:
        dsn: libpq connection string of the database (never logged).
        table: Target table (must exist, with ``columns``).
        group: Consumer group the offsets are stored under.
        columns: Target columns (default: topic, kafka_partition, kafka_offset, key, value).
        row: Record -> values for ``columns`` (default: the record's fields above).
        schema: Schema of ``table``.
        offsetTable: Table of the :class:`PostgresOffsetStore`.
        offsetSchema: Its schema (default: ``schema``).
        statementTimeoutMs: ``statement_timeout`` of the writing transactions.
    """

    def __init__(self, dsn: str, table: str, group: str,
                 columns: Sequence[str] = DEFAULT_COLUMNS, row: RowFunction = default_row,
                 schema: str = "public", offsetTable: str = "kafka_offsets",
                 offsetSchema: str | None = None, statementTimeoutMs: int | None = None) -> None:
        if not columns or not all(isinstance(c, str) and c for c in columns):
            raise ConfigurationError(f"columns must be a list of column names, got {columns!r}")
        if not callable(row):
            raise ConfigurationError(f"row must be a function of a record, got {row!r}")
        self._dsn = dsn
        self.table = table
        self.group = group
        self.columns = tuple(columns)
        self.row = row
        self.schema = schema
        self.store = PostgresOffsetStore(dsn, table=offsetTable,
                                         schema=offsetSchema or schema)
        self.statementTimeoutMs = statementTimeoutMs

    def __repr__(self) -> str:
        return f"TransactionalPostgresSink({self.schema}.{self.table}, group={self.group!r})"

    def writeBatch(self, offsetRanges: Sequence[OffsetRange], rows: Iterable[Sequence[Any]]
                   ) -> dict[str, int]:
        """Write ``rows`` and advance every range, in one transaction on the driver.

        Every range must continue from its stored offset, or every range must be applied
        already (a re-run batch: nothing is written). Consecutive ranges of one partition
        are chained. ``rows`` are values for ``columns``, e.g. ``results.toLocalIterator()``
        of an aggregation.

        Raises:
            OffsetMismatchError: A range neither continues nor repeats its stored offset, or
                the batch was applied in part only.
            GroupBusyError: The job's lock of the group was lost to another job.
            SinkWriteError: The database failed: rolled back, or with ``outcome="unknown"``
                when the connection broke during COMMIT (the stored offsets tell; writing
                the batch again is exactly-once either way).
        """
        ranges = chain_ranges(self.group, offsetRanges)  # sorted: the lock order
        generation = self.store.verifyLock(self.group)
        with database_errors(f"{self.schema}.{self.table}"):
            return self._writeBatch(ranges, rows, generation)

    def _writeBatch(self, ranges: Sequence[OffsetRange], rows: Iterable[Sequence[Any]],
                    generation: int | None) -> dict[str, int]:
        from psycopg2 import sql

        self.store.seed(self.group, {r.topicPartition(): r.fromOffset for r in ranges})
        with self.store.transaction(self.statementTimeoutMs) as cursor:
            self.store.fence(cursor, self.group, generation)
            fresh = [self.store.claim(cursor, self.group, r) for r in ranges]
            pending = [r for r, new in zip(ranges, fresh, strict=True) if new]
            if not pending and any(r.count() for r in ranges):
                logger.info("%r: batch applied before; nothing written", self)
                return {"rows": 0, "skipped": len(ranges)}
            done = [r for r, new in zip(ranges, fresh, strict=True) if not new and r.count()]
            if done:
                first = done[0]
                raise OffsetMismatchError(
                    f"batch applied in part: {first} of group {self.group!r} was committed "
                    f"before, other ranges of the batch were not; the batch's ranges must "
                    "be the same as when it first ran", group=self.group, topic=first.topic,
                    partition=first.partition, stored=first.untilOffset,
                    fromOffset=first.fromOffset, untilOffset=first.untilOffset)
            written = copy_rows(cursor, sql.Identifier(self.schema, self.table), self.columns,
                                rows)
            for r in pending:
                self.store.advance(cursor, self.group, r)
        return {"rows": written, "skipped": 0}

    def perBatch(self, results: Callable[[Any], Any]) -> Callable[[Any], None]:
        """A ``foreachRDD`` function writing ``results(kafkaRDD)`` with :meth:`writeBatch`.

        ``results`` turns the batch's KafkaRDD into an RDD of rows (aggregations welcome);
        its rows are streamed to the driver and written with all the batch's offsets.
        """

        def write(rdd: Any) -> None:
            refuse_concurrent_batches(self)
            offsetRanges = self.offsetRangesOf(rdd)
            from kafka_direct.task_errors import typed_errors

            with typed_errors():
                self.writeBatch(offsetRanges, results(rdd).toLocalIterator())

        return write

    def write(self, rdd: Any) -> dict[str, int]:
        """Write the RDD's ranges; returns counts of rows written and ranges skipped.

        Raises:
            ConfigurationError: The running stream has ``spark.streaming.concurrentJobs``
                above 1 (checked before anything is written).
            OffsetMismatchError: A range does not continue from its stored offset.
            GroupBusyError: The job's lock of the group was lost to another job.
            SinkWriteError: The database failed: that range's transaction was rolled back,
                or with ``outcome="unknown"`` the connection broke during its COMMIT.
        """
        refuse_concurrent_batches(self)
        offsetRanges = tuple(self.offsetRangesOf(rdd))
        generation = self.store.verifyLock(self.group)
        # Partitions new to the store start where this batch starts (the stream's policy).
        self.store.seed(self.group, {r.topicPartition(): r.fromOffset for r in offsetRanges})
        if not any(r.count() for r in offsetRanges):
            return {"rows": 0, "skipped": 0}  # an idle batch needs no Spark job
        writer = _PartitionWriter(self._dsn, self.group, self.table, self.schema,
                                  self.columns, self.row, offsetRanges, self.store.table,
                                  self.store.schema, self.statementTimeoutMs, generation)
        from kafka_direct.task_errors import typed_errors

        with typed_errors():
            outcomes = rdd.mapPartitionsWithIndex(writer).collect()
        written = sum(n for kind, _, n in outcomes if kind == "written")
        skipped = sum(1 for kind, _, _ in outcomes if kind == "skipped")
        logger.info("%r wrote %d rows (%d ranges already applied)", self, written, skipped)
        return {"rows": written, "skipped": skipped}
