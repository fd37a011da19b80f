"""The offset link's shared names: a store's reference, its tables and its lock key.

The source's side (:mod:`kafka_direct.sql.link.source_side`) and the sink's
(:mod:`kafka_direct.sql.link.sink_side`) meet here; the protocol, the lock and the grants each
side needs are described in :mod:`kafka_direct.sql.link`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from kafka_direct.errors import ConfigurationError
from kafka_direct.postgres.catalog import ensure_tables
from kafka_direct.postgres.connection import Database

__all__ = [
    "LINK_LOCK_SPACE",
    "LINK_OPTIONS",
    "PLANS_TABLE",
    "STORES_TABLE",
    "StoreRef",
    "ensure_link_tables",
    "grant_fix",
    "lock_key",
    "table_identifier",
]

STORES_TABLE = "kafka_direct_offset_stores"
PLANS_TABLE = "kafka_direct_offset_plans"
#: First key of the store's advisory lock (the second: hashtext of "schema/store").
LINK_LOCK_SPACE = 0x6B6C
_OPTION_PREFIX = "offsetstore."
#: The link's options (source and sink alike), lower case as Spark hands them over.
LINK_OPTIONS = frozenset(_OPTION_PREFIX + name for name in ("name", "dsn", "schema", "password"))


@dataclass(frozen=True, slots=True)
class StoreRef:
    """An offset store: its database, name and the schema of its tables.

    What the sink holds of the link (the source's :class:`~kafka_direct.sql.link.
    source_side.SourceLink` is a StoreRef too, with the source's operations).

    Attributes:
        dsn: libpq connection string of the sink's database ("" for libpq's environment);
            never shown.
        store: The offset store's name (the same on the source and the sink).
        schema: Schema of the link's tables.
        password: A password given apart from the DSN (``offsetStore.password``), or None.
    """

    dsn: str
    store: str
    schema: str = "public"
    password: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.dsn, str):
            raise ConfigurationError("offsetStore.dsn must be a libpq connection string")
        for name, value in (("offsetStore.name", self.store),
                            ("offsetStore.schema", self.schema)):
            if not isinstance(value, str) or not value.strip() or len(value) > 200:
                raise ConfigurationError(
                    f"{name} must be a non-empty name of at most 200 characters, got "
                    f"{value!r}")

    def __repr__(self) -> str:
        return f"StoreRef(store={self.store!r}, schema={self.schema!r})"  # no DSN

    @property
    def database(self) -> Database:
        """The link's database (DSN and password)."""
        return Database(self.dsn, self.password)

    @classmethod
    def from_options(cls, options: Mapping[str, Any], dsn: str | None = None,
                     password: str | None = None) -> Self | None:
        """The link the options ask for (``offsetStore.name``/``.dsn``/``.schema``), or None.

        Option names are case-insensitive (Spark lowercases them). ``offsetStore.password``
        may hold the password apart from the DSN (Spark redacts such options in plans).

        Args:
            options: The data source's options.
            dsn: The DSN to use when ``offsetStore.dsn`` is absent (the sink passes its
                own: its store must live in its database); None makes it required.
            password: The password to use with ``dsn``.

        Raises:
            ConfigurationError: ``offsetStore.*`` options without ``offsetStore.name``, or
                a source's link without ``offsetStore.dsn``.
        """
        lowered = {str(k).lower(): v for k, v in options.items()}
        given = sorted(k for k in lowered if k.startswith(_OPTION_PREFIX))
        name = lowered.get(_OPTION_PREFIX + "name")
        if name is None:
            if given:
                raise ConfigurationError(
                    f"options {given} need offsetStore.name: the offset store both the "
                    "source and the sink use (the same name on both)")
            return None
        linkDsn = lowered.get(_OPTION_PREFIX + "dsn")
        linkPassword = lowered.get(_OPTION_PREFIX + "password")
        if linkDsn is None:
            if dsn is None:
                raise ConfigurationError(
                    "offsetStore.name needs offsetStore.dsn: the connection string of the "
                    "sink's database, where the sink commits the offsets with the rows "
                    "(\"\" for libpq's environment)")
            linkDsn, linkPassword = dsn, password if linkPassword is None else linkPassword
        schema = lowered.get(_OPTION_PREFIX + "schema") or "public"
        return cls(str(linkDsn), str(name), str(schema),
                   None if linkPassword is None else str(linkPassword))


def lock_key(schema: str, store: str) -> tuple[int, str]:
    """The advisory lock of a store: ``pg_advisory_lock(space, hashtext(text))``.

    The text is unambiguous (the schema's length first): schema ``x`` with store ``a/b``
    and schema ``x/a`` with store ``b`` are different stores with different locks.
    """
    return LINK_LOCK_SPACE, f"{len(schema)}:{schema}/{store}"


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

    created = ensure_tables(cursor, schema, {
        STORES_TABLE: [sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (store text PRIMARY KEY, end_offsets jsonb, "
            "plan_id bigint, query_id text, batch_id bigint, "
            "updated_at timestamptz NOT NULL DEFAULT now())").format(
            table_identifier(schema, STORES_TABLE))],
        PLANS_TABLE: [sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} ("
            "plan_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, store text NOT NULL, "
            "start_offsets jsonb NOT NULL, end_offsets jsonb NOT NULL, "
            "recorded_at timestamptz NOT NULL DEFAULT now(), query_id text, batch_id bigint, "
            "reset_offsets jsonb)"
            ).format(table_identifier(schema, PLANS_TABLE)),
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (store, plan_id)").format(
            sql.Identifier(f"{PLANS_TABLE}_store"), table_identifier(schema, PLANS_TABLE))],
    })
    if PLANS_TABLE not in created and not _has_column(cursor, schema, PLANS_TABLE,
                                                      "reset_offsets"):
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
