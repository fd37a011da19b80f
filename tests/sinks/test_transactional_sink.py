"""TransactionalPostgresSink on real Kafka, PostgreSQL and Spark: exactly once under retries."""

import threading
import time

import pytest

from kafka_direct import (
    ConfigurationError,
    ConsumerStrategies,
    KafkaUtils,
    LocationStrategies,
    OffsetMismatchError,
    OffsetRange,
    SinkWriteError,
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


def run_two_concurrent_batches(spark, kafka, topic, write, jobs):
    """Batch 1 (offsets 0-2) is slow before it writes: batch 2 (3-4) gets there first."""
    kafka.produce(topic, [b"a"] * 3)
    params = kafka.params(**{"group.id": f"cj-{topic}", "auto.offset.reset": "earliest"})
    driver = Driver(spark, conf={"spark.streaming.concurrentJobs": str(jobs)})
    stream = KafkaUtils.createDirectStream(driver.ssc, LocationStrategies.PreferConsistent(),
                                           ConsumerStrategies.Subscribe([topic], params))

    def slowFirstBatch(rdd):
        if rdd.offsetRanges()[0].fromOffset == 0:
            time.sleep(3)
        write(rdd)

    stream.foreachRDD(slowFirstBatch)
    driver.start()
    try:
        driver.clock.setTime(1000)
        deadline = time.monotonic() + 20
        while (driver.ssc.scheduler.jobGenerator.lastTickTime or 0) < 1000:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        kafka.produce(topic, [b"b"] * 2)
        driver.clock.setTime(2000)
        with pytest.raises(ConfigurationError, match=f"spark.streaming.concurrentJobs={jobs}"
                           ) as info:
            driver.ssc.awaitTermination(60)
        assert info.value.setting == "spark.streaming.concurrentJobs"
    finally:
        driver.stop()


def test_concurrent_jobs_above_one_are_refused_before_anything_is_written(
        spark, kafka, kafka_topic, postgres, table):
    topic = kafka_topic()
    sink = TransactionalPostgresSink(postgres.dsn, "events", f"cj-{topic}", schema=table)
    run_two_concurrent_batches(spark, kafka, topic, sink.write, jobs=2)
    assert rows(postgres, table) == []


def test_per_batch_writes_refuse_concurrent_jobs_too(spark, kafka, kafka_topic, postgres,
                                                      table):
    topic = kafka_topic()
    sink = TransactionalPostgresSink(postgres.dsn, "events", f"cj-{topic}", schema=table)
    write = sink.perBatch(lambda rdd: rdd.map(
        lambda r: (r.topic, r.partition, r.offset, r.key, r.value)))
    run_two_concurrent_batches(spark, kafka, topic, write, jobs=3)
    assert rows(postgres, table) == []


class CommitsThenLosesTheAnswer:
    """A connection whose COMMIT reaches the server but whose answer is lost."""

    def __init__(self, connection):
        self._connection = connection

    def __getattr__(self, name):
        return getattr(self._connection, name)

    def commit(self):
        import psycopg2

        self._connection.commit()
        self._connection.close()
        raise psycopg2.OperationalError("server closed the connection unexpectedly")


def test_a_commit_whose_answer_is_lost_is_outcome_unknown_and_a_retry_writes_nothing_twice(
        spark, kafka, kafka_topic, postgres, table):
    import psycopg2

    topic = kafka_topic()
    kafka.produce(topic, [b"a", b"b"])
    sink = TransactionalPostgresSink(postgres.dsn, "events", "lost", schema=table)
    ranges = [OffsetRange(topic, 0, 0, 2)]
    batch = [(topic, 0, o, None, v) for o, v in ((0, b"a"), (1, b"b"))]
    sink.store.seed("lost", {TopicPartition(topic, 0): 0})
    # The batch's one transaction (which seeds too) loses the answer to its COMMIT.
    connections = iter([CommitsThenLosesTheAnswer(psycopg2.connect(postgres.dsn))])
    sink.store._connect = lambda: next(connections)
    with pytest.raises(SinkWriteError, match="may have committed") as info:
        sink.writeBatch(ranges, batch)
    assert info.value.outcome == "unknown" and "rolled back" not in str(info.value)
    sink.store._connect = None
    assert sink.writeBatch(ranges, batch) == {"rows": 0, "skipped": 1}  # it had committed
    assert rows(postgres, table) == [(0, 0, b"a"), (0, 1, b"b")]


def test_a_backend_terminated_during_commit_is_outcome_unknown_and_a_retry_writes_once(
        postgres, table):
    topic = "events-commit"
    with postgres.connect() as connection, connection.cursor() as cursor:
        # A deferred trigger runs inside COMMIT: it holds the commit open to be cut.
        cursor.execute(f'CREATE FUNCTION "{table}".slow_commit() RETURNS trigger '
                       "LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(30); RETURN NULL; "
                       "END $$")
        cursor.execute(f'CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON "{table}".events '
                       "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "
                       f'"{table}".slow_commit()')
    connection.close()
    sink = TransactionalPostgresSink(postgres.dsn, "events", "cut", schema=table,
                                     statementTimeoutMs=60_000)
    ranges = [OffsetRange(topic, 0, 0, 1)]
    batch = [(topic, 0, 0, None, b"a")]
    outcome = []

    def write():
        try:
            sink.writeBatch(ranges, batch)
            outcome.append("written")
        except SinkWriteError as error:
            outcome.append(error)

    writer = threading.Thread(target=write)
    writer.start()
    deadline = time.monotonic() + 30
    monitor = postgres.connect()
    monitor.autocommit = True  # pg_stat_activity is a snapshot per transaction
    try:
        with monitor.cursor() as cursor:
            while True:
                cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                               "WHERE query = 'COMMIT' AND wait_event = 'PgSleep'")
                if cursor.fetchall():
                    break
                assert time.monotonic() < deadline, f"the COMMIT never started: {outcome}"
                time.sleep(0.05)
            cursor.execute(f'DROP TRIGGER slow ON "{table}".events')
    finally:
        monitor.close()
    writer.join(30)
    error = outcome[0]
    assert isinstance(error, SinkWriteError) and error.outcome == "unknown"
    assert "may have committed" in str(error)
    assert sink.writeBatch(ranges, batch) == {"rows": 1, "skipped": 0}  # it had not
    assert sink.writeBatch(ranges, batch) == {"rows": 0, "skipped": 1}
    assert rows(postgres, table) == [(0, 0, b"a")]


def test_two_ranges_of_one_partition_are_written_in_order_from_the_first(
        spark, kafka, kafka_topic, postgres, table):
    # Seeded from the last range, [0, 5) looked applied and its records were skipped.
    topic = kafka_topic()
    kafka.produce(topic, [b"v%d" % i for i in range(10)])
    sink = TransactionalPostgresSink(postgres.dsn, "events", "two", schema=table)
    rdd = KafkaUtils.createRDD(spark, kafka.params(), [OffsetRange(topic, 0, 5, 10),
                                                       OffsetRange(topic, 0, 0, 5)])
    assert sink.write(rdd) == {"rows": 10, "skipped": 0}
    assert [o for _, o, _ in rows(postgres, table)] == list(range(10))
    store = PostgresOffsetStore(postgres.dsn, schema=table)
    assert store.load("two") == {TopicPartition(topic, 0): 10}
    assert sink.write(rdd) == {"rows": 0, "skipped": 2}  # the batch again: nothing twice


def test_a_refused_batch_seeds_nothing(spark, kafka, kafka_topic, postgres, table):
    # A seed left by a refused batch would be where a later start resumes, past records
    # it never wrote.
    topic = kafka_topic(partitions=2)
    store = PostgresOffsetStore(postgres.dsn, schema=table)
    store.seed("refused", {TopicPartition(topic, 0): 1})
    sink = TransactionalPostgresSink(postgres.dsn, "events", "refused", schema=table)
    with pytest.raises(OffsetMismatchError) as info:
        sink.writeBatch([OffsetRange(topic, 0, 0, 2), OffsetRange(topic, 1, 1, 2)],
                        [(topic, 1, 1, None, b"d")])
    assert (info.value.partition, info.value.stored) == (0, 1)
    assert store.load("refused") == {TopicPartition(topic, 0): 1}
    assert rows(postgres, table) == []


def test_a_range_whose_write_fails_leaves_no_seed(spark, kafka, kafka_topic, postgres, table):
    topic = kafka_topic(partitions=2)
    kafka.produce(topic, [b"a", b"b"], partition=0)
    kafka.produce(topic, [b"c", b"d"], partition=1)

    def row(record):  # partition 0's rows do not fit the table: its COPY fails
        partition = "not a number" if record.partition == 0 else record.partition
        return (record.topic, partition, record.offset, record.key, record.value)

    sink = TransactionalPostgresSink(postgres.dsn, "events", "failed", row=row, schema=table)
    rdd = KafkaUtils.createRDD(spark, kafka.params(), [OffsetRange(topic, 0, 1, 2),
                                                       OffsetRange(topic, 1, 1, 2)])
    with pytest.raises(SinkWriteError):
        sink.write(rdd)
    store = PostgresOffsetStore(postgres.dsn, schema=table)
    assert TopicPartition(topic, 0) not in store.load("failed")


class _TasksHere:
    """A KafkaRDD whose tasks run in this process, one after another (to count their work).

    Only what the sink asks of an RDD: its ranges, read settings and a job over its
    partitions.
    """

    def __init__(self, rdd):
        self.rdd = rdd
        self.context = rdd.context

    def offsetRanges(self):
        return self.rdd.offsetRanges()

    def readSettings(self):
        return self.rdd.readSettings()

    def mapPartitionsWithIndex(self, function):
        from kafka_direct.rdd.record_reader import read_range

        ranges, settings = self.rdd.offsetRanges(), self.rdd.readSettings()

        class Job:
            @staticmethod
            def collect():
                return [out for index in range(len(ranges))
                        for out in function(index, read_range(ranges[index], settings))]

        return Job()


def test_a_batchs_tasks_ask_the_catalog_nothing_the_driver_prepared(spark, kafka, kafka_topic,
                                                                     postgres, table,
                                                                     monkeypatch):
    # The driver prepares the offset store before each batch's job; its tasks asked the
    # catalog again whether the offset tables exist (three round trips a range, every batch).
    import offsets.postgres_offset_store as store_module

    topic = kafka_topic(partitions=4)
    for p in range(4):
        kafka.produce(topic, [b"v"] * 3, partition=p)
    sink = TransactionalPostgresSink(postgres.dsn, "events", "job", schema=table)
    asked = []
    original = store_module.ensure_tables
    monkeypatch.setattr(store_module, "ensure_tables",
                        lambda *args, **kwargs: asked.append(args[1]) or original(*args,
                                                                                  **kwargs))
    first = KafkaUtils.createRDD(spark, kafka.params(), [OffsetRange(topic, p, 0, 2)
                                                         for p in range(4)])
    assert sink.write(_TasksHere(first)) == {"rows": 8, "skipped": 0}
    assert len(asked) == 1  # the driver's first preparation, none in the tasks
    second = KafkaUtils.createRDD(spark, kafka.params(), [OffsetRange(topic, p, 2, 3)
                                                          for p in range(4)])
    assert sink.write(_TasksHere(second)) == {"rows": 4, "skipped": 0}
    assert len(asked) == 1
    assert len(rows(postgres, table)) == 12


def test_a_partition_is_seeded_in_its_tasks_only_until_its_offset_row_exists(
        spark, kafka, kafka_topic, postgres, table, monkeypatch):
    # Each task seeded its partition's offset row (an INSERT ... ON CONFLICT DO NOTHING)
    # in every batch; once a batch of the sink committed the row, it stays.
    topic = kafka_topic(partitions=4)
    for p in range(4):
        kafka.produce(topic, [b"v"] * 3, partition=p)
    sink = TransactionalPostgresSink(postgres.dsn, "events", "job", schema=table)
    seeds = []
    original = PostgresOffsetStore.seed

    def seed(self, group, offsets, cursor=None):
        seeds.append(sorted(offsets))
        return original(self, group, offsets, cursor=cursor)

    monkeypatch.setattr(PostgresOffsetStore, "seed", seed)
    for batch, (start, end) in enumerate([(0, 1), (1, 2), (2, 3)]):
        seeds.clear()
        rdd = KafkaUtils.createRDD(spark, kafka.params(), [OffsetRange(topic, p, start, end)
                                                           for p in range(4)])
        assert sink.write(_TasksHere(rdd)) == {"rows": 4, "skipped": 0}
        assert len(seeds) == (4 if batch == 0 else 0), batch
    assert len(rows(postgres, table)) == 12
    store = PostgresOffsetStore(postgres.dsn, schema=table)
    assert store.load("job") == {TopicPartition(topic, p): 3 for p in range(4)}
