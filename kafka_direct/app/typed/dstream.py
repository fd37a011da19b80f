"""The DStream job's typed writer: tasks stage, the driver commits rows and offsets at once.

Per batch of the direct stream:

1. one Spark job: each Kafka partition range's task decodes its records and stages them
   (:mod:`.stage`); a bad record (``--on-bad-record fail``), a schema change or a failing
   registry fails the job with its typed error, before anything reaches the target;
2. one transaction on the driver (``TransactionalPostgresSink.writeBatch``): the group's
   lock fenced, every range claimed against the stored offsets (a batch applied before
   writes nothing), the staged rows moved (:func:`~kafka_direct.app.typed.commit.
   move_parts`: new columns, rows or upserts, deletes, dead letters), the offsets advanced;
3. the batch's staging tables are dropped in that transaction; what a failed batch staged
   is dropped after it, and what a killed job left behind at the next run's first batch.

So every batch is exactly once whatever stops the job, rows, deletes and dead letters alike.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kafka_direct.app.typed.commit import MoveCounts, move_tables
from kafka_direct.app.typed.options import TypedOptions
from kafka_direct.app.typed.stage import StagedPart, Stager
from sinks.postgres_writer import KafkaRDDSink

__all__ = ["TypedDStreamWriter"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _StageTask:
    """What each task runs (holds the DSN through its stager: never shown)."""

    stager: Stager

    def __repr__(self) -> str:
        return f"_StageTask({self.stager!r})"

    def __call__(self, index: int, records: Iterator[Any]) -> Iterator[StagedPart]:
        from kafka_direct.task_errors import carry_errors

        return carry_errors(self._stage(index, records))

    def _stage(self, index: int, records: Iterator[Any]) -> Iterator[StagedPart]:
        yield self.stager.stage(index, ((r.topic, r.partition, r.offset, r.key, r.value,
                                         r.timestamp, r.headers) for r in records))


@dataclass
class TypedDStreamWriter(KafkaRDDSink):
    """Write the direct stream's batches as typed rows, exactly once (see the module).

    Args:
        dsn: libpq connection string (never shown).
        schema: Schema of the table, its staging and the offsets table.
        table: The target table, or a per-topic template (``{topic}``).
        group: The consumer group the offsets are stored under.
        options: The record options.
        statementTimeoutMs: ``statement_timeout`` of the transactions.
    """

    dsn: str = field(repr=False)
    schema: str
    table: str
    group: str
    options: TypedOptions
    statementTimeoutMs: int | None = None
    batches: int = field(default=0, repr=False)
    cleaned: bool = field(default=False, repr=False)
    schemas: dict[int, tuple[str, ...]] = field(default_factory=dict, repr=False)
    topics: set[str] = field(default_factory=set, repr=False)

    def __repr__(self) -> str:
        return f"TypedDStreamWriter({self.schema}.{self.table}, group={self.group!r})"

    @property
    def queryId(self) -> str:
        """The staging registry's key of this job's batches."""
        return f"ingest:{self.group}"

    def _sink(self) -> Any:
        from sinks.transactional_postgres_sink import TransactionalPostgresSink

        return TransactionalPostgresSink(self.dsn, self.table, self.group, schema=self.schema,
                                         statementTimeoutMs=self.statementTimeoutMs)

    def write(self, rdd: Any) -> dict[str, int]:
        """Stage and commit one batch; returns counts (rows, deletes, deadLetters, skipped).

        Raises:
            BadRecordError: A record cannot be a row (``--on-bad-record fail``): nothing of
                the batch was written.
            SchemaChangeError: A field no longer fits its column: nothing written.
            SchemaRegistryError: The registry failed: nothing written.
            OffsetMismatchError, GroupBusyError, SinkWriteError: As the transactional sink.
        """
        from sinks.transactional_postgres_sink import refuse_concurrent_batches

        self.refuseOnce(lambda: refuse_concurrent_batches(self))
        offsetRanges = self.offsetRangesOf(rdd)
        sink = self._sink()
        if not self.cleaned:  # what a killed run of the group staged (the job holds its lock)
            self._drop(None)
            self.cleaned = True
        self.batches += 1
        batch = self.batches
        parts: list[StagedPart] = []
        from kafka_direct.app.typed.routing import TableRoute

        # Two topics of a pattern onto one table: refused before anything is read.
        # A topic's dead-letter table that is another's table too.
        TableRoute(self.table).tables({r.topic for r in offsetRanges}, self.options)
        if any(r.count() for r in offsetRanges):
            from kafka_direct.task_errors import typed_errors

            fresh = {r.topic for r in offsetRanges} - self.topics
            if fresh and self.options.registry is not None:
                from kafka_direct.app.typed.formats import fetch_schemas

                self.schemas.update(fetch_schemas(self.options, sorted(fresh)))
            self.topics |= fresh
            stager = Stager(self.dsn, self.schema, self.table, self.options, self.queryId,
                            batch, self.statementTimeoutMs, tuple(sorted(self.schemas.items())))
            try:
                with typed_errors():
                    parts = rdd.mapPartitionsWithIndex(_StageTask(stager)).collect()
            except BaseException:
                self._drop(batch)
                raise
        for part in parts:  # schemas a task had to fetch: the next tasks get them
            self.schemas.update(part.schemas)
        moved = MoveCounts()

        def move(cursor: Any) -> int:
            nonlocal moved
            moved = move_tables(cursor, self.schema, self.table, self.options, parts)
            self._dropIn(cursor, batch)
            return moved.written

        try:
            counts = sink.writeBatch(offsetRanges, (), write=move)
        finally:
            if any(p.rows for p in parts):
                self._drop(batch)  # a no-op once the commit dropped them
        logger.info("%r: batch wrote %d rows, deleted %d, %d dead letters", self,
                    moved.written, moved.deleted, moved.deadLetters)
        return {"rows": int(counts["rows"]), "deleted": moved.deleted,
                "deadLetters": moved.deadLetters, "skipped": int(counts.get("skipped", 0)),
                "ignored": sum(p.ignored for p in parts)}

    def _dropIn(self, cursor: Any, batch: int | None) -> int:
        from psycopg2 import sql

        from kafka_direct.postgres.staging import drop_staged

        if batch is None:
            return drop_staged(cursor, self.schema, sql.SQL("query_id = %s"), (self.queryId,))
        return drop_staged(cursor, self.schema, sql.SQL("query_id = %s AND batch_id = %s"),
                           (self.queryId, batch))

    def _drop(self, batch: int | None) -> None:
        """Drop staged tables of one batch (None: all of this group's), best effort."""
        import psycopg2

        from kafka_direct.postgres.connection import connect

        try:
            connection = connect(self.dsn)
        except psycopg2.Error as error:
            logger.warning("%r: dropping staged rows failed (they go by age): %s", self,
                           type(error).__name__)
            return
        try:
            with connection, connection.cursor() as cursor:
                self._dropIn(cursor, batch)
        except psycopg2.Error as error:
            logger.warning("%r: dropping staged rows failed (they go by age): %s", self,
                           type(error).__name__)
        finally:
            connection.close()
