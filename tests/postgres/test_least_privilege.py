"""A database role with only the privileges it needs works: nothing that exists is created.

The role has USAGE on the schema and SELECT, INSERT, UPDATE on the tables an administrator
created beforehand; no CREATE on the database or the schema. The store, both sinks and the
group lock must work with it, on the real PostgreSQL and Spark.
"""

import secrets
import uuid

import pytest

from kafka_direct import KafkaUtils, OffsetRange, OffsetStoreError, TopicPartition
from offsets import PostgresOffsetStore
from sinks import IdempotentPostgresSink, TransactionalPostgresSink

EVENTS = ("CREATE TABLE {}.events (topic text, kafka_partition int, kafka_offset bigint, "
          "key bytea, value bytea, PRIMARY KEY (topic, kafka_partition, kafka_offset))")


@pytest.fixture
def limited(postgres, pg_schema):
    """The DSN of a role that may use the existing tables of ``pg_schema`` and nothing more."""
    role, password = f"app_{uuid.uuid4().hex[:8]}", secrets.token_urlsafe(16)
    PostgresOffsetStore(postgres.dsn, schema=pg_schema).ensure_schema()
    connection = postgres.connect()
    connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute(EVENTS.format(f'"{pg_schema}"'))
        cursor.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        cursor.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        cursor.execute(f'GRANT USAGE ON SCHEMA "{pg_schema}" TO {role}')
        cursor.execute(f'GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA "{pg_schema}" '
                       f"TO {role}")
    dsn = " ".join(f"{k}={v}" for k, v in (
        part.split("=", 1) for part in postgres.dsn.split()) if k not in ("user", "password"))
    yield f"{dsn} user={role} password={password}"
    with connection.cursor() as cursor:
        cursor.execute(f'REVOKE ALL ON ALL TABLES IN SCHEMA "{pg_schema}" FROM {role}')
        cursor.execute(f'REVOKE ALL ON SCHEMA "{pg_schema}" FROM {role}')
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE usename = %s", (role,))
        cursor.execute(f"DROP ROLE {role}")
    connection.close()


def test_the_role_really_cannot_create(limited, pg_schema):
    import psycopg2

    connection = psycopg2.connect(limited)
    try:
        with pytest.raises(psycopg2.errors.InsufficientPrivilege), connection.cursor() as c:
            c.execute(f'CREATE TABLE IF NOT EXISTS "{pg_schema}".events (x int)')
    finally:
        connection.close()


def test_store_sinks_and_group_lock_work_with_a_least_privileged_role(
        spark, kafka, kafka_topic, limited, pg_schema):
    topic = kafka_topic(partitions=2)
    kafka.produce(topic, [b"a", b"b"], partition=0)
    kafka.produce(topic, [b"c"], partition=1)
    store = PostgresOffsetStore(limited, schema=pg_schema)
    with store.lockGroup("job"):
        store.verifyLock("job")
        ranges = [OffsetRange(topic, 0, 0, 2), OffsetRange(topic, 1, 0, 1)]
        rdd = KafkaUtils.createRDD(spark, kafka.params(), ranges)
        sink = TransactionalPostgresSink(limited, "events", "job", schema=pg_schema)
        assert sink.write(rdd) == {"rows": 3, "skipped": 0}
        assert store.load("job") == {TopicPartition(topic, 0): 2, TopicPartition(topic, 1): 1}
    upsert = IdempotentPostgresSink(limited, "events", schema=pg_schema, onConflict="update",
                                    offsetStore=store, group="upserts")
    assert upsert.write(rdd)["rows"] == 3
    assert store.load("upserts") == {TopicPartition(topic, 0): 2, TopicPartition(topic, 1): 1}


def test_a_missing_privilege_is_named_with_its_fix(limited, pg_schema):
    store = PostgresOffsetStore(limited, schema=pg_schema, table="not_created_for_it")
    with pytest.raises(OffsetStoreError) as raised:
        store.load("job")
    text = str(raised.value)
    assert "lacks a privilege" in text and "'not_created_for_it'" in text
    assert "password" not in text.lower() or "[redacted]" in text


def test_the_ingest_job_runs_with_a_least_privileged_role(kafka, kafka_topic, limited,
                                                          pg_schema, tmp_path):
    # The schema and table exist: the job creates nothing (CREATE ... IF NOT EXISTS would
    # need the CREATE privilege all the same), it only writes.
    import os
    import subprocess
    import sys

    topic = kafka_topic(partitions=2)
    kafka.produce(topic, [b"a", b"b", b"c"], partition=0)
    env = {**os.environ, "KAFKA_DIRECT_PG_DSN": limited}
    done = subprocess.run(
        [sys.executable, "-m", "kafka_direct.app.cli", "ingest", "--bootstrap-servers",
         kafka.bootstrap_servers, "--topic", topic, "--schema", pg_schema, "--table", "events",
         "--batch-interval", "0.5", "--stop-after-idle", "1"],
        capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"table {pg_schema}.events: 3 rows, 0 duplicates" in done.stdout
    assert "stored offsets == log end" in done.stdout


def test_a_table_the_role_may_not_create_is_named_with_the_grant(limited, pg_schema):
    from kafka_direct.app.ingest_table import ensure_table

    with pytest.raises(OffsetStoreError) as raised:
        ensure_table(limited, pg_schema, "not_created_for_it")
    text = str(raised.value)
    assert "lacks a privilege" in text and "'not_created_for_it'" in text
    assert "password=" not in text
