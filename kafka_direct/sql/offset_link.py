"""The link between the kafka-direct source and the PostgreSQL sink of one query.

A query whose checkpoint directory is lost restarts from nothing: Spark knows neither its
offsets nor which batches its sink committed. Linked by one *offset store* name, the source
and the sink keep the offsets in PostgreSQL instead, committed in the same transaction as
the rows:

1. The source (driver side), for each batch it plans, calls :meth:`SourceLink.record_plan`
   with the batch's start and end offsets, before any task of the batch runs. Call it from
   ``partitions(start, end)``: Spark calls that for every batch that reads the source,
   re-executed ones included. A batch that reads nothing from the source (Spark's no-data
   batches) has no plan. The first plan takes the store's lock (below).
2. The sink, in the transaction that commits a batch's rows
   (:func:`apply_newest_plan`), locks the store's row, takes the store's newest plan and
   checks that it chains onto the store: every partition the store has must start where the
   store ended; partitions new to the store may start anywhere; the first commit of an empty
   store accepts any start. It then stores the plan's end offsets (merged into the stored
   ones) with the batch. A plan the sink already applied means the batch read nothing new:
   the offsets stay.
3. A source started without a checkpoint starts from :meth:`SourceLink.committed`, the end
   offsets of the newest batch the sink committed: nothing lost, nothing repeated. (A read
   only: applications may call it too.) The store holds the source's offsets only: a
   stateful query (an aggregation) restarted so starts from empty state at those offsets.

Micro-batches of a query run one after the other, so at the sink's commit of batch N the
newest plan of the store is batch N's (or an applied one: batch N read nothing). That holds
for one query per store: the source holds a session-level advisory lock on the store while
it runs (taken by its first plan or :meth:`SourceLink.hold`; :meth:`SourceLink.release`, or
the end of its process, lets go), so a second query on the same store fails with
:class:`~kafka_direct.errors.GroupBusyError` instead of interleaving its plans. The sink
refuses a batch without a new plan unless a source holds that lock or the batch's query
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
few plans of each store). The source needs SELECT on the first and SELECT, INSERT, DELETE on
the second; the sink SELECT, INSERT, UPDATE on the first and SELECT on the second.

Modules: :mod:`kafka_direct.sql.link_tables` (the tables, the lock's key, offsets as JSON),
:mod:`kafka_direct.sql.source_link` (:class:`SourceLink`), :mod:`kafka_direct.sql.store_lock`
(the session holding a store's lock) and :mod:`kafka_direct.sql.sink_link`
(:func:`apply_newest_plan`). This module re-exports their public names.
"""

from kafka_direct.sql.link_tables import (
    LINK_LOCK_SPACE,
    PLANS_TABLE,
    STORES_TABLE,
    SourceOffsets,
    ensure_link_tables,
    lock_key,
    normalise_offsets,
    offsets_json,
)
from kafka_direct.sql.sink_link import AppliedPlan, apply_newest_plan, source_holds
from kafka_direct.sql.source_link import SourceLink

__all__ = [
    "LINK_LOCK_SPACE",
    "PLANS_TABLE",
    "STORES_TABLE",
    "AppliedPlan",
    "SourceLink",
    "SourceOffsets",
    "apply_newest_plan",
    "ensure_link_tables",
    "lock_key",
    "normalise_offsets",
    "offsets_json",
    "source_holds",
]
