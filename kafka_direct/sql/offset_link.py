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
   only: applications may call it too.)

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
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_direct.errors import (
    ConfigurationError,
    GroupBusyError,
    OffsetMismatchError,
    OffsetStoreError,
)
from kafka_direct.sql.sink_database import Database

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

logger = logging.getLogger(__name__)

#: Source offsets as the source's JSON: {"topic": {"partition": next offset}}.
SourceOffsets = dict[str, dict[str, int]]

STORES_TABLE = "kafka_direct_offset_stores"
PLANS_TABLE = "kafka_direct_offset_plans"
#: First key of the store's advisory lock (the second: hashtext of "schema/store").
LINK_LOCK_SPACE = 0x6B6C
#: How long a source waits for a store another session holds (a query stopping) before
#: it gives up with GroupBusyError.
LOCK_WAIT_MS = 10_000
#: Plans kept per store (only the newest counts; a few more help whoever investigates).
KEEP_PLANS = 5

_OPTION_PREFIX = "offsetstore."


def lock_key(schema: str, store: str) -> tuple[int, str]:
    """The advisory lock of a store: ``pg_advisory_lock(space, hashtext(text))``."""
    return LINK_LOCK_SPACE, f"{schema}/{store}"


def normalise_offsets(value: Any, what: str) -> SourceOffsets:
    """``value`` as source offsets (topics and partitions as text, offsets as int >= 0).

    Raises:
        ConfigurationError: ``value`` is not ``{"topic": {"partition": offset}}``.
    """
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f"{what} must be offsets as {{\"topic\": {{\"partition\": offset}}}}, got "
            f"{type(value).__name__}")
    offsets: SourceOffsets = {}
    for topic, partitions in value.items():
        if not isinstance(topic, str) or not topic or not isinstance(partitions, Mapping):
            raise ConfigurationError(
                f"{what}: topic {topic!r} must be a name mapping partitions to offsets")
        shaped: dict[str, int] = {}
        for partition, offset in partitions.items():
            try:
                number = int(partition)
            except (TypeError, ValueError):
                number = -1
            if number < 0 or isinstance(partition, bool):
                raise ConfigurationError(
                    f"{what}: partition {partition!r} of topic {topic!r} is not a partition "
                    "number")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise ConfigurationError(
                    f"{what}: offset {offset!r} of {topic}-{number} must be an int >= 0")
            shaped[str(number)] = offset
        offsets[topic] = dict(sorted(shaped.items(), key=lambda item: int(item[0])))
    return dict(sorted(offsets.items()))


def offsets_json(offsets: SourceOffsets) -> str:
    """The offsets as JSON in a stable key order (topics sorted, partitions by number)."""
    ordered = {topic: dict(sorted(parts.items(), key=lambda item: int(item[0])))
               for topic, parts in sorted(offsets.items())}
    return json.dumps(ordered, separators=(",", ":"))


def _identifier(schema: str, table: str) -> Any:
    from psycopg2 import sql

    return sql.Identifier(schema, table)


def ensure_link_tables(cursor: Any, schema: str) -> None:
    """Create the link's tables that do not exist (asked first: no CREATE needed otherwise).

    Raises:
        psycopg2.Error: The database failed, or the role may not create what is missing.
    """
    from psycopg2 import sql

    from offsets.database import schema_exists, table_exists

    if not schema_exists(cursor, schema):
        cursor.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    if not table_exists(cursor, schema, STORES_TABLE):
        cursor.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (store text PRIMARY KEY, end_offsets jsonb, "
            "plan_id bigint, query_id text, batch_id bigint, "
            "updated_at timestamptz NOT NULL DEFAULT now())").format(
            _identifier(schema, STORES_TABLE)))
    if not table_exists(cursor, schema, PLANS_TABLE):
        cursor.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} ("
            "plan_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, store text NOT NULL, "
            "start_offsets jsonb NOT NULL, end_offsets jsonb NOT NULL, "
            "recorded_at timestamptz NOT NULL DEFAULT now())").format(
            _identifier(schema, PLANS_TABLE)))
        cursor.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (store, plan_id)").format(
            sql.Identifier(f"{PLANS_TABLE}_store"), _identifier(schema, PLANS_TABLE)))


class _Holder:
    """The session holding a store's advisory lock in this process (plans go through it)."""

    def __init__(self) -> None:
        self.connection: Any = None
        self.mutex = threading.Lock()
        self.tablesReady = False


_holders: dict[tuple[Database, str, str], _Holder] = {}
_holders_mutex = threading.Lock()


@dataclass(frozen=True, slots=True)
class SourceLink:
    """Where a source records its plans and finds its committed offsets (PostgreSQL).

    Attributes:
        dsn: libpq connection string of the sink's database ("" for libpq's environment);
            never shown.
        store: The offset store's name (the same on the source and the sink).
        schema: Schema of the link's tables.
        password: A password given apart from the DSN (``offsetStore.password``), or None.
    """

    dsn: str
    store: str
    schema: str = "public"
    password: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.dsn, str):
            raise ConfigurationError("offsetStore.dsn must be a libpq connection string")
        for name, value in (("offsetStore.name", self.store),
                            ("offsetStore.schema", self.schema)):
            if not isinstance(value, str) or not value.strip() or len(value) > 200:
                raise ConfigurationError(
                    f"{name} must be a non-empty name of at most 200 characters, got "
                    f"{value!r}")

    def __repr__(self) -> str:
        return f"SourceLink(store={self.store!r}, schema={self.schema!r})"  # no DSN

    @property
    def database(self) -> Database:
        """The link's database (DSN and password)."""
        return Database(self.dsn, self.password)

    @staticmethod
    def from_options(options: Mapping[str, Any], dsn: str | None = None,
                     password: str | None = None) -> SourceLink | None:
        """The link the options ask for (``offsetStore.name``/``.dsn``/``.schema``), or None.

        Option names are case-insensitive (Spark lowercases them). ``offsetStore.password``
        may hold the password apart from the DSN (Spark redacts such options in plans).

        Args:
            options: The data source's options.
            dsn: The DSN to use when ``offsetStore.dsn`` is absent (the sink passes its
                own: its store must live in its database); None makes it required.
            password: The password to use with ``dsn``.

        Raises:
            ConfigurationError: ``offsetStore.*`` options without ``offsetStore.name``, or
                a source's link without ``offsetStore.dsn``.
        """
        lowered = {str(k).lower(): v for k, v in options.items()}
        given = sorted(k for k in lowered if k.startswith(_OPTION_PREFIX))
        name = lowered.get(_OPTION_PREFIX + "name")
        if name is None:
            if given:
                raise ConfigurationError(
                    f"options {given} need offsetStore.name: the offset store both the "
                    "source and the sink use (the same name on both)")
            return None
        linkDsn = lowered.get(_OPTION_PREFIX + "dsn")
        linkPassword = lowered.get(_OPTION_PREFIX + "password")
        if linkDsn is None:
            if dsn is None:
                raise ConfigurationError(
                    "offsetStore.name needs offsetStore.dsn: the connection string of the "
                    "sink's database, where the sink commits the offsets with the rows "
                    "(\"\" for libpq's environment)")
            linkDsn, linkPassword = dsn, password if linkPassword is None else linkPassword
        schema = lowered.get(_OPTION_PREFIX + "schema") or "public"
        return SourceLink(str(linkDsn), str(name), str(schema),
                          None if linkPassword is None else str(linkPassword))

    # -- the source's side ------------------------------------------------------------------

    def _holder(self) -> _Holder:
        key = (self.database, self.schema, self.store)
        with _holders_mutex:
            holder = _holders.get(key)
            if holder is None:
                holder = _holders[key] = _Holder()
            return holder

    def _take(self, holder: _Holder) -> None:
        """Open the holder's session and take the store's lock (waits up to LOCK_WAIT_MS)."""
        import psycopg2

        space, text = lock_key(self.schema, self.store)
        connection = self.database.connect()
        try:
            connection.autocommit = True
            with connection.cursor() as cursor:
                cursor.execute("SET lock_timeout = %s", (int(LOCK_WAIT_MS),))
                try:
                    cursor.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (space, text))
                except psycopg2.errors.LockNotAvailable as busy:
                    raise GroupBusyError(
                        f"offset store {self.store!r} (schema {self.schema!r}) is used by "
                        f"another running query (it holds the store's lock, waited "
                        f"{LOCK_WAIT_MS} ms): one query per store. Stop that query, or give "
                        "this one another offsetStore.name", group=self.store) from busy
                cursor.execute("SET lock_timeout = 0")
        except BaseException:
            with contextlib.suppress(Exception):
                connection.close()
            raise
        holder.connection = connection
        logger.info("holding offset store %r (schema %r)", self.store, self.schema)

    def _run(self, what: str, work: Any) -> Any:
        """Run ``work(cursor, holder)`` on the held session, taking the lock first.

        A session that broke (the lock went with it) is replaced once: the lock is taken
        again on a new one.
        """
        import psycopg2

        from kafka_direct.sql.sink_database import retry_broken

        holder = self._holder()
        with holder.mutex:
            for attempt in (1, 2):
                try:
                    if holder.connection is None or holder.connection.closed:
                        holder.connection = None
                        self._take(holder)
                    with holder.connection.cursor() as cursor:
                        return work(cursor, holder)
                except psycopg2.Error as error:
                    if attempt == 1 and retry_broken(self.database, error):
                        logger.warning("the session holding offset store %r broke (%s); "
                                       "taking the store again", self.store,
                                       self.database.describe(error))
                        with contextlib.suppress(Exception):
                            holder.connection.close()
                        holder.connection = None
                        continue
                    cause = self.database.describe(error)
                    raise OffsetStoreError(
                        f"{what} of offset store {self.store!r} (schema {self.schema!r}) "
                        f"failed: {cause}. {_grant_fix(error, self.schema, 'source')}",
                        store=repr(self), cause=cause) from error
        raise AssertionError("unreachable")  # pragma: no cover

    def hold(self) -> None:
        """Take the store's lock for this process now (the first plan would take it).

        Raises:
            GroupBusyError: Another running query holds the store.
            OffsetStoreError: The database failed.
        """
        self._run("taking", lambda cursor, holder: None)

    def release(self) -> None:
        """Let go of the store (ends the session holding its lock); call from ``stop()``."""
        key = (self.database, self.schema, self.store)
        with _holders_mutex:
            holder = _holders.pop(key, None)
        if holder is not None:
            with holder.mutex:
                if holder.connection is not None:
                    with contextlib.suppress(Exception):
                        holder.connection.close()
                    holder.connection = None

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
        from psycopg2 import sql

        from offsets.database import table_exists

        try:
            connection = self.database.connect()
            try:
                with connection.cursor() as cursor:
                    stored = None
                    if table_exists(cursor, self.schema, STORES_TABLE):
                        cursor.execute(sql.SQL("SELECT end_offsets FROM {} WHERE store = %s"
                                               ).format(_identifier(self.schema, STORES_TABLE)),
                                       (self.store,))
                        row = cursor.fetchone()
                        stored = None if row is None else row[0]
                connection.rollback()
            finally:
                connection.close()
        except psycopg2.Error as error:
            cause = self.database.describe(error)
            raise OffsetStoreError(
                f"reading the committed offsets of offset store {self.store!r} (schema "
                f"{self.schema!r}) failed: {cause}. {_grant_fix(error, self.schema, 'source')}",
                store=repr(self), cause=cause) from error
        if stored is None:
            return None
        return normalise_offsets(stored, f"the committed offsets of store {self.store!r}")

    def record_plan(self, start: SourceOffsets, end: SourceOffsets) -> None:
        """Record the offsets of the batch being planned (before any task runs).

        Args:
            start: Where the batch starts reading, for every partition of ``end``.
            end: Where it stops (exclusive: the next offset to read), per partition.

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
        plans = _identifier(self.schema, PLANS_TABLE)

        def insert(cursor: Any, holder: _Holder) -> None:
            if not holder.tablesReady:
                ensure_link_tables(cursor, self.schema)
                holder.tablesReady = True
            cursor.execute(sql.SQL(
                "INSERT INTO {} (store, start_offsets, end_offsets) "
                "VALUES (%s, %s::jsonb, %s::jsonb) RETURNING plan_id").format(plans),
                (self.store, offsets_json(begin), offsets_json(until)))
            plan = int(cursor.fetchone()[0])
            cursor.execute(sql.SQL("DELETE FROM {} WHERE store = %s AND plan_id <= %s").format(
                plans), (self.store, plan - KEEP_PLANS))
            logger.debug("offset store %r: plan %d recorded", self.store, plan)

        self._run("recording a plan", insert)


def _grant_fix(error: BaseException, schema: str, side: str) -> str:
    code = str(getattr(error, "pgcode", "") or "")
    if code == "42501":
        if side == "source":
            return (f"The role lacks a privilege: GRANT USAGE ON SCHEMA {schema}; GRANT SELECT "
                    f"ON {schema}.{STORES_TABLE}; GRANT SELECT, INSERT, DELETE ON "
                    f"{schema}.{PLANS_TABLE} (or let a role with CREATE make the tables once)")
        return (f"The role lacks a privilege: GRANT USAGE ON SCHEMA {schema}; GRANT SELECT, "
                f"INSERT, UPDATE ON {schema}.{STORES_TABLE}; GRANT SELECT ON "
                f"{schema}.{PLANS_TABLE}")
    if code.startswith("28"):
        return "The database refused the login: check the user and password"
    return "Nothing changed; run again once the database answers"


# -- the sink's side ---------------------------------------------------------------------


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

    stores = _identifier(schema, STORES_TABLE)
    plans = _identifier(schema, PLANS_TABLE)
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
