"""One kafka-direct source used twice in a streaming query, linked to an offset store.

What PySpark does (documented in docs/structured-source.md): a union or
self-join of ONE ``load()`` is one source listed once per use in the offset log, planned
once per use with the same offsets; two ``load()`` calls are two sources, and only one of
them can hold an offset store.
"""

import contextlib
import json

from pyspark.errors import StreamingQueryException

from kafka_direct import GroupBusyError
from kafka_direct.sql.link.tables import PLANS_TABLE, STORES_TABLE
from kafka_direct.task_errors import carried_error
from tests.sql.sink.test_sink_stream import execute, rows_of


def linked_source(spark_session, kafka, postgres, topic, schema):
    return (spark_session.readStream.format("kafka-direct")
            .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
            .option("subscribe", topic).option("startingOffsets", "earliest")
            .option("offsetStore.name", "reused").option("offsetStore.dsn", postgres.dsn)
            .option("offsetStore.schema", schema).load()
            .selectExpr("topic", "partition", "offset", "value"))


def start(rows, postgres, schema, checkpoint):
    return (rows.writeStream.format("kafka-direct-postgres").option("dsn", postgres.dsn)
            .option("schema", schema).option("table", "target").option("createTable", "true")
            .option("offsetStore.name", "reused").option("offsetStore.schema", schema)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds").start())


def offset_log(checkpoint, batch):
    # A batch's offset file: a version, the batch's metadata, then one line per source.
    return (checkpoint / "offsets" / str(batch)).read_text().splitlines()[2:]


def test_a_union_of_one_load_is_one_source_planned_once_per_use(
        spark_session, kafka, kafka_topic, postgres, pg_schema, tmp_path):
    topic = kafka_topic()
    kafka.produce(topic, [b"a", b"b", b"c"], partition=0)
    df = linked_source(spark_session, kafka, postgres, topic, pg_schema)
    checkpoint = tmp_path / "checkpoint"
    query = start(df.union(df), postgres, pg_schema, checkpoint)
    try:
        query.processAllAvailable()
        kafka.produce(topic, [b"d", b"e"], partition=0)
        query.processAllAvailable()
        assert len(query.lastProgress["sources"]) == 1
    finally:
        query.stop()
    assert query.exception() is None
    assert [json.loads(line) for line in offset_log(checkpoint, 1)] == [{topic: {"0": 5}}] * 2
    # Each use reads every record (a union of a stream with itself), once.
    rows = [(o, bytes(v)) for o, v in rows_of(postgres, pg_schema, columns='"offset", value')]
    assert rows == [(o, v) for o, v in enumerate([b"a", b"b", b"c", b"d", b"e"])
                    for _ in range(2)]
    # partitions() runs once per use: the same plan twice per batch, and the store keeps
    # its end, as with one use.
    plans = execute(postgres, f'SELECT start_offsets, end_offsets FROM "{pg_schema}".'
                              f'{PLANS_TABLE} ORDER BY 1')
    assert len(plans) == 4 and plans[0] == plans[1] and plans[2] == plans[3]
    stored = execute(postgres, f'SELECT end_offsets FROM "{pg_schema}".{STORES_TABLE}')
    assert stored == [({topic: {"0": 5}},)]


def test_two_loads_linked_to_one_store_fail_with_group_busy(
        spark_session, kafka, kafka_topic, postgres, pg_schema, tmp_path):
    topic = kafka_topic()
    kafka.produce(topic, [b"a"], partition=0)
    first = linked_source(spark_session, kafka, postgres, topic, pg_schema)
    second = linked_source(spark_session, kafka, postgres, topic, pg_schema)
    query = start(first.union(second), postgres, pg_schema, tmp_path / "checkpoint")
    with contextlib.suppress(StreamingQueryException):
        query.awaitTermination(120)
    assert not query.isActive
    error = carried_error(query.exception())
    assert isinstance(error, GroupBusyError), query.exception()
    assert "source of the same query" in str(error)
    # Nothing was written, not even the table.
    assert execute(postgres, "SELECT to_regclass(%s)", f'"{pg_schema}".target') == [(None,)]
