"""The link between the kafka-direct source and the PostgreSQL sink of one query.

A query whose checkpoint directory is lost restarts from nothing: Spark knows neither its
offsets nor which batches its sink committed. Linked by one *offset store* name, the source
and the sink keep the offsets in PostgreSQL instead, committed in the same transaction as
the rows:

1. The source (driver side), for each batch it plans, calls :meth:`SourceLink.record_plan`
   with the batch's start and end offsets, before any task of the batch runs, and hands
   the plan's id to the batch's input partitions. Call it from ``partitions(start, end)``:
   Spark calls that for every batch that reads the source, re-executed ones included. A
   batch that reads nothing from the source (Spark's no-data batches) has no plan. The
   first plan takes the store's lock (below).
2. Every read task of the batch binds the plan to its query and batch
   (:meth:`SourceLink.bind_read`, from the task's ``sql.streaming.queryId`` and
   ``streaming.sql.batchId`` local properties), before it reads.
3. The sink, in the transaction that commits a batch's rows (:func:`apply_batch_plan`),
   locks the store's row, takes the plan bound to the batch (the newest one, when a
   restarted query planned it again) and checks that it chains onto the store: every
   partition the batch read must start where the store ended; partitions new to the store
   may start anywhere; the first commit of an empty store accepts any start. It then stores
   the plan's end offsets (merged into the stored ones) with the batch. A batch no task
   bound read nothing: the offsets stay. A plan ending exactly at the stored offsets was
   read and committed by another run (a checkpoint behind the store): its rows are in
   already, and the sink writes none of them. A plan that does not chain is refused with
   its cause named: a checkpoint behind the store, or a store behind the checkpoint. The
   one exception: a partition the source marked in the plan as moved by data loss
   (``failOnDataLoss=false``: a re-created topic, a truncated log) goes on from there.
4. A source started without a checkpoint starts from :meth:`SourceLink.committed`, the end
   offsets of the newest batch the sink committed: nothing lost, nothing repeated. (A read
   only: applications may call it too.) The store holds the source's offsets only: a
   stateful query (an aggregation) restarted so starts from empty state at those offsets.

Why the binding: the sink never guesses which plan is its batch's. A query whose lock
session broke (PostgreSQL restarted, the network cut it) while a second query took the
store can still commit a batch it planned before; it commits its own plan, which no longer
chains onto what the second query stored, and is refused, instead of committing the second
query's plan with its own rows (rows twice, or offsets stored without their rows).

One query per store: the source holds a session-level advisory lock on the store while it
runs (taken by its first plan or :meth:`SourceLink.hold`; :meth:`SourceLink.release`, or
the end of its process, lets go), so a second query on the same store fails with
:class:`~kafka_direct.errors.GroupBusyError` instead of interleaving its plans. The sink
refuses a batch that read nothing unless a source holds that lock or the batch's query
applied the newest plan (a restarted query whose first batch read nothing): a query with
a fresh checkpoint whose source is not linked is caught at its first batch. Limit: a
source that loses its offsetStore options while the query keeps its checkpoint is only
warned about (the store stops following the query). Sources should take the lock as soon
as they run (:meth:`SourceLink.hold` from a driver-side method Spark calls at every start,
e.g. ``getDefaultReadLimit``), never where Spark builds readers to plan tasks.

Tables (in ``offsetStore.schema``, created on first use when missing; a role without CREATE
works where an administrator created them): ``kafka_direct_offset_stores`` (one row per
store: its end offsets as JSON ``{"topic": {"partition": next offset}}``, the plan applied
last, the query and batch that applied it) and ``kafka_direct_offset_plans`` (the newest
few plans of each store, with the query and batch that read each). The source needs SELECT
on the first and SELECT, INSERT, UPDATE, DELETE on the second (its read tasks bind plans on
executors, so executors must reach the database, as the sink's do); the sink SELECT, INSERT,
UPDATE on the first and SELECT on the second.

Modules: :mod:`kafka_direct.sql.link.tables` (a store's reference, the tables, the lock's
key), :mod:`kafka_direct.sql.link.source_side` (:class:`SourceLink`),
:mod:`kafka_direct.sql.link.store_lock` (the session holding a store's lock) and
:mod:`kafka_direct.sql.link.sink_side` (:func:`apply_batch_plan`); offsets as JSON are
:mod:`kafka_direct.offsets_json`'s. This package re-exports the link's public names.
"""

from kafka_direct.sql.link.sink_side import AppliedPlan, apply_batch_plan, source_holds
from kafka_direct.sql.link.source_side import SourceLink
from kafka_direct.sql.link.tables import (
    LINK_LOCK_SPACE,
    LINK_OPTIONS,
    PLANS_TABLE,
    STORES_TABLE,
    StoreRef,
    ensure_link_tables,
    lock_key,
)

__all__ = [
    "LINK_LOCK_SPACE",
    "LINK_OPTIONS",
    "PLANS_TABLE",
    "STORES_TABLE",
    "AppliedPlan",
    "SourceLink",
    "StoreRef",
    "apply_batch_plan",
    "ensure_link_tables",
    "lock_key",
    "source_holds",
]
