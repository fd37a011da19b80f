"""The sinks on a grouped KafkaRDD (several ranges per Spark task): every offset once.

A grouped task writes its ranges' rows and all their offsets in one transaction; a retried
or duplicate attempt finds its ranges taken and writes nothing; the table ends the same as
with one task per range.
"""

import threading

import pytest

from kafka_direct import (
    ConsumerStrategies,
    KafkaUtils,
    LocationStrategies,
    OffsetRange,
    TopicPartition,
)
from offsets import PostgresOffsetStore
from sinks import IdempotentPostgresSink, TransactionalPostgresSink
from sinks.transactional_postgres_sink import default_row
from tests.streaming.helpers import Driver

PARTITIONS = 10
GROUPED = {"minOffsetsPerTask": 1000}


@pytest.fixture
def tables(postgres, pg_schema):
    with postgres.connect() as connection, connection.cursor() as cursor:
        for name in ("plain", "grouped"):
            cursor.execute(f'CREATE TABLE "{pg_schema}".{name} (topic text, kafka_partition '
                           "int, kafka_offset bigint, key bytea, value bytea)")
    connection.close()
    return pg_schema


@pytest.fixture
def topic(kafka, kafka_topic):
    name = kafka_topic(partitions=PARTITIONS)
    for p in range(PARTITIONS):
        kafka.produce(name, [f"{p}-{i}".encode() for i in range(p % 4 + 2)], partition=p)
    return name


def ends(p):
    return p % 4 + 2


def contents(postgres, schema, table):
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'SELECT kafka_partition, kafka_offset, value FROM "{schema}".{table} '
                       "ORDER BY 1, 2")
        found = [(p, o, bytes(v)) for p, o, v in cursor.fetchall()]
    connection.close()
    return found


def every_offset_once(topic):
    return [(p, o, f"{p}-{o}".encode()) for p in range(PARTITIONS) for o in range(ends(p))]


def row(record):  # a row function of its own: the records' path, not the Arrow one
    return default_row(record)


@pytest.mark.parametrize("rows", [default_row, row], ids=["arrow", "records"])
def test_grouped_and_ungrouped_batches_write_the_same_table(spark, kafka, topic, postgres,
                                                            tables, rows):
    ranges = [OffsetRange(topic, p, 0, ends(p)) for p in range(PARTITIONS)]
    plain = KafkaUtils.createRDD(spark, kafka.params(), ranges)
    grouped = KafkaUtils.createRDD(spark, kafka.params(), ranges, **GROUPED)
    assert grouped.isGrouped()
    results = {}
    for table, rdd in (("plain", plain), ("grouped", grouped)):
        sink = TransactionalPostgresSink(postgres.dsn, table, table, row=rows, schema=tables)
        results[table] = sink.write(rdd)
        # A re-run batch (a retried job, a recovered batch): nothing twice.
        assert sink.write(rdd) == {"rows": 0, "skipped": len(ranges)}
    assert results["plain"] == results["grouped"] == {"rows": sum(map(ends, range(PARTITIONS))),
                                                      "skipped": 0}
    assert contents(postgres, tables, "grouped") == contents(postgres, tables, "plain") \
        == every_offset_once(topic)
    store = PostgresOffsetStore(postgres.dsn, schema=tables)
    assert store.load("grouped") == store.load("plain") == {
        TopicPartition(topic, p): ends(p) for p in range(PARTITIONS)}


def test_a_grouped_task_failing_after_part_of_its_rows_leaves_no_duplicate(
        spark, kafka, topic, postgres, tables):
    def dying(record):
        from pyspark import TaskContext

        context = TaskContext.get()
        if context.attemptNumber() == 0 and context.partitionId() == 0 and record.offset == 1:
            raise RuntimeError("the first attempt dies after writing part of its group")
        return default_row(record)

    ranges = [OffsetRange(topic, p, 0, ends(p)) for p in range(PARTITIONS)]
    rdd = KafkaUtils.createRDD(spark, kafka.params(), ranges, **GROUPED)
    assert len(rdd.rangeGroups()[0]) > 1
    sink = TransactionalPostgresSink(postgres.dsn, "grouped", "retry", row=dying, schema=tables)
    assert sink.write(rdd)["rows"] == sum(map(ends, range(PARTITIONS)))
    assert contents(postgres, tables, "grouped") == every_offset_once(topic)


def test_two_attempts_of_every_grouped_task_at_once_write_each_offset_once(
        spark, kafka, topic, postgres, tables):
    # Two jobs of one batch at once: each task's twin (a zombie, a speculative attempt)
    # waits for the other's locks, then finds all its ranges taken and rolls back.
    ranges = [OffsetRange(topic, p, 0, ends(p)) for p in range(PARTITIONS)]
    rdd = KafkaUtils.createRDD(spark, kafka.params(), ranges, **GROUPED)
    sink = TransactionalPostgresSink(postgres.dsn, "grouped", "twins", schema=tables)
    # The store's rows exist first, as after the sink's first batch: the twins race on
    # claiming them, not on creating them.
    PostgresOffsetStore(postgres.dsn, schema=tables).seed(
        "twins", {TopicPartition(topic, p): 0 for p in range(PARTITIONS)})
    outcomes, errors = [], []

    def run():
        try:
            outcomes.append(sink.write(rdd))
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors
    assert sum(o["rows"] for o in outcomes) == sum(map(ends, range(PARTITIONS)))
    assert sum(o["skipped"] for o in outcomes) == len(ranges)
    assert contents(postgres, tables, "grouped") == every_offset_once(topic)


@pytest.mark.parametrize("rows", [default_row, row], ids=["arrow", "records"])
def test_a_batch_grouped_otherwise_than_when_it_first_ran_writes_only_what_is_missing(
        spark, kafka, topic, postgres, tables, rows):
    ranges = [OffsetRange(topic, p, 0, ends(p)) for p in range(PARTITIONS)]
    sink = TransactionalPostgresSink(postgres.dsn, "grouped", "regroup", row=rows,
                                     schema=tables)
    # The batch first ran ungrouped and only some of its tasks committed.
    first = KafkaUtils.createRDD(spark, kafka.params(), ranges[1:3] + ranges[6:7])
    assert sink.write(first)["rows"] == ends(1) + ends(2) + ends(6)
    again = KafkaUtils.createRDD(spark, kafka.params(), ranges, **GROUPED)
    assert sink.write(again) == {"rows": sum(map(ends, range(PARTITIONS))) - ends(1)
                                 - ends(2) - ends(6), "skipped": 3}
    assert contents(postgres, tables, "grouped") == every_offset_once(topic)


def test_the_idempotent_sink_upserts_a_grouped_batch_as_an_ungrouped_one(
        spark, kafka, topic, postgres, pg_schema):
    with postgres.connect() as connection, connection.cursor() as cursor:
        for name in ("plain", "grouped"):
            cursor.execute(f'CREATE TABLE "{pg_schema}".{name} (topic text, kafka_partition '
                           "int, kafka_offset bigint, key bytea, value bytea, "
                           "UNIQUE (topic, kafka_partition, kafka_offset))")
    connection.close()
    ranges = [OffsetRange(topic, p, 0, ends(p)) for p in range(PARTITIONS)]
    store = PostgresOffsetStore(postgres.dsn, schema=pg_schema)
    for name, options in (("plain", {}), ("grouped", GROUPED)):
        rdd = KafkaUtils.createRDD(spark, kafka.params(), ranges, **options)
        sink = IdempotentPostgresSink(postgres.dsn, name, schema=pg_schema, offsetStore=store,
                                      group=name)
        total = sum(map(ends, range(PARTITIONS)))
        assert sink.write(rdd) == {"rows": total, "upserted": total}
        assert sink.write(rdd) == {"rows": total, "upserted": 0}  # redelivered: nothing new
    assert contents(postgres, pg_schema, "grouped") == contents(postgres, pg_schema, "plain") \
        == every_offset_once(topic)
    assert store.load("grouped") == store.load("plain")


def test_a_grouped_direct_stream_resumes_from_the_store_with_every_offset_once(
        spark, kafka, topic, postgres, tables):
    store = PostgresOffsetStore(postgres.dsn, schema=tables)
    group = f"grouped-{topic}"
    params = kafka.params(**{"group.id": group, "auto.offset.reset": "earliest"})
    seen = []

    def run(batches):
        driver = Driver(spark, conf={"spark.streaming.kafka.minOffsetsPerTask": "1000"})
        stream = KafkaUtils.createDirectStream(
            driver.ssc, LocationStrategies.PreferConsistent(),
            ConsumerStrategies.Subscribe([topic], params,
                                         offsets=store.load(group, [topic])))
        sink = TransactionalPostgresSink(postgres.dsn, "grouped", group, schema=tables)

        def write(rdd):
            seen.append((len(rdd.offsetRanges()), rdd.getNumPartitions(), rdd.isGrouped()))
            sink.write(rdd)
            stream.commitAsync(rdd.offsetRanges())

        stream.foreachRDD(write)
        driver.start()
        try:
            driver.run(batches)
        finally:
            driver.stop()

    run(1)
    for p in range(PARTITIONS):
        kafka.produce(topic, [f"{p}-{ends(p) + i}".encode() for i in range(2)], partition=p)
    run(2)
    assert contents(postgres, tables, "grouped") == [
        (p, o, f"{p}-{o}".encode()) for p in range(PARTITIONS) for o in range(ends(p) + 2)]
    assert store.load(group) == {TopicPartition(topic, p): ends(p) + 2
                                 for p in range(PARTITIONS)}
    assert seen[0][2] and seen[0][1] < seen[0][0]  # the first batch ran grouped
