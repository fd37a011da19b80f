"""Before the first batch: the target table, the sink's own tables and the role's grants.

:func:`prepare_target` runs where Spark plans the write (once per process and options): it
creates what is missing of the sink's record tables (asked first, so a role without CREATE
works where they exist), creates the target only when ``createTable`` says so, resolves the
``columns`` against the target's (exact name first, else the one column that matches
ignoring case), checks the unique constraint ``mode=update`` upserts on, and names every
privilege the role lacks as the GRANT to run, before a task starts.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Sequence
from typing import Any

from kafka_direct.errors import ConfigurationError
from kafka_direct.postgres.catalog import ensure_tables, has_unique
from kafka_direct.postgres.connection import transaction
from kafka_direct.postgres.errors import CommitOutcomeUnknownError, database_error
from kafka_direct.postgres.sink_claims import RANGES_TABLE, ensure_ranges_table
from kafka_direct.postgres.staging import COMMITS_TABLE, STAGED_TABLE, ensure_sink_tables
from kafka_direct.sql.link.tables import PLANS_TABLE, STORES_TABLE, ensure_link_tables
from kafka_direct.sql.sink.options import SinkOptions

__all__ = ["postgres_type", "prepare_target", "required_grants"]

logger = logging.getLogger(__name__)

_prepared: dict[SinkOptions, SinkOptions] = {}
_prepared_mutex = threading.Lock()

_SIMPLE_TYPES = {
    "BooleanType": "boolean",
    "ByteType": "smallint",
    "ShortType": "smallint",
    "IntegerType": "integer",
    "LongType": "bigint",
    "FloatType": "real",
    "DoubleType": "double precision",
    "StringType": "text",
    "CharType": "text",
    "BinaryType": "bytea",
    "DateType": "date",
    "TimestampType": "timestamptz",
    "TimestampNTZType": "timestamp",
    "DayTimeIntervalType": "interval",
    "ArrayType": "jsonb",
    "MapType": "jsonb",
    "StructType": "jsonb",
    "NullType": "text",
    "TimeType": "time",
}


def postgres_type(column: str, dataType: Any) -> str:
    """The PostgreSQL type ``createTable`` gives a column of Spark type ``dataType``.

    Raises:
        ConfigurationError: A type the sink cannot write (the message says what to cast
            it to).
    """
    name = type(dataType).__name__
    if name == "DecimalType":
        return f"numeric({int(dataType.precision)}, {int(dataType.scale)})"
    if name == "VarcharType":
        return f"varchar({int(dataType.length)})"
    if name in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[name]
    raise ConfigurationError(
        f"column {column!r} has Spark type {dataType.simpleString()}, which the sink "
        "cannot write: cast it to a string (or another simple type) before writing",
        setting="columns", value=column)


def required_grants(options: SinkOptions) -> list[tuple[str, str, str]]:
    """Every privilege the sink needs: (object kind, object, privileges)."""
    target = f"{options.schema}.{options.table}"
    onTarget = ["SELECT", "INSERT"]
    if options.mode == "update":
        onTarget.append("UPDATE")
    if options.mode == "complete":
        onTarget.append("DELETE")
    grants = [("SCHEMA", options.schema, "USAGE"),
              ("SCHEMA", options.stagingSchema, "USAGE, CREATE"),
              ("TABLE", target, ", ".join(onTarget)),
              ("TABLE", f"{options.stagingSchema}.{STAGED_TABLE}",
               "SELECT, INSERT, UPDATE, DELETE"),
              ("TABLE", f"{options.stagingSchema}.{COMMITS_TABLE}", "SELECT, INSERT, UPDATE")]
    if options.direct:
        grants.append(("TABLE", f"{options.stagingSchema}.{RANGES_TABLE}",
                       "SELECT, INSERT, UPDATE, DELETE"))
    if options.link is not None:
        grants += [("SCHEMA", options.link.schema, "USAGE"),
                   ("TABLE", f"{options.link.schema}.{STORES_TABLE}", "SELECT, INSERT, UPDATE"),
                   ("TABLE", f"{options.link.schema}.{PLANS_TABLE}", "SELECT")]
    return grants


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _missing_grants(cursor: Any, options: SinkOptions) -> list[str]:
    """The GRANT statements the role needs and lacks.

    Each privilege is asked on its own: the has_*_privilege functions answer true for a
    list when any one of it is held.
    """
    cursor.execute("SELECT current_user")
    role = str(cursor.fetchone()[0])
    missing = []
    for kind, name, privileges in required_grants(options):
        if kind == "SCHEMA":
            subject, check = _quoted(name), "SELECT has_schema_privilege(%s, %s)"
            argument: Any = name
        else:
            # By oid: resolving a name would need USAGE on its schema, itself a grant to name.
            schema, table = name.split(".", 1)
            subject = f"{_quoted(schema)}.{_quoted(table)}"
            cursor.execute("SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace "
                           "n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
                           (schema, table))
            found = cursor.fetchone()
            if found is None:
                continue  # made by the sink's first run, by its owner
            argument = found[0]
            check = "SELECT has_table_privilege(%s::oid, %s)"
        lacking = []
        for privilege in privileges.split(", "):
            cursor.execute(check, (argument, privilege))
            if not cursor.fetchone()[0]:
                lacking.append(privilege)
        if lacking:
            missing.append(f"GRANT {', '.join(lacking)} ON {kind} {subject} TO {_quoted(role)}")
    return missing


def _target_columns(cursor: Any, schema: str, table: str) -> list[str] | None:
    cursor.execute(
        "SELECT a.attname FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c "
        "ON c.oid = a.attrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p') "
        "AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum", (schema, table))
    rows = cursor.fetchall()
    if rows:
        return [str(r[0]) for r in rows]
    cursor.execute("SELECT c.relkind FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
                   "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
                   (schema, table))
    kind = cursor.fetchone()
    if kind is not None:
        raise ConfigurationError(
            f"{schema}.{table} is not a table (relkind {kind[0]!r}): the sink writes into "
            "a table", setting="table", value=table)
    return None


def _resolve(columns: Sequence[str], existing: Sequence[str], target: str) -> tuple[str, ...]:
    resolved, missing = [], []
    for column in columns:
        if column in existing:
            resolved.append(column)
            continue
        folded = [c for c in existing if c.lower() == column.lower()]
        if len(folded) == 1:
            resolved.append(folded[0])
        else:
            missing.append(column)
    if missing:
        raise ConfigurationError(
            f"{target} has no columns {missing} (its columns: {list(existing)}): rename the "
            "DataFrame's columns, map them with option columns, or add the columns",
            setting="columns", value=list(columns))
    return tuple(resolved)


def _create_target(cursor: Any, options: SinkOptions, fields: Sequence[tuple[str, Any]]
                   ) -> None:
    from psycopg2 import sql

    definitions = [sql.SQL("{} {}").format(sql.Identifier(column),
                                           sql.SQL(postgres_type(column, dataType)))
                   for column, (_, dataType) in zip(options.columns, fields, strict=True)]
    if options.keyColumns:
        definitions.append(sql.SQL("PRIMARY KEY ({})").format(
            sql.SQL(", ").join(sql.Identifier(k) for k in options.keyColumns)))
    ensure_tables(cursor, options.schema, {options.table: [
        sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
            sql.Identifier(options.schema, options.table), sql.SQL(", ").join(definitions))]})
    logger.info("created the sink's target table %s", options.target)


def prepare_target(options: SinkOptions, fields: Sequence[tuple[str, Any]]) -> SinkOptions:
    """Check (and create what is asked) before a write; the options with resolved columns.

    Done once per process for the same options.

    Args:
        options: The sink's options.
        fields: The DataFrame's (name, Spark type) pairs, in order.

    Raises:
        ConfigurationError: The target is missing (without ``createTable``), lacks a
            column, lacks the unique constraint of ``mode=update``, or the role lacks a
            privilege (named as GRANT statements).
        SinkWriteError: The database failed or refused the login.
    """
    with _prepared_mutex:
        done = _prepared.get(options)
    if done is not None:
        return done
    import psycopg2

    try:
        with transaction(options.database, options.statementTimeoutMs) as cursor:
            resolved = _prepare(cursor, options, fields)
    except (psycopg2.Error, CommitOutcomeUnknownError) as error:
        grants = "; ".join(f"GRANT {p} ON {k} {n}" for k, n, p in required_grants(options))
        raise database_error(error, options.database, doing="preparing the sink",
                             table=options.target, grants=grants) from error
    with _prepared_mutex:
        _prepared[options] = resolved
    return resolved


_OFFSET_TYPES = (("topic", ("StringType", "VarcharType", "CharType")),
                 ("partition", ("IntegerType", "LongType", "ShortType", "ByteType")),
                 ("offset", ("LongType", "IntegerType")))


def _check_offset_types(options: SinkOptions, fields: Sequence[tuple[str, Any]]) -> None:
    """Direct writes claim offsets: the three columns must hold a topic and two integers."""
    for (role, allowed), column in zip(_OFFSET_TYPES, options.offsetColumns, strict=True):
        dataType = fields[options.columns.index(column)][1]
        if type(dataType).__name__ not in allowed:
            raise ConfigurationError(
                f"offsetColumns: column {column!r} holds the record's {role}, but it is "
                f"{dataType.simpleString()}: write the kafka-direct source's {role} column "
                f"as it comes ({'a string' if role == 'topic' else 'an integer'})",
                setting="offsetColumns", value=list(options.offsetColumns))


def _prepare(cursor: Any, options: SinkOptions, fields: Sequence[tuple[str, Any]]
             ) -> SinkOptions:
    if options.direct:
        _check_offset_types(options, fields)
    ensure_sink_tables(cursor, options.stagingSchema)
    if options.direct:
        ensure_ranges_table(cursor, options.stagingSchema)
    if options.link is not None:
        ensure_link_tables(cursor, options.link.schema)
    existing = _target_columns(cursor, options.schema, options.table)
    if existing is None:
        if not options.createTable:
            raise ConfigurationError(
                f"the target table {options.target} does not exist: create it (columns "
                f"{list(options.columns)}"
                + (f", a unique key on {list(options.keyColumns)}" if options.keyColumns
                   else "")
                + "), or set option createTable=true to create it from the DataFrame's "
                "schema", setting="table", value=options.table)
        _create_target(cursor, options, fields)
        existing = _target_columns(cursor, options.schema, options.table) or []
    columns = _resolve(options.columns, existing, options.target)
    keys = _resolve(options.keyColumns, existing, options.target) if options.keyColumns else ()
    if options.mode == "update" and not has_unique(cursor, options.schema, options.table,
                                                    keys):
        raise ConfigurationError(
            f"mode=update upserts on keyColumns {list(keys)}, but {options.target} has no "
            f"unique constraint or index on exactly those columns: ALTER TABLE "
            f"{options.target} ADD PRIMARY KEY ({', '.join(keys)}) (or CREATE UNIQUE INDEX)",
            setting="keyColumns", value=list(keys))
    offsets = (_resolve(options.offsetColumns, existing, options.target)
               if options.offsetColumns else ())
    resolved = dataclasses.replace(options, columns=columns, keyColumns=keys,
                                   offsetColumns=offsets)
    missing = _missing_grants(cursor, resolved)
    if missing:
        raise ConfigurationError(
            f"the database role lacks privileges the sink needs for {options.target}: "
            + "; ".join(missing), setting="privileges", value=missing)
    return resolved
