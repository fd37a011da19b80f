"""Driver side: a batch's staged rows into the target, in the batch's transaction.

:func:`move_parts` runs inside the transaction that also stores the batch's offsets (the
DStream job's per-batch offset claim, or the structured sink's commit), so everything
below commits with them or not at all:

1. the columns the batch's rows carry, joined over its tasks (a column new in two tasks
   takes the type that holds both, or the batch stops with SchemaChangeError);
2. the target: created from them when missing; new columns added (``ALTER TABLE ... ADD
   COLUMN``, nullable); an existing column that a schema's field outgrew widened (``ALTER
   COLUMN ... TYPE``: ``integer`` to ``bigint``, ``varchar(n)`` to ``text``, more digits of
   ``numeric``...), and one whose schema field now lets rows be NULL loses ``NOT NULL``;
   any other type change stops the batch with :class:`~kafka_direct.errors.
   SchemaChangeError` naming the field, both types and the record's offset; key columns
   that arrive with the batch get their primary key;
3. rows: appended (``INSERT ... SELECT``, each staged text cast to its column's type), or
   with key columns reduced to the latest record of each key (highest offset; within a
   batch too), then deleted (the latest is a tombstone) or upserted (``ON CONFLICT (keys)
   DO UPDATE``) — a compacted topic's view;
4. dead letters into the dead-letter table;
5. the staging tables dropped with their registry rows.

With ``--envelope debezium`` (:mod:`.envelope`): a batch's truncate events (``--on-truncate
truncate``) first delete the topic's rows and every staged row of their partition before
them; a column a row keeps (Debezium's unavailable value) takes the value the key had
before it, in the batch or in the target.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kafka_direct.app.typed.columns import fits, widens, widest
from kafka_direct.app.typed.envelope import (
    KEEP,
    after_truncates,
    apply_truncates,
    fill_kept,
    truncated,
)
from kafka_direct.app.typed.options import COORDINATES, REGISTRY_FORMATS, TypedOptions
from kafka_direct.app.typed.rows import BAD, DELETE, ROW
from kafka_direct.app.typed.stage import ERROR, KIND, RAW_KEY, RAW_VALUE, StagedPart
from kafka_direct.app.typed.table import (
    add_columns,
    alter_column_type,
    create_target,
    drop_not_null,
    not_null_columns,
    not_null_without_default,
    table_columns,
)
from kafka_direct.errors import SchemaChangeError
from kafka_direct.postgres.catalog import has_unique

__all__ = ["MoveCounts", "batch_columns", "move_parts", "move_tables"]

logger = logging.getLogger(__name__)

_LATEST = "kafka_direct_latest"


@dataclass(slots=True)
class MoveCounts:
    """What a batch's move did.

    Attributes:
        written: Rows inserted or updated in the target.
        deleted: Rows deleted (tombstones).
        deadLetters: Records written into the dead-letter table.
        added: Columns added to the target.
    """

    written: int = 0
    deleted: int = 0
    deadLetters: int = 0
    added: tuple[str, ...] = ()


def batch_columns(parts: Sequence[StagedPart], target: str
                  ) -> dict[str, tuple[str, bool, str, int, int]]:
    """The batch's field columns: name -> (type, fromSchema, where first seen), joined.

    Raises:
        SchemaChangeError: Two tasks give a new column types no column holds both.
    """
    joined: dict[str, tuple[str, bool, str, int, int]] = {}
    for part in parts:
        for name, kind, fromSchema, topic, partition, offset in part.columns:
            held = joined.get(name)
            if held is None:
                joined[name] = (kind, fromSchema, topic, partition, offset)
                continue
            if held[0] == kind:
                continue
            wider = widest(held[0], kind)
            if wider is None:
                raise SchemaChangeError(
                    f"field {name!r} has type {held[0]} in records of one partition and "
                    f"type {kind} in another (at {topic}-{partition} offset {offset}) in "
                    f"the same batch; no column type holds both. Give {target}.{name} a "
                    "type by hand (ALTER TABLE ... ADD COLUMN) or fix the producers",
                    table=target, field=name, columnType=held[0], newType=kind,
                    topic=topic or None, partition=None if partition < 0 else partition,
                    offset=None if offset < 0 else offset)
            joined[name] = (wider, held[1] and fromSchema, *held[2:])
    return joined


def _evolve(cursor: Any, schema: str, table: str, options: TypedOptions,
            columns: dict[str, tuple[str, bool, str, int, int]]) -> tuple[dict[str, str],
                                                                          tuple[str, ...]]:
    """Create or widen the target for the batch's columns; returns (its columns, added)."""
    from psycopg2 import sql

    target = f"{schema}.{table}"
    existing = table_columns(cursor, schema, table)
    if existing is None:
        known = [(name, info[0]) for name, info in columns.items()]
        keys = options.keyColumns or COORDINATES
        create_target(cursor, schema, table, known, keys)
        return table_columns(cursor, schema, table) or {}, tuple(columns)
    new: list[tuple[str, str]] = []
    for name, (kind, fromSchema, topic, partition, offset) in columns.items():
        column = existing.get(name)
        if column is None:
            new.append((name, kind))
        elif not fits(column, kind):
            reason = ("no widening of the column holds it" if not (fromSchema and widens(
                column, kind)) else _widen(cursor, schema, table, name, kind))
            if reason is None:
                existing[name] = kind
                continue
            raise SchemaChangeError(
                f"field {name!r} now has type {kind} (first at {topic}-{partition} offset "
                f"{offset}), which column {name} of {target} (type {column}) cannot hold: "
                f"{reason}. Change the column (ALTER TABLE {target} ALTER COLUMN {name} TYPE "
                f"{kind}) or the schema, then run the job again: it resumes at this batch",
                table=target, field=name, columnType=column, newType=kind,
                topic=topic or None, partition=None if partition < 0 else partition,
                offset=None if offset < 0 else offset)
    add_columns(cursor, schema, table, new)
    for name, kind in new:
        existing[name] = kind
    keys = options.keyColumns
    if keys and any(k in dict(new) for k in keys) and all(k in existing for k in keys) \
            and not has_unique(cursor, schema, table, keys):
        # The key columns came with this batch (the table was made before their types were
        # known): their primary key too. A table with rows cannot take it (NULL keys).
        cursor.execute(sql.SQL("ALTER TABLE {} ADD PRIMARY KEY ({})").format(
            sql.Identifier(schema, table), sql.SQL(", ").join(sql.Identifier(k) for k in keys)))
    return existing, tuple(name for name, _ in new)


def _widen(cursor: Any, schema: str, table: str, name: str, kind: str) -> str | None:
    """Alter column ``name`` to the wider ``kind``; None, or why PostgreSQL refused.

    A refusal (a view or rule that uses the column...) is returned for the caller's
    SchemaChangeError; the transaction is then lost, and the batch rolls back.
    """
    import psycopg2

    try:
        alter_column_type(cursor, schema, table, name, kind)
    except psycopg2.Error as error:
        primary = getattr(getattr(error, "diag", None), "message_primary", None)
        return f"PostgreSQL refused to widen it ({primary or type(error).__name__})"
    return None


def _nullable(cursor: Any, schema: str, table: str, options: TypedOptions,
              parts: Sequence[StagedPart], columns: dict[str, tuple[str, bool, str, int, int]],
              after: Any = None) -> list[str]:
    """Drop NOT NULL of schema fields whose rows in the batch have a NULL; their names.

    A schema that lets a field be null, or no longer has it, writes NULL there: the
    column follows (a key column never: a null key is a bad record). A NOT NULL column
    that no row of the batch supplies (its field left the schema of every record) follows
    too, when the values come from a schema. ``after``: SQL that keeps the staged rows a
    Debezium truncate of the batch leaves (None: all).
    """
    from psycopg2 import sql

    fromSchema = [n for n, info in columns.items() if info[1] and n not in options.keyColumns
                  and n not in COORDINATES]
    rowParts = [p for p in parts if p.rows - p.deletes - p.deadLetters - len(p.truncates)]
    dropped = []
    if rowParts and options.valueFormat in REGISTRY_FORMATS:
        # Rows that leave a column out write NULL there (or its default).
        dropped += sorted(n for n in not_null_without_default(cursor, schema, table)
                          if n not in columns and n not in options.keyColumns
                          and n not in COORDINATES)
    if not fromSchema:
        drop_not_null(cursor, schema, table, dropped)
        return dropped
    strict = not_null_columns(cursor, schema, table)
    for name in (n for n in fromSchema if n in strict):
        if any(name not in {c[0] for c in p.columns} for p in rowParts):
            dropped.append(name)  # records of a schema without the field: NULL
            continue
        # A row that keeps the column (Debezium's unavailable value) takes its old value.
        isNull = sql.SQL("{} IS NULL AND NOT coalesce({}::jsonb ? {}, false)").format(
            sql.Identifier(name), sql.Identifier(KEEP), sql.Literal(name))
        cursor.execute(sql.SQL("SELECT EXISTS (") + _union(
            rowParts, schema, lambda _: sql.SQL("1"), (ROW,),
            isNull if after is None else isNull + sql.SQL(" AND ") + after) + sql.SQL(")"))
        if cursor.fetchone()[0]:
            dropped.append(name)
    drop_not_null(cursor, schema, table, dropped)
    return dropped


def _union(parts: Sequence[StagedPart], schema: str, select: Any, kinds: Sequence[str],
           where: Any = None) -> Any:
    """``SELECT <select per part> FROM stage WHERE kind IN kinds [AND where]`` over the parts.

    A part that is a view of one table of several (``part.topics``) selects only their rows.
    """
    from psycopg2 import sql

    extra = sql.SQL(" AND ") + where if where is not None else sql.SQL("")
    return sql.SQL(" UNION ALL ").join(
        sql.SQL("SELECT ") + select(part) + sql.SQL(" FROM {} WHERE {} IN ({})").format(
            sql.Identifier(schema, part.table), sql.Identifier(KIND),
            sql.SQL(", ").join(sql.Literal(k) for k in kinds))
        + (sql.SQL(" AND topic IN ({})").format(sql.SQL(", ").join(
            sql.Literal(t) for t in part.topics)) if part.topics else sql.SQL(""))
        + extra
        for part in parts)


def move_tables(cursor: Any, schema: str, table: str, options: TypedOptions,
                parts: Sequence[StagedPart]) -> MoveCounts:
    """Move the staged ``parts`` into their target tables; in the caller's transaction.

    ``table`` is the ``--table`` option: one table, or a per-topic template
    (:class:`~kafka_direct.app.typed.routing.TableRoute`). With a template, each table the
    batch writes is prepared first (created, or checked, with its dead-letter table: a
    pattern's topics appear while the job runs), and two topics of the batch that map onto
    one table stop it before anything is written.

    Raises:
        ConfigurationError: Two topics map onto one table, or a table cannot work as it is.
        SchemaChangeError: A field's type does not fit its column.
        psycopg2.Error: The database failed (the caller rolls back).
    """
    from kafka_direct.app.typed.routing import TableRoute
    from kafka_direct.app.typed.table import prepare_table

    route = TableRoute(table)
    if not route.perTopic:
        views = [v for p in parts if (v := p.for_table(table)) is not None]
        return move_parts(cursor, schema, table, options,
                          views if any(p.shares for p in parts) else parts)
    topics = {t for p in parts for share in p.shares for t in share.topics}
    route.tables(topics, options)  # two topics onto one table: refused, nothing written
    total = MoveCounts()
    for name in sorted({t for p in parts for t in p.targets}):
        views = [v for p in parts if (v := p.for_table(name)) is not None]
        topic = min(t for p in parts for share in p.shares if share.table == name
                    for t in share.topics)
        deadLetter = route.dead_letter_table(options, topic)
        prepare_table(cursor, schema, name, options, deadLetter)
        counts = move_parts(cursor, schema, name, options, views, deadLetter=deadLetter)
        total.written += counts.written
        total.deleted += counts.deleted
        total.deadLetters += counts.deadLetters
        total.added += tuple(f"{name}.{c}" for c in counts.added)
    return total


def move_parts(cursor: Any, schema: str, table: str, options: TypedOptions,
               parts: Sequence[StagedPart], deadLetter: str | None = None) -> MoveCounts:
    """Move the staged ``parts`` into the target (see the module); in the caller's transaction.

    ``deadLetter``: the dead-letter table (None: the options' for ``table``).

    Raises:
        SchemaChangeError: A field's type does not fit its column.
        psycopg2.Error: The database failed (the caller rolls back).
    """
    from psycopg2 import sql

    target = f"{schema}.{table}"
    parts = [p for p in parts if p.rows]
    counts = MoveCounts()
    if not parts:
        return counts
    columns = batch_columns(parts, target)
    existing, counts.added = _evolve(cursor, schema, table, options, columns)
    goal = sql.Identifier(schema, table)
    last = truncated([t for p in parts for t in p.truncates])
    after = after_truncates(last) if last else None
    _nullable(cursor, schema, table, options, parts, columns, after)
    if last:
        counts.deleted += apply_truncates(cursor, goal, last)
    fields = [name for name in columns if name not in COORDINATES]
    written = [*COORDINATES, *fields]

    def casted(part: StagedPart) -> Any:
        mine = {name for name, *_ in part.columns}
        values = [sql.Identifier(c) for c in COORDINATES] + [
            sql.SQL("{}::{} AS {}").format(sql.Identifier(name) if name in mine else sql.NULL,
                                           sql.SQL(existing[name]), sql.Identifier(name))
            for name in fields]
        return sql.SQL(", ").join(values)

    names = sql.SQL(", ").join(sql.Identifier(c) for c in written)
    kept = [c for c in dict.fromkeys(k for p in parts for k in p.kept) if c in fields]
    if any(p.rows - p.deadLetters - len(p.truncates) for p in parts):
        if not options.keyColumns:
            cursor.execute(sql.SQL("INSERT INTO {} ({}) ").format(goal, names)
                           + _union(parts, schema, casted, (ROW,), after))
            counts.written = cursor.rowcount
        else:
            head = sql.SQL(", ").join(sql.Identifier(c) for c in (KIND, KEEP))
            written_, deleted = _upsert(cursor, goal, options.keyColumns, written, _union(
                parts, schema, lambda p: head + sql.SQL(", ") + casted(p), (ROW, DELETE),
                after), kept)
            counts.written, counts.deleted = written_, counts.deleted + deleted
    deadLetter = deadLetter or options.dead_letter_table(table)
    if deadLetter is not None and any(p.deadLetters for p in parts):
        cursor.execute(sql.SQL(
            "INSERT INTO {} (topic, kafka_partition, kafka_offset, key, value, error) ").format(
            sql.Identifier(schema, deadLetter)) + _union(
            parts, schema, lambda p: sql.SQL(", ").join(
                sql.Identifier(c) for c in (*COORDINATES, RAW_KEY, RAW_VALUE, ERROR)), (BAD,)))
        counts.deadLetters = cursor.rowcount
    return counts


def _upsert(cursor: Any, goal: Any, keys: Sequence[str], written: Sequence[str],
            staged: Any, kept: Sequence[str] = ()) -> tuple[int, int]:
    """Reduce to each key's latest record, delete tombstoned keys, upsert the rest.

    ``kept``: columns some rows keep (Debezium): filled from before them first.
    """
    from psycopg2 import sql

    keyList = sql.SQL(", ").join(sql.Identifier(k) for k in keys)
    # The latest record of each key: the highest offset (Kafka orders a key within its
    # partition; a key in two partitions of one batch goes to the higher partition).
    cursor.execute(sql.SQL(
        "CREATE TEMP TABLE {} ON COMMIT DROP AS SELECT DISTINCT ON ({}) * FROM (").format(
        sql.Identifier(_LATEST), keyList) + staged + sql.SQL(
        ") AS staged ORDER BY {}, kafka_offset DESC, kafka_partition DESC").format(keyList))
    if kept:
        fill_kept(cursor, sql.Identifier(_LATEST), goal, keys, kept, staged)
    cursor.execute(sql.SQL("DELETE FROM {} AS t USING {} AS l WHERE l.{} = %s AND ").format(
        goal, sql.Identifier(_LATEST), sql.Identifier(KIND)) + sql.SQL(" AND ").join(
        sql.SQL("t.{} = l.{}").format(sql.Identifier(k), sql.Identifier(k)) for k in keys),
        (DELETE,))
    deleted = cursor.rowcount
    others = [c for c in written if c not in keys]
    action = (sql.SQL("DO UPDATE SET ") + sql.SQL(", ").join(
        sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c))
        for c in others)) if others else sql.SQL("DO NOTHING")
    columns = sql.SQL(", ").join(sql.Identifier(c) for c in written)
    cursor.execute(sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} WHERE {} = %s "
                           "ON CONFLICT ({}) ").format(
        goal, columns, columns, sql.Identifier(_LATEST), sql.Identifier(KIND), keyList)
        + action, (ROW,))
    written_ = cursor.rowcount
    cursor.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(_LATEST)))
    return written_, deleted
