"""TransactionalPostgresSink: each partition's rows and its offset in one transaction.

Per Spark partition of a KafkaRDD (one offset range), one task, one PostgreSQL transaction:

1. lock the range's offset row (``PostgresOffsetStore.claim``);
2. stored offset == ``untilOffset``: the range was applied before (a retried task, a re-run
   batch) — write nothing;
3. stored offset == ``fromOffset``: COPY the range's rows into the table and advance the
   offset to ``untilOffset``, then commit — results and offset together, or neither;
4. anything else: a gap or an overlap — roll back and raise ``OffsetMismatchError``.

A partition new to the store is seeded in step 1's transaction, at the batch's lowest
``fromOffset`` of it: a failed write leaves no seed. Several ranges of one partition in one
RDD must chain; they are written in rounds (one Spark job each), each after the earlier
range committed.

A grouped KafkaRDD's partition (``rangeGroups()``: several ranges, one per Kafka partition)
is one task and one transaction too: its rows and all its ranges' offsets commit together.
Each range is claimed in it; a retried or zombie attempt finds them all taken and writes
nothing. A task that finds some of its ranges applied and others not (the batch grouped
otherwise when it first ran) writes the others' records only.

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

from kafka_direct import (
    ConfigurationError,
    ConsumerRecord,
    OffsetMismatchError,
    OffsetRange,
    TopicPartition,
)
from kafka_direct.postgres.connection import Database, cached_connection, transaction
from kafka_direct.task_errors import carry_errors
from offsets.offset_store import chain_ranges
from offsets.postgres_offset_store import PostgresOffsetStore
from sinks.postgres_writer import (
    KafkaRDDSink,
    copy_rows,
    database_errors,
    user_rows,
)

__all__ = ["TransactionalPostgresSink"]

logger = logging.getLogger(__name__)

RowFunction = Callable[[ConsumerRecord], Sequence[Any]]


def default_row(record: ConsumerRecord) -> tuple[Any, ...]:
    """``(topic, partition, offset, key, value)`` of a record."""
    return (record.topic, record.partition, record.offset, record.key, record.value)


DEFAULT_COLUMNS = ("topic", "kafka_partition", "kafka_offset", "key", "value")
#: The Arrow columns that are :func:`default_row`'s values, in its order.
_ARROW_COLUMNS = ("topic", "partition", "offset", "key", "value")
CONCURRENT_JOBS = "spark.streaming.concurrentJobs"


_IN_ORDER = ("writes offsets in batch order and cannot run with {setting}={jobs}: a later "
             "batch could reach PostgreSQL before an earlier one and find a gap")
_IN_ORDER_FIX = ("Set {setting} to 1 (the default); for throughput, give the topic more "
                 "partitions (they are written in parallel) or raise maxRatePerPartition")


def refuse_concurrent_batches(sink: object, why: str = _IN_ORDER, fix: str = _IN_ORDER_FIX
                              ) -> None:
    """Raise ConfigurationError when the running stream may run batches side by side.

    Offsets must move in batch order: batch N+1 claiming before batch N committed finds its
    stored offsets behind its ranges, a gap. Batch jobs outside a stream are not concerned.

    Args:
        sink: The refusing sink (its repr names it in the message).
        why: What goes wrong with concurrent batches; ``{setting}`` and ``{jobs}`` are
            filled in.
        fix: What to do instead, filled in the same way.

    Raises:
        ConfigurationError: ``spark.streaming.concurrentJobs`` of the active streaming
            context is above 1 (with ``setting`` and ``value``).
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
            f"{sink!r} " + why.format(setting=CONCURRENT_JOBS, jobs=jobs) + ". "
            + fix.format(setting=CONCURRENT_JOBS, jobs=jobs), setting=CONCURRENT_JOBS,
            value=jobs)


def write_rounds(offsetRanges: Sequence[OffsetRange]) -> list[list[int]]:
    """The RDD partitions (indices of ``offsetRanges``) in the rounds that write them.

    Round k holds the k-th range (by ``fromOffset``) of every Kafka partition: a range
    whose partition has an earlier range in the same RDD is written only once that range
    committed, so it finds the stored offset at its start. Usually every partition has one
    range, and there is one round.
    """
    byPartition: dict[TopicPartition, list[int]] = {}
    for index in sorted(range(len(offsetRanges)),
                        key=lambda i: (offsetRanges[i].fromOffset, offsetRanges[i].untilOffset)):
        byPartition.setdefault(offsetRanges[index].topicPartition(), []).append(index)
    rounds = max((len(indices) for indices in byPartition.values()), default=0)
    return [sorted(indices[k] for indices in byPartition.values() if k < len(indices))
            for k in range(rounds)]


@dataclass(frozen=True)
class _PartitionWriter:
    """What each task runs (shipped to executors; holds the DSN, never logs it).

    Task ``index`` writes the ranges of ``groups[index]``: one range, or a grouped
    KafkaRDD's several (at most one per partition), all in one transaction.
    """

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
    columnar: Any = None  # PartitionReadSettings: the range read as Arrow, COPYed as CSV
    #: Partitions that may be new to the store, seeded in their task (None: every one). A
    #: row an earlier batch of the sink committed is not seeded again.
    unseeded: frozenset[TopicPartition] | None = None
    #: The ranges of each Spark partition, in partition order (one each unless grouped).
    groups: tuple[tuple[OffsetRange, ...], ...] = ()

    def __repr__(self) -> str:
        return f"_PartitionWriter({self.schema}.{self.table}, group={self.group!r})"

    def __call__(self, index: int, records: Iterator[Any]) -> Iterator[tuple[int, int]]:
        return carry_errors(self._write(index, records))

    def _chains(self, present: Sequence[OffsetRange]) -> dict[tuple[str, int], tuple[int, int]]:
        """The start and end of each of ``present``'s partitions' ranges in the batch.

        One pass over the batch's ranges: a grouped task's hundreds of ranges each looked
        up in a batch of a thousand would be a task's quadratic share of the batch.
        """
        chains = {(r.topic, r.partition): (r.fromOffset, r.untilOffset) for r in present}
        for r in self.ranges:
            key = (r.topic, r.partition)
            found = chains.get(key)
            if found is not None:
                chains[key] = (min(found[0], r.fromOffset), max(found[1], r.untilOffset))
        return chains

    def _write(self, index: int, records: Iterator[Any]) -> Iterator[tuple[int, int]]:
        """Yields ``(rows written, ranges found applied before)``."""
        from psycopg2 import sql

        group = self.groups[index] if self.groups else (self.ranges[index],)
        present = [r for r in group if r.count()]
        if not present:
            yield (0, 0)  # nothing to write, the offsets stay
            return
        # The driver prepared the store before this batch's job (``write``): asking the
        # catalog again in every task cost three round trips a range.
        store = PostgresOffsetStore(table=self.offsetTable, schema=self.offsetSchema,
                                    connect=lambda: cached_connection(Database(self.dsn)),
                                    prepared=True)
        chains = self._chains(present)
        target = sql.Identifier(self.schema, self.table)
        with database_errors(f"{self.schema}.{self.table}", tuple(present), self.dsn), \
                transaction(Database(self.dsn), self.statementTimeoutMs) as cursor:
            store.fence(cursor, self.group, self.generation)
            # A partition new to the store starts at the batch's lowest range of it, seeded
            # in this transaction: a failed write leaves no seed that a later start resumes
            # from. A row an earlier batch committed stays: seeding it again was a round
            # trip a range, every batch (and a row deleted meanwhile is a mismatch, not a
            # silent new start).
            seeds = {r.topicPartition(): chains[(r.topic, r.partition)][0] for r in present
                     if self.unseeded is None or r.topicPartition() in self.unseeded}
            if seeds:
                store.seed(self.group, seeds, cursor=cursor)
            # Every range of the task claimed (its row locked) in the task's order: a
            # retried or zombie attempt of the same task finds them taken and writes
            # nothing; a range in a state that fits neither rolls the whole task back.
            fresh = [r for r in present
                     if store.claim(cursor, self.group, r, chains[(r.topic, r.partition)][1])]
            if not fresh:
                written = -1  # applied before: the transaction ends with nothing written
            elif self.columnar is not None:
                from kafka_direct.postgres.copy_csv import copy_batches
                from kafka_direct.rdd.arrow_reader import read_ranges, task_attempt

                # The default rows, with no Python object per record: the ranges read as
                # Arrow batches and COPYed as CSV. ``records`` is never started, so the
                # KafkaRDD's own read of the ranges does not run.
                written = copy_batches(cursor, target, self.columns, read_ranges(
                    fresh, self.columnar, attempt=task_attempt()))
            else:
                if len(fresh) < len(present):
                    records = _of_ranges(records, fresh, self.group)
                written = copy_rows(cursor, target, self.columns, user_rows(
                    self.row, records, fresh[0] if len(fresh) == 1 else tuple(fresh),
                    f"{self.schema}.{self.table}", self.columns))
            for r in fresh:
                store.advance(cursor, self.group, r)
        yield (max(written, 0), len(present) - len(fresh))


def _of_ranges(records: Iterator[Any], ranges: Sequence[OffsetRange], group: str
               ) -> Iterator[Any]:
    """The records of ``ranges`` only (one range per partition): the task's others applied.

    A task of a grouped batch finds some of its ranges applied before and others not when
    the batch was grouped otherwise when it first ran (a setting changed before a restart
    from a checkpoint); its records are then sorted by partition. Only records that name
    theirs (ConsumerRecords) can be.

    Raises:
        ConfigurationError: A record is no ConsumerRecord (a messageHandler's element).
    """
    keep = {(r.topic, r.partition) for r in ranges}
    for record in records:
        if not isinstance(record, ConsumerRecord):
            first = ranges[0]
            raise ConfigurationError(
                f"a grouped task of group {group!r} found some of its ranges applied before "
                f"and others not ({first} not), and its records are no ConsumerRecords (a "
                "messageHandler's elements) that name their partition: run the batch with "
                "the grouping it first ran with (spark.streaming.kafka.minOffsetsPerTask)",
                setting="spark.streaming.kafka.minOffsetsPerTask", group=group,
                topic=first.topic, partition=first.partition)
        if (record.topic, record.partition) in keep:
            yield record


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
        self._seeded: set[TopicPartition] = set()

    def __repr__(self) -> str:
        return f"TransactionalPostgresSink({self.schema}.{self.table}, group={self.group!r})"

    def writeBatch(self, offsetRanges: Sequence[OffsetRange], rows: Iterable[Sequence[Any]],
                   write: Callable[[Any], int] | None = None) -> dict[str, int]:
        """Write ``rows`` and advance every range, in one transaction on the driver.

        Every range must continue from its stored offset, or every range must be applied
        already (a re-run batch: nothing is written). Consecutive ranges of one partition
        are chained. Partitions new to the store are seeded at their chain's start in the
        same transaction, so a refused batch seeds nothing. ``rows`` are values for
        ``columns``, e.g. ``results.toLocalIterator()`` of an aggregation. ``write``, when
        given, writes instead of the COPY of ``rows``: called with the transaction's cursor
        once the ranges are claimed, it returns the rows it wrote.

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
        with database_errors(f"{self.schema}.{self.table}", dsn=self._dsn):
            return self._writeBatch(ranges, rows, generation, write)

    def _writeBatch(self, ranges: Sequence[OffsetRange], rows: Iterable[Sequence[Any]],
                    generation: int | None, write: Callable[[Any], int] | None = None
                    ) -> dict[str, int]:
        from psycopg2 import sql

        self.store.prepare()
        with self.store.transaction(self.statementTimeoutMs) as cursor:
            self.store.fence(cursor, self.group, generation)
            # In the batch's transaction: a refused batch leaves no seed behind.
            self.store.seed(self.group, {r.topicPartition(): r.fromOffset for r in ranges},
                            cursor=cursor)
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
            written = (write(cursor) if write is not None else
                       copy_rows(cursor, sql.Identifier(self.schema, self.table), self.columns,
                                 rows))
            for r in pending:
                self.store.advance(cursor, self.group, r)
        return {"rows": written, "skipped": 0}

    def perBatch(self, results: Callable[[Any], Any]) -> Callable[[Any], None]:
        """A ``foreachRDD`` function writing ``results(kafkaRDD)`` with :meth:`writeBatch`.

        ``results`` turns the batch's KafkaRDD into an RDD of rows (aggregations welcome);
        its rows are streamed to the driver and written with all the batch's offsets.
        """

        def write(rdd: Any) -> None:
            self.refuseOnce(lambda: refuse_concurrent_batches(self))
            offsetRanges = self.offsetRangesOf(rdd)
            from kafka_direct.task_errors import typed_errors

            with typed_errors():
                self.writeBatch(offsetRanges, results(rdd).toLocalIterator())

        return write

    def _columnar(self, rdd: Any) -> Any:
        """How to read ``rdd``'s ranges as Arrow batches, or None to write its records.

        The default rows of a KafkaRDD's raw records are its ``topic``, ``partition``,
        ``offset``, ``key`` and ``value`` columns: read as Arrow and COPYed as CSV, with no
        Python object per record (several times cheaper). Anything else (a row function, a
        derived or persisted RDD, deserializers) goes through the records.
        """
        from kafka_direct.rdd.arrow_reader import PartitionReadSettings, driver_impl
        from kafka_direct.rdd.kafka_rdd import KafkaRDD

        if self.row is not default_row or len(self.columns) != len(DEFAULT_COLUMNS) \
                or not isinstance(rdd, KafkaRDD) or rdd.holdsRecords():
            return None
        settings = rdd.readSettings()
        if (settings.keyDeserializer is not None or settings.valueDeserializer is not None
                or settings.messageHandler is not None):
            return None
        return PartitionReadSettings(settings, columns=_ARROW_COLUMNS, planned=False,
                                     impl=driver_impl())

    def write(self, rdd: Any) -> dict[str, int]:
        """Write the RDD's ranges; returns counts of rows written and ranges skipped.

        Each range's task checks it against the stored offset in its own transaction;
        a partition new to the store is seeded there, at the batch's lowest ``fromOffset``
        of it, so a range whose write fails leaves no seed behind. Several ranges of one
        partition must chain (checked first); they are written in rounds, each after the
        one before committed (see :func:`write_rounds`).

        Raises:
            ConfigurationError: The running stream has ``spark.streaming.concurrentJobs``
                above 1 (checked before anything is written).
            OffsetMismatchError: A range does not continue from its stored offset (that
                range's transaction rolls back; other partitions' ranges may have committed),
                or ranges of a partition do not chain (checked first: nothing is written).
            GroupBusyError: The job's lock of the group was lost to another job.
            SinkWriteError: The database failed: that range's transaction was rolled back,
                or with ``outcome="unknown"`` the connection broke during its COMMIT.
        """
        self.refuseOnce(lambda: refuse_concurrent_batches(self))
        offsetRanges = tuple(self.offsetRangesOf(rdd))
        chained = chain_ranges(self.group, offsetRanges)  # ranges that do not chain: refused
        generation = self.store.verifyLock(self.group)
        self.store.prepare()
        # Partitions new to the store start where this batch starts (the stream's policy):
        # here those with nothing to write; the others in their range's transaction.
        idle = {r.topicPartition(): r.fromOffset for r in chained if not r.count()}
        if idle:
            self.store.seed(self.group, idle)
        if not any(r.count() for r in offsetRanges):
            return {"rows": 0, "skipped": 0}  # an idle batch needs no Spark job
        groups = tuple(rdd.rangeGroups()) if getattr(rdd, "isGrouped", bool)() else ()
        writer = _PartitionWriter(self._dsn, self.group, self.table, self.schema,
                                  self.columns, self.row, offsetRanges, self.store.table,
                                  self.store.schema, self.statementTimeoutMs, generation,
                                  self._columnar(rdd),
                                  frozenset(r.topicPartition() for r in offsetRanges
                                            if r.topicPartition() not in self._seeded),
                                  groups)
        from kafka_direct.task_errors import typed_errors

        # A grouped KafkaRDD holds one range per partition (group_ranges): one round.
        rounds = [list(range(len(groups)))] if groups else write_rounds(offsetRanges)
        with typed_errors():
            written = rdd.mapPartitionsWithIndex(writer)
            if len(rounds) == 1:
                outcomes = written.collect()
            else:
                outcomes = []
                for partitions in rounds:
                    outcomes += rdd.context.runJob(written, list, partitions)
        # Every range's transaction committed (or found its range applied before): each
        # partition's offset row exists from now on.
        self._seeded.update(r.topicPartition() for r in offsetRanges)
        written = sum(rows for rows, _ in outcomes)
        skipped = sum(applied for _, applied in outcomes)
        logger.info("%r wrote %d rows (%d ranges already applied)", self, written, skipped)
        return {"rows": written, "skipped": skipped}
