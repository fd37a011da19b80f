"""What exists in the database, asked before anything is created.

PostgreSQL checks the CREATE privilege even for ``CREATE ... IF NOT EXISTS``, so every
schema and table the package keeps (offset stores, the sinks' tables, the offset link's
tables, the ingest job's table) is looked up first and created only when missing: a role
without CREATE works where an administrator created them. :func:`ensure_tables` is that
rule, once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ensure_tables", "schema_exists", "table_exists"]


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
