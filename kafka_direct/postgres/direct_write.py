"""Direct writes: a write task's rows COPYed once, into the target, claimed by Kafka offsets.

A write task attempt whose rows carry their Kafka coordinates (a topic, a partition and an
offset column) writes them where they belong in ONE transaction, with a record of which
offsets it wrote (Koeninger's pattern: results and offsets in one transaction):

1. **Fence.** The query's commit row (made, if missing, in a short transaction first, so
   that it exists before the query's first commit) is read ``FOR SHARE``: when the batch
   is committed already (a zombie or a re-run attempt), nothing is written. A commit under
   way holds the row ``FOR UPDATE``, so the attempt waits for it and then writes nothing.
2. **Rows.** ``COPY`` straight into the target: appends only. (Upserts stay staged: the
   latest record of a key is decided across the batch's tasks at its commit, which a task
   holding one piece of a Kafka partition's range cannot do alone.)
3. **Claims.** Per Kafka partition the attempt wrote, one row in
   ``kafka_direct_sink_ranges``: (target, topic, partition, first offset, last offset + 1,
   rows, query, batch, Spark partition, attempt token). Claims of one target never
   overlap: an attempt whose offsets overlap a claim writes none of the claimed offsets.
4. **COMMIT.**

Whether an attempt must look for claims before it writes is decided from its first rows and
its batch's plan (with the offset store): when no claim names a Kafka partition of its
first rows, no claim of another batch names a Kafka partition the batch reads, and no other
query committed the store's offsets last, it streams (no row kept in memory) and checks for
overlaps only when it claims, under the claims' locks. Otherwise (a retried attempt, a
batch run again after a failure, a Kafka partition split between tasks) it keeps its rows,
drops those that claims cover (another attempt wrote them), writes the rest and claims them
in pieces between the claims. A speculative twin that claims first makes the other's claim
fail on the unique key: that attempt rolls back and goes the careful way.

The driver's commit (:mod:`kafka_direct.postgres.sink_claims`, where the claims and their
table live) checks that every
claim the batch's messages name is there, and deletes the batch's claims in the
transaction that stores the batch's offsets; claims of a batch that failed stay until
a committed batch of the offset store passes their offsets, so a query run again (from
its checkpoint or, without one, from the store) never writes their rows twice.

What this costs, against staging (:mod:`~kafka_direct.postgres.staging`): nothing moved
twice, no table created per task; a batch's rows become visible task by task before the
batch commits, and a batch that fails for good leaves the rows its finished tasks wrote
(each once: they are not written again when it runs again).

The arithmetic on the rows' offsets (the claims rows make, the rows claims leave, pieces
between claims) is :mod:`~kafka_direct.postgres.row_offsets`'s; this module is the protocol.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from kafka_direct.errors import ConfigurationError, SinkWriteError
from kafka_direct.postgres.connection import Database, drop_cached, retry_broken, transaction
from kafka_direct.postgres.copy_csv import copy_batches
from kafka_direct.postgres.errors import CommitOutcomeUnknownError, database_error
from kafka_direct.postgres.row_offsets import RowOffsets, claim_pieces, uncovered_rows
from kafka_direct.postgres.sink_claims import RANGES_TABLE, Claim, DirectAttempt
from kafka_direct.postgres.staging import COMMITS_TABLE, new_token

__all__ = ["DirectTarget", "write_direct"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DirectTarget:
    """What a task needs to write directly.

    Attributes:
        database: The database (never shown).
        schema: The target's schema.
        table: The target table.
        columns: The target columns the rows fill, in the rows' order.
        offsetColumns: The target columns holding each row's topic, partition and offset.
        stagingSchema: Where the sink's records (commit rows, claims) live.
        statementTimeoutMs: ``statement_timeout``, or None.
        store: The linked offset store: (schema, table of stores, table of plans, store
            name). Offsets below its end offsets count as claimed (a committed batch wrote
            them); the batch's plan names the Kafka partitions it reads.
    """

    database: Database
    schema: str
    table: str
    columns: tuple[str, ...]
    offsetColumns: tuple[str, str, str]
    stagingSchema: str = "public"
    statementTimeoutMs: int | None = None
    store: tuple[str, str, str, str] | None = None

    def __post_init__(self) -> None:
        missing = [c for c in self.offsetColumns if c not in self.columns]
        if len(self.offsetColumns) != 3 or missing:
            raise ConfigurationError(
                f"the offset columns {list(self.offsetColumns)} must be among the written "
                f"columns {list(self.columns)}", setting="offsetColumns")

    def __repr__(self) -> str:
        return f"DirectTarget({self.schema}.{self.table})"

    @property
    def target(self) -> str:
        """``schema.table``, as the sink's records name it."""
        return f"{self.schema}.{self.table}"

    @property
    def indexes(self) -> tuple[int, int, int]:
        """Positions of the topic, partition and offset columns in the rows."""
        topic, partition, offset = (self.columns.index(c) for c in self.offsetColumns)
        return topic, partition, offset


def _sql_target(target: DirectTarget) -> Any:
    from psycopg2 import sql

    return sql.Identifier(target.schema, target.table)


def _ranges(target: DirectTarget) -> Any:
    from psycopg2 import sql

    return sql.Identifier(target.stagingSchema, RANGES_TABLE)


def _committed(cursor: Any, target: DirectTarget, queryId: str, batchId: int) -> bool:
    from psycopg2 import sql

    cursor.execute(sql.SQL("SELECT batch_id FROM {} WHERE query_id = %s AND target = %s "
                           "FOR SHARE").format(sql.Identifier(target.stagingSchema,
                                                              COMMITS_TABLE)),
                   (queryId, target.target))
    row = cursor.fetchone()
    return row is not None and int(row[0]) >= batchId


def _store(cursor: Any, target: DirectTarget) -> tuple[str | None, dict[tuple[str, int], int]]:
    """The linked store's last committing query and its end offsets (none: None, {})."""
    from psycopg2 import sql

    if target.store is None:
        return None, {}
    schema, table, _, store = target.store
    cursor.execute(sql.SQL("SELECT query_id, end_offsets FROM {} WHERE store = %s").format(
        sql.Identifier(schema, table)), (store,))
    row = cursor.fetchone()
    if row is None:
        return None, {}
    ends = {(str(t), int(p)): int(o) for t, parts in (row[1] or {}).items()
            for p, o in parts.items()}
    return (None if row[0] is None else str(row[0])), ends


def _plan(cursor: Any, target: DirectTarget, queryId: str, batchId: int
          ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The batch's plan: its start and end offsets (JSON objects), or empty ones unknown."""
    from psycopg2 import sql

    if target.store is None:
        return {}, {}
    schema, _, plans, store = target.store
    cursor.execute(sql.SQL(
        "SELECT start_offsets, end_offsets FROM {} WHERE store = %s AND query_id = %s AND "
        "batch_id = %s ORDER BY plan_id DESC LIMIT 1").format(sql.Identifier(schema, plans)),
        (store, queryId, batchId))
    row = cursor.fetchone()
    return ({}, {}) if row is None else (row[0] or {}, row[1] or {})


def _behind(start: dict[str, Any], end: dict[str, Any], ends: dict[tuple[str, int], int]
            ) -> bool:
    """Whether a plan reads a Kafka partition from below the store's ``ends``.

    The store's last committer may be this very query and still be ahead of it: a batch of
    this query found covered by another query's commit made it the committer, and that
    commit moved partitions the batch did not read.
    """
    return any(int(offset) < ends.get((str(topic), int(partition)), 0)
               and int(offset) < int(end.get(topic, {}).get(partition, offset))
               for topic, parts in start.items() for partition, offset in parts.items())


def _must_look(cursor: Any, target: DirectTarget, queryId: str, batchId: int,
               firstKeys: Sequence[str]) -> bool:
    """Whether a claim may overlap this attempt's rows (then it keeps them and looks).

    Claims of its first rows' Kafka partitions may (a twin's, a piece of the same range);
    claims of another batch or query on a Kafka partition its batch reads may; so may the
    store's offsets when another query committed them last, or when the batch reads a
    partition from below them (a checkpoint behind the store).
    Claims of the same batch's other tasks on other Kafka partitions may not.
    """
    from psycopg2 import sql

    committer, ends = _store(cursor, target)
    if ends and committer != queryId:
        return True
    start, end = _plan(cursor, target, queryId, batchId)
    if _behind(start, end, ends):
        return True
    # The Kafka partitions the batch's plan reads (``topic/partition``), or none known.
    planned = [f"{topic}/{partition}" for topic, parts in end.items() for partition in parts]
    cursor.execute(sql.SQL(
        "SELECT EXISTS (SELECT 1 FROM {} WHERE target = %s AND (topic || '/' || "
        "kafka_partition = ANY(%s) OR (NOT (query_id = %s AND batch_id = %s) AND "
        "topic || '/' || kafka_partition = ANY(%s))))").format(_ranges(target)),
        (target.target, list(firstKeys), queryId, batchId, planned))
    return bool(cursor.fetchone()[0])


def _overlapping(cursor: Any, target: DirectTarget, wanted: Sequence[Claim]
                 ) -> list[tuple[str, int, int, int, str]]:
    """Claims overlapping ``wanted``, locked: (topic, partition, from, until, token).

    The offset store's committed offsets count as a claim of ``[0, end)`` (token "").
    """
    from psycopg2 import sql

    if not wanted:
        return []
    _, ends = _store(cursor, target)
    stored = [(c.topic, c.partition, 0, ends[(c.topic, c.partition)], "") for c in wanted
              if ends.get((c.topic, c.partition), 0) > c.fromOffset]
    cursor.execute(sql.SQL(
        "SELECT r.topic, r.kafka_partition, r.from_offset, r.until_offset, r.token FROM {} r "
        "JOIN unnest(%s::text[], %s::int[], %s::bigint[], %s::bigint[]) AS w(t, p, f, u) "
        "ON r.topic = w.t AND r.kafka_partition = w.p AND r.from_offset < w.u "
        "AND r.until_offset > w.f WHERE r.target = %s ORDER BY 1, 2, 3 FOR UPDATE OF r"
    ).format(_ranges(target)),
        ([c.topic for c in wanted], [c.partition for c in wanted],
         [c.fromOffset for c in wanted], [c.untilOffset for c in wanted], target.target))
    return stored + [(str(t), int(p), int(f), int(u), str(k))
                     for t, p, f, u, k in cursor.fetchall()]


def _insert_claims(cursor: Any, target: DirectTarget, attempt: DirectAttempt,
                   claims: Sequence[Claim]) -> None:
    from psycopg2 import sql

    if not claims:
        return
    cursor.execute(sql.SQL(
        "INSERT INTO {} (target, topic, kafka_partition, from_offset, until_offset, rows, "
        "query_id, batch_id, partition_id, token) SELECT %s, t, p, f, u, n, %s, %s, %s, %s "
        "FROM unnest(%s::text[], %s::int[], %s::bigint[], %s::bigint[], %s::bigint[]) "
        "AS c(t, p, f, u, n)").format(_ranges(target)),
        (target.target, attempt.queryId, attempt.batchId, attempt.partitionId, attempt.token,
         [c.topic for c in claims], [c.partition for c in claims],
         [c.fromOffset for c in claims], [c.untilOffset for c in claims],
         [c.rows for c in claims]))


def _write_rows(cursor: Any, target: DirectTarget, batches: Iterable[Any]) -> int:
    """COPY the rows into the target."""
    return copy_batches(cursor, _sql_target(target), target.columns, batches)


def _careful(cursor: Any, target: DirectTarget, attempt: DirectAttempt, batches: list[Any]
             ) -> DirectAttempt:
    """Write the rows no claim covers and claim them in pieces (rows kept in memory)."""
    seen = RowOffsets(target.indexes)
    for batch in batches:
        seen.observe(batch)
    claimed = _overlapping(cursor, target, seen.claims())
    rest = uncovered_rows(batches, target.indexes, claimed) if claimed else batches
    wrote = RowOffsets(target.indexes)
    for batch in rest:
        wrote.observe(batch)
    pieces = claim_pieces(wrote, rest, target.indexes, claimed) if claimed else wrote.claims()
    rows = _write_rows(cursor, target, rest) if rest else 0
    if rows != sum(c.rows for c in pieces):
        raise _count_error(target, attempt, rows, sum(c.rows for c in pieces))
    done = DirectAttempt(attempt.queryId, attempt.batchId, attempt.partitionId, attempt.token,
                         rows, tuple(pieces), tuple(sorted({k for *_, k in claimed if k})))
    _insert_claims(cursor, target, done, pieces)
    if claimed:
        logger.info("partition %d of batch %d of query %s: %d rows were written before "
                    "(claimed by %d earlier attempts), %d written now", attempt.partitionId,
                    attempt.batchId, attempt.queryId,
                    sum(c.rows for c in seen.claims()) - rows, len(done.covered), rows)
    return done


def _count_error(target: DirectTarget, attempt: DirectAttempt, wrote: int, claimed: int
                 ) -> SinkWriteError:
    return SinkWriteError(
        f"partition {attempt.partitionId} of batch {attempt.batchId}: PostgreSQL took {wrote} "
        f"rows, the claims count {claimed}; nothing was written", table=target.target,
        topic=None, partition=None, fromOffset=None, untilOffset=None,
        cause="row count mismatch", outcome="rolled back")


class _Tracked(Iterator[Any]):
    """An iterator that remembers whether anything was taken from it."""

    def __init__(self, inner: Iterator[Any]) -> None:
        self.inner = inner
        self.taken = False

    def __next__(self) -> Any:
        item = next(self.inner)
        self.taken = True
        return item


class _OverlapError(Exception):
    """A streamed attempt found claims over its offsets when claiming (rolled back)."""


def _streamed(cursor: Any, target: DirectTarget, attempt: DirectAttempt, first: Any,
              rest: Iterator[Any]) -> DirectAttempt:
    seen = RowOffsets(target.indexes)
    rows = _write_rows(cursor, target, map(seen.observe, itertools.chain([first], rest)))
    claims = seen.claims()
    if sum(c.rows for c in claims) != rows:
        raise _count_error(target, attempt, rows, sum(c.rows for c in claims))
    if _overlapping(cursor, target, claims):
        raise _OverlapError()
    done = DirectAttempt(attempt.queryId, attempt.batchId, attempt.partitionId, attempt.token,
                         rows, tuple(claims))
    _insert_claims(cursor, target, done, claims)
    return done


def _first_keys(target: DirectTarget, first: Any) -> list[str]:
    seen = RowOffsets(target.indexes)
    seen.observe(first)
    return seen.keys()


def write_direct(target: DirectTarget, queryId: str, batchId: int, partitionId: int,
                 batches: Iterable[Any], token: str | None = None) -> DirectAttempt:
    """Write one task attempt's rows (Arrow record batches) and claim their offsets.

    Args:
        target: Where and what to write.
        queryId: The streaming query's id.
        batchId: The micro-batch.
        partitionId: The Spark partition.
        batches: The rows, as Arrow record batches with one column per target column.
        token: The attempt's token (default: a fresh random one).

    Raises:
        SinkWriteError: The database failed (nothing written), the COMMIT's outcome is
            unknown, or the attempt's offsets overlap claims it could not see before it
            streamed (a batch whose tasks were split differently when it first ran:
            nothing written; the message names the fix).
        ConfigurationError: A row without its coordinates, or rows of the wrong width.
    """
    attempt = DirectAttempt(queryId, batchId, partitionId, token or new_token())
    rows = iter(batches)
    first = next((b for b in rows if b.num_rows), None)
    if first is None:
        return attempt
    if first.num_columns != len(target.columns):
        raise ConfigurationError(
            f"the rows have {first.num_columns} columns for the {len(target.columns)} target "
            f"columns {list(target.columns)}", setting="columns")
    import psycopg2
    import psycopg2.errors

    firstKeys = _first_keys(target, first)
    doing = f"writing partition {partitionId} of batch {batchId} of query {queryId}"
    _fence_row(target, queryId, doing)
    kept: list[Any] | None = None
    rows = _Tracked(rows)
    for round in range(4):
        try:
            with transaction(target.database, target.statementTimeoutMs) as cursor:
                if _committed(cursor, target, queryId, batchId):
                    logger.info("partition %d of batch %d of query %s: the batch was "
                                "committed already; nothing written", partitionId, batchId,
                                queryId)
                    return DirectAttempt(queryId, batchId, partitionId, attempt.token,
                                         skipped=True)
                # A lost task commit is lost with its claim: the driver's commit (later in
                # the log, and flushed) finds the claim missing and refuses the batch.
                cursor.execute("SET LOCAL synchronous_commit = off")
                if kept is None and not _must_look(cursor, target, queryId, batchId,
                                                   firstKeys):
                    streamed = _streamed(cursor, target, attempt, first, rows)
                    logger.debug("wrote %d rows of partition %d, batch %d", streamed.rows,
                                 partitionId, batchId)
                    return streamed
                if kept is None:
                    kept = [first, *(b for b in rows if b.num_rows)]
                return _careful(cursor, target, attempt, kept)
        except _OverlapError:
            # A twin attempt (the same Spark partition) claimed between the look and the
            # claim; otherwise offsets another task of another split wrote.
            twin = _twin(target, attempt, firstKeys)
            if twin is not None:
                return twin
            raise _replanned(target, attempt) from None
        except (psycopg2.errors.UniqueViolation, psycopg2.errors.ExclusionViolation
                ) as error:
            # A twin attempt claimed (or wrote) first. With every row kept, look again
            # (its claims are visible now); a streamed attempt keeps none: the claims
            # of its twin (the same Spark partition of the same batch) cover it.
            if kept is not None and round < 3:
                continue
            twin = _twin(target, attempt, firstKeys)
            if twin is not None:
                return twin
            raise _staged_error(error, target, doing) from error
        except (psycopg2.Error, CommitOutcomeUnknownError) as error:
            # A cached connection the server closed fails at its first statement: run
            # again on a new one, if no row was taken from Spark yet (or all are kept).
            if round == 0 and (kept is not None or not rows.taken) and retry_broken(
                    target.database, error):
                drop_cached(target.database)
                continue
            raise _staged_error(error, target, doing) from error
    raise _replanned(target, attempt)


def _fence_row(target: DirectTarget, queryId: str, doing: str) -> None:
    """Make the query's commit row if missing, committed at once (tasks then lock it).

    Before the query's first commit there is no row to lock: a zombie attempt would not
    wait for that commit, whose deleting its twin's claims would let it write again.
    """
    import psycopg2
    from psycopg2 import sql

    for retry in (False, True):
        try:
            with transaction(target.database, target.statementTimeoutMs) as cursor:
                cursor.execute(sql.SQL(
                    "INSERT INTO {} (query_id, target, batch_id) VALUES (%s, %s, -1) "
                    "ON CONFLICT DO NOTHING").format(
                    sql.Identifier(target.stagingSchema, COMMITS_TABLE)),
                    (queryId, target.target))
            return
        except (psycopg2.Error, CommitOutcomeUnknownError) as error:
            if not retry and retry_broken(target.database, error):
                drop_cached(target.database)
                continue
            raise _staged_error(error, target, doing) from error


def _twin(target: DirectTarget, attempt: DirectAttempt, firstKeys: Sequence[str]
          ) -> DirectAttempt | None:
    """The same Spark partition's claims, made by another attempt of this batch, or None."""
    from psycopg2 import sql

    with transaction(target.database, target.statementTimeoutMs) as cursor:
        cursor.execute(sql.SQL(
            "SELECT DISTINCT token FROM {} WHERE target = %s AND query_id = %s AND "
            "batch_id = %s AND partition_id = %s AND topic || '/' || kafka_partition = "
            "ANY(%s)").format(_ranges(target)),
            (target.target, attempt.queryId, attempt.batchId, attempt.partitionId,
             list(firstKeys)))
        tokens = sorted(str(r[0]) for r in cursor.fetchall())
    if len(tokens) != 1:
        return None
    logger.info("partition %d of batch %d of query %s: attempt %s wrote it first; nothing "
                "written again", attempt.partitionId, attempt.batchId, attempt.queryId,
                tokens[0][:8])
    return DirectAttempt(attempt.queryId, attempt.batchId, attempt.partitionId, attempt.token,
                         covered=(tokens[0],))


def _replanned(target: DirectTarget, attempt: DirectAttempt) -> SinkWriteError:
    return SinkWriteError(
        f"partition {attempt.partitionId} of batch {attempt.batchId} of query "
        f"{attempt.queryId}: some of its Kafka offsets were written before by a task split "
        "differently (the batch first ran with other source options, such as minPartitions "
        "or maxRecordsPerPartition). Nothing was written by this task. Run the query with "
        "the source options it had when this batch first ran; once the batch commits, "
        "change them", table=target.target, topic=None, partition=None, fromOffset=None,
        untilOffset=None, cause="offsets claimed by a differently split task",
        outcome="rolled back")


def _staged_error(error: BaseException, target: DirectTarget, doing: str) -> SinkWriteError:
    grants = (f"GRANT INSERT ON {target.target}; GRANT SELECT, INSERT, UPDATE ON "
              f"{target.stagingSchema}.{COMMITS_TABLE}; GRANT SELECT, INSERT, UPDATE ON "
              f"{target.stagingSchema}.{RANGES_TABLE}")
    return database_error(error, target.database, doing=doing, table=target.target,
                          grants=grants)
