"""What exists in the database, asked before anything is created.

PostgreSQL checks the CREATE privilege even for ``CREATE ... IF NOT EXISTS``, so every
schema and table the package keeps (offset stores, the sinks' tables, the offset link's
tables, the ingest job's table) is looked up first and created only when missing: a role
without CREATE works where an administrator created them. :func:`ensure_tables` is that
rule, once. :func:`has_unique` answers whether an upsert's ``ON CONFLICT`` has the unique
constraint it needs; :func:`bytea_columns` which of a table's columns read bytea's input.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["NAME_LIMIT", "bytea_columns", "ensure_tables", "has_unique", "schema_exists",
           "table_exists"]

#: PostgreSQL's longest identifier, in bytes (it truncates longer ones: two names alike in
#: their first 63 bytes would be one table or column).
NAME_LIMIT = 63


def schema_exists(cursor: Any, schema: str) -> bool:
    """Whether ``schema`` exists (asked first: CREATE ... IF NOT EXISTS needs CREATE rights)."""
    cursor.execute("SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = %s", (schema,))
    return cursor.fetchone() is not None


def table_exists(cursor: Any, schema: str, table: str) -> bool:
    """Whether ``schema.table`` exists (a table, view or partitioned table)."""
    cursor.execute("SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
                   "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
                   (schema, table))
    return cursor.fetchone() is not None


def ensure_tables(cursor: Any, schema: str, tables: Mapping[str, Sequence[Any]]
                  ) -> list[str]:
    """Create ``schema`` and those of ``tables`` that do not exist, asking first.

    Args:
        cursor: A cursor in the caller's transaction.
        schema: The schema of the tables.
        tables: Per table name, the statements that make it (``CREATE TABLE IF NOT EXISTS``
            and its indexes), run in order when the table is missing; text or
            ``psycopg2.sql`` compositions.

    Returns:
        The tables it created, in the order given.

    Raises:
        psycopg2.Error: The database failed, or the role may not create what is missing.
    """
    from psycopg2 import sql

    if not schema_exists(cursor, schema):
        cursor.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    created = []
    for table, statements in tables.items():
        if table_exists(cursor, schema, table):
            continue
        for statement in statements:
            cursor.execute(statement)
        created.append(table)
    return created


def has_unique(cursor: Any, schema: str, table: str, keys: Sequence[str]) -> bool:
    """Whether a unique index covers exactly ``keys`` (what ``ON CONFLICT (keys)`` needs).

    Only an index without a predicate or expressions counts: an upsert cannot name others.
    """
    cursor.execute(
        "SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_catalog.pg_index i "
        "JOIN pg_catalog.pg_class c ON c.oid = i.indrelid "
        "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        "JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey) "
        "WHERE n.nspname = %s AND c.relname = %s AND i.indisunique AND i.indpred IS NULL "
        "AND i.indexprs IS NULL GROUP BY i.indexrelid", (schema, table))
    wanted = sorted(keys)
    return any(sorted(row[0]) == wanted for row in cursor.fetchall())


def bytea_columns(cursor: Any, table: str) -> tuple[list[str], set[str]]:
    """A table's columns in their order, and those of type bytea (or a domain over it).

    Args:
        cursor: A psycopg2 cursor; asked in its transaction, so a temporary table is found
            as any other.
        table: The table as SQL text, quoted as needed (``"schema"."table"``), as
            ``regclass`` reads it.
    """
    cursor.execute(
        "SELECT a.attname, (t.oid = 'bytea'::regtype OR t.typbasetype = 'bytea'::regtype) "
        "FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid "
        "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped "
        "ORDER BY a.attnum", (table,))
    found = cursor.fetchall()
    return [name for name, _ in found], {name for name, is_bytea in found if is_bytea}
