"""Staging: each write task's rows in an UNLOGGED table of their own, until the commit.

A write task (one attempt of one partition of one batch) runs one transaction:

1. ``CREATE UNLOGGED TABLE kafka_direct_stage_<token> AS SELECT <columns> FROM <target>
   WITH NO DATA``: the target's column types, nothing else (no WAL, no index);
2. ``COPY ... FROM STDIN WITH (FORMAT csv, FREEZE)``: the rows, encoded from Arrow;
3. a row in ``kafka_direct_sink_staged``: (token, query id, batch id, partition, table,
   rows, when);
4. COMMIT. The task's commit message names the attempt: (query id, batch id, partition,
   token, rows).

The token is random per attempt, so a retried, speculative or zombie attempt stages apart
from every other; only the attempts named in the messages the driver's commit receives are
ever moved into the target (:mod:`kafka_direct.sql.sink.commit`). Staged tables are dropped
by the commit or abort of their batch, by a later commit of their query (earlier batches),
or by age. A task that fails anywhere before its COMMIT leaves nothing. A partition with no
rows stages nothing (its message says 0 rows).

An unlogged table is emptied by PostgreSQL's crash recovery; the commit notices (an empty
table where rows were staged) and refuses the batch rather than commit it short.
"""

from __future__ import annotations

import itertools
import logging
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kafka_direct.errors import ConfigurationError, SinkWriteError
from kafka_direct.postgres.catalog import ensure_tables
from kafka_direct.postgres.connection import Database, drop_cached, retry_broken, transaction
from kafka_direct.postgres.copy_csv import CsvStream, bytea_columns_of
from kafka_direct.postgres.errors import CommitOutcomeUnknownError, database_error

__all__ = [
    "COMMITS_TABLE",
    "STAGED_TABLE",
    "STAGE_PREFIX",
    "StagedAttempt",
    "StagingTarget",
    "drop_staged",
    "ensure_sink_tables",
    "new_token",
    "stage_rows",
]

logger = logging.getLogger(__name__)

STAGED_TABLE = "kafka_direct_sink_staged"
COMMITS_TABLE = "kafka_direct_sink_commits"
STAGE_PREFIX = "kafka_direct_stage_"
_TOKEN = re.compile(r"[0-9a-f]{32}")


def new_token() -> str:
    """A fresh attempt token (random: unique across attempts, drivers and restarts)."""
    return uuid.uuid4().hex


@dataclass(frozen=True, slots=True)
class StagedAttempt:
    """One write task attempt's staged rows, as its commit message names them.

    Attributes:
        queryId: The streaming query's id (stable across restarts from one checkpoint), or
            ``write:<id>`` for a batch write.
        batchId: The micro-batch (0 for a batch write).
        partitionId: The Spark partition the attempt wrote.
        token: The attempt's random token (32 hex digits).
        rows: How many rows it staged (0: no staging table).
    """

    queryId: str
    batchId: int
    partitionId: int
    token: str
    rows: int

    def __post_init__(self) -> None:
        if not isinstance(self.queryId, str) or not self.queryId:
            raise ConfigurationError(f"a staged attempt needs its query id, got "
                                     f"{self.queryId!r}")
        for name, value in (("batchId", self.batchId), ("partitionId", self.partitionId),
                            ("rows", self.rows)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigurationError(f"a staged attempt's {name} must be an int >= 0, "
                                         f"got {value!r}")
        if not isinstance(self.token, str) or not _TOKEN.fullmatch(self.token):
            raise ConfigurationError(f"a staged attempt's token must be 32 hex digits, got "
                                     f"{self.token!r}")

    @property
    def table(self) -> str:
        """The attempt's staging table (in the staging schema)."""
        return STAGE_PREFIX + self.token


@dataclass(frozen=True, slots=True)
class StagingTarget:
    """What a task needs to stage: where, the target's columns, and how long to wait.

    Attributes:
        database: The database (never shown).
        schema: The target's schema.
        table: The target table.
        columns: The target columns the rows fill, in the rows' order.
        stagingSchema: Where staging tables and the sink's records live.
        statementTimeoutMs: ``statement_timeout``, or None.
    """

    database: Database
    schema: str
    table: str
    columns: tuple[str, ...]
    stagingSchema: str
    statementTimeoutMs: int | None = None

    def __repr__(self) -> str:
        return f"StagingTarget({self.schema}.{self.table})"

    @property
    def target(self) -> str:
        """``schema.table``, as the sink's commit records name it."""
        return f"{self.schema}.{self.table}"


def ensure_sink_tables(cursor: Any, stagingSchema: str) -> None:
    """Create the sink's record tables that do not exist (asked first).

    ``kafka_direct_sink_staged``: one row per staged attempt; ``kafka_direct_sink_commits``:
    per (query id, target), the newest committed batch.
    """
    from psycopg2 import sql

    ensure_tables(cursor, stagingSchema, {
        STAGED_TABLE: [sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (token text PRIMARY KEY, query_id text NOT NULL, "
            "batch_id bigint NOT NULL, partition_id integer NOT NULL, "
            "staging_table text NOT NULL, rows bigint NOT NULL, "
            "staged_at timestamptz NOT NULL DEFAULT now())").format(
            sql.Identifier(stagingSchema, STAGED_TABLE)),
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (query_id, batch_id)").format(
            sql.Identifier(f"{STAGED_TABLE}_batch"), sql.Identifier(stagingSchema, STAGED_TABLE))],
        COMMITS_TABLE: [sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (query_id text NOT NULL, target text NOT NULL, "
            "batch_id bigint NOT NULL, rows bigint NOT NULL DEFAULT 0, "
            "committed_at timestamptz NOT NULL DEFAULT now(), "
            "PRIMARY KEY (query_id, target))").format(
            sql.Identifier(stagingSchema, COMMITS_TABLE))],
    })


def _stage_once(target: StagingTarget, key: StagedAttempt, stream: CsvStream) -> int:
    from psycopg2 import sql

    stage = sql.Identifier(target.stagingSchema, key.table)
    columns = sql.SQL(", ").join(sql.Identifier(c) for c in target.columns)
    with transaction(target.database, target.statementTimeoutMs) as cursor:
        # A zombie attempt (speculative, or outliving its batch) that stages after the
        # batch committed would leave its table until the age sweep: stage nothing then.
        # FOR SHARE waits for a commit under way, which then drops what this stages.
        cursor.execute(sql.SQL("SELECT batch_id FROM {} WHERE query_id = %s AND target = %s "
                               "FOR SHARE").format(
            sql.Identifier(target.stagingSchema, COMMITS_TABLE)),
            (key.queryId, target.target))
        row = cursor.fetchone()
        if row is not None and int(row[0]) >= key.batchId:
            logger.info("partition %d of batch %d of query %s: the batch was committed "
                        "already; nothing staged", key.partitionId, key.batchId, key.queryId)
            return 0
        # The staged rows are rebuilt by re-running the batch if lost: no need to wait
        # for the WAL flush of this transaction (its registry row only).
        cursor.execute("SET LOCAL synchronous_commit = off")
        cursor.execute(sql.SQL("CREATE UNLOGGED TABLE {} AS SELECT {} FROM {} WITH NO DATA"
                               ).format(stage, columns,
                                        sql.Identifier(target.schema, target.table)))
        # The staging table has the target's types: its bytea columns take their own text.
        stream.bytea_columns = bytea_columns_of(
            cursor, sql.Identifier(target.schema, target.table).as_string(cursor),
            target.columns)
        cursor.copy_expert(sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT csv, FREEZE true)")
                           .format(stage, columns).as_string(cursor), stream, size=1 << 20)
        if cursor.rowcount != stream.rows:
            raise SinkWriteError(
                f"staging partition {key.partitionId} of batch {key.batchId}: PostgreSQL read "
                f"{cursor.rowcount} rows of the {stream.rows} sent; nothing was staged",
                table=f"{target.schema}.{target.table}", topic=None, partition=None,
                fromOffset=None, untilOffset=None, cause="row count mismatch",
                outcome="rolled back")
        cursor.execute(sql.SQL(
            "INSERT INTO {} (token, query_id, batch_id, partition_id, staging_table, rows) "
            "VALUES (%s, %s, %s, %s, %s, %s)").format(
            sql.Identifier(target.stagingSchema, STAGED_TABLE)),
            (key.token, key.queryId, key.batchId, key.partitionId, key.table, stream.rows))
    return stream.rows


def stage_rows(target: StagingTarget, queryId: str, batchId: int, partitionId: int,
               batches: Iterable[Any], token: str | None = None) -> StagedAttempt:
    """Stage one task attempt's rows (Arrow record batches); returns what was staged.

    Args:
        target: Where and what to stage.
        queryId: The query id (``write:<id>`` for a batch write).
        batchId: The micro-batch.
        partitionId: The Spark partition.
        batches: The rows, as Arrow record batches with one column per target column.
        token: The attempt's token (default: a fresh random one).

    Raises:
        SinkWriteError: The database failed (nothing staged), or the COMMIT's outcome is
            unknown (the task fails; its retry stages apart, and what this attempt may
            have staged is never moved).
    """
    attempt = StagedAttempt(queryId, batchId, partitionId, token or new_token(), 0)
    rows = iter(batches)
    first = next((b for b in rows if b.num_rows), None)
    if first is None:
        return attempt  # nothing to stage, nothing to clean up
    if first.num_columns != len(target.columns):
        raise ConfigurationError(
            f"the rows have {first.num_columns} columns for the {len(target.columns)} target "
            f"columns {list(target.columns)}", setting="columns")
    import psycopg2

    doing = f"staging partition {partitionId} of batch {batchId} of query {queryId}"
    for retry in (False, True):
        stream = CsvStream(itertools.chain([first], rows))
        try:
            staged = _stage_once(target, attempt, stream)
            break
        except (psycopg2.Error, CommitOutcomeUnknownError) as error:
            # A cached connection the server closed fails at its first statement, before
            # the COPY read a row (so ``rows`` is untouched): run again on a new one.
            if not retry and stream.rows == 0 and retry_broken(target.database, error):
                drop_cached(target.database)
                continue
            raise _staging_error(error, target, doing) from error
    else:  # pragma: no cover - the loop breaks or raises
        raise AssertionError("unreachable")
    logger.debug("staged %d rows of partition %d, batch %d", staged, partitionId, batchId)
    return StagedAttempt(queryId, batchId, partitionId, attempt.token, staged)


def _staging_error(error: BaseException, target: StagingTarget, doing: str) -> SinkWriteError:
    grants = (f"GRANT USAGE, CREATE ON SCHEMA {target.stagingSchema}; GRANT SELECT ON "
              f"{target.schema}.{target.table}; GRANT INSERT ON "
              f"{target.stagingSchema}.{STAGED_TABLE}")
    return database_error(error, target.database, doing=doing,
                          table=f"{target.schema}.{target.table}", grants=grants)


def drop_staged(cursor: Any, stagingSchema: str, condition: Any, params: Sequence[Any]
                ) -> int:
    """Delete the staged attempts matching ``condition`` and drop their tables.

    ``DELETE ... RETURNING`` decides who drops what: of two transactions cleaning the same
    attempt, the second finds its row gone and drops nothing.

    Args:
        cursor: A cursor in the caller's transaction.
        stagingSchema: The staging schema.
        condition: A ``psycopg2.sql`` condition on the staged table's columns.
        params: Its parameters.

    Returns:
        How many staging tables were dropped.
    """
    from psycopg2 import sql

    cursor.execute(sql.SQL("DELETE FROM {} WHERE ").format(
        sql.Identifier(stagingSchema, STAGED_TABLE)) + condition
        + sql.SQL(" RETURNING staging_table"), list(params))
    tables = sorted({row[0] for row in cursor.fetchall()})
    if tables:
        cursor.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.SQL(", ").join(
            sql.Identifier(stagingSchema, t) for t in tables)))
    return len(tables)
