"""A user function (deserializer, messageHandler) failing on an executor reaches the driver as
one KafkaReadError naming topic, partition and offset, with the user's exception type and
message, and without the record's value (real Spark)."""

import json

import pytest

from kafka_direct import KafkaReadError, KafkaUtils, OffsetRange

SECRET = "card=4111-1111-1111-1111"


def failing_handler(record):
    if record.offset == 2:
        raise ValueError("amount missing")
    return record.value


@pytest.mark.parametrize(("arguments", "function", "offset", "kind", "message"), [
    ({"valueDeserializer": json.loads}, "valueDeserializer", 1, "JSONDecodeError",
     "Expecting value"),
    ({"keyDeserializer": lambda b: b.decode("ascii")}, "keyDeserializer", 1,
     "UnicodeDecodeError", "can't decode byte 0xff"),
    ({"messageHandler": failing_handler}, "messageHandler", 2, "ValueError", "amount missing"),
])
def test_a_failing_user_function_is_one_typed_error_naming_the_record(
        kafka, kafka_topic, spark, params, arguments, function, offset, kind, message):
    topic = kafka_topic()
    kafka.produce(topic, [b'{"n": 0}', SECRET.encode(), b'{"n": 2}'], partition=0,
                  keys=[b"k", b"\xff", b"k"])
    rdd = KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 0, 0, 3)], **arguments)
    with pytest.raises(KafkaReadError) as caught:
        rdd.collect()
    error = caught.value
    assert type(error) is KafkaReadError
    assert (error.topic, error.partition, error.offset, error.function, error.errorType) == (
        topic, 0, offset, function, kind)
    assert (error.fromOffset, error.untilOffset) == (0, 3)
    assert message in error.errorMessage and message in str(error)
    assert f"{function} failed on {topic}-0 at offset {offset}" in str(error)
    assert SECRET not in str(error) and "4111" not in error.errorMessage


def _failing_row(record):
    if record.offset == 1:
        raise ValueError("no amount in the record")
    return (record.topic, record.partition, record.offset, record.key, record.value)


@pytest.mark.parametrize("kind", ["transactional", "idempotent"])
def test_a_failing_row_function_of_a_sink_is_a_typed_error_naming_the_record(
        kafka, kafka_topic, spark, params, postgres, pg_schema, kind):
    from kafka_direct import SinkWriteError
    from offsets import PostgresOffsetStore
    from sinks import IdempotentPostgresSink, TransactionalPostgresSink

    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'CREATE TABLE "{pg_schema}".events (topic text, kafka_partition int, '
                       'kafka_offset bigint, key bytea, value bytea, '
                       'PRIMARY KEY (topic, kafka_partition, kafka_offset))')
    connection.close()
    topic = kafka_topic()
    kafka.produce(topic, [b"a", SECRET.encode(), b"c"], partition=0)
    if kind == "transactional":
        sink = TransactionalPostgresSink(postgres.dsn, "events", "job", row=_failing_row,
                                         schema=pg_schema)
    else:
        store = PostgresOffsetStore(postgres.dsn, schema=pg_schema)
        store.ensure_schema()
        sink = IdempotentPostgresSink(postgres.dsn, "events", row=_failing_row,
                                      schema=pg_schema, offsetStore=store, group="job")
    rdd = KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 0, 0, 3)])
    with pytest.raises(SinkWriteError) as caught:
        sink.write(rdd)
    error = caught.value
    assert (error.topic, error.partition, error.offset, error.function, error.errorType) == (
        topic, 0, 1, "row", "ValueError")
    assert f"row function _failing_row failed on {topic}-0 at offset 1" in str(error)
    assert "no amount in the record" in str(error) and SECRET not in str(error)
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'SELECT count(*) FROM "{pg_schema}".events')
        assert cursor.fetchone()[0] == 0  # nothing of the range committed
    connection.close()
