"""End to end on real parts: Debezium's PostgreSQL connector (Kafka Connect standalone, jars
from Maven Central) reads a source PostgreSQL by logical replication (pgoutput) into Apache
Kafka; `kafka-direct ingest --envelope debezium` writes a second PostgreSQL. After a random
workload of inserts, updates, deletes, primary key changes and large (TOASTed) values, with
the job killed with SIGKILL mid-way and started again, the target equals the source row for
row.

Slow: the first run resolves Kafka Connect and Debezium's connector (about 90 MB), and a
Connect worker, a second PostgreSQL and two runs of the job start.
"""

import os
import random
import signal
import string
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg2
import pytest
from psycopg2.extensions import parse_dsn

from kafka_direct.testing.jvm_peers import debezium_postgres_source
from kafka_direct.testing.kafka_connect import KafkaConnect
from kafka_direct.testing.postgres import EmbeddedPostgres

pytestmark = [pytest.mark.services, pytest.mark.slow]

ROOT = Path(__file__).parents[2]
CLI = [sys.executable, "-m", "kafka_direct.app.cli"]
COLUMNS = "id, name, big, amount, born, seen, at, doc"
TABLE = """CREATE TABLE items (id integer PRIMARY KEY, name text, big text,
    amount numeric(12,2), born date, seen timestamp, at timestamptz, doc jsonb);
    ALTER TABLE items REPLICA IDENTITY FULL"""


def big_text(rng):
    """About 20 kB that pglz cannot shrink below TOAST's threshold: stored out of line."""
    return "".join(rng.choices(string.ascii_letters + string.digits, k=rng.randint(8_000,
                                                                                  20_000)))


class Workload:
    """Random statements on the source table, in transactions of one to four."""

    def __init__(self, dsn, seed):
        self.rng = random.Random(seed)
        self.connection = psycopg2.connect(dsn)
        self.ids: set[int] = set()
        self.next = 1

    def values(self, id_):
        rng = self.rng
        return (id_, f"name-{rng.randint(0, 999)}", big_text(rng) if rng.random() < 0.4 else
                None, f"{rng.randint(-99999, 99999)}.{rng.randint(0, 99):02d}",
                f"19{rng.randint(50, 99)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}",
                f"2024-05-0{rng.randint(1, 9)} 12:34:56.{rng.randint(0, 999999):06d}",
                f"2024-06-01 10:00:00.{rng.randint(0, 999):03d}+02",
                f'{{"n": {rng.randint(0, 9)}.50, "t": ["x", {rng.randint(0, 9)}]}}')

    def insert(self, cursor):
        id_ = self.next
        self.next += 1
        cursor.execute(f"INSERT INTO items ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                       self.values(id_))
        self.ids.add(id_)

    def step(self, cursor):
        rng = self.rng
        if len(self.ids) < 5 or rng.random() < 0.3:
            return self.insert(cursor)
        id_ = rng.choice(sorted(self.ids))
        roll = rng.random()
        if roll < 0.35:  # an update that leaves the large value as it is
            cursor.execute("UPDATE items SET name = %s, amount = amount + 1 WHERE id = %s",
                           (f"renamed-{rng.randint(0, 999)}", id_))
        elif roll < 0.5:
            cursor.execute("UPDATE items SET big = %s WHERE id = %s", (big_text(rng), id_))
        elif roll < 0.7:
            cursor.execute("DELETE FROM items WHERE id = %s", (id_,))
            self.ids.discard(id_)
        else:  # a primary key change
            new = self.next
            self.next += 1
            cursor.execute("UPDATE items SET id = %s, name = name || '+' WHERE id = %s",
                           (new, id_))
            self.ids.discard(id_)
            self.ids.add(new)

    def run(self, statements):
        done = 0
        while done < statements:
            with self.connection, self.connection.cursor() as cursor:
                for _ in range(self.rng.randint(1, 4)):
                    self.step(cursor)
                    done += 1


def rows(dsn, table):
    connection = psycopg2.connect(dsn)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute(f"SELECT {COLUMNS} FROM {table} ORDER BY id")
            return cursor.fetchall()
    finally:
        connection.close()


def connector(source, name):
    settings = parse_dsn(source.dsn)
    return {
        "name": name, "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "tasks.max": "1", "plugin.name": "pgoutput", "database.hostname": "127.0.0.1",
        "database.port": str(source.port), "database.user": settings["user"],
        "database.password": settings["password"], "database.dbname": settings["dbname"],
        "topic.prefix": name, "table.include.list": "public.items",
        "slot.name": name, "publication.name": f"{name}_publication",
        "publication.autocreate.mode": "filtered", "snapshot.mode": "initial",
        "poll.interval.ms": "100", "key.converter.schemas.enable": "true",
        "value.converter.schemas.enable": "true",
        "topic.creation.default.replication.factor": "1",
        "topic.creation.default.partitions": "2"}


def end_offsets(kafka, topic):
    try:
        return sum(high for _, high in kafka.end_offsets(topic, range(2)).values())
    except Exception:  # not created yet
        return -1


def settle(kafka, topic, quiet=5.0, timeout=180.0):
    """Wait until the topic's end offsets have not moved for ``quiet`` seconds."""
    deadline = time.monotonic() + timeout
    last, since = end_offsets(kafka, topic), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = end_offsets(kafka, topic)
        if now != last:
            last, since = now, time.monotonic()
        elif now > 0 and time.monotonic() - since >= quiet:
            return now
    raise AssertionError(f"{topic} did not settle (end offsets {last})")


@pytest.mark.parametrize("api", ["dstream", "structured"])
def test_debezium_source_into_the_job_equals_the_source_after_a_kill(kafka, postgres,
                                                                     pg_schema, tmp_path, api):
    name = f"dbz{uuid.uuid4().hex[:8]}"
    topic = f"{name}.public.items"
    with EmbeddedPostgres(tmp_path / "source", logical=True) as source:
        with psycopg2.connect(source.dsn) as connection, connection.cursor() as cursor:
            cursor.execute(TABLE)
        connection.close()
        workload = Workload(source.dsn, seed=38)
        workload.run(60)  # the snapshot's rows
        worker = KafkaConnect(kafka.bootstrap_servers, plugins=[debezium_postgres_source()],
                              connectors=[connector(source, name)],
                              data_dir=tmp_path / "connect", offset_flush_interval_ms=500)
        with worker:
            assert worker.wait_running(name, timeout=120).running, worker.log_tail()
            workload.run(150)
            settle(kafka, topic)
            argv = [*CLI, "ingest", "--api", api, "--bootstrap-servers",
                    kafka.bootstrap_servers, "--topic", topic, "--group", name,
                    "--schema", pg_schema, "--table", "items", "--batch-interval", "0.5",
                    "--envelope", "debezium", "--value-format", "json", "--key-format",
                    "json", "--key-columns", "id", "--starting-offsets", "earliest"]
            env = {**os.environ, "KAFKA_DIRECT_PG_DSN": postgres.dsn, "PYTHONPATH": str(ROOT)}
            log = tmp_path / "first.out"
            with open(log, "w") as out:
                job = subprocess.Popen([*argv, "--max-rate-per-partition", "40"], stdout=out,
                                       stderr=subprocess.STDOUT, cwd=ROOT, env=env)
                deadline = time.monotonic() + 180
                while (sum(line.startswith("batch ") for line in
                           log.read_text().splitlines()) < 2
                       and job.poll() is None and time.monotonic() < deadline):
                    time.sleep(0.1)
                workload.run(150)  # while the job runs
                assert job.poll() is None, log.read_text()[-3000:]
                job.send_signal(signal.SIGKILL)  # mid-way: some batches committed
                job.wait(60)
            workload.run(150)
            with psycopg2.connect(source.dsn) as connection, connection.cursor() as cursor:
                cursor.execute("SELECT count(*), count(big) FROM items")
                count, large = cursor.fetchone()
            connection.close()
            assert count > 20 and large > 5
            settle(kafka, topic)
            done = subprocess.run([*argv, "--stop-after-idle", "4"], capture_output=True,
                                  text=True, cwd=ROOT, env=env, timeout=600)
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
            assert "stored offsets == log end" in done.stdout, done.stdout[-3000:]
        expected = rows(source.dsn, "items")
    got = rows(postgres.dsn, f'"{pg_schema}".items')
    assert len(got) == len(expected)
    assert got == expected
