"""IdempotentPostgresSink: writing twice is harmless; offsets follow the write."""

import pytest

from kafka_direct import ConfigurationError, KafkaUtils, OffsetRange, TopicPartition
from offsets import PostgresOffsetStore
from sinks import IdempotentPostgresSink


@pytest.fixture
def table(postgres, pg_schema):
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'CREATE TABLE "{pg_schema}".latest (k text PRIMARY KEY, v text, '
                       "kafka_offset bigint)")
        cursor.execute(f'CREATE TABLE "{pg_schema}".events (topic text, kafka_partition int, '
                       "kafka_offset bigint, key bytea, value bytea, "
                       "UNIQUE (topic, kafka_partition, kafka_offset))")
    connection.close()
    return pg_schema


def query(postgres, sql):
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(sql)
        found = cursor.fetchall()
    connection.close()
    return found


def test_a_redelivered_batch_adds_nothing_and_offsets_move_after_the_write(
        spark, kafka, kafka_topic, postgres, table):
    topic = kafka_topic(partitions=2)
    kafka.produce(topic, [b"a", b"b"], partition=0)
    kafka.produce(topic, [b"c"], partition=1)
    store = PostgresOffsetStore(postgres.dsn, schema=table)
    sink = IdempotentPostgresSink(postgres.dsn, "events", schema=table, offsetStore=store,
                                  group="idem")
    rdd = KafkaUtils.createRDD(spark, kafka.params(), [OffsetRange(topic, 0, 0, 2),
                                                       OffsetRange(topic, 1, 0, 1)])
    assert sink.write(rdd) == {"rows": 3, "upserted": 3}
    # a crash after the write but before the offsets: the batch comes again
    again = IdempotentPostgresSink(postgres.dsn, "events", schema=table)
    assert again.write(rdd) == {"rows": 3, "upserted": 0}
    assert query(postgres, f'SELECT count(*) FROM "{table}".events') == [(3,)]
    assert store.load("idem") == {TopicPartition(topic, 0): 2, TopicPartition(topic, 1): 1}


def test_on_conflict_update_keeps_the_latest_value_per_key(spark, kafka, kafka_topic,
                                                           postgres, table):
    topic = kafka_topic()
    kafka.produce(topic, [b"1", b"2", b"3"], keys=[b"x", b"y", b"x"])

    def row(record):
        return (record.key.decode(), record.value.decode(), record.offset)

    sink = IdempotentPostgresSink(postgres.dsn, "latest", columns=["k", "v", "kafka_offset"],
                                  row=row, keyColumns=["k"], onConflict="update",
                                  schema=table)
    sink.write(KafkaUtils.createRDD(spark, kafka.params(), [OffsetRange(topic, 0, 0, 2)]))
    sink.write(KafkaUtils.createRDD(spark, kafka.params(), [OffsetRange(topic, 0, 2, 3)]))
    assert query(postgres, f'SELECT k, v, kafka_offset FROM "{table}".latest ORDER BY k') == [
        ("x", "3", 2), ("y", "2", 1)]


def test_bad_configuration_is_refused(postgres):
    with pytest.raises(ConfigurationError, match="onConflict"):
        IdempotentPostgresSink(postgres.dsn, "t", onConflict="replace")
    with pytest.raises(ConfigurationError, match="keyColumns"):
        IdempotentPostgresSink(postgres.dsn, "t", keyColumns=["id"])
    with pytest.raises(ConfigurationError, match="needs the group"):
        IdempotentPostgresSink(postgres.dsn, "t", offsetStore=PostgresOffsetStore(postgres.dsn))
