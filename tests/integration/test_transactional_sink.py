"""TransactionalPostgresSink on real Kafka, PostgreSQL and Spark: exactly once under retries."""

import pytest

from kafka_direct import (
    ConsumerStrategies,
    KafkaUtils,
    LocationStrategies,
    OffsetMismatchError,
    OffsetRange,
    TopicPartition,
)
from offsets import PostgresOffsetStore
from sinks import TransactionalPostgresSink
from sinks.postgres_writer import encode_copy_value
from tests.streaming.helpers import Driver


@pytest.fixture
def table(postgres, pg_schema):
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'CREATE TABLE "{pg_schema}".events (topic text, kafka_partition int, '
                       'kafka_offset bigint, key bytea, value bytea, '
                       'PRIMARY KEY (topic, kafka_partition, kafka_offset))')
    connection.close()
    return pg_schema


def rows(postgres, schema):
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'SELECT kafka_partition, kafka_offset, value FROM "{schema}".events '
                       "ORDER BY 1, 2")
        found = [(p, o, bytes(v)) for p, o, v in cursor.fetchall()]
    connection.close()
    return found


def test_a_batch_is_written_once_however_often_it_runs(spark, kafka, kafka_topic, postgres,
                                                       table):
    topic = kafka_topic(partitions=2)
    kafka.produce(topic, [b"a\tb\n\\c", b"plain"], partition=0)
    kafka.produce(topic, [b"x"] * 3, partition=1)
    sink = TransactionalPostgresSink(postgres.dsn, "events", "job", schema=table)
    ranges = [OffsetRange(topic, 0, 0, 2), OffsetRange(topic, 1, 0, 3)]
    rdd = KafkaUtils.createRDD(spark, kafka.params(), ranges)
    assert sink.write(rdd) == {"rows": 5, "skipped": 0}
    assert sink.write(rdd) == {"rows": 0, "skipped": 2}  # a re-run batch: nothing twice
    assert rows(postgres, table) == [(0, 0, b"a\tb\n\\c"), (0, 1, b"plain"),
                                     (1, 0, b"x"), (1, 1, b"x"), (1, 2, b"x")]
    store = PostgresOffsetStore(postgres.dsn, schema=table)
    assert store.load("job") == {TopicPartition(topic, 0): 2, TopicPartition(topic, 1): 3}
    kafka.produce(topic, [b"y"], partition=1)
    overlap = KafkaUtils.createRDD(spark, kafka.params(), [OffsetRange(topic, 1, 3, 4),
                                                            OffsetRange(topic, 0, 0, 1)])
    with pytest.raises(OffsetMismatchError) as info:
        sink.write(overlap)  # partition 0 would be written again from 0
    assert info.value.partition == 0 and info.value.stored == 2
    assert len(rows(postgres, table)) == 5 + 1  # partition 1's valid range went through


def test_a_task_failing_after_writing_part_of_its_rows_leaves_no_duplicate(
        spark, kafka, kafka_topic, postgres, table):
    topic = kafka_topic(partitions=2)
    for p in range(2):
        kafka.produce(topic, [f"{p}-{i}".encode() for i in range(50)], partition=p)

    def row(record):
        from pyspark import TaskContext

        if TaskContext.get().attemptNumber() == 0 and record.offset == 30:
            raise RuntimeError("the first attempt dies after writing part of its rows")
        return (record.topic, record.partition, record.offset, record.key, record.value)

    sink = TransactionalPostgresSink(postgres.dsn, "events", "retry", row=row, schema=table)
    rdd = KafkaUtils.createRDD(spark, kafka.params(), [OffsetRange(topic, p, 0, 50)
                                                       for p in range(2)])
    assert sink.write(rdd)["rows"] == 100
    written = rows(postgres, table)
    assert len(written) == 100 and len(set(written)) == 100


def test_a_stream_resumes_from_the_store_after_a_stop(spark, kafka, kafka_topic, postgres,
                                                      table):
    topic = kafka_topic(partitions=2)
    store = PostgresOffsetStore(postgres.dsn, schema=table)
    params = kafka.params(**{"group.id": f"sink-{topic}", "auto.offset.reset": "earliest"})

    def run(batches):
        driver = Driver(spark)
        stream = KafkaUtils.createDirectStream(
            driver.ssc, LocationStrategies.PreferConsistent(),
            ConsumerStrategies.Subscribe([topic], params,
                                         offsets=store.load(params["group.id"], [topic])))
        stream.foreachRDD(TransactionalPostgresSink(postgres.dsn, "events", params["group.id"],
                                                    schema=table))
        driver.start()
        try:
            driver.run(batches)
        finally:
            driver.stop()

    kafka.produce(topic, [b"first"] * 4, partition=0)
    run(1)
    kafka.produce(topic, [b"second"] * 3, partition=1)
    kafka.produce(topic, [b"second"] * 2, partition=0)
    run(2)
    assert [(p, o) for p, o, _ in rows(postgres, table)] == [
        (0, o) for o in range(6)] + [(1, o) for o in range(3)]
    assert store.load(params["group.id"]) == {TopicPartition(topic, 0): 6,
                                              TopicPartition(topic, 1): 3}


def test_copy_text_format_encoding():
    assert encode_copy_value(None) == "\\N"
    assert encode_copy_value("a\tb\nc\\") == "a\\tb\\nc\\\\"
    assert encode_copy_value(b"\x00\xff") == "\\\\x00ff"
    assert encode_copy_value(True) == "t" and encode_copy_value(7) == "7"


def test_aggregates_are_written_with_all_offsets_in_one_transaction(spark, kafka, kafka_topic,
                                                                    postgres, pg_schema):
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'CREATE TABLE "{pg_schema}".counts (word text, n bigint)')
    connection.close()
    topic = kafka_topic(partitions=2)
    kafka.produce(topic, [b"a", b"b", b"a"], partition=0)
    kafka.produce(topic, [b"a", b"c"], partition=1)
    sink = TransactionalPostgresSink(postgres.dsn, "counts", "agg", columns=["word", "n"],
                                     schema=pg_schema)

    def counts(rdd):
        return rdd.map(lambda r: (r.value.decode(), 1)).reduceByKey(lambda a, b: a + b)

    write = sink.perBatch(counts)
    rdd = KafkaUtils.createRDD(spark, kafka.params(), [OffsetRange(topic, 0, 0, 3),
                                                       OffsetRange(topic, 1, 0, 2)])
    write(rdd)
    write(rdd)  # the batch again (a recovered driver re-running it): counted once
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'SELECT word, n FROM "{pg_schema}".counts ORDER BY word')
        assert cursor.fetchall() == [("a", 3), ("b", 1), ("c", 1)]
    connection.close()
    store = PostgresOffsetStore(postgres.dsn, schema=pg_schema)
    assert store.load("agg") == {TopicPartition(topic, 0): 3, TopicPartition(topic, 1): 2}
    kafka.produce(topic, [b"d"], partition=1)
    partly = KafkaUtils.createRDD(spark, kafka.params(), [OffsetRange(topic, 0, 0, 3),
                                                          OffsetRange(topic, 1, 2, 3)])
    with pytest.raises(OffsetMismatchError, match="applied in part"):
        write(partly)
    assert store.load("agg")[TopicPartition(topic, 1)] == 2  # nothing of it was written
