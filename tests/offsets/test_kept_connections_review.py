"""The stores' kept connections and clients, attacked: what one transaction leaves in its
session never reaches the next, a forked child neither ends its parent's session nor
crashes on its parent's Kafka client.
"""

import os
import signal
import time

import pytest

from kafka_direct import OffsetRange, TopicPartition
from offsets import KafkaOffsetStore, PostgresOffsetStore
from sinks.transactional_postgres_sink import TransactionalPostgresSink

T0 = TopicPartition("events", 0)


def _pid(store):  # the kept session's backend
    with store.transaction(kept=True) as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def _alive(postgres, pid):
    admin = postgres.connect()
    try:
        with admin, admin.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,))
            return cursor.fetchone()[0] == 1
    finally:
        admin.close()


def test_session_settings_of_one_transaction_do_not_reach_the_next(postgres, pg_schema):
    # A transaction on a new connection starts from the server's defaults; the kept one
    # starts from whatever the previous transaction SET (not LOCAL) on the session.
    store = PostgresOffsetStore(postgres.dsn, table="leak", schema=pg_schema)
    store.seed("g", {T0: 0})
    with store.transaction() as cursor:
        cursor.execute("SET default_transaction_read_only = on")
    try:
        store.commit("g", [OffsetRange("events", 0, 0, 1)])  # read-only: refused
        assert store.load("g") == {T0: 1}
    finally:
        store.close()


def test_a_sink_write_with_a_temporary_table_runs_batch_after_batch(postgres, pg_schema):
    # A write callback staging through a temporary table (the usual COPY-then-merge) ran on
    # a new session each batch; on the kept session, the second batch finds it there.
    admin = postgres.connect()
    try:
        with admin, admin.cursor() as cursor:
            cursor.execute(f'CREATE TABLE "{pg_schema}".target (v int)')
    finally:
        admin.close()
    sink = TransactionalPostgresSink(postgres.dsn, "target", "g", schema=pg_schema,
                                     columns=["v"])

    def write(cursor):
        cursor.execute("CREATE TEMP TABLE staging (v int)")
        cursor.execute("INSERT INTO staging VALUES (1)")
        cursor.execute(f'INSERT INTO "{pg_schema}".target SELECT v FROM staging')
        return 1

    try:
        sink.writeBatch([OffsetRange("events", 0, 0, 1)], [], write)
        sink.writeBatch([OffsetRange("events", 0, 1, 2)], [], write)
        assert sink.store.load("g") == {T0: 2}
    finally:
        sink.store.close()


def test_a_forked_child_using_the_store_leaves_its_parents_session_alone(postgres,
                                                                          pg_schema):
    store = PostgresOffsetStore(postgres.dsn, table="forked", schema=pg_schema)
    store.seed("g", {T0: 0})
    parent = _pid(store)
    child = os.fork()
    if child == 0:  # the child: one transaction of its own, then out
        code = 1
        try:
            store.load("g")
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    time.sleep(0.5)
    try:
        assert _alive(postgres, parent), "the child ended the parent's kept session"
    finally:
        store.close()


def test_a_forked_child_using_a_kafka_store_does_not_hang(kafka, kafka_topic):
    topic = kafka_topic(partitions=1)
    store = KafkaOffsetStore(kafka.params())
    group, tp = f"fork-{topic}", TopicPartition(topic, 0)
    store.seed(group, {tp: 0})  # the parent keeps the group's client
    child = os.fork()
    if child == 0:
        code = 1
        try:
            store.load(f"{group}-other", [topic])  # another group: the kept one dropped
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            done, status = os.waitpid(child, os.WNOHANG)
            if done:
                assert os.waitstatus_to_exitcode(status) == 0
                return
            time.sleep(0.2)
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        pytest.fail("the forked child hung for 30 s dropping its parent's Kafka client")
    finally:
        store.close()
