"""The sink's side of the offset link: apply the store's newest plan with a batch's rows.

:func:`apply_batch_plan` runs inside the sink's commit transaction: it checks that the
batch's own plan (the one its read tasks bound) chains onto the stored offsets and stores
its end offsets with the batch's rows, or refuses the batch. The protocol:
:mod:`kafka_direct.sql.link`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from kafka_direct.errors import ConfigurationError, OffsetMismatchError
from kafka_direct.offsets_json import SourceOffsets, normalise_offsets, offsets_json
from kafka_direct.sql.link.tables import PLANS_TABLE, STORES_TABLE, lock_key, table_identifier

__all__ = ["AppliedPlan", "apply_batch_plan", "bound_plan", "check_committed_before",
           "source_holds"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AppliedPlan:
    """What a batch's commit did to its offset store.

    Attributes:
        store: The store's name.
        planId: The plan applied (or the one applied before, when ``changed`` is False;
            None when the store has applied none yet).
        start: The batch's start offsets (the stored ones when nothing changed).
        end: The store's end offsets after the commit.
        changed: False when the batch read nothing new (no new plan).
        covered: True when the batch read only offsets another query stored already (its
            query resumed from a checkpoint behind the store): its rows are in the target
            already, so the sink writes none of them.
    """

    store: str
    planId: int | None
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
    ``partitions()`` call, so no plan). Accepted for the query that applied the store's
    newest plan (with a warning when no source holds the store: right after a restart its
    source may not have taken it yet), or, before any plan was applied, while a source
    holds the store. A batch of another query is refused: its source is not linked, or
    another query took the store over (it would write rows the store does not follow).

    Raises:
        ConfigurationError: The batch's query is not the one the store follows.
    """
    holds = source_holds(cursor, schema, store)
    if appliedBy is not None and appliedBy != queryId:
        raise _missing_plan(store, schema, f"batch {batchId} of query {queryId} read "
                            f"nothing from a linked source while the store follows query "
                            f"{appliedBy} (its offsets were last committed by that query; "
                            "if that query took the store over, stop this one)")
    if holds:
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


def _mismatch(store: str, schema: str, queryId: str, batchId: int, topic: str,
              partition: str, was: int, begins: int, until: int) -> OffsetMismatchError:
    """The refusal of a plan that does not start where the store ends, with its cause."""
    gap = begins - was
    if gap < 0 and begins == 0:
        cause = (f"{topic}-{partition} is new to this query (read from offset 0) while the "
                 f"store has it read up to {was}: either the topic was deleted and "
                 "re-created (a new log: start a new query with a new offsetStore.name, or "
                 "run with failOnDataLoss=false while the query sees the deletion), or "
                 "this query's checkpoint predates the partition while another run read it "
                 "(delete this query's checkpoint directory: it then resumes from the "
                 "store)")
    elif gap < 0 and batchId == 0:
        cause = ("this new query's source did not start from the store: a query without a "
                 "checkpoint starts from the store's offsets only when its source has the "
                 "same offsetStore.name, offsetStore.schema and an offsetStore.dsn reaching "
                 "the sink's database. Give it those options, or use a new store name")
    elif gap < 0:
        cause = (f"this query's checkpoint is behind the store: another run (one without "
                 f"this checkpoint, or another query on the store) committed {topic}-"
                 f"{partition} up to {was} since this batch was planned. Delete this query's "
                 "checkpoint directory (checkpointLocation): without it the query resumes "
                 "from the store, losing and repeating nothing")
    else:
        cause = (f"the store is behind this query's checkpoint: the database was restored "
                 f"from an older backup, or the store's row was reset or edited, so offsets "
                 f"[{was}, {begins}) of {topic}-{partition} that earlier batches of this "
                 "query read are not committed in it (nor, with a restored database, are "
                 "their rows). Delete this query's checkpoint directory to read them again "
                 "from the store, or use a new offsetStore.name to go on from the checkpoint")
    return OffsetMismatchError(
        f"offset store {store!r} (schema {schema!r}): batch {batchId} of query {queryId} "
        f"reads {topic}-{partition} from offset {begins}, but the store's offsets end at "
        f"{was}: committing it would "
        + (f"skip {gap} records" if gap > 0 else f"repeat {-gap} records")
        + f". Nothing was written. Cause: {cause}",
        group=store, topic=topic, partition=int(partition), stored=was, fromOffset=begins,
        untilOffset=until)


def _read_partitions(start: SourceOffsets, end: SourceOffsets) -> list[tuple[str, str]]:
    """The partitions a plan reads (start before end), in a stable order."""
    return [(topic, partition) for topic, partitions in sorted(end.items())
            for partition in sorted(partitions, key=int)
            if partitions[partition] != start[topic][partition]]


def bound_plan(cursor: Any, plans: Any, store: str, queryId: str, batchId: int
                ) -> tuple[int, SourceOffsets, SourceOffsets, SourceOffsets] | None:
    """The newest plan the batch's read tasks bound: (id, start, end, resets), or None."""
    from psycopg2 import sql

    cursor.execute(sql.SQL("SELECT plan_id, start_offsets, end_offsets, reset_offsets FROM {} "
                           "WHERE store = %s AND query_id = %s AND batch_id = %s "
                           "ORDER BY plan_id DESC LIMIT 1").format(plans),
                   (store, queryId, batchId))
    row = cursor.fetchone()
    if row is None:
        return None
    planId = int(row[0])
    return (planId, normalise_offsets(row[1], f"plan {planId}'s start"),
            normalise_offsets(row[2], f"plan {planId}'s end"),
            normalise_offsets(row[3] or {}, f"plan {planId}'s resets"))


def check_committed_before(cursor: Any, schema: str, store: str, queryId: str, batchId: int,
                           last: int) -> None:
    """A batch the sink committed before may be skipped only if its offsets are stored.

    A query restarted from a checkpoint restored from an older copy plans batch ids it ran
    before, with other offsets; skipping such a batch as committed would lose the records
    its new plan reads beyond the store.

    Raises:
        OffsetMismatchError: The batch's plan reads beyond the stored offsets; nothing is
            written.
        psycopg2.Error: The database failed.
    """
    from psycopg2 import sql

    bound = bound_plan(cursor, table_identifier(schema, PLANS_TABLE), store, queryId,
                        batchId)
    if bound is None:
        return
    _, start, end, _ = bound
    cursor.execute(sql.SQL("SELECT end_offsets FROM {} WHERE store = %s").format(
        table_identifier(schema, STORES_TABLE)), (store,))
    row = cursor.fetchone()
    stored = normalise_offsets(row[0], f"the stored offsets of store {store!r}") if (
        row is not None and row[0] is not None) else {}
    for topic, partition in _read_partitions(start, end):
        was = stored.get(topic, {}).get(partition, 0)
        until = end[topic][partition]
        if until > was:
            raise OffsetMismatchError(
                f"offset store {store!r} (schema {schema!r}): batch {batchId} of query "
                f"{queryId} was committed before (the sink has committed up to batch {last}), "
                f"but this run planned it again with other offsets: it reads {topic}-"
                f"{partition} up to {until}, beyond the store's {was}. Skipping it would "
                "lose those records. Nothing was written. Cause: the query's checkpoint was "
                "restored from an older copy. Delete the checkpoint directory "
                "(checkpointLocation): the query then resumes from the store",
                group=store, topic=topic, partition=int(partition), stored=was,
                fromOffset=start[topic][partition], untilOffset=until)


def apply_batch_plan(cursor: Any, schema: str, store: str, queryId: str, batchId: int,
                     hasRows: bool = True) -> AppliedPlan:
    """In the sink's commit transaction: check the batch's own plan and store its end.

    The batch's plan is the newest one its read tasks bound to (``queryId``, ``batchId``)
    (:meth:`~kafka_direct.sql.link.source_side.SourceLink.bind_read`), never merely the store's
    newest: a query whose lock session broke while a second query took the store cannot
    commit the second one's plan with its own rows. Locks the store's row (created empty on
    the first commit) until the transaction ends.

    Args:
        cursor: A cursor in the sink's commit transaction.
        schema: Schema of the link's tables.
        store: The offset store's name.
        queryId: The batch's query.
        batchId: The batch.
        hasRows: Whether the batch writes rows (a batch of no plan and no rows is one
            whose read Spark pruned away; with rows, its source is not linked).

    Raises:
        ConfigurationError: The store has no plan, or the batch read nothing while no
            source holds the store and another query applied the newest plan (the source
            is not linked).
        OffsetMismatchError: The batch's plan does not chain onto the stored offsets (the
            error names the cause: a checkpoint behind the store, or a store behind the
            checkpoint); nothing is written.
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
    bound = bound_plan(cursor, plans, store, queryId, batchId)
    if bound is None:
        # No read task of this batch bound a plan: the batch read nothing from the source.
        cursor.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE store = %s)").format(
            plans), (store,))
        if not cursor.fetchone()[0]:
            # A first batch whose read Spark pruned away (limit(0)) records no plan and
            # writes nothing, while its linked source holds the store. Rows without a
            # plan come from a source that is not linked (whoever holds the store).
            if hasRows or not source_holds(cursor, schema, store):
                raise _missing_plan(store, schema,
                                    "the store has no plan of the batch's offsets")
            logger.debug("offset store %r: batch %d read nothing (no plan yet)", store,
                         batchId)
            return AppliedPlan(store, None, stored or {}, stored or {}, False)
        _no_new_plan(cursor, schema, store, queryId, batchId, appliedBy)
        current = stored or {}
        return AppliedPlan(store, None if applied is None else int(applied), current, current,
                           False)
    planId, start, end, resets = bound
    # Partitions the batch read; the others keep their stored offset (never moved back).
    read = _read_partitions(start, end)
    if stored is not None and read and not resets and all(
            start[topic][partition] > 0 and
            stored.get(topic, {}).get(partition) == end[topic][partition]
            for topic, partition in read):
        # The plan ends where the store does: another run stored these offsets (this
        # query's checkpoint was behind the store); their rows are in the target already.
        # The store follows this query from here on (its later no-data batches pass).
        cursor.execute(sql.SQL("UPDATE {} SET plan_id = %s, query_id = %s, batch_id = %s "
                               "WHERE store = %s").format(stores),
                       (planId, queryId, batchId, store))
        logger.warning(
            "offset store %r: batch %d of query %s reads %s, which %s stored already (this "
            "query's checkpoint is behind the store): nothing is written", store, batchId,
            queryId, offsets_json(start),
            "it" if appliedBy == queryId else f"query {appliedBy}")
        return AppliedPlan(store, planId, start, stored, False, covered=True)
    if stored is not None:
        for topic, partition in read:
            was = stored.get(topic, {}).get(partition)
            begins = start[topic][partition]
            if was is not None and was != begins:
                if resets.get(topic, {}).get(partition) == begins:
                    logger.warning("offset store %r: %s-%s goes on from %d, not %d: the "
                                   "source met data loss (failOnDataLoss=false)", store,
                                   topic, partition, begins, was)
                    continue
                raise _mismatch(store, schema, queryId, batchId, topic, partition, was,
                                begins, end[topic][partition])
    merged: SourceOffsets = {topic: dict(parts) for topic, parts in (stored or {}).items()}
    for topic, partitions in end.items():
        for partition, offset in partitions.items():
            if (topic, partition) in read or partition not in merged.get(topic, {}):
                merged.setdefault(topic, {})[partition] = offset
    merged = normalise_offsets(merged, "the new offsets")
    cursor.execute(sql.SQL(
        "UPDATE {} SET end_offsets = %s::jsonb, plan_id = %s, query_id = %s, batch_id = %s, "
        "updated_at = now() WHERE store = %s").format(stores),
        (offsets_json(merged), planId, queryId, batchId, store))
    return AppliedPlan(store, planId, start, merged, True)
