"""The target and dead-letter tables of typed rows: read, created, evolved, checked.

Only what is missing is created, asked first (PostgreSQL checks the CREATE privilege even
for ``IF NOT EXISTS``), so a role without CREATE works where the tables exist.

* The target starts with the Kafka coordinates (``topic, kafka_partition, kafka_offset``)
  and the columns known before the first record (``key``/``value`` bytea of raw parts,
  ``--columns``); its primary key is the coordinates, or ``--key-columns`` once their
  types are known. Each batch adds the columns its records bring
  (:func:`evolve`, in the batch's transaction).
* The dead-letter table: ``topic, kafka_partition, kafka_offset, key bytea, value bytea,
  error text, failed_at timestamptz``, keyed by the coordinates.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kafka_direct.app.typed.columns import fits, normalise_type
from kafka_direct.app.typed.options import COORDINATES, TypedOptions
from kafka_direct.errors import ConfigurationError, SchemaChangeError
from kafka_direct.postgres.catalog import has_unique

__all__ = ["COORDINATE_TYPES", "DEAD_LETTER_COLUMNS", "add_columns", "alter_column_type",
           "create_target", "drop_not_null", "ensure_dead_letter", "known_columns",
           "not_null_columns", "not_null_without_default",
           "prepare_table", "prepare_tables", "schema_exists", "table_columns"]

logger = logging.getLogger(__name__)

#: The coordinates' column types.
COORDINATE_TYPES = (("topic", "text"), ("kafka_partition", "integer"),
                    ("kafka_offset", "bigint"))


def schema_exists(cursor: Any, schema: str) -> bool:
    """Whether the schema exists."""
    cursor.execute("SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = %s", (schema,))
    return cursor.fetchone() is not None


def table_columns(cursor: Any, schema: str, table: str) -> dict[str, str] | None:
    """The table's columns and their (canonical) types in order, or None when it is missing.

    Raises:
        ConfigurationError: The name is something other than a table (a view...).
    """
    cursor.execute(
        "SELECT c.relkind, a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod) "
        "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        "LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 "
        "AND NOT a.attisdropped WHERE n.nspname = %s AND c.relname = %s ORDER BY a.attnum",
        (schema, table))
    rows = cursor.fetchall()
    if not rows:
        return None
    if rows[0][0] not in ("r", "p"):
        raise ConfigurationError(f"{schema}.{table} is not a table (relkind {rows[0][0]!r}): "
                                 "the job writes into a table")
    return {str(name): normalise_type(str(kind)) for _, name, kind in rows if name is not None}


def known_columns(options: TypedOptions) -> list[tuple[str, str]]:
    """The columns known before any record: raw parts, a primitive key, ``--columns``.

    The timestamp and header columns too: their types are known from the options.
    """
    columns = [(name, "bytea") for name, kind in (("key", options.keyFormat),
                                                  ("value", options.valueFormat))
               if kind == "raw"]
    if options.keyColumn is not None:
        from kafka_direct.app.typed.keys import KEY_TYPES

        columns.append((options.keyColumn, dict(options.columns).get(options.keyColumn)
                        or KEY_TYPES[options.keyFormat]))
    taken = {name for name, _ in columns}
    columns += [(name, kind) for name, kind in options.columns if name not in taken]
    if options.timestampColumn is not None:
        columns.append((options.timestampColumn, "timestamptz"))
    columns += list(options.headerColumns)
    return columns


def create_target(cursor: Any, schema: str, table: str, columns: Sequence[tuple[str, str]],
                  primaryKey: Sequence[str]) -> None:
    """CREATE the target: coordinates, ``columns``, and ``primaryKey`` (if any)."""
    from psycopg2 import sql

    if not schema_exists(cursor, schema):
        cursor.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    definitions = [sql.SQL("{} {} NOT NULL").format(sql.Identifier(name), sql.SQL(kind))
                   for name, kind in COORDINATE_TYPES]
    definitions += [sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(kind))
                    for name, kind in columns if name not in COORDINATES]
    if primaryKey:
        definitions.append(sql.SQL("PRIMARY KEY ({})").format(
            sql.SQL(", ").join(sql.Identifier(k) for k in primaryKey)))
    cursor.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
        sql.Identifier(schema, table), sql.SQL(", ").join(definitions)))
    logger.info("created table %s.%s with columns %s", schema, table,
                [name for name, _ in columns])


def add_columns(cursor: Any, schema: str, table: str, columns: Sequence[tuple[str, str]]
                ) -> None:
    """ALTER TABLE ... ADD COLUMN for each (nullable), in the caller's transaction."""
    from psycopg2 import sql

    if not columns:
        return
    cursor.execute(sql.SQL("ALTER TABLE {} ").format(sql.Identifier(schema, table))
                   + sql.SQL(", ").join(sql.SQL("ADD COLUMN IF NOT EXISTS {} {}").format(
                       sql.Identifier(name), sql.SQL(kind)) for name, kind in columns))
    logger.info("added columns %s to %s.%s", [name for name, _ in columns], schema, table)


def alter_column_type(cursor: Any, schema: str, table: str, name: str, kind: str) -> None:
    """ALTER TABLE ... ALTER COLUMN ... TYPE (a widening), in the caller's transaction.

    Raises:
        psycopg2.Error: PostgreSQL refused (a view or rule uses the column...).
    """
    from psycopg2 import sql

    cursor.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE {}").format(
        sql.Identifier(schema, table), sql.Identifier(name), sql.SQL(kind)))
    logger.info("widened column %s of %s.%s to %s", name, schema, table, kind)


def not_null_columns(cursor: Any, schema: str, table: str) -> set[str]:
    """The table's columns that are NOT NULL."""
    cursor.execute(
        "SELECT a.attname FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON "
        "c.oid = a.attrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped "
        "AND a.attnotnull", (schema, table))
    return {str(row[0]) for row in cursor.fetchall()}


def not_null_without_default(cursor: Any, schema: str, table: str) -> set[str]:
    """The table's NOT NULL columns that an INSERT leaving them out leaves NULL.

    Not those with a default, an identity or a generated value.
    """
    cursor.execute(
        "SELECT a.attname FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON "
        "c.oid = a.attrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped "
        "AND a.attnotnull AND NOT a.atthasdef AND a.attidentity = '' "
        "AND a.attgenerated = ''", (schema, table))
    return {str(row[0]) for row in cursor.fetchall()}


def drop_not_null(cursor: Any, schema: str, table: str, names: Sequence[str]) -> None:
    """ALTER TABLE ... ALTER COLUMN ... DROP NOT NULL for each, in the caller's transaction."""
    from psycopg2 import sql

    if not names:
        return
    cursor.execute(sql.SQL("ALTER TABLE {} ").format(sql.Identifier(schema, table))
                   + sql.SQL(", ").join(sql.SQL("ALTER COLUMN {} DROP NOT NULL").format(
                       sql.Identifier(name)) for name in names))
    logger.info("columns %s of %s.%s are nullable now", list(names), schema, table)


#: The dead-letter table's columns the job writes, and their types.
DEAD_LETTER_COLUMNS = (*COORDINATE_TYPES, ("key", "bytea"), ("value", "bytea"),
                       ("error", "text"))


def ensure_dead_letter(cursor: Any, schema: str, table: str) -> None:
    """Create the dead-letter table when missing (asked first), else check its columns.

    Raises:
        ConfigurationError: The table lacks a dead-letter column, or has one of a type
            that cannot hold it (another table: a topic's own, say).
    """
    from psycopg2 import sql

    existing = table_columns(cursor, schema, table)
    if existing is not None:
        wrong = [f"{name} {kind}" for name, kind in DEAD_LETTER_COLUMNS
                 if name not in existing or not fits(existing[name], kind)]
        if wrong:
            raise ConfigurationError(
                f"--dead-letter-table: {schema}.{table} exists but is not a dead-letter "
                f"table (it needs columns {', '.join(wrong)}): choose another "
                "--dead-letter-table, or drop or rename that table",
                setting="--dead-letter-table")
        return
    if not schema_exists(cursor, schema):
        cursor.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    cursor.execute(sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} (topic text NOT NULL, kafka_partition integer NOT NULL, "
        "kafka_offset bigint NOT NULL, key bytea, value bytea, error text NOT NULL, "
        "failed_at timestamptz NOT NULL DEFAULT now(), "
        "PRIMARY KEY (topic, kafka_partition, kafka_offset))").format(
        sql.Identifier(schema, table)))


def _check_existing(cursor: Any, schema: str, table: str, existing: Mapping[str, str],
                    options: TypedOptions) -> None:
    from psycopg2 import sql

    target = f"{schema}.{table}"
    missing = [c for c in COORDINATES if c not in existing]
    if missing:
        raise ConfigurationError(
            f"{target} has no columns {missing}: the job keeps every record's Kafka "
            "coordinates (topic text, kafka_partition integer, kafka_offset bigint) in its "
            "rows; add them, or choose another --table")
    keyColumn = options.keyColumn
    if keyColumn is not None and keyColumn in existing:
        from kafka_direct.app.typed.keys import key_fits

        if not key_fits(options.keyFormat, existing[keyColumn]):
            raise ConfigurationError(
                f"--key-format {options.keyFormat}: column {keyColumn} of {target} has type "
                f"{existing[keyColumn]}, which a {options.keyFormat} key cannot be read as: "
                "choose the --key-format the producer writes (string reads any type), "
                "change the column, or choose another --table", setting="--key-format")
    for name, kind in known_columns(options):
        if name == keyColumn:
            continue  # a string key is read as its column's type: checked above
        if name in existing and not fits(existing[name], kind):
            raise SchemaChangeError(
                f"column {name} of {target} has type {existing[name]}, which cannot hold the "
                f"{kind} the job writes there: change the column or choose another --table",
                table=target, field=name, columnType=existing[name], newType=kind,
                topic=None, partition=None, offset=None)
    keys = [k for k in options.keyColumns if k in existing]
    if options.keyColumns and len(keys) == len(options.keyColumns):
        if not has_unique(cursor, schema, table, options.keyColumns):
            raise ConfigurationError(
                f"--key-columns {','.join(options.keyColumns)} upserts on those columns, but "
                f"{target} has no unique constraint or index on exactly them: ALTER TABLE "
                f"{target} ADD PRIMARY KEY ({', '.join(options.keyColumns)}) (or CREATE "
                "UNIQUE INDEX), or choose another --table")
    elif options.keyColumns:
        cursor.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(
            sql.Identifier(schema, table)))
        if cursor.fetchone()[0]:
            absent = [k for k in options.keyColumns if k not in existing]
            raise ConfigurationError(
                f"--key-columns names {absent}, which {target} does not have, and the table "
                "has rows already (the key of a row must never be NULL): add the columns "
                "with a unique constraint yourself, or choose another --table")


def prepare_table(cursor: Any, schema: str, table: str, options: TypedOptions,
                  deadLetter: str | None) -> None:
    """The target (created when missing, else checked) and its dead-letter table.

    Raises:
        ConfigurationError: The target cannot work as it is (the message says the fix).
        SchemaChangeError: A column cannot hold what the job writes there.
    """
    existing = table_columns(cursor, schema, table)
    if existing is None:
        known = known_columns(options)
        names = {name for name, _ in known} | set(COORDINATES)
        keys = (options.keyColumns if all(k in names for k in options.keyColumns)
                else ())
        create_target(cursor, schema, table, known,
                      keys if options.keyColumns else COORDINATES)
    else:
        _check_existing(cursor, schema, table, existing, options)
    if deadLetter is not None:
        ensure_dead_letter(cursor, schema, deadLetter)


def prepare_tables(dsn: str, schema: str, table: str, options: TypedOptions,
                   structured: bool = False, topics: Sequence[str] = ()) -> None:
    """Before the stream starts: the targets, their dead-letter tables, the staging records.

    A missing target is created with the columns known now; a target that exists must
    keep the coordinates, and have a unique constraint on ``--key-columns`` (or gain them
    with their first records while it is empty). With a per-topic ``table`` template, the
    tables of ``topics`` are prepared (a pattern's: by the batch that first writes them).

    Raises:
        ConfigurationError: The target cannot work as it is (the message says the fix), or
            two topics map onto one table.
        SchemaChangeError: A column cannot hold what the job writes there.
        OffsetStoreError: The database failed, or the role may not create what is missing.
    """
    import psycopg2

    from kafka_direct.app.typed.routing import TableRoute
    from kafka_direct.errors import OffsetStoreError
    from kafka_direct.postgres.connection import connect
    from kafka_direct.postgres.errors import describe_database_error, fix_for
    from kafka_direct.postgres.staging import ensure_sink_tables

    route = TableRoute(table)
    targets = ({name: topic for topic, name in route.tables(topics, options).items()}
               if route.perTopic else {table: ""})
    connection = connect(dsn)
    try:
        with connection, connection.cursor() as cursor:
            for name, topic in targets.items():
                table = name
                prepare_table(cursor, schema, name, options,
                              route.dead_letter_table(options, topic) if topic
                              else options.dead_letter_table(name))
            ensure_sink_tables(cursor, schema)
            if structured:
                from kafka_direct.sql.link.tables import ensure_link_tables

                ensure_link_tables(cursor, schema)
    except psycopg2.Error as error:
        cause = describe_database_error(error, dsn)
        raise OffsetStoreError(
            f"preparing the table {schema}.{table} failed: {cause}. "
            f"{fix_for(error, schema, table)}", store="PostgreSQL", cause=cause) from error
    finally:
        connection.close()
