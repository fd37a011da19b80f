"""IdempotentPostgresSink: writing twice is harmless; offsets follow the write."""

import pytest

from kafka_direct import (
    ConfigurationError,
    KafkaUtils,
    OffsetMismatchError,
    OffsetRange,
    TopicPartition,
)
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


def latest_sink(postgres, schema, **options):
    def row(record):
        return (record.key.decode(), record.value.decode(), record.offset)

    return IdempotentPostgresSink(postgres.dsn, "latest", columns=["k", "v", "kafka_offset"],
                                  row=row, keyColumns=["k"], onConflict="update",
                                  schema=schema, **options)


def test_on_conflict_update_with_a_key_twice_in_one_range_keeps_its_highest_offset(
        spark, kafka, kafka_topic, postgres, table):
    # A changelog topic: the same key several times in one batch must not stall the stream.
    topic = kafka_topic()
    kafka.produce(topic, [b"1", b"2", b"3", b"4"], keys=[b"x", b"y", b"x", b"x"])
    sink = latest_sink(postgres, table)
    rdd = KafkaUtils.createRDD(spark, kafka.params(), [OffsetRange(topic, 0, 0, 4)])
    assert sink.write(rdd) == {"rows": 4, "upserted": 2}
    assert sink.write(rdd)["rows"] == 4  # a redelivery changes nothing
    assert query(postgres, f'SELECT k, v, kafka_offset FROM "{table}".latest ORDER BY k') == [
        ("x", "4", 3), ("y", "2", 1)]


def test_a_key_in_several_partitions_keeps_the_latest_of_each_partitions_own_write(
        spark, kafka, kafka_topic, postgres, table):
    # Kafka orders records within a partition only: per partition the highest offset wins,
    # across partitions the range written last (its transaction committed last) wins.
    topic = kafka_topic(partitions=2)
    kafka.produce(topic, [b"p0-a", b"p0-b"], partition=0, keys=[b"x", b"x"])
    kafka.produce(topic, [b"p1-a", b"p1-b"], partition=1, keys=[b"x", b"x"])
    sink = latest_sink(postgres, table)
    sink.write(KafkaUtils.createRDD(spark, kafka.params(), [OffsetRange(topic, 0, 0, 2),
                                                            OffsetRange(topic, 1, 0, 2)]))
    assert query(postgres, f'SELECT v FROM "{table}".latest')[0][0] in ("p0-b", "p1-b")


@pytest.mark.parametrize("identity", ["bigint GENERATED ALWAYS AS IDENTITY",
                                      "bigint GENERATED BY DEFAULT AS IDENTITY", "bigserial"])
def test_a_table_with_an_identity_key_and_defaults_the_rows_do_not_provide(
        spark, kafka, kafka_topic, postgres, pg_schema, identity):
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'CREATE TABLE "{pg_schema}".events (id {identity} PRIMARY KEY, '
                       "topic text NOT NULL, kafka_partition int NOT NULL, "
                       "kafka_offset bigint NOT NULL, key bytea, value bytea, "
                       "received timestamptz NOT NULL DEFAULT now(), "
                       "UNIQUE (topic, kafka_partition, kafka_offset))")
    connection.close()
    topic = kafka_topic()
    kafka.produce(topic, [b"a", b"b", b"c"])
    sink = IdempotentPostgresSink(postgres.dsn, "events", schema=pg_schema)
    rdd = KafkaUtils.createRDD(spark, kafka.params(), [OffsetRange(topic, 0, 0, 3)])
    assert sink.write(rdd) == {"rows": 3, "upserted": 3}
    assert sink.write(rdd) == {"rows": 3, "upserted": 0}
    assert query(postgres, f'SELECT count(DISTINCT id), count(received) '
                           f'FROM "{pg_schema}".events') == [(3, 3)]


def test_stored_offsets_that_do_not_fit_the_ranges_refuse_the_batch_before_writing(
        spark, kafka, kafka_topic, postgres, table):
    topic = kafka_topic(partitions=2)
    kafka.produce(topic, [b"a", b"b"], partition=0)
    kafka.produce(topic, [b"c"], partition=1)
    store = PostgresOffsetStore(postgres.dsn, schema=table)
    store.seed("idem", {TopicPartition(topic, 0): 0, TopicPartition(topic, 1): 5})
    sink = IdempotentPostgresSink(postgres.dsn, "events", schema=table, offsetStore=store,
                                  group="idem")
    rdd = KafkaUtils.createRDD(spark, kafka.params(), [OffsetRange(topic, 0, 0, 2),
                                                       OffsetRange(topic, 1, 0, 1)])
    with pytest.raises(OffsetMismatchError) as info:
        sink.write(rdd)
    assert (info.value.partition, info.value.stored) == (1, 5)
    assert query(postgres, f'SELECT count(*) FROM "{table}".events') == [(0,)]
    assert store.load("idem") == {TopicPartition(topic, 0): 0, TopicPartition(topic, 1): 5}
