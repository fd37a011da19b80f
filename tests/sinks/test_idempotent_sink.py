"""IdempotentPostgresSink: writing twice is harmless; offsets follow the write."""

import os
import threading
import time

import pytest

from kafka_direct import (
    ConfigurationError,
    ConsumerStrategies,
    GroupBusyError,
    KafkaUtils,
    LocationStrategies,
    OffsetMismatchError,
    OffsetRange,
    TopicPartition,
)
from offsets import PostgresOffsetStore
from sinks import IdempotentPostgresSink
from tests.streaming.helpers import Driver


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


def test_two_ranges_of_one_partition_seed_the_store_from_the_first(
        spark, kafka, kafka_topic, postgres, table):
    # Seeding from the last range would store 5 for a new partition: [0, 5) then looks
    # applied, its records are skipped, or the chained commit is refused.
    topic = kafka_topic()
    kafka.produce(topic, [b"v%d" % i for i in range(10)])
    store = PostgresOffsetStore(postgres.dsn, schema=table)
    sink = IdempotentPostgresSink(postgres.dsn, "events", schema=table, offsetStore=store,
                                  group="idem")
    rdd = KafkaUtils.createRDD(spark, kafka.params(), [OffsetRange(topic, 0, 0, 5),
                                                       OffsetRange(topic, 0, 5, 10)])
    assert sink.write(rdd) == {"rows": 10, "upserted": 10}
    assert store.load("idem") == {TopicPartition(topic, 0): 10}


def test_a_refused_batch_seeds_nothing(spark, kafka, kafka_topic, postgres, table):
    # A seed left by a refused batch would be where a later start resumes, past records
    # it never wrote.
    topic = kafka_topic(partitions=2)
    kafka.produce(topic, [b"a", b"b"], partition=0)
    kafka.produce(topic, [b"c", b"d"], partition=1)
    store = PostgresOffsetStore(postgres.dsn, schema=table)
    store.seed("idem", {TopicPartition(topic, 0): 1})
    sink = IdempotentPostgresSink(postgres.dsn, "events", schema=table, offsetStore=store,
                                  group="idem")
    rdd = KafkaUtils.createRDD(spark, kafka.params(), [OffsetRange(topic, 0, 0, 2),
                                                       OffsetRange(topic, 1, 1, 2)])
    with pytest.raises(OffsetMismatchError) as info:
        sink.write(rdd)
    assert (info.value.partition, info.value.stored) == (0, 1)
    assert store.load("idem") == {TopicPartition(topic, 0): 1}
    assert query(postgres, f'SELECT count(*) FROM "{table}".events') == [(0,)]


def run_one_batch_with_concurrent_jobs(spark, kafka, topic, makeSink):
    """One batch of 3 records on a stream with concurrentJobs=2; returns the stream's error."""
    kafka.produce(topic, [b"a", b"b", b"c"], keys=[b"x", b"y", b"x"])
    params = kafka.params(**{"group.id": f"cj-{topic}", "auto.offset.reset": "earliest"})
    driver = Driver(spark, conf={"spark.streaming.concurrentJobs": "2"})
    stream = KafkaUtils.createDirectStream(driver.ssc, LocationStrategies.PreferConsistent(),
                                           ConsumerStrategies.Subscribe([topic], params))
    stream.foreachRDD(makeSink(stream))
    driver.start()
    try:
        driver.clock.setTime(1000)
        try:
            driver.ssc.awaitTermination(15)
        except ConfigurationError as error:
            return error, stream
        return None, stream
    finally:
        driver.stop()


@pytest.mark.parametrize("options", ["offsetStore", "update"])
def test_concurrent_jobs_are_refused_when_batch_order_matters_before_writing(
        spark, kafka, kafka_topic, postgres, table, options):
    # With an offset store, seeds, checks and commits must come in batch order; with
    # onConflict="update", a later batch's value must not be overwritten by an earlier one.
    topic = kafka_topic()
    store = PostgresOffsetStore(postgres.dsn, schema=table)

    sinks = []

    def makeSink(stream):
        if options == "offsetStore":
            sinks.append(IdempotentPostgresSink(postgres.dsn, "events", schema=table,
                                                offsetStore=store, group="idem"))
        else:
            sinks.append(latest_sink(postgres, table, stream=stream))
        return sinks[-1]

    error, _ = run_one_batch_with_concurrent_jobs(spark, kafka, topic, makeSink)
    assert error is not None, "the stream ran with concurrentJobs=2"
    # A batch still running when the refusal stopped the stream writes after the context
    # is gone: it is refused all the same.
    with pytest.raises(ConfigurationError, match="concurrentJobs=2"):
        sinks[0].write(KafkaUtils.createRDD(spark, kafka.params(), [OffsetRange(topic, 0, 0, 3)]))
    assert error.setting == "spark.streaming.concurrentJobs" and error.value == 2
    assert "spark.streaming.concurrentJobs=2" in str(error)
    assert query(postgres, f'SELECT count(*) FROM "{table}".events') == [(0,)]
    assert query(postgres, f'SELECT count(*) FROM "{table}".latest') == [(0,)]
    assert store.load("idem") == {}


def test_concurrent_jobs_work_with_do_nothing_and_commit_async(spark, kafka, kafka_topic,
                                                               postgres, table):
    topic = kafka_topic()
    error, _ = run_one_batch_with_concurrent_jobs(
        spark, kafka, topic,
        lambda stream: IdempotentPostgresSink(postgres.dsn, "events", schema=table,
                                              stream=stream))
    assert error is None
    assert query(postgres, f'SELECT count(*) FROM "{table}".events') == [(3,)]


def test_upserts_of_a_job_that_lost_its_group_are_fenced(spark, kafka, kafka_topic,
                                                        postgres, pg_schema, tmp_path):
    # Job A verified its lock and its task is writing when its lock session dies and job B
    # takes the group and writes a newer value: A's upsert must not commit over it.
    started, release = str(tmp_path / "started"), str(tmp_path / "release")

    def row(record):
        import os
        import time

        open(started, "w").close()
        deadline = time.monotonic() + 60
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.02)
        return (record.key, record.value)

    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'CREATE TABLE "{pg_schema}".kv (key bytea PRIMARY KEY, value bytea)')
    connection.close()
    topic = kafka_topic()
    kafka.produce(topic, [b"old", b"new"], keys=[b"K", b"K"])
    store = PostgresOffsetStore(postgres.dsn, schema=pg_schema)
    outcome = {}
    with store.lockGroup("g") as lock:
        sink = IdempotentPostgresSink(postgres.dsn, "kv", columns=("key", "value"), row=row,
                                      keyColumns=("key",), onConflict="update",
                                      schema=pg_schema, offsetStore=store, group="g")
        rdd = KafkaUtils.createRDD(spark, kafka.params(), [OffsetRange(topic, 0, 0, 1)])

        def jobA():
            try:
                outcome["A"] = sink.write(rdd)
            except Exception as error:
                outcome["A"] = error

        thread = threading.Thread(target=jobA)
        thread.start()
        deadline = time.monotonic() + 60
        while not os.path.exists(started):
            assert time.monotonic() < deadline and thread.is_alive()
            time.sleep(0.02)
        b = postgres.connect()
        b.autocommit = True
        with b.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)",
                           (lock._connection.get_backend_pid(),))
            cursor.execute(f'UPDATE "{pg_schema}".kafka_offsets_locks '
                           "SET generation = generation + 1 WHERE group_id = 'g'")
            cursor.execute(f'INSERT INTO "{pg_schema}".kv VALUES (%s, %s)', (b"K", b"new"))
            cursor.execute(f'UPDATE "{pg_schema}".kafka_offsets SET next_offset = 2 '
                           "WHERE group_id = 'g'")
        open(release, "w").close()
        thread.join(60)
        with b.cursor() as cursor:
            cursor.execute(f'SELECT key, value FROM "{pg_schema}".kv')
            found = [(bytes(k), bytes(v)) for k, v in cursor.fetchall()]
        b.close()
    assert found == [(b"K", b"new")], f"the fenced-out job wrote: {outcome.get('A')!r}"
    assert isinstance(outcome["A"], GroupBusyError)
