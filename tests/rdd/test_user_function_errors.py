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

    topic = kafka_topic()
    kafka.produce(topic, [b"a", SECRET.encode(), b"c"], partition=0)
    sink = _sink(kind, postgres, pg_schema, _failing_row)
    rdd = KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 0, 0, 3)])
    with pytest.raises(SinkWriteError) as caught:
        sink.write(rdd)
    error = caught.value
    assert (error.topic, error.partition, error.offset, error.function, error.errorType) == (
        topic, 0, 1, "row", "ValueError")
    assert f"row function _failing_row failed on {topic}-0 at offset 1" in str(error)
    assert "no amount in the record" in str(error) and SECRET not in str(error)
    assert _count(postgres, pg_schema) == 0  # nothing of the range committed


def _count(postgres, pg_schema):
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'SELECT count(*) FROM "{pg_schema}".events')
        count = cursor.fetchone()[0]
    connection.close()
    return count


def _keyed_row(record):
    fields = {"topic": record.topic}
    return (fields["topic"], fields["partition"], record.offset, record.key, record.value)


def _short_row(record):
    return (record.topic, record.partition, record.offset)


def _sink(kind, postgres, pg_schema, row):
    from offsets import PostgresOffsetStore
    from sinks import IdempotentPostgresSink, TransactionalPostgresSink

    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'CREATE TABLE "{pg_schema}".events (topic text, kafka_partition int, '
                       'kafka_offset bigint, key bytea, value bytea, '
                       'PRIMARY KEY (topic, kafka_partition, kafka_offset))')
    connection.close()
    if kind == "transactional":
        return TransactionalPostgresSink(postgres.dsn, "events", "job", row=row,
                                         schema=pg_schema)
    store = PostgresOffsetStore(postgres.dsn, schema=pg_schema)
    store.ensure_schema()
    return IdempotentPostgresSink(postgres.dsn, "events", row=row, schema=pg_schema,
                                  offsetStore=store, group="job")


def _failure(kafka, kafka_topic, spark, params, postgres, pg_schema, kind, row, expected):
    """What writing two records with ``row`` raises (``expected``), and the topic."""
    topic = kafka_topic()
    kafka.produce(topic, [b"a", b"b"], partition=0)
    sink = _sink(kind, postgres, pg_schema, row)
    with pytest.raises(expected) as caught:
        sink.write(KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 0, 0, 2)]))
    return caught.value, topic


@pytest.mark.parametrize("kind", ["transactional", "idempotent"])
def test_a_row_functions_key_error_names_the_target_table_and_the_record(
        kafka, kafka_topic, spark, params, postgres, pg_schema, kind):
    from kafka_direct import SinkWriteError

    error, topic = _failure(kafka, kafka_topic, spark, params, postgres, pg_schema, kind,
                            _keyed_row, SinkWriteError)
    assert (error.table, error.topic, error.partition, error.offset, error.errorType) == (
        f"{pg_schema}.events", topic, 0, 0, "KeyError")
    assert f"row function _keyed_row failed on {topic}-0 at offset 0 (range [0, 2)), a row " \
           f"of table {pg_schema}.events: KeyError: 'partition'" in str(error), str(error)


@pytest.mark.parametrize("kind", ["transactional", "idempotent"])
def test_a_row_of_too_few_values_is_a_typed_error_naming_the_function_and_the_columns(
        kafka, kafka_topic, spark, params, postgres, pg_schema, kind):
    from kafka_direct import ConfigurationError

    error, topic = _failure(kafka, kafka_topic, spark, params, postgres, pg_schema, kind,
                            _short_row, ConfigurationError)
    assert (error.table, error.topic, error.partition, error.offset) == (
        f"{pg_schema}.events", topic, 0, 0)
    message = str(error)
    assert "row function _short_row returned 3 values for the 5 columns" in message, message
    assert "['topic', 'kafka_partition', 'kafka_offset', 'key', 'value']" in message, message
    assert _count(postgres, pg_schema) == 0  # nothing of the range committed
