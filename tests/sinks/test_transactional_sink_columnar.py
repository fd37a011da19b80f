"""The transactional sink's default rows copied from Arrow: the same table as from records.

A KafkaRDD's raw records written with the default row are read as Arrow batches and COPYed
as CSV (no Python object per record); every other write goes through the records. Both
must leave the same rows and offsets, under both readers and both isolation levels.
"""

import random

import pytest

from kafka_direct import KafkaUtils, OffsetOutOfRangeError, OffsetRange, TopicPartition
from kafka_direct.client.columnar import native_status
from kafka_direct.testing.kafka import ANY_TIMESTAMP
from offsets import PostgresOffsetStore
from sinks import TransactionalPostgresSink
from sinks.transactional_postgres_sink import default_row
from tests.client.test_columnar_reader import produce_random_log


def create_table(postgres, schema, name):
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'CREATE TABLE "{schema}"."{name}" (topic text, kafka_partition int, '
                       'kafka_offset bigint, key bytea, value bytea, '
                       'PRIMARY KEY (topic, kafka_partition, kafka_offset))')
    connection.close()


def table_rows(postgres, schema, name):
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'SELECT topic, kafka_partition, kafka_offset, key, value FROM '
                       f'"{schema}"."{name}" ORDER BY 2, 3')
        found = [(t, p, o, None if k is None else bytes(k), None if v is None else bytes(v))
                 for t, p, o, k, v in cursor.fetchall()]
    connection.close()
    return found


def as_records(record):
    """The default row, but a function of its own: the sink writes records."""
    return default_row(record)


# Each reader once, each isolation level once (the readers' own differential test crosses
# them all).
@pytest.mark.parametrize(("impl", "isolation"), [("c", "read_committed"),
                                                 ("python", "read_uncommitted")])
def test_default_rows_from_arrow_equal_the_rows_from_records(spark, kafka, kafka_topic, postgres,
                                                             pg_schema, monkeypatch, impl,
                                                             isolation):
    if impl == "c" and not native_status()[0]:
        pytest.skip(f"no native reader: {native_status()[1]}")
    monkeypatch.setenv("KAFKA_DIRECT_IMPL", impl)
    rng = random.Random(f"{impl}-{isolation}")
    topic = kafka_topic(partitions=2, config=ANY_TIMESTAMP)
    produce_random_log(kafka, topic, 2, rng)  # nulls, empty values, headers, transactions
    ends = kafka.end_offsets(topic, range(2))
    params = kafka.params(**{"isolation.level": isolation})
    for name in ("arrow", "records"):
        create_table(postgres, pg_schema, name)
    arrow = TransactionalPostgresSink(postgres.dsn, "arrow", "arrow", schema=pg_schema)
    records = TransactionalPostgresSink(postgres.dsn, "records", "records", schema=pg_schema,
                                        row=as_records)
    # Two batches per partition: the second continues where the first ended.
    cuts = {p: rng.randrange(1, ends[p][1]) for p in range(2)}
    for batch in ([OffsetRange(topic, p, 0, cuts[p]) for p in range(2)],
                  [OffsetRange(topic, p, cuts[p], ends[p][1]) for p in range(2)]):
        rdd = KafkaUtils.createRDD(spark, params, batch)
        assert arrow._columnar(rdd) is not None and records._columnar(rdd) is None
        assert arrow.write(rdd) == records.write(rdd)
    copied = table_rows(postgres, pg_schema, "arrow")
    assert copied == table_rows(postgres, pg_schema, "records")
    assert any(key is None for _, _, _, key, _ in copied) and len(copied) > 100
    stores = [PostgresOffsetStore(postgres.dsn, schema=pg_schema).load(group)
              for group in ("arrow", "records")]
    assert stores[0] == stores[1] == {TopicPartition(topic, p): ends[p][1] for p in range(2)}


def test_records_are_written_where_arrow_cannot_give_the_rows(spark, kafka, kafka_topic,
                                                               postgres, pg_schema):
    topic = kafka_topic()
    kafka.produce(topic, [b"a", b"b"], partition=0)
    sink = TransactionalPostgresSink(postgres.dsn, "t", "g", schema=pg_schema)
    ranges = [OffsetRange(topic, 0, 0, 2)]
    rdd = KafkaUtils.createRDD(spark, kafka.params(), ranges)
    assert sink._columnar(rdd) is not None
    assert sink._columnar(rdd.map(lambda record: record)) is None  # a derived RDD
    kept = KafkaUtils.createRDD(spark, kafka.params(), ranges)
    kept.cache()
    assert sink._columnar(kept) is None  # Spark's kept records, not Kafka again
    decoded = KafkaUtils.createRDD(spark, kafka.params(), ranges,
                                   valueDeserializer=bytes.decode)
    assert sink._columnar(decoded) is None
    six = TransactionalPostgresSink(postgres.dsn, "t", "g", schema=pg_schema,
                                    columns=("a", "b", "c", "d", "e", "f"))
    assert six._columnar(rdd) is None


def test_a_range_beyond_the_log_writes_nothing_and_keeps_the_offset(spark, kafka, kafka_topic,
                                                                     postgres, pg_schema):
    topic = kafka_topic(partitions=2)
    for p in range(2):
        kafka.produce(topic, [b"%d" % i for i in range(10)], partition=p)
    create_table(postgres, pg_schema, "events")
    sink = TransactionalPostgresSink(postgres.dsn, "events", "beyond", schema=pg_schema)
    rdd = KafkaUtils.createRDD(spark, kafka.params(), [OffsetRange(topic, 0, 0, 10),
                                                        OffsetRange(topic, 1, 0, 15)])
    assert sink._columnar(rdd) is not None
    with pytest.raises(OffsetOutOfRangeError) as raised:
        sink.write(rdd)
    assert (raised.value.topic, raised.value.partition) == (topic, 1)
    # Partition 1's transaction rolled back: no row, no offset; partition 0 committed.
    assert {p for _, p, _, _, _ in table_rows(postgres, pg_schema, "events")} <= {0}
    stored = PostgresOffsetStore(postgres.dsn, schema=pg_schema).load("beyond")
    assert TopicPartition(topic, 1) not in stored or stored[TopicPartition(topic, 1)] == 0


def test_a_statement_timeout_bounds_each_copy_not_the_read_of_the_range(
        spark, kafka, kafka_topic, postgres, pg_schema):
    # Small fetches make the read of the range slow; the record path reads between COPYs
    # of 10,000 rows, and so must the Arrow path, or no batch could ever commit.
    topic = kafka_topic()
    kafka.produce(topic, [b"v%05d" % i for i in range(30_000)], partition=0)
    create_table(postgres, pg_schema, "events")
    sink = TransactionalPostgresSink(postgres.dsn, "events", "timeout", schema=pg_schema,
                                     statementTimeoutMs=400)
    params = kafka.params(**{"max.partition.fetch.bytes": 2048})
    rdd = KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 0, 0, 30_000)])
    assert sink._columnar(rdd) is not None
    assert sink.write(rdd) == {"rows": 30_000, "skipped": 0}
    assert len(table_rows(postgres, pg_schema, "events")) == 30_000
