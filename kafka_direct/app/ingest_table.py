"""The ingest job's table: created when missing, and checked against the log it came from.

The table is ``topic text, kafka_partition int, kafka_offset bigint, key bytea, value
bytea`` with the primary key (topic, kafka_partition, kafka_offset): :func:`ensure_table`
creates it when missing (asking first, so a role without CREATE works where it exists);
:func:`check_table` counts its rows and distinct records beside the group's stored offsets
(:class:`TableCheck`), which is how the demo and the tests show exactly-once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kafka_direct.errors import OffsetStoreError
from kafka_direct.topic_partition import TopicPartition

__all__ = ["TableCheck", "check_table", "ensure_table"]

#: The columns that name a record: at most one row each in the job's raw table.
_RECORD_KEY = ("topic", "kafka_partition", "kafka_offset")


def ensure_table(dsn: str, schema: str, table: str) -> None:
    """Create ``schema.table`` with the default columns when it does not exist.

    Only what is missing is created (PostgreSQL checks the CREATE privilege even for
    ``IF NOT EXISTS``), so a role with USAGE on the schema and SELECT, INSERT, UPDATE on an
    existing table needs nothing more.

    Raises:
        OffsetStoreError: The schema or table is missing and the role may not create it
            (the message names the grant), or the database failed.
    """
    import psycopg2
    from psycopg2 import sql

    from kafka_direct.postgres.catalog import ensure_tables
    from kafka_direct.postgres.connection import connect
    from kafka_direct.postgres.errors import fix_for

    connection = connect(dsn)
    try:
        with connection, connection.cursor() as cursor:
            ensure_tables(cursor, schema, {table: [sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (topic text NOT NULL, kafka_partition "
                "integer NOT NULL, kafka_offset bigint NOT NULL, key bytea, value bytea, "
                "PRIMARY KEY (topic, kafka_partition, kafka_offset))").format(
                sql.Identifier(schema, table))]})
    except psycopg2.Error as error:
        cause = " ".join(str(error).split())
        raise OffsetStoreError(
            f"creating the table {schema}.{table} failed: {cause}. "
            f"{fix_for(error, schema, table)}", store="PostgreSQL", cause=cause) from error
    finally:
        connection.close()


@dataclass(frozen=True, slots=True)
class TableCheck:
    """What a table holds against the log it was ingested from.

    Attributes:
        rows: Rows in the table.
        distinctRecords: Distinct (topic, partition, offset) among them.
        stored: The group's stored next offsets.
        logEnd: The partitions' end offsets.
    """

    rows: int
    distinctRecords: int
    stored: dict[TopicPartition, int]
    logEnd: dict[TopicPartition, int]

    @property
    def duplicates(self) -> int:
        """Rows beyond the first of each record."""
        return self.rows - self.distinctRecords

    @property
    def caughtUp(self) -> bool:
        """Whether the stored offsets are the log end of every partition."""
        return self.stored == self.logEnd


def check_table(dsn: str, schema: str, table: str, group: str,
                logEnd: Mapping[TopicPartition, int],
                stored: Mapping[TopicPartition, int] | None = None) -> TableCheck:
    """Count the table's rows and distinct records, and read the group's stored offsets.

    ``stored`` gives the offsets instead (a structured query keeps them in its own store).
    """
    from psycopg2 import sql

    from kafka_direct.postgres.catalog import has_unique
    from kafka_direct.postgres.connection import connect
    from offsets.postgres_offset_store import PostgresOffsetStore

    connection = connect(dsn)
    try:
        with connection, connection.cursor() as cursor:
            if has_unique(cursor, schema, table, _RECORD_KEY):
                # The job's own table: its primary key admits no duplicate, so only the
                # rows are counted (a grouping costs about 1 s a million rows, every run).
                cursor.execute(sql.SQL("SELECT count(*), count(*) FROM {}").format(
                    sql.Identifier(schema, table)))
            else:
                # Grouped by hashing, not count(DISTINCT (row)): that sorts composite
                # values, 5-7 s for a million rows against about 1 s. The memory is this
                # transaction's only (a larger table's groups spill to disk).
                cursor.execute("SET LOCAL work_mem = '256MB'")
                cursor.execute(sql.SQL(
                    "SELECT coalesce(sum(n), 0), count(*) FROM (SELECT count(*) AS n FROM {} "
                    "GROUP BY topic, kafka_partition, kafka_offset) AS records"
                ).format(sql.Identifier(schema, table)))
            rows, distinct = cursor.fetchone()
    finally:
        connection.close()
    if stored is None:
        stored = PostgresOffsetStore(dsn, schema=schema).load(group,
                                                               {tp.topic for tp in logEnd})
    return TableCheck(int(rows), int(distinct), dict(stored), dict(logEnd))
