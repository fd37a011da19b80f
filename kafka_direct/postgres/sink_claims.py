"""The claims of direct writes: which Kafka offsets a write task put into which target.

:mod:`kafka_direct.postgres.direct_write` is the task's side (writing and claiming); this is
what both sides share and the commit's side:

* :class:`Claim` and :class:`DirectAttempt`: an attempt's claims, as its commit message
  names them;
* ``kafka_direct_sink_ranges`` (:data:`RANGES_TABLE`), made when missing
  (:func:`ensure_ranges_table`): one row per claim, keyed by (target, topic, partition,
  first offset);
* :func:`check_claims`: the commit refuses a batch whose named claims are not all there;
* :func:`release_claims`: the commit deletes the claims its batch makes needless.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kafka_direct.errors import ConfigurationError, SinkWriteError
from kafka_direct.postgres.catalog import ensure_tables

__all__ = ["RANGES_TABLE", "Claim", "DirectAttempt", "check_claims", "ensure_ranges_table",
           "release_claims"]

RANGES_TABLE = "kafka_direct_sink_ranges"


@dataclass(frozen=True, slots=True)
class Claim:
    """Offsets ``[fromOffset, untilOffset)`` of one Kafka partition, written by one attempt.

    Attributes:
        topic: The Kafka topic.
        partition: The Kafka partition.
        fromOffset: The first offset written.
        untilOffset: One past the last offset written.
        rows: The rows written for it.
    """

    topic: str
    partition: int
    fromOffset: int
    untilOffset: int
    rows: int

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not self.topic:
            raise ConfigurationError(f"a claim needs its topic, got {self.topic!r}")
        for name, value in (("partition", self.partition), ("fromOffset", self.fromOffset),
                            ("rows", self.rows)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigurationError(f"a claim's {name} must be an int >= 0, got "
                                         f"{value!r}")
        if (isinstance(self.untilOffset, bool) or not isinstance(self.untilOffset, int)
                or self.untilOffset <= self.fromOffset):
            raise ConfigurationError(f"a claim's offsets [{self.fromOffset}, "
                                     f"{self.untilOffset}) are empty or reversed")


@dataclass(frozen=True, slots=True)
class DirectAttempt:
    """What one write task attempt did, as its commit message names it.

    Attributes:
        queryId: The streaming query's id.
        batchId: The micro-batch.
        partitionId: The Spark partition the attempt wrote.
        token: The attempt's random token (32 hex digits).
        rows: Rows it wrote.
        claims: The claims it made (in its transaction).
        covered: Tokens of earlier attempts whose claims cover rows it did not write again.
        skipped: True when the batch was committed already: it wrote and claimed nothing.
    """

    queryId: str
    batchId: int
    partitionId: int
    token: str
    rows: int = 0
    claims: tuple[Claim, ...] = ()
    covered: tuple[str, ...] = ()
    skipped: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.queryId, str) or not self.queryId:
            raise ConfigurationError(f"a direct attempt needs its query id, got "
                                     f"{self.queryId!r}")
        for name, value in (("batchId", self.batchId), ("partitionId", self.partitionId),
                            ("rows", self.rows)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigurationError(f"a direct attempt's {name} must be an int >= 0, "
                                         f"got {value!r}")
        if sum(c.rows for c in self.claims) != self.rows:
            raise ConfigurationError(
                f"a direct attempt's claims hold {sum(c.rows for c in self.claims)} rows, "
                f"it wrote {self.rows}")


def ensure_ranges_table(cursor: Any, stagingSchema: str) -> None:
    """Create the claims table when missing (asked first)."""
    from psycopg2 import sql

    ensure_tables(cursor, stagingSchema, {RANGES_TABLE: [sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} (target text NOT NULL, topic text NOT NULL, "
        "kafka_partition integer NOT NULL, from_offset bigint NOT NULL, "
        "until_offset bigint NOT NULL, rows bigint NOT NULL, query_id text NOT NULL, "
        "batch_id bigint NOT NULL, partition_id integer NOT NULL, token text NOT NULL, "
        "claimed_at timestamptz NOT NULL DEFAULT now(), "
        "PRIMARY KEY (target, topic, kafka_partition, from_offset))").format(
        sql.Identifier(stagingSchema, RANGES_TABLE)),
        sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (token)").format(
        sql.Identifier(f"{RANGES_TABLE}_token"), sql.Identifier(stagingSchema, RANGES_TABLE))]})


def check_claims(cursor: Any, stagingSchema: str, target: str, queryId: str, batchId: int,
                 attempts: Sequence[DirectAttempt]) -> None:
    """In the commit: refuse the batch unless every claim its messages name is there.

    Raises:
        SinkWriteError: A claim is missing or counts other rows (rolled back).
    """
    from psycopg2 import sql

    tokens = sorted({a.token for a in attempts if a.claims}
                    | {t for a in attempts for t in a.covered})
    if not tokens:
        return
    cursor.execute(sql.SQL("SELECT token, count(*), sum(rows) FROM {} WHERE target = %s AND "
                           "token = ANY(%s) GROUP BY token").format(
        sql.Identifier(stagingSchema, RANGES_TABLE)), (target, tokens))
    found = {str(t): (int(n), int(rows)) for t, n, rows in cursor.fetchall()}
    for attempt in attempts:
        problem = None
        if attempt.claims and found.get(attempt.token) != (
                len(attempt.claims), attempt.rows):
            problem = (f"its claims are {found.get(attempt.token, 'missing')}, the task "
                       f"reported {(len(attempt.claims), attempt.rows)} (claims, rows)")
        for token in attempt.covered:
            if token not in found:
                problem = f"the claims of attempt {token[:8]} it relies on are missing"
        if problem is not None:
            raise SinkWriteError(
                f"batch {batchId} of query {queryId}: partition {attempt.partitionId} "
                f"(attempt {attempt.token[:8]}): {problem}. Nothing was committed; restart "
                "the query from its checkpoint to run the batch again", table=target,
                topic=None, partition=None, fromOffset=None, untilOffset=None,
                cause=problem, outcome="rolled back")


def release_claims(cursor: Any, stagingSchema: str, target: str, queryId: str, batchId: int,
                   stored: dict[str, dict[str, int]] | None) -> int:
    """In the commit: delete the claims a committed batch makes needless; returns how many.

    Without an offset store, the query's claims of this batch and earlier ones go (their
    batches are committed). Given the offset store's offsets after the commit, every claim
    of the target that lies below them goes (this batch's, and a failed batch's whose
    offsets a committed batch has passed), and only those: a claim of an attempt of this
    batch id that read further (planned again shorter, from an older copy of the
    checkpoint) holds rows past the store, and stays until a batch passes them.
    """
    from psycopg2 import sql

    ranges = sql.Identifier(stagingSchema, RANGES_TABLE)
    released = 0
    if stored is None:
        cursor.execute(sql.SQL("DELETE FROM {} WHERE target = %s AND query_id = %s AND "
                               "batch_id <= %s").format(ranges), (target, queryId, batchId))
        released = int(cursor.rowcount)
    if stored:
        pairs = [(t, int(p), int(u)) for t, parts in stored.items() for p, u in parts.items()]
        cursor.execute(sql.SQL(
            "DELETE FROM {} r USING unnest(%s::text[], %s::int[], %s::bigint[]) AS s(t, p, u) "
            "WHERE r.target = %s AND r.topic = s.t AND r.kafka_partition = s.p "
            "AND r.until_offset <= s.u").format(ranges),
            ([t for t, _, _ in pairs], [p for _, p, _ in pairs], [u for _, _, u in pairs],
             target))
        released += int(cursor.rowcount)
    return released
