"""The driver's commit of a micro-batch: its staged rows into the target, once, atomically.

:func:`commit_batch` runs ONE PostgreSQL transaction:

1. lock the sink's commit row of (query id, target) (``SELECT ... FOR UPDATE``, created on
   the query's first commit): a second driver committing the same query waits here;
2. if the row's batch is already this one or later, the batch was committed before (a
   re-executed batch after a crash, a lost acknowledgement): drop the batch's staged rows,
   write nothing;
3. check the staged attempts the messages name: registered, and not emptied by a crash
   of PostgreSQL (unlogged tables are): otherwise refuse the batch, writing nothing;
4. with an offset store: apply the batch's plan (:func:`~kafka_direct.sql.link.sink_side.
   apply_batch_plan`: chained onto the stored offsets or refused);
5. move exactly the named attempts' rows into the target: ``INSERT ... SELECT`` (append),
   an upsert ``ON CONFLICT (keys) DO UPDATE`` (update), or ``DELETE`` then insert
   (complete);
6. record the batch in the commit row, drop every staged table of the query's batches up
   to this one (failed and speculative attempts included), COMMIT.

A COMMIT whose answer is lost raises :class:`~kafka_direct.errors.SinkWriteError` with
``outcome="unknown"``: the restarted query runs the batch again and step 2 decides.
:func:`abort_batch` drops a batch's staged rows; staged rows nobody claims are dropped by age
(:func:`drop_stale`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kafka_direct.errors import ConfigurationError, KafkaDirectError, SinkWriteError
from kafka_direct.postgres.connection import drop_cached, retry_broken, transaction
from kafka_direct.postgres.errors import CommitOutcomeUnknownError, database_error
from kafka_direct.postgres.sink_claims import DirectAttempt, check_claims, release_claims
from kafka_direct.postgres.staging import COMMITS_TABLE, STAGED_TABLE, StagedAttempt, drop_staged
from kafka_direct.sql.link.sink_side import AppliedPlan, apply_batch_plan, check_committed_before
from kafka_direct.sql.sink.options import SinkOptions

__all__ = ["CommitResult", "Mover", "abort_batch", "commit_batch", "commit_write", "drop_stale",
           "move_statement"]

logger = logging.getLogger(__name__)

#: Stale staged rows are looked for at most this often per process and staging schema.
STALE_SWEEP_SECONDS = 60.0
_swept: dict[tuple[object, str], float] = {}
_swept_mutex = threading.Lock()

#: A writer's own move of its staged rows: (cursor, attempts with rows) -> rows written.
Mover = Callable[[Any, Sequence[StagedAttempt]], int]
#: What a write task's commit message names: rows staged, or rows written and claimed.
Attempt = StagedAttempt | DirectAttempt

_PART = "kafka_direct_part"
_POS = "kafka_direct_pos"
_RANK = "kafka_direct_rank"


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What a commit did.

    Attributes:
        queryId: The query (``write:<id>`` for a batch write).
        batchId: The batch.
        rows: Rows moved into the target (0 when skipped; upserts count inserted and
            updated rows).
        skipped: True when the batch was committed before: nothing was written.
        plan: What the commit did to the offset store, or None without one.
    """

    queryId: str
    batchId: int
    rows: int
    skipped: bool
    plan: AppliedPlan | None = None


def move_statement(options: SinkOptions, staged: Sequence[StagedAttempt]) -> Any:
    """The INSERT moving ``staged`` attempts' rows into the target (for the options' mode).

    In update mode the rows of one key are reduced to one first (ON CONFLICT may touch a
    row once per statement): the row of the highest partition, last in it, stays. Rows
    with a NULL in the key never conflict and all go in.
    """
    from psycopg2 import sql

    columns = sql.SQL(", ").join(sql.Identifier(c) for c in options.columns)
    target = sql.Identifier(options.schema, options.table)
    if options.mode != "update":
        union = sql.SQL(" UNION ALL ").join(
            sql.SQL("SELECT {} FROM {}").format(columns, sql.Identifier(options.stagingSchema,
                                                                         a.table))
            for a in staged)
        return sql.SQL("INSERT INTO {} ({}) ").format(target, columns) + union
    union = sql.SQL(" UNION ALL ").join(
        sql.SQL("SELECT {}, {} AS {}, ctid AS {} FROM {}").format(
            columns, sql.Literal(a.partitionId), sql.Identifier(_PART), sql.Identifier(_POS),
            sql.Identifier(options.stagingSchema, a.table))
        for a in staged)
    keys = sql.SQL(", ").join(sql.Identifier(k) for k in options.keyColumns)
    anyNull = sql.SQL(" OR ").join(sql.SQL("{} IS NULL").format(sql.Identifier(k))
                                   for k in options.keyColumns)
    others = [c for c in options.columns if c not in options.keyColumns]
    action = (sql.SQL("DO UPDATE SET ") + sql.SQL(", ").join(
        sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c))
        for c in others)) if others else sql.SQL("DO NOTHING")
    return sql.SQL(
        "INSERT INTO {} ({}) SELECT {} FROM (SELECT *, row_number() OVER (PARTITION BY {} "
        "ORDER BY {} DESC, {} DESC) AS {} FROM (").format(
        target, columns, columns, keys, sql.Identifier(_PART), sql.Identifier(_POS),
        sql.Identifier(_RANK)) + union + sql.SQL(
        ") AS staged) AS ranked WHERE {} = 1 OR {} ON CONFLICT ({}) ").format(
        sql.Identifier(_RANK), anyNull, keys) + action


def _check_staged(cursor: Any, options: SinkOptions, queryId: str, batchId: int,
                  staged: Sequence[StagedAttempt]) -> None:
    """Refuse the batch unless every named attempt's rows are there, as many as staged."""
    from psycopg2 import sql

    if not staged:
        return
    cursor.execute(sql.SQL(
        "SELECT token, rows, pg_relation_size(to_regclass(quote_ident(%s) || '.' || "
        "quote_ident(staging_table))) FROM {} WHERE token = ANY(%s) AND query_id = %s "
        "AND batch_id = %s FOR UPDATE").format(
        sql.Identifier(options.stagingSchema, STAGED_TABLE)),
        (options.stagingSchema, [a.token for a in staged], queryId, batchId))
    found = {str(t): (int(rows), size) for t, rows, size in cursor.fetchall()}
    for attempt in staged:
        registered = found.get(attempt.token)
        problem = None
        if registered is None:
            problem = "are not registered (dropped as stale, or by a cleanup)"
        elif registered[0] != attempt.rows:
            problem = f"count {registered[0]}, the task reported {attempt.rows}"
        elif not registered[1]:
            problem = ("are gone: the staging table is empty or missing (PostgreSQL "
                       "empties unlogged tables when it recovers from a crash)")
        if problem is not None:
            raise SinkWriteError(
                f"batch {batchId} of query {queryId}: the staged rows of partition "
                f"{attempt.partitionId} (attempt {attempt.token[:8]}) {problem}. Nothing was "
                "written; restart the query from its checkpoint to run the batch again",
                table=options.target, topic=None, partition=None, fromOffset=None,
                untilOffset=None, cause=problem, outcome="rolled back")


def _lock_commit_row(cursor: Any, options: SinkOptions, queryId: str) -> int:
    from psycopg2 import sql

    commits = sql.Identifier(options.stagingSchema, COMMITS_TABLE)
    cursor.execute(sql.SQL("INSERT INTO {} (query_id, target, batch_id) VALUES (%s, %s, -1) "
                           "ON CONFLICT DO NOTHING").format(commits),
                   (queryId, options.target))
    cursor.execute(sql.SQL("SELECT batch_id FROM {} WHERE query_id = %s AND target = %s "
                           "FOR UPDATE").format(commits), (queryId, options.target))
    return int(cursor.fetchone()[0])


def _commit_once(options: SinkOptions, queryId: str, batchId: int,
                 attempts: Sequence[Attempt], record: bool,
                 move: Mover | None = None) -> CommitResult:
    from psycopg2 import sql

    with transaction(options.database, options.statementTimeoutMs) as cursor:
        if record:
            last = _lock_commit_row(cursor, options, queryId)
            if batchId <= last:
                if options.link is not None:
                    check_committed_before(cursor, options.link.schema, options.link.store,
                                           queryId, batchId, last)
                dropped = drop_staged(cursor, options.stagingSchema,
                                      sql.SQL("query_id = %s AND batch_id <= %s"),
                                      (queryId, batchId))
                if options.direct and options.link is None:
                    # (With an offset store, its commit released the claims the store
                    # passes; the others hold rows past it.)
                    release_claims(cursor, options.stagingSchema, options.target, queryId,
                                   batchId, None)
                logger.info("batch %d of query %s was committed before (newest: %d): "
                            "nothing written, %d staged attempts dropped", batchId, queryId,
                            last, dropped)
                return CommitResult(queryId, batchId, 0, True)
        staged = [a for a in attempts if isinstance(a, StagedAttempt)]
        direct = [a for a in attempts if isinstance(a, DirectAttempt)]
        withRows = [a for a in staged if a.rows]
        _check_staged(cursor, options, queryId, batchId, withRows)
        written = sum(a.rows for a in direct)
        plan = None
        if options.link is not None and record:
            plan = apply_batch_plan(cursor, options.link.schema, options.link.store,
                                    queryId, batchId,
                                    hasRows=bool(withRows or written
                                                 or any(a.covered for a in direct)))
        if plan is None or not plan.covered:
            # A batch the store covers was committed by another query, whose commit
            # released the claims its offsets pass, these attempts' too (it relied on
            # them): their rows are in the target, once.
            check_claims(cursor, options.stagingSchema, options.target, queryId, batchId,
                         direct)
        if direct and record:  # the batch's claims, and those its stored offsets pass
            release_claims(cursor, options.stagingSchema, options.target, queryId, batchId,
                           None if plan is None else plan.end)
        if plan is not None and plan.covered and not written:
            # Another query wrote these offsets' rows: none again.
            cursor.execute(sql.SQL(
                "UPDATE {} SET batch_id = %s, rows = 0, committed_at = now() "
                "WHERE query_id = %s AND target = %s").format(
                sql.Identifier(options.stagingSchema, COMMITS_TABLE)),
                (batchId, queryId, options.target))
            drop_staged(cursor, options.stagingSchema,
                        sql.SQL("query_id = %s AND batch_id <= %s"), (queryId, batchId))
            return CommitResult(queryId, batchId, 0, True, plan)
        if options.mode == "complete":
            cursor.execute(sql.SQL("DELETE FROM {}").format(
                sql.Identifier(options.schema, options.table)))
        moved = written  # written by the tasks themselves (direct writes)
        if withRows and move is not None:  # the writer moves its own staged rows
            moved = move(cursor, withRows)
        elif withRows:
            cursor.execute(move_statement(options, withRows))
            moved += cursor.rowcount
            expected = sum(a.rows for a in withRows)
            if options.mode != "update" and cursor.rowcount != expected:
                raise SinkWriteError(
                    f"batch {batchId} of query {queryId}: {cursor.rowcount} rows moved of the "
                    f"{expected} staged; nothing was written. Restart the query to run "
                    "the batch again", table=options.target, topic=None, partition=None,
                    fromOffset=None, untilOffset=None, cause="row count mismatch",
                    outcome="rolled back")
        if record:
            cursor.execute(sql.SQL(
                "UPDATE {} SET batch_id = %s, rows = %s, committed_at = now() "
                "WHERE query_id = %s AND target = %s").format(
                sql.Identifier(options.stagingSchema, COMMITS_TABLE)),
                (batchId, moved, queryId, options.target))
        drop_staged(cursor, options.stagingSchema,
                    sql.SQL("query_id = %s AND batch_id <= %s"), (queryId, batchId))
    return CommitResult(queryId, batchId, moved, False, plan)


def _run(options: SinkOptions, doing: str, work: Any) -> Any:
    """Run ``work()`` (a transaction), once more if a cached connection had broken."""
    import psycopg2

    for retry in (False, True):
        try:
            return work()
        except (psycopg2.Error, CommitOutcomeUnknownError) as error:
            if not retry and retry_broken(options.database, error):
                drop_cached(options.database)
                continue
            grants = (f"GRANT INSERT{', UPDATE' if options.mode == 'update' else ''}"
                      f"{', DELETE' if options.mode == 'complete' else ''} ON "
                      f"{options.target}; GRANT SELECT, INSERT, UPDATE ON "
                      f"{options.stagingSchema}.{COMMITS_TABLE}; GRANT SELECT, UPDATE, DELETE ON "
                      f"{options.stagingSchema}.{STAGED_TABLE}; the role must own the "
                      "staging tables (the same role as the tasks')")
            raise database_error(error, options.database, doing=doing,
                                 table=options.target, grants=grants) from error
    raise AssertionError("unreachable")  # pragma: no cover


def _attempts(queryId: str | None, batchId: int, messages: Sequence[Attempt | None]
              ) -> tuple[str, list[Attempt]]:
    staged = [m for m in messages if m is not None]
    if len(staged) != len(messages):
        raise SinkWriteError(
            f"batch {batchId}: {len(messages) - len(staged)} of {len(messages)} write tasks "
            "sent no commit message, so their rows cannot be found; nothing was written",
            table="", topic=None, partition=None, fromOffset=None, untilOffset=None,
            cause="missing commit message", outcome="rolled back")
    queries = {a.queryId for a in staged} | ({queryId} if queryId else set())
    if len(queries) != 1:
        raise SinkWriteError(
            f"batch {batchId}: the write tasks name {len(queries)} queries "
            f"({sorted(queries)}), so the batch cannot be committed as one; nothing was "
            "written", table="", topic=None, partition=None, fromOffset=None,
            untilOffset=None, cause="query ids differ", outcome="rolled back")
    wrong = [a for a in staged if a.batchId != batchId]
    if wrong:
        raise SinkWriteError(
            f"batch {batchId}: a write task staged its rows for batch {wrong[0].batchId}; "
            "nothing was written", table="", topic=None, partition=None, fromOffset=None,
            untilOffset=None, cause="batch ids differ", outcome="rolled back")
    tokens = [a.token for a in staged]
    if len(set(tokens)) != len(tokens):
        raise SinkWriteError(
            f"batch {batchId}: two commit messages name the same attempt; nothing was "
            "written", table="", topic=None, partition=None, fromOffset=None,
            untilOffset=None, cause="duplicate attempt", outcome="rolled back")
    return queries.pop(), staged


def commit_batch(options: SinkOptions, batchId: int,
                 messages: Sequence[Attempt | None], *,
                 queryId: str | None = None, move: Mover | None = None) -> CommitResult:
    """Commit micro-batch ``batchId`` exactly once (see the module's steps).

    Args:
        options: The sink's prepared options.
        batchId: Spark's batch id.
        messages: One staged attempt per write task (a stream's batch has at least one; a
            ``foreachBatch`` write of no partition has none).
        queryId: The query's id when the caller knows it (a ``foreachBatch`` write): the
            messages must name it; needed when there is no message.
        move: Moves the staged attempts' rows into the target instead of step 5 (a writer
            whose staging tables are its own): called with the commit's cursor and the
            attempts that staged rows, it returns the rows written.

    Raises:
        SinkWriteError: The database failed (rolled back: nothing written), the COMMIT's
            outcome is unknown (``outcome="unknown"``), or the staged rows are not all
            there (rolled back).
        OffsetMismatchError: The offset store's plan does not chain (nothing written).
        ConfigurationError: The sink is linked to an offset store the source does not
            record its plans in.
    """
    queryId, staged = _attempts(queryId, batchId, messages)
    if queryId.startswith("write:"):
        raise ConfigurationError(
            f"batch {batchId}: the write tasks did not run in a streaming query (no query "
            "id): use df.write for batch writes", setting="queryId")
    result: CommitResult = _run(
        options, f"committing batch {batchId} of query {queryId}",
        lambda: _commit_once(options, queryId, batchId, staged, True, move))
    if not result.skipped:
        logger.info("batch %d of query %s committed: %d rows into %s", batchId, queryId,
                    result.rows, options.target)
    drop_stale(options)
    return result


def commit_write(options: SinkOptions, messages: Sequence[Attempt | None]
                 ) -> CommitResult:
    """Commit a batch write (``df.write``): all its staged rows in one transaction.

    Raises:
        SinkWriteError: As :func:`commit_batch`.
    """
    writeId, staged = _attempts(None, 0, messages)
    result: CommitResult = _run(options, f"committing the write {writeId}",
                                lambda: _commit_once(options, writeId, 0, staged, False))
    logger.info("write %s committed: %d rows into %s", writeId, result.rows, options.target)
    return result


def abort_batch(options: SinkOptions, batchId: int,
                messages: Sequence[Attempt | None]) -> int:
    """Drop the staged rows of a failed batch; returns how many staged tables were dropped.

    Needs the query id from a message; when every task failed there is none, and the
    batch's staged rows go when it commits after a restart, or by age. Never raises for
    the database: a failed cleanup is logged and left to those.
    """
    from psycopg2 import sql

    staged = [m for m in messages if m is not None]
    if not staged:
        logger.info("batch %d aborted with no staged attempt to name it; its staged rows, "
                    "if any, go when it commits or by age", batchId)
        return 0
    queryId = staged[0].queryId
    try:
        dropped: int = _run(options, f"aborting batch {batchId} of query {queryId}",
                            lambda: _drop(options, sql.SQL("query_id = %s AND batch_id = %s"),
                                          (queryId, batchId)))
    except KafkaDirectError as error:
        logger.warning("aborting batch %d of query %s: its staged rows stay until it "
                       "commits or they age out: %s", batchId, queryId, error)
        return 0
    logger.info("batch %d of query %s aborted: %d staged attempts dropped", batchId, queryId,
                dropped)
    return dropped


def _drop(options: SinkOptions, condition: Any, params: Sequence[Any]) -> int:
    with transaction(options.database, options.statementTimeoutMs) as cursor:
        return drop_staged(cursor, options.stagingSchema, condition, params)


def drop_stale(options: SinkOptions, force: bool = False) -> int:
    """Drop staged attempts older than ``staleStagingMinutes`` (of any query); best effort.

    Runs at most once a minute per process and staging schema (unless ``force``); skips
    attempts another transaction holds (a commit under way).
    """
    from psycopg2 import sql

    key = (options.database, options.stagingSchema)
    now = time.monotonic()
    with _swept_mutex:
        if not force and now - _swept.get(key, -STALE_SWEEP_SECONDS) < STALE_SWEEP_SECONDS:
            return 0
        _swept[key] = now
    condition = sql.SQL("token IN (SELECT token FROM {} WHERE staged_at < now() - "
                        "make_interval(mins => %s) FOR UPDATE SKIP LOCKED)").format(
        sql.Identifier(options.stagingSchema, STAGED_TABLE))
    try:
        dropped: int = _run(options, "dropping stale staged rows",
                            lambda: _drop(options, condition, (options.staleStagingMinutes,)))
    except KafkaDirectError as error:
        logger.warning("dropping stale staged rows failed (tried again at the next "
                       "commit): %s", error)
        return 0
    if dropped:
        logger.info("dropped %d staged attempts older than %d minutes", dropped,
                    options.staleStagingMinutes)
    return dropped
