"""Executor side: a task decodes its records and stages them in an unlogged table of its own.

One task (a Kafka partition range of a DStream batch, a Spark partition of a structured
micro-batch) runs one transaction:

1. read the target's columns from the catalog (their types decide how values are checked);
2. decode and convert its records in chunks (:class:`~kafka_direct.app.typed.rows.
   RowBuilder`): rows, deletes and dead letters, or a typed error that fails the batch;
3. ``CREATE UNLOGGED TABLE kafka_direct_stage_<token>``: the coordinates, a kind, one
   ``text`` column per field (the commit casts each to its column's type; every value was
   checked against that type here), and the raw key, value and reason of dead letters;
   COPY the rows in; a column first met in a later chunk is added before that chunk;
4. register the table in ``kafka_direct_sink_staged`` (the structured sink's registry, so
   its cleanup by batch, query and age covers these tables too), and commit.

The task's :class:`StagedPart` tells the driver's commit where the rows are and which
columns (with their types and where each was first seen) they carry. Nothing is in the
target until the driver's commit moves them, in the batch's transaction.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kafka_direct.app.typed.envelope import KEEP
from kafka_direct.app.typed.options import TypedOptions
from kafka_direct.app.typed.rows import BAD, DELETE, TRUNCATE, ColumnInfo, RowBuilder

__all__ = ["CHUNK_ROWS", "KIND", "StagedPart", "Stager", "TableShare"]

logger = logging.getLogger(__name__)

#: Records decoded per COPY chunk (memory holds one chunk).
CHUNK_ROWS = 5_000
#: The staging tables' own columns.
KIND = "kafka_direct_kind"
RAW_KEY = "kafka_direct_key"
RAW_VALUE = "kafka_direct_value"
ERROR = "kafka_direct_error"

#: (topic, partition, offset, key, value[, timestamp, headers]): the last two for the
#: timestamp and header columns.
Record = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class TableShare:
    """What one task staged for one target table (its topics' rows).

    Attributes:
        table: The target table.
        topics: The topics whose rows go there.
        rows: Staged rows of every kind.
        deletes: Of them, keys to delete.
        deadLetters: Of them, dead letters.
        columns: As :attr:`StagedPart.columns`, for this table.
        truncates: As :attr:`StagedPart.truncates`, of this table's topics.
        kept: As :attr:`StagedPart.kept`, of this table's rows.
    """

    table: str
    topics: tuple[str, ...]
    rows: int = 0
    deletes: int = 0
    deadLetters: int = 0
    columns: tuple[tuple[str, str, bool, str, int, int], ...] = ()
    truncates: tuple[tuple[str, int, int], ...] = ()
    kept: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StagedPart:
    """What one task staged (its commit message).

    Attributes:
        partitionId: The Spark partition.
        token: The attempt's random token (its staging table is
            ``kafka_direct_stage_<token>``).
        rows: Staged rows of every kind (0: nothing staged, no table).
        deletes: Of them, keys to delete.
        deadLetters: Of them, dead letters.
        ignored: Tombstones skipped (``--on-tombstone ignore``).
        columns: ``(name, type, fromSchema, topic, partition, offset)`` of every field
            column the rows carry; the type is the table's for its existing columns, else
            the schema's or the inferred one; the coordinates say where it was first seen.
        schemas: Avro schemas the task had to fetch from the registry (id, texts), for the
            driver to give the next tasks.
        shares: What it staged per target table (one share unless ``--table`` is a
            per-topic template and the task read several topics).
        topics: Of a view of one table (:meth:`for_table`): the topics to select from a
            staging table shared with other tables; empty: all of its rows.
        truncates: ``(topic, partition, offset)`` of Debezium truncate events (staged too).
        kept: Columns some staged rows keep (Debezium's unavailable values).
    """

    partitionId: int
    token: str
    rows: int = 0
    deletes: int = 0
    deadLetters: int = 0
    ignored: int = 0
    columns: tuple[tuple[str, str, bool, str, int, int], ...] = field(default=())
    schemas: tuple[tuple[int, tuple[str, ...]], ...] = field(default=(), repr=False)
    shares: tuple[TableShare, ...] = field(default=())
    topics: tuple[str, ...] = ()
    truncates: tuple[tuple[str, int, int], ...] = ()
    kept: tuple[str, ...] = ()

    @property
    def table(self) -> str:
        """The staging table's name."""
        from kafka_direct.postgres.staging import STAGE_PREFIX

        return STAGE_PREFIX + self.token

    @property
    def targets(self) -> tuple[str, ...]:
        """The target tables its rows go to."""
        return tuple(share.table for share in self.shares)

    def for_table(self, table: str) -> StagedPart | None:
        """This part as the rows of target ``table`` only (None: it has none for it).

        The view names the same staging table; when the part holds rows of other tables
        too, its ``topics`` are the ones to select (the commit filters on them).
        """
        for share in self.shares:
            if share.table == table:
                return StagedPart(self.partitionId, self.token, share.rows, share.deletes,
                                  share.deadLetters, 0, share.columns,
                                  topics=share.topics if len(self.shares) > 1 else (),
                                  truncates=share.truncates, kept=share.kept)
        return None


@dataclass(frozen=True)
class Stager:
    """What each task runs to stage its records (holds the DSN: never shown).

    Attributes:
        dsn: libpq connection string.
        schema: The target's schema (the staging tables and their registry live there).
        table: The target table, or a per-topic template (:class:`~kafka_direct.app.typed.
            routing.TableRoute`): each topic's rows are built for its own table's columns.
        options: The record options.
        queryId: Registry key of the writer: ``ingest:<group>`` (DStream) or Spark's query
            id (structured).
        batchId: Registry key of the batch.
        statementTimeoutMs: ``statement_timeout`` of the task's transaction.
        schemas: Avro schema texts by id the driver knows (the task asks for no other).
    """

    dsn: str = field(repr=False)
    schema: str
    table: str
    options: TypedOptions
    queryId: str
    batchId: int
    statementTimeoutMs: int | None = None
    schemas: tuple[tuple[int, tuple[str, ...]], ...] = field(default=(), repr=False)

    def __repr__(self) -> str:
        return f"Stager({self.schema}.{self.table}, batch {self.batchId})"

    def stage(self, partitionId: int, records: Iterable[Record],
              token: str | None = None) -> StagedPart:
        """Stage ``records``; returns what was staged.

        Each record is (topic, partition, offset, key, value[, timestamp, headers]).

        Raises:
            BadRecordError: A record cannot be a row and bad records fail the batch.
            SchemaChangeError: A schema's field no longer fits its column.
            SchemaRegistryError: The registry failed.
            SinkWriteError: The database failed (nothing staged).
        """
        from kafka_direct.postgres.connection import Database, transaction
        from kafka_direct.postgres.staging import new_token
        from sinks.postgres_writer import database_errors

        token = token or new_token()
        target = f"{self.schema}.{self.table}"
        with database_errors(target, dsn=self.dsn), \
                transaction(Database(self.dsn), self.statementTimeoutMs) as cursor:
            cursor.execute("SET LOCAL synchronous_commit = off")  # rebuilt by a re-run if lost
            return self._stage(cursor, _Builders(self, cursor), partitionId, token, records)

    def _stage(self, cursor: Any, builders: _Builders, partitionId: int, token: str,
               records: Iterable[Record]) -> StagedPart:
        from psycopg2 import sql

        from kafka_direct.postgres.staging import STAGE_PREFIX, STAGED_TABLE

        stage = sql.Identifier(self.schema, STAGE_PREFIX + token)
        staged: list[str] = []  # field columns the staging table has, in order
        counts = {"rows": 0, "deletes": 0, "dead": 0, "ignored": 0}
        shares: dict[str, list[int]] = {}  # table -> [rows, deletes, dead letters]
        truncates: dict[str, list[tuple[str, int, int]]] = {}  # table -> truncate events
        created = False
        lastTopic: str | None = None
        builder: Any = None  # the builder of lastTopic's table
        share = [0, 0, 0]
        for chunk in _chunks(records, CHUNK_ROWS):
            rows = []
            for record in chunk:
                if record[0] != lastTopic:  # a task reads one topic's range, mostly
                    lastTopic = record[0]
                    table, builder = builders.of(record[0])
                    share = shares.setdefault(table, [0, 0, 0])
                built = builder.build(*record)
                if built is None:
                    counts["ignored"] += 1
                    continue
                share[0] += 1
                if built[0] == DELETE:
                    share[1] += 1
                elif built[0] == BAD:
                    share[2] += 1
                elif built[0] == TRUNCATE:
                    truncates.setdefault(table, []).append(record[:3])
                rows.append((built, *record[:5]))
            if not rows:
                continue
            if not created:
                cursor.execute(sql.SQL(
                    "CREATE UNLOGGED TABLE {} ({} \"char\" NOT NULL, topic text NOT NULL, "
                    "kafka_partition integer NOT NULL, kafka_offset bigint NOT NULL, "
                    "{} bytea, {} bytea, {} text, {} text)").format(
                    stage, sql.Identifier(KIND), sql.Identifier(RAW_KEY),
                    sql.Identifier(RAW_VALUE), sql.Identifier(ERROR), sql.Identifier(KEEP)))
                created = True
            fresh = [c for c in builders.columns() if c not in staged]
            if fresh:
                cursor.execute(sql.SQL("ALTER TABLE {} ").format(stage) + sql.SQL(", ").join(
                    sql.SQL("ADD COLUMN {} text").format(sql.Identifier(c)) for c in fresh))
                staged += fresh
            columns = (KIND, "topic", "kafka_partition", "kafka_offset", RAW_KEY, RAW_VALUE,
                       ERROR, KEEP, *staged)
            text = "".join(_lines(rows, staged, counts))
            cursor.copy_expert(sql.SQL("COPY {} ({}) FROM STDIN").format(
                stage, sql.SQL(", ").join(sql.Identifier(c) for c in columns)).as_string(cursor),
                io.StringIO(text))
            counts["rows"] += len(rows)
        fetched = tuple(sorted(builders.fetched().items()))
        if not counts["rows"]:
            return StagedPart(partitionId, token, ignored=counts["ignored"], schemas=fetched)
        cursor.execute(sql.SQL(
            "INSERT INTO {} (token, query_id, batch_id, partition_id, staging_table, rows) "
            "VALUES (%s, %s, %s, %s, %s, %s)").format(sql.Identifier(self.schema,
                                                                     STAGED_TABLE)),
            (token, self.queryId, self.batchId, partitionId, STAGE_PREFIX + token,
             counts["rows"]))
        parts = tuple(TableShare(table, builders.topics(table), rows, deletes, dead,
                                 _described(builders.builders[table]),
                                 tuple(truncates.get(table, ())),
                                 tuple(builders.builders[table].kept))
                      for table, (rows, deletes, dead) in shares.items() if rows)
        return StagedPart(partitionId, token, counts["rows"], counts["deletes"],
                          counts["dead"], counts["ignored"],
                          parts[0].columns if len(parts) == 1 else (), fetched, parts,
                          truncates=tuple(t for share in parts for t in share.truncates),
                          kept=tuple(dict.fromkeys(k for share in parts for k in share.kept)))


class _Builders:
    """A task's row builders, one per target table (made at its first record)."""

    def __init__(self, stager: Stager, cursor: Any) -> None:
        from kafka_direct.app.typed.routing import TableRoute

        self.stager = stager
        self.cursor = cursor
        self.route = TableRoute(stager.table)
        self.builders: dict[str, RowBuilder] = {}
        self._byTopic: dict[str, tuple[str, RowBuilder]] = {}

    def of(self, topic: str) -> tuple[str, RowBuilder]:
        """(the table, its builder) of ``topic``'s records."""
        found = self._byTopic.get(topic)
        if found is not None:
            return found
        from kafka_direct.app.typed.table import table_columns

        s = self.stager
        table = self.route.table(topic)
        self.route.tables([*self._byTopic, topic])  # two topics onto one table: refused
        builder = self.builders.get(table)
        if builder is None:
            builder = RowBuilder(s.options, f"{s.schema}.{table}",
                                 table_columns(self.cursor, s.schema, table), dict(s.schemas))
            self.builders[table] = builder
        self._byTopic[topic] = (table, builder)
        return table, builder

    def topics(self, table: str) -> tuple[str, ...]:
        """The topics read so far whose rows go to ``table``."""
        return tuple(sorted(t for t, (name, _) in self._byTopic.items() if name == table))

    def columns(self) -> list[str]:
        """Every column the builders' rows carry, in the order first seen."""
        return list(dict.fromkeys(c for b in self.builders.values() for c in b.columns))

    def fetched(self) -> dict[int, tuple[str, ...]]:
        """Schemas the builders' decoders had to fetch."""
        found: dict[int, tuple[str, ...]] = {}
        for builder in self.builders.values():
            found.update(builder.fetched)
        return found


_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_text(value: Any) -> str:
    """One staged value in COPY's text format (every staged field column is text)."""
    kind = type(value)
    if kind is str:
        return value.translate(_ESCAPES)  # type: ignore[no-any-return]
    if value is None:
        return "\\N"
    if kind is int:
        return str(value)
    if kind is bool:
        return "t" if value else "f"
    if kind is float:
        return repr(value)
    if kind is bytes:
        return "\\\\x" + str(value.hex())  # bytea's hex input, its backslash escaped for COPY
    return str(value).translate(_ESCAPES)


def _lines(rows: list[tuple[Any, ...]], staged: list[str], counts: dict[str, int]
           ) -> Iterator[str]:
    """The rows as lines of COPY's text format, in the staging table's column order."""
    nulls = "\t".join(["\\N"] * len(staged))
    for (kind, body), topic, partition, offset, key, value in rows:
        head = f"{topic.translate(_ESCAPES)}\t{partition}\t{offset}"
        if kind == BAD:
            counts["dead"] += 1
            line = "\t".join((BAD, head, _copy_text(key), _copy_text(value),
                              _copy_text(body), "\\N"))
            yield f"{line}\t{nulls}\n" if staged else f"{line}\n"
            continue
        if kind == DELETE:
            counts["deletes"] += 1
        fields = "\t".join([_copy_text(body.get(c)) for c in staged])
        keep = _copy_text(body.get(KEEP))
        yield f"{kind}\t{head}\t\\N\t\\N\t\\N\t{keep}\t{fields}\n" if staged else \
            f"{kind}\t{head}\t\\N\t\\N\t\\N\t{keep}\n"


def _described(builder: RowBuilder) -> tuple[tuple[str, str, bool, str, int, int], ...]:
    described = []
    for name in builder.columns:
        info: ColumnInfo | None = builder.new.get(name)
        if info is None:  # an existing column: its own type
            described.append((name, builder.existing[name], False, "", -1, -1))
        else:
            described.append((name, *info))
    return tuple(described)


def _chunks(records: Iterable[Record], size: int) -> Iterator[list[Record]]:
    chunk: list[Record] = []
    for record in records:
        chunk.append(record)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
