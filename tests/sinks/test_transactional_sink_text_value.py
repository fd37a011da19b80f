"""A KafkaRDD's bytes into a text column: the Arrow path stores what the records path does."""

from kafka_direct import KafkaUtils, OffsetRange
from sinks import TransactionalPostgresSink
from tests.sinks.test_transactional_sink_columnar import as_records


def test_a_text_value_column_gets_the_same_rows_by_arrow_as_by_records(spark, kafka, kafka_topic,
                                                                      postgres, pg_schema):
    # Bytes go to a bytea column as their own text when printable; into a text column a
    # value's form must not depend on its batch's other values (one non-ASCII value
    # there turned its printable neighbours into hex, while alone they went as text).
    topic = kafka_topic(partitions=1)
    kafka.produce(topic, [b'{"a":1}', b'{"a":2}', b'{"a":3}', '{"a":"\u00e9"}'.encode()],
                  partition=0)
    with postgres.connect() as connection, connection.cursor() as cursor:
        for name in ("arrow", "records"):
            cursor.execute(f'CREATE TABLE "{pg_schema}"."{name}" (topic text, kafka_partition '
                           "int, kafka_offset bigint, key bytea, value text, "
                           "PRIMARY KEY (topic, kafka_partition, kafka_offset))")
    connection.close()
    arrow = TransactionalPostgresSink(postgres.dsn, "arrow", "arrow", schema=pg_schema)
    records = TransactionalPostgresSink(postgres.dsn, "records", "records", schema=pg_schema,
                                        row=as_records)
    params = kafka.params()
    for batch in ([OffsetRange(topic, 0, 0, 2)], [OffsetRange(topic, 0, 2, 4)]):
        rdd = KafkaUtils.createRDD(spark, params, batch)
        assert arrow._columnar(rdd) is not None  # the Arrow path is the one tested
        arrow.write(rdd)
        records.write(rdd)
    got = {}
    with postgres.connect() as connection, connection.cursor() as cursor:
        for name in ("arrow", "records"):
            cursor.execute(f'SELECT kafka_offset, value FROM "{pg_schema}"."{name}" ORDER BY 1')
            got[name] = cursor.fetchall()
    connection.close()
    assert len(got["arrow"]) == 4
    assert got["arrow"] == got["records"]
