"""The offset link's shared names: its tables, the store's lock key and offsets as JSON.

The source's side (:mod:`kafka_direct.sql.source_link`) and the sink's
(:mod:`kafka_direct.sql.sink_link`) meet here; the protocol, the lock and the grants each
side needs are described in :mod:`kafka_direct.sql.offset_link`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kafka_direct.errors import ConfigurationError

__all__ = [
    "LINK_LOCK_SPACE",
    "PLANS_TABLE",
    "STORES_TABLE",
    "SourceOffsets",
    "ensure_link_tables",
    "grant_fix",
    "lock_key",
    "normalise_offsets",
    "offsets_json",
    "table_identifier",
]

#: Source offsets as the source's JSON: {"topic": {"partition": next offset}}.
SourceOffsets = dict[str, dict[str, int]]

STORES_TABLE = "kafka_direct_offset_stores"
PLANS_TABLE = "kafka_direct_offset_plans"
#: First key of the store's advisory lock (the second: hashtext of "schema/store").
LINK_LOCK_SPACE = 0x6B6C


def lock_key(schema: str, store: str) -> tuple[int, str]:
    """The advisory lock of a store: ``pg_advisory_lock(space, hashtext(text))``.

    The text is unambiguous (the schema's length first): schema ``x`` with store ``a/b``
    and schema ``x/a`` with store ``b`` are different stores with different locks.
    """
    return LINK_LOCK_SPACE, f"{len(schema)}:{schema}/{store}"


def normalise_offsets(value: Any, what: str) -> SourceOffsets:
    """``value`` as source offsets (topics and partitions as text, offsets as int >= 0).

    Raises:
        ConfigurationError: ``value`` is not ``{"topic": {"partition": offset}}``.
    """
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f"{what} must be offsets as {{\"topic\": {{\"partition\": offset}}}}, got "
            f"{type(value).__name__}")
    offsets: SourceOffsets = {}
    for topic, partitions in value.items():
        if not isinstance(topic, str) or not topic or not isinstance(partitions, Mapping):
            raise ConfigurationError(
                f"{what}: topic {topic!r} must be a name mapping partitions to offsets")
        shaped: dict[str, int] = {}
        for partition, offset in partitions.items():
            try:
                number = int(partition)
            except (TypeError, ValueError):
                number = -1
            if number < 0 or isinstance(partition, bool):
                raise ConfigurationError(
                    f"{what}: partition {partition!r} of topic {topic!r} is not a partition "
                    "number")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise ConfigurationError(
                    f"{what}: offset {offset!r} of {topic}-{number} must be an int >= 0")
            shaped[str(number)] = offset
        offsets[topic] = dict(sorted(shaped.items(), key=lambda item: int(item[0])))
    return dict(sorted(offsets.items()))


def offsets_json(offsets: SourceOffsets) -> str:
    """The offsets as JSON in a stable key order (topics sorted, partitions by number)."""
    ordered = {topic: dict(sorted(parts.items(), key=lambda item: int(item[0])))
               for topic, parts in sorted(offsets.items())}
    return json.dumps(ordered, separators=(",", ":"))


def table_identifier(schema: str, table: str) -> Any:
    """``schema.table`` as a quoted identifier to compose into SQL (psycopg2's ``sql``)."""
    from psycopg2 import sql

    return sql.Identifier(schema, table)


def ensure_link_tables(cursor: Any, schema: str) -> None:
    """Create the link's tables that do not exist (asked first: no CREATE needed otherwise).

    Raises:
        psycopg2.Error: The database failed, or the role may not create what is missing.
    """
    from psycopg2 import sql

    from offsets.database import schema_exists, table_exists

    if not schema_exists(cursor, schema):
        cursor.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    if not table_exists(cursor, schema, STORES_TABLE):
        cursor.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (store text PRIMARY KEY, end_offsets jsonb, "
            "plan_id bigint, query_id text, batch_id bigint, "
            "updated_at timestamptz NOT NULL DEFAULT now())").format(
            table_identifier(schema, STORES_TABLE)))
    if not table_exists(cursor, schema, PLANS_TABLE):
        cursor.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} ("
            "plan_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, store text NOT NULL, "
            "start_offsets jsonb NOT NULL, end_offsets jsonb NOT NULL, "
            "recorded_at timestamptz NOT NULL DEFAULT now(), query_id text, batch_id bigint, "
            "reset_offsets jsonb)"
            ).format(table_identifier(schema, PLANS_TABLE)))
        cursor.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (store, plan_id)").format(
            sql.Identifier(f"{PLANS_TABLE}_store"), table_identifier(schema, PLANS_TABLE)))
    elif not _has_column(cursor, schema, PLANS_TABLE, "reset_offsets"):
        # Plans tables made before reads were bound to their batch and resets were marked.
        cursor.execute(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS query_id text, "
                               "ADD COLUMN IF NOT EXISTS batch_id bigint, "
                               "ADD COLUMN IF NOT EXISTS reset_offsets jsonb").format(
            table_identifier(schema, PLANS_TABLE)))


def _has_column(cursor: Any, schema: str, table: str, column: str) -> bool:
    cursor.execute("SELECT 1 FROM information_schema.columns WHERE table_schema = %s "
                   "AND table_name = %s AND column_name = %s", (schema, table, column))
    return cursor.fetchone() is not None


def grant_fix(error: BaseException, schema: str, side: str) -> str:
    """What to do about a failure of the link's tables: the grants missing, or a retry.

    Args:
        error: The driver's error.
        schema: The schema of the link's tables.
        side: "source" for the source's privileges; anything else for the sink's.
    """
    code = str(getattr(error, "pgcode", "") or "")
    if code == "42501":
        if side == "source":
            return (f"The role lacks a privilege: GRANT USAGE ON SCHEMA {schema}; GRANT SELECT "
                    f"ON {schema}.{STORES_TABLE}; GRANT SELECT, INSERT, UPDATE, DELETE ON "
                    f"{schema}.{PLANS_TABLE} (or let a role with CREATE make the tables once)")
        return (f"The role lacks a privilege: GRANT USAGE ON SCHEMA {schema}; GRANT SELECT, "
                f"INSERT, UPDATE ON {schema}.{STORES_TABLE}; GRANT SELECT ON "
                f"{schema}.{PLANS_TABLE}")
    if code.startswith("28"):
        return "The database refused the login: check the user and password"
    return "Nothing changed; run again once the database answers"
