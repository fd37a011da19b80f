"""Kafka Connect's standalone worker started by the harness, with Debezium's JDBC sink.

The benchmarks' Connect contender stands on it: every dataset it reads reaches PostgreSQL
whole, a worker killed with SIGKILL and started again resumes from its committed offsets,
and a task that fails is reported with its trace and without the database's password.
"""

import json
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from kafka_direct import ServiceError
from kafka_direct.testing.jvm_peers import debezium_jdbc_sink
from kafka_direct.testing.kafka_connect import KafkaConnect, _properties
from kafka_direct.testing.process import wait_for

sys.path.insert(0, str(Path(__file__).parents[2] / "bench" / "peers"))

import common

pytestmark = pytest.mark.services

RECORDS = 400
SINK = "io.debezium.connector.jdbc.JdbcSinkConnector"
BYTES = "org.apache.kafka.connect.converters.ByteArrayConverter"


def sink(name, topic, table, postgres, **more):
    url, properties = common.jdbc_url(postgres.dsn)
    settings = {"name": name, "connector.class": SINK, "topics": topic, "tasks.max": "2",
                "connection.url": url, "connection.username": properties["user"],
                "connection.password": properties.get("password", ""),
                "collection.name.format": table, "quote.identifiers": "true",
                "schema.evolution": "basic", "insert.mode": "insert",
                "primary.key.mode": "none", "batch.size": "100",
                "consumer.override.max.poll.records": "100",
                "consumer.override.auto.offset.reset": "earliest",
                # A killed worker's consumer leaves the group when its session ends: the
                # broker's minimum, not Kafka's 45 s, so the restarted one resumes at once.
                "consumer.override.session.timeout.ms": "6000",
                "consumer.override.heartbeat.interval.ms": "1000"}
    settings.update(more)
    return settings


def raw_sink(name, topic, table, postgres):
    return sink(name, topic, table, postgres, **{
        "key.converter": BYTES, "value.converter": BYTES, "transforms": "hoist,meta",
        "transforms.hoist.type": "org.apache.kafka.connect.transforms.HoistField$Value",
        "transforms.hoist.field": "value",
        "transforms.meta.type": "org.apache.kafka.connect.transforms.InsertField$Value",
        "transforms.meta.topic.field": "topic",
        "transforms.meta.partition.field": "kafka_partition",
        "transforms.meta.offset.field": "kafka_offset"})


def committed(kafka, group, topic):
    consumer = Consumer(kafka.params(**{"group.id": group, "enable.auto.commit": False}))
    try:
        offsets = consumer.committed([TopicPartition(topic, p) for p in range(common.PARTITIONS)],
                                     timeout=10)
        return sum(max(0, tp.offset) for tp in offsets)
    finally:
        consumer.close()


@pytest.fixture
def names(postgres):
    suffix = uuid.uuid4().hex[:8]
    made = {kind: f"kc_{kind}_{suffix}" for kind in ("raw", "typed", "updates", "bad")}
    yield made
    connection = postgres.connect()
    connection.autocommit = True
    with connection.cursor() as cursor:
        for table in made.values():
            cursor.execute(f'DROP TABLE IF EXISTS "{table}"')
    connection.close()


def test_connector_settings_are_written_as_java_properties():
    assert _properties({"a b": "x=y:z\\ é", "t": "HoistField$Value"}) == (
        "a\\ b=x\\=y\\:z\\\\ \\u00e9\nt=HoistField$Value\n")


# Slow: the first run resolves Kafka Connect and Debezium's sink from Maven Central (about
# 130 MB) and starts a third kind of JVM, which only the benchmark and this test use.
@pytest.mark.slow
def test_debezium_sink_writes_every_dataset_and_resumes_after_kill(kafka, postgres, names,
                                                                   tmp_path):
    datasets = {"raw": "raw", "typed": "typed-connect", "updates": "updates-connect"}
    for kind, dataset in datasets.items():
        common.produce(kafka, names[kind], dataset, RECORDS)
    connectors = [
        raw_sink(names["raw"], names["raw"], names["raw"], postgres),
        sink(names["typed"], names["typed"], names["typed"], postgres),
        sink(names["updates"], names["updates"], names["updates"], postgres,
             **{"insert.mode": "upsert", "primary.key.mode": "record_key",
                "primary.key.fields": "id"}),
    ]
    connection = postgres.connect()
    connection.autocommit = True
    worker = KafkaConnect(kafka.bootstrap_servers, plugins=[debezium_jdbc_sink()],
                          connectors=connectors, data_dir=tmp_path / "connect",
                          offset_flush_interval_ms=500)
    with worker:
        for kind in datasets:
            status = worker.wait_running(names[kind])
            assert status.running and len(status.tasks) == 2
        for kind, dataset in datasets.items():
            want = common.expected_rows(dataset, RECORDS)
            assert common.wait_until(lambda kind=kind, dataset=dataset, want=want:
                                     common.table_rows(connection, names[kind], dataset,
                                                       RECORDS) >= want, 60), worker.log_tail()
            assert common.verify(connection, names[kind], dataset, RECORDS) == {
                "rows": want, "duplicates": 0, "gaps": 0, "stale": 0, "wrong": 0}
        with connection.cursor() as cursor:
            cursor.execute("SELECT column_name, data_type FROM information_schema.columns "
                           "WHERE table_name = %s ORDER BY ordinal_position", (names["typed"],))
            assert cursor.fetchall() == [("id", "bigint"), ("name", "text"),
                                         ("amount", "double precision"), ("ts", "bigint")]

        # Every record's offset committed, then a crash: what arrives meanwhile is written
        # once the worker is back, from the committed offsets, nothing twice.
        group = f"connect-{names['raw']}"
        assert wait_for(lambda: committed(kafka, group, names["raw"]) == RECORDS, 30)
        pid = worker.pid
        worker.kill()
        assert not worker.alive() and pid is not None
        per = RECORDS // common.PARTITIONS
        for partition in range(common.PARTITIONS):
            kafka.produce(names["raw"], (common.raw_value(partition, i)
                                         for i in range(per, 2 * per)), partition=partition)
        worker.start()
        assert worker.pid != pid
        worker.wait_running(names["raw"])
        assert common.wait_until(lambda: common.table_rows(
            connection, names["raw"], "raw", 2 * RECORDS) >= 2 * RECORDS, 60), worker.log_tail()
        assert common.verify(connection, names["raw"], "raw", 2 * RECORDS) == {
            "rows": 2 * RECORDS, "duplicates": 0, "gaps": 0, "stale": 0, "wrong": 0}

        # A task that cannot log in fails; its trace is reported without the password.
        password = "Wrong-" + uuid.uuid4().hex
        worker.add_connector(sink(names["bad"], names["typed"], names["bad"], postgres,
                                  **{"connection.password": password}))
        with pytest.raises(ServiceError, match="failed") as failure:
            worker.wait_running(names["bad"], timeout=60)
        assert password not in str(failure.value)
        assert password not in failure.value.log_tail
        assert password not in worker.log_path.read_text(errors="replace")
        # Nor does the REST API, which every local user may ask, show it.
        for path in (f"/connectors/{names['bad']}/config", f"/connectors/{names['bad']}",
                     f"/connectors/{names['raw']}/config"):
            shown = json.dumps(worker._get(path))
            real = common.jdbc_url(postgres.dsn)[1]["password"]
            assert password not in shown and real not in shown, path
    connection.close()
    assert not worker.alive()
