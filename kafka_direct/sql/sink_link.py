"""The sink's side of the offset link: apply the store's newest plan with a batch's rows.

:func:`apply_newest_plan` runs inside the sink's commit transaction: it checks that the
store's newest plan chains onto the stored offsets and stores its end offsets with the
batch's rows, or refuses the batch. The protocol: :mod:`kafka_direct.sql.offset_link`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from kafka_direct.errors import ConfigurationError, OffsetMismatchError
from kafka_direct.sql.link_tables import (
    PLANS_TABLE,
    STORES_TABLE,
    SourceOffsets,
    lock_key,
    normalise_offsets,
    offsets_json,
    table_identifier,
)

__all__ = ["AppliedPlan", "apply_newest_plan", "source_holds"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AppliedPlan:
    """What a batch's commit did to its offset store.

    Attributes:
        store: The store's name.
        planId: The plan applied (or the one applied before, when ``changed`` is False).
        start: The batch's start offsets (the stored ones when nothing changed).
        end: The store's end offsets after the commit.
        changed: False when the batch read nothing new (no new plan).
        covered: True when the batch read only offsets another query stored already (its
            query resumed from a checkpoint behind the store): its rows are in the target
            already, so the sink writes none of them.
    """

    store: str
    planId: int
    start: SourceOffsets
    end: SourceOffsets
    changed: bool
    covered: bool = False


def source_holds(cursor: Any, schema: str, store: str) -> bool:
    """Whether some session holds the store's advisory lock (a linked source runs)."""
    space, text = lock_key(schema, store)
    cursor.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks WHERE locktype = 'advisory' "
        "AND granted AND objsubid = 2 AND database = (SELECT oid FROM pg_catalog.pg_database "
        "WHERE datname = current_database()) AND classid = %s::oid "
        "AND objid = (hashtext(%s)::bigint & 4294967295)::oid)", (space, text))
    return bool(cursor.fetchone()[0])


def _missing_plan(store: str, schema: str, why: str) -> ConfigurationError:
    return ConfigurationError(
        f"the sink is linked to offset store {store!r} (schema {schema!r}) but {why}. The "
        "source must record its plans there: give it the same options offsetStore.name, "
        "offsetStore.schema, and offsetStore.dsn reaching the sink's database",
        setting="offsetStore.name", value=store)


def _no_new_plan(cursor: Any, schema: str, store: str, queryId: str, batchId: int,
                 appliedBy: str | None) -> None:
    """Accept a batch without a new plan as one that read nothing, or refuse it.

    A batch reads nothing from the source when Spark runs it for a moved watermark (no
    ``partitions()`` call, so no plan). A running linked source holds the store's lock;
    right after a restart it may not yet (its first plan takes it), so a batch of the query
    that applied the newest plan is accepted too, with a warning. A batch of another query
    (a fresh checkpoint) with no plan means the source is not linked: refused.

    Raises:
        ConfigurationError: No source holds the store and another query applied its plan.
    """
    if source_holds(cursor, schema, store):
        logger.debug("offset store %r: batch %d read nothing new", store, batchId)
        return
    if appliedBy != queryId:
        raise _missing_plan(store, schema, f"batch {batchId} of query {queryId} brought no "
                            "new plan and no running source holds the store")
    logger.warning(
        "offset store %r: batch %d of query %s brought no new plan and no running source "
        "holds the store. Right after a restart that is a batch which read nothing; "
        "otherwise the source lost its offsetStore options and the store no longer "
        "follows the query", store, batchId, queryId)


def apply_newest_plan(cursor: Any, schema: str, store: str, queryId: str, batchId: int
                      ) -> AppliedPlan:
    """In the sink's commit transaction: check the store's newest plan and store its end.

    Locks the store's row (created empty on the first commit) until the transaction ends.

    Raises:
        ConfigurationError: The store has no plan, or no new plan while no source holds
            the store and another query applied the newest plan (the source is not
            linked).
        OffsetMismatchError: The newest plan does not chain onto the stored offsets (the
            source did not start from the store); nothing is written.
        psycopg2.Error: The database failed.
    """
    from psycopg2 import sql

    stores = table_identifier(schema, STORES_TABLE)
    plans = table_identifier(schema, PLANS_TABLE)
    cursor.execute(sql.SQL("INSERT INTO {} (store) VALUES (%s) ON CONFLICT DO NOTHING").format(
        stores), (store,))
    cursor.execute(sql.SQL("SELECT end_offsets, plan_id, query_id FROM {} WHERE store = %s "
                           "FOR UPDATE").format(stores), (store,))
    stored_json, applied, appliedBy = cursor.fetchone()
    stored = None if stored_json is None else normalise_offsets(
        stored_json, f"the stored offsets of store {store!r}")
    cursor.execute(sql.SQL("SELECT plan_id, start_offsets, end_offsets FROM {} "
                           "WHERE store = %s ORDER BY plan_id DESC LIMIT 1").format(plans),
                   (store,))
    row = cursor.fetchone()
    if row is None:
        raise _missing_plan(store, schema, "the store has no plan of the batch's offsets")
    planId = int(row[0])
    if applied is not None and planId <= int(applied):
        _no_new_plan(cursor, schema, store, queryId, batchId, appliedBy)
        current = stored or {}
        return AppliedPlan(store, int(applied), current, current, False)
    start = normalise_offsets(row[1], f"plan {planId}'s start")
    end = normalise_offsets(row[2], f"plan {planId}'s end")
    if stored is not None and start != end and all(
            stored.get(topic, {}).get(partition) == offset
            for topic, partitions in end.items() for partition, offset in partitions.items()):
        # The newest plan ends where the store does: its offsets were stored already.
        cursor.execute(sql.SQL("UPDATE {} SET plan_id = %s WHERE store = %s").format(stores),
                       (planId, store))
        if appliedBy == queryId:
            # A batch of this query committed before and planned again when the query
            # restarted (its own commit was then skipped): this batch brought no plan.
            _no_new_plan(cursor, schema, store, queryId, batchId, appliedBy)
            return AppliedPlan(store, planId, stored, stored, False)
        # Another query (a fresh checkpoint) read and stored these offsets after this query's
        # checkpoint was written: the rows are in the target already; write none again.
        logger.warning(
            "offset store %r: batch %d of query %s reads %s, which query %s has stored "
            "already (this query's checkpoint is behind the store): nothing is written",
            store, batchId, queryId, offsets_json(start), appliedBy)
        return AppliedPlan(store, planId, start, stored, False, covered=True)
    if stored is not None:
        for topic, partitions in sorted(end.items()):
            for partition in sorted(partitions, key=int):
                was = stored.get(topic, {}).get(partition)
                begins = start[topic][partition]
                if was is not None and was != begins:
                    gap = begins - was
                    raise OffsetMismatchError(
                        f"offset store {store!r} (schema {schema!r}): batch {batchId} of query "
                        f"{queryId} reads {topic}-{partition} from offset {begins}, but the "
                        f"store's offsets end at {was}: committing it would "
                        + (f"skip {gap} records" if gap > 0 else f"repeat {-gap} records")
                        + ". Nothing was written. The source did not start from the store: "
                        "give it the same options offsetStore.name, offsetStore.schema and "
                        "offsetStore.dsn as the sink (with no checkpoint it then starts from "
                        "the store), or use a new store name",
                        group=store, topic=topic, partition=int(partition), stored=was,
                        fromOffset=begins, untilOffset=partitions[partition])
    merged: SourceOffsets = {topic: dict(parts) for topic, parts in (stored or {}).items()}
    for topic, partitions in end.items():
        merged.setdefault(topic, {}).update(partitions)
    merged = normalise_offsets(merged, "the new offsets")
    cursor.execute(sql.SQL(
        "UPDATE {} SET end_offsets = %s::jsonb, plan_id = %s, query_id = %s, batch_id = %s, "
        "updated_at = now() WHERE store = %s").format(stores),
        (offsets_json(merged), planId, queryId, batchId, store))
    return AppliedPlan(store, planId, start, merged, True)
