"""The source's side of the offset link: record each batch's plan, read the committed offsets.

:class:`SourceLink` names an offset store (``offsetStore.*`` options). The source records
each batch's planned offsets through it (:meth:`SourceLink.record_plan`, which holds the
store: :mod:`kafka_direct.sql.link.store_lock`) and, started without a checkpoint, resumes from
:meth:`SourceLink.committed`. Its read tasks bind the plan to their batch
(:func:`bind_plan`); :func:`catch_up` and :func:`covered` are the source's decisions when
its checkpoint is behind the store. The protocol: :mod:`kafka_direct.sql.link`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kafka_direct.errors import ConfigurationError, OffsetStoreError
from kafka_direct.offset_range import Offsets
from kafka_direct.offsets_json import (
    SourceOffsets,
    normalise_offsets,
    offsets_from_json,
    offsets_json,
)
from kafka_direct.postgres.catalog import table_exists
from kafka_direct.postgres.connection import retry_broken, transaction
from kafka_direct.postgres.errors import CommitOutcomeUnknownError
from kafka_direct.sql.formats import BATCH_ID_PROPERTY, QUERY_ID_PROPERTY
from kafka_direct.sql.link.store_lock import HeldSession, StoreLock
from kafka_direct.sql.link.tables import (
    PLANS_TABLE,
    STORES_TABLE,
    StoreRef,
    ensure_link_tables,
    grant_fix,
    table_identifier,
)
from kafka_direct.topic_partition import TopicPartition

__all__ = ["KEEP_PLANS", "SourceLink", "bind_plan", "catch_up", "covered"]

logger = logging.getLogger(__name__)

#: Plans kept per store (only the newest counts; a few more help whoever investigates).
KEEP_PLANS = 5


@dataclass(frozen=True, slots=True)
class SourceLink(StoreRef):
    """Where a source records its plans and finds its committed offsets (PostgreSQL).

    The store's reference (:class:`~kafka_direct.sql.link.tables.StoreRef`: its database,
    name and schema) with what the source does with it.
    """

    def __repr__(self) -> str:
        return f"SourceLink(store={self.store!r}, schema={self.schema!r})"  # no DSN

    # -- the source's side ------------------------------------------------------------------

    def _lock(self) -> StoreLock:
        """This process's hold on the store (the session holding its advisory lock)."""
        return StoreLock(self.database, self.schema, self.store)

    def hold(self) -> None:
        """Take the store's lock for this process now (the first plan would take it).

        Raises:
            GroupBusyError: Another running query holds the store.
            OffsetStoreError: The database failed.
        """
        self._lock().run("taking", repr(self), lambda cursor, holder: None)

    def release(self) -> None:
        """Let go of the store (ends the session holding its lock); call from ``stop()``."""
        self._lock().release()

    def committed(self) -> SourceOffsets | None:
        """The end offsets of the newest batch the sink committed under this store.

        A read on a connection of its own: it takes no lock (the source takes the store
        with its first plan, or :meth:`hold`), so monitoring and applications may call it
        while a query runs.

        Returns:
            ``{"topic": {"partition": next offset}}``, or None when the sink committed
            nothing under this store yet (no tables, no row, or no offsets).

        Raises:
            OffsetStoreError: The database failed.
        """
        import psycopg2

        try:
            connection = self.database.connect()
            try:
                with connection.cursor() as cursor:
                    stored = (self._select_stored(cursor)
                              if table_exists(cursor, self.schema, STORES_TABLE) else None)
                connection.rollback()
            finally:
                connection.close()
        except psycopg2.Error as error:
            cause = self.database.describe(error)
            raise OffsetStoreError(
                f"reading the committed offsets of offset store {self.store!r} (schema "
                f"{self.schema!r}) failed: {cause}. {grant_fix(error, self.schema, 'source')}",
                store=repr(self), cause=cause) from error
        if stored is None:
            return None
        return normalise_offsets(stored, f"the committed offsets of store {self.store!r}")

    def record_plan(self, start: SourceOffsets, end: SourceOffsets,
                    resets: SourceOffsets | None = None) -> int:
        """Record the offsets of the batch being planned (before any task runs).

        Args:
            start: Where the batch starts reading, for every partition of ``end``.
            end: Where it stops (exclusive: the next offset to read), per partition.
            resets: Partitions whose start the source moved away from the stored offset
                on data loss (``failOnDataLoss=false``: the log shrank below it, or lost
                records after it), with that start: the sink accepts them there.

        Returns:
            The plan's id: the batch's read tasks bind it to their query and batch
            (:meth:`bind_read`), so the sink applies the plan its batch read.

        Raises:
            ConfigurationError: Offsets of the wrong shape, a partition of ``end`` missing
                from ``start``, or an end before its start.
            GroupBusyError: Another running query holds the store.
            OffsetStoreError: The database failed.
        """
        from psycopg2 import sql

        begin = normalise_offsets(start, "a plan's start")
        until = normalise_offsets(end, "a plan's end")
        for topic, partitions in until.items():
            for partition, offset in partitions.items():
                first = begin.get(topic, {}).get(partition)
                if first is None:
                    raise ConfigurationError(
                        f"a plan's end has {topic}-{partition} but its start does not: "
                        "give the start of every partition the batch reads")
                if offset < first:
                    raise ConfigurationError(
                        f"a plan's end {offset} of {topic}-{partition} is before its start "
                        f"{first}")
        plans = table_identifier(self.schema, PLANS_TABLE)

        def insert(cursor: Any, holder: HeldSession) -> int:
            if not holder.tablesReady:
                ensure_link_tables(cursor, self.schema)
                holder.tablesReady = True
            cursor.execute(sql.SQL(
                "INSERT INTO {} (store, start_offsets, end_offsets, reset_offsets) "
                "VALUES (%s, %s::jsonb, %s::jsonb, %s::jsonb) RETURNING plan_id").format(plans),
                (self.store, offsets_json(begin), offsets_json(until),
                 offsets_json(normalise_offsets(resets, "a plan's resets")) if resets
                 else None))
            plan = int(cursor.fetchone()[0])
            cursor.execute(sql.SQL("DELETE FROM {} WHERE store = %s AND plan_id <= %s").format(
                plans), (self.store, plan - KEEP_PLANS))
            logger.debug("offset store %r: plan %d recorded", self.store, plan)
            return plan

        return self._lock().run("recording a plan", repr(self), insert)

    def _select_stored(self, cursor: Any) -> Any:
        """The store row's end offsets as the database has them (None: no row or none)."""
        from psycopg2 import sql

        cursor.execute(sql.SQL("SELECT end_offsets FROM {} WHERE store = %s").format(
            table_identifier(self.schema, STORES_TABLE)), (self.store,))
        row = cursor.fetchone()
        return None if row is None else row[0]

    def stored_on_held_session(self) -> SourceOffsets | None:
        """:meth:`committed`, asked on the session holding the store (no new connection).

        Raises:
            GroupBusyError: Another running query holds the store.
            OffsetStoreError: The database failed.
        """
        def select(cursor: Any, holder: HeldSession) -> Any:
            if not holder.tablesReady:
                ensure_link_tables(cursor, self.schema)
                holder.tablesReady = True
            return self._select_stored(cursor)

        stored = self._lock().run("reading the offsets", repr(self), select)
        if stored is None:
            return None
        return normalise_offsets(stored, f"the committed offsets of store {self.store!r}")

    def bind_read(self, planId: int, queryId: str, batchId: int) -> None:
        """Record that micro-batch ``batchId`` of query ``queryId`` reads plan ``planId``.

        Called by every read task of a linked source (on executors; idempotent). The sink
        then applies exactly the plan its batch read, never another query's: a query
        whose lock session broke while another one took the store cannot commit that
        one's plan (see :mod:`kafka_direct.sql.link`).

        Raises:
            OffsetStoreError: The database failed.
        """
        import psycopg2
        from psycopg2 import sql

        plans = table_identifier(self.schema, PLANS_TABLE)
        statement = sql.SQL(
            "UPDATE {} SET query_id = %s, batch_id = %s WHERE plan_id = %s AND store = %s "
            "AND (query_id IS DISTINCT FROM %s OR batch_id IS DISTINCT FROM %s)").format(plans)
        values = (queryId, batchId, planId, self.store, queryId, batchId)
        for attempt in (1, 2):
            try:
                with transaction(self.database) as cursor:
                    cursor.execute(statement, values)
                return
            except (psycopg2.Error, CommitOutcomeUnknownError) as error:
                # The UPDATE is idempotent: a broken connection or an unknown COMMIT
                # outcome is simply run once more.
                if attempt == 1 and (isinstance(error, CommitOutcomeUnknownError)
                                     or retry_broken(self.database, error)):
                    continue
                cause = self.database.describe(error)
                raise OffsetStoreError(
                    f"binding plan {planId} of offset store {self.store!r} (schema "
                    f"{self.schema!r}) to batch {batchId} of query {queryId} failed: {cause}. "
                    f"{grant_fix(error, self.schema, 'source')}",
                    store=repr(self), cause=cause) from error


# -- the source's decisions about the store (driver side; bind_plan in tasks) -------------


def covered(ranges: Sequence[Any], start: Offsets, stored: SourceOffsets | None) -> bool:
    """Whether the store's offsets are at or past the end of every range.

    Only for partitions the batch's start knows: a partition new to the query (a
    re-created topic, read from 0 again) may end where the old log's stored offset was
    without being the same records.
    """
    if not stored:
        return False
    return all(TopicPartition(r.topic, r.partition) in start
               and stored.get(r.topic, {}).get(str(r.partition), -1) >= r.untilOffset
               for r in ranges)


def catch_up(start: Offsets, stored: SourceOffsets | None, subscription: Any
             ) -> dict[TopicPartition, int] | None:
    """The end of a batch that brings a checkpoint behind its offset store up to the store.

    A query restarted from a checkpoint older than its store (another run without that
    checkpoint moved the store since) would plan from the checkpoint's offsets and be
    refused by the sink at every batch. Ending the next batch exactly at the stored offsets
    lets the chain go on: that batch reads and writes nothing (its offsets are committed).

    Returns:
        The batch's end, or None when the store is nowhere ahead of ``start``, or is behind
        it somewhere (a store restored from an older backup: the sink refuses the batch and
        names that cause and the fix).
    """
    if not stored:
        return None
    known = {tp: offset for tp, offset in offsets_from_json(
        stored, "the offset store's committed offsets").items()
        if subscription.covers(tp) and tp in start}
    if any(offset < start[tp] for tp, offset in known.items()):
        return None
    ahead = {tp: offset for tp, offset in known.items() if offset > start[tp]}
    return {**start, **ahead} if ahead else None


def bind_plan(link: SourceLink, planId: int) -> None:
    """In a read task: bind plan ``planId`` to the running micro-batch (query and batch id).

    Raises:
        ConfigurationError: The task runs outside a streaming micro-batch.
        OffsetStoreError: The database failed.
    """
    from pyspark import TaskContext

    context = TaskContext.get()
    queryId = context.getLocalProperty(QUERY_ID_PROPERTY) if context is not None else None
    batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
    if not queryId or batch is None:
        raise ConfigurationError(
            "a source linked to an offset store read outside a streaming micro-batch (no "
            "query id or batch id in the task): read it with readStream and write it with "
            "the linked sink", setting="offsetStore.name", value=link.store)
    link.bind_read(planId, str(queryId), int(batch))
