"""Starting streams and batch jobs from offset stores; the group lock; typed database errors."""

import pickle

import pytest

from kafka_direct import (
    ConfigurationError,
    DataLossError,
    GroupBusyError,
    KafkaUtils,
    OffsetRange,
    OffsetStoreError,
    SinkWriteError,
    TopicPartition,
)
from kafka_direct.testing import EmbeddedPostgres
from offsets import (
    CheckpointOffsetStore,
    KafkaOffsetStore,
    PostgresOffsetStore,
    createDirectStreamFromStore,
    offsetRangesFromStore,
)
from sinks import TransactionalPostgresSink
from tests.streaming.helpers import Driver


@pytest.fixture
def store(postgres, pg_schema):
    return PostgresOffsetStore(postgres.dsn, schema=pg_schema)


def test_a_stream_starts_at_stored_offsets_and_seeds_partitions_the_store_lacks(
        spark, kafka, kafka_topic, store):
    topic = kafka_topic(partitions=2)
    for p in range(2):
        kafka.produce(topic, [b"x"] * 5, partition=p)
    store.seed("g", {TopicPartition(topic, 0): 3})
    driver = Driver(spark)
    stream = createDirectStreamFromStore(driver.ssc, store, "g", kafka.params(**{
        "auto.offset.reset": "latest"}), topics=[topic])
    seen = []
    stream.foreachRDD(lambda rdd: seen.append(rdd.offsetRanges()))
    driver.start()
    try:
        # Seeded before the first batch: a crash now restarts partition 1 at 5, not at a
        # later "latest".
        assert store.load("g") == {TopicPartition(topic, 0): 3, TopicPartition(topic, 1): 5}
        kafka.produce(topic, [b"y"] * 2, partition=1)
        driver.run(1)
    finally:
        driver.stop()
    assert seen == [[OffsetRange(topic, 0, 3, 5), OffsetRange(topic, 1, 5, 7)]]
    assert stream.consumerStrategy.usesGroupManagement is False


def test_a_pattern_stream_from_a_checkpoint_store_finds_new_topics(spark, kafka, kafka_topic,
                                                                   tmp_path):
    first = kafka_topic(partitions=1)
    kafka.produce(first, [b"a"] * 2)
    store = CheckpointOffsetStore(tmp_path)
    driver = Driver(spark)
    stream = createDirectStreamFromStore(
        driver.ssc, store, "p", kafka.params(**{"auto.offset.reset": "earliest"}),
        pattern=f"{first}|{first}-more")
    seen = []

    def save(rdd):
        ranges = rdd.offsetRanges()
        seen.extend(r for r in ranges if r.count())
        store.commit("p", ranges)

    stream.foreachRDD(save)
    driver.start()
    try:
        driver.run(1)
        kafka.create_topic(f"{first}-more", 1)
        kafka.produce(f"{first}-more", [b"b"] * 3)
        driver.run(1)
    finally:
        driver.stop()
    assert seen == [OffsetRange(first, 0, 0, 2), OffsetRange(f"{first}-more", 0, 0, 3)]
    assert store.load("p") == {TopicPartition(first, 0): 2,
                               TopicPartition(f"{first}-more", 0): 3}


def test_batch_job_ranges_come_from_the_store_and_move_on_after_a_commit(
        spark, kafka, kafka_topic, postgres, pg_schema, store):
    topic = kafka_topic(partitions=2)
    kafka.produce(topic, [b"v"] * 4, partition=0)
    kafka.produce(topic, [b"v"] * 6, partition=1)
    params = kafka.params(**{"auto.offset.reset": "earliest"})
    ranges = offsetRangesFromStore(store, "batch", params, [topic], maxOffsetsPerPartition=5)
    assert ranges == [OffsetRange(topic, 0, 0, 4), OffsetRange(topic, 1, 0, 5)]
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(f'CREATE TABLE "{pg_schema}".events (topic text, kafka_partition int, '
                       "kafka_offset bigint, key bytea, value bytea)")
    connection.close()
    sink = TransactionalPostgresSink(postgres.dsn, "events", "batch", schema=pg_schema)
    assert sink.write(KafkaUtils.createRDD(spark, params, ranges))["rows"] == 9
    assert offsetRangesFromStore(store, "batch", params, [topic]) == [
        OffsetRange(topic, 0, 4, 4), OffsetRange(topic, 1, 5, 6)]
    with pytest.raises(ConfigurationError, match="auto.offset.reset is none"):
        offsetRangesFromStore(store, "new", kafka.params(**{"auto.offset.reset": "none"}),
                              [topic])


def test_a_second_holder_of_a_group_is_refused_until_the_first_lets_go(store):
    with store.lockGroup("g"):
        with pytest.raises(GroupBusyError, match="'g' is held by another running job") as info, \
                store.lockGroup("g"):
            pass
        assert pickle.loads(pickle.dumps(info.value)).group == "g"
        with store.lockGroup("other"):
            pass
    with store.lockGroup("g"):
        pass


def test_database_failures_are_typed_and_name_no_password(spark, kafka, kafka_topic):
    dsn = "host=127.0.0.1 port=1 user=postgres password=hunter2 dbname=x connect_timeout=2"
    store = PostgresOffsetStore(dsn)
    failed = r"in PostgresOffsetStore\(table=public.kafka_offsets\) failed and changed nothing"
    with pytest.raises(OffsetStoreError, match=failed) as info:
        store.load("g")
    assert "hunter2" not in str(info.value)
    topic = kafka_topic(partitions=1)
    kafka.produce(topic, [b"v"])
    sink = TransactionalPostgresSink(dsn, "events", "g")
    rdd = KafkaUtils.createRDD(spark, kafka.params(), [OffsetRange(topic, 0, 0, 1)])
    with pytest.raises(OffsetStoreError) as info:
        sink.write(rdd)  # preparing the offsets table on the driver fails first
    assert "hunter2" not in str(info.value)
    sink.store._ready = True  # go straight to the writing task (it seeds there)
    with pytest.raises(SinkWriteError) as written:
        sink.write(rdd)
    error = written.value
    assert (error.topic, error.partition, error.fromOffset, error.untilOffset) == (
        topic, 0, 0, 1)
    assert "was rolled back" in str(error) and "hunter2" not in str(error)


def test_partitions_the_store_lacks_start_per_auto_offset_reset_never_at_the_groups_commits(
        spark, kafka, kafka_topic, store):
    topic = kafka_topic(partitions=3)
    for p in range(3):
        kafka.produce(topic, [b"x"] * 5, partition=p)
    group = f"g-{topic}"
    # The Kafka group has commits (an earlier job, another tool); the store decides.
    KafkaOffsetStore(kafka.params()).seed(group, {TopicPartition(topic, p): 3 for p in range(3)})
    store.seed(group, {TopicPartition(topic, 0): 1})
    driver = Driver(spark)
    stream = createDirectStreamFromStore(
        driver.ssc, store, group, kafka.params(**{"auto.offset.reset": "earliest"}),
        topics=[topic], startingOffsets={TopicPartition(topic, 2): 4})
    seen = []
    stream.foreachRDD(lambda rdd: seen.append(rdd.offsetRanges()))
    driver.start()
    try:
        driver.run(1)
    finally:
        driver.stop()
    assert seen == [[OffsetRange(topic, 0, 1, 5), OffsetRange(topic, 1, 0, 5),
                     OffsetRange(topic, 2, 4, 5)]]
    assert store.load(group) == {TopicPartition(topic, 0): 1, TopicPartition(topic, 1): 0,
                                 TopicPartition(topic, 2): 4}


def test_a_partition_added_while_running_starts_per_its_policy_not_the_groups_commit(
        spark, kafka, kafka_topic, store):
    topic = kafka_topic(partitions=1)
    kafka.produce(topic, [b"x"] * 2)
    group = f"g-{topic}"
    driver = Driver(spark)
    stream = createDirectStreamFromStore(
        driver.ssc, store, group, kafka.params(**{"auto.offset.reset": "latest"}),
        topics=[topic])
    seen = []
    stream.foreachRDD(lambda rdd: seen.extend(r for r in rdd.offsetRanges() if r.count()))
    driver.start()
    try:
        kafka.add_partitions(topic, 2)
        kafka.produce(topic, [b"y"] * 4, partition=1)
        KafkaOffsetStore(kafka.params()).seed(group, {TopicPartition(topic, 1): 3})
        driver.run(1)
    finally:
        driver.stop()
    assert seen == [OffsetRange(topic, 1, 0, 4)]  # newPartitionOffsets: earliest


def terminate_lock_sessions(postgres):
    """Cut every session holding a group lock (as an administrator or a proxy would)."""
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_locks "
                       "WHERE locktype = 'advisory' AND classid = %s", (0x6B64,))
        cut = len(cursor.fetchall())
    connection.close()
    return cut


def other_job(store, dsn):
    """The same store as another process would have it (its own connection string)."""
    return PostgresOffsetStore(dsn + " application_name=second-job", schema=store.schema)


T = TopicPartition("events", 0)


def test_a_job_whose_lock_session_was_cut_stops_before_writing_once_another_job_holds_it(
        postgres, store):
    store.seed("g", {T: 0})
    second = other_job(store, postgres.dsn)
    with store.lockGroup("g"):
        store.commit("g", [OffsetRange("events", 0, 0, 2)])
        generation = store.verifyLock("g")
        assert terminate_lock_sessions(postgres) == 1
        with second.lockGroup("g"):  # the lock was free: a second job starts
            with pytest.raises(GroupBusyError, match="held by another running job"):
                store.commit("g", [OffsetRange("events", 0, 2, 4)])
            # Stopped for good: later commits say why without asking the lock again (the
            # second job holding it or, once its session has ended, having held it).
            with pytest.raises(GroupBusyError, match="taken by another job while this job"):
                store.commit("g", [OffsetRange("events", 0, 2, 4)])
            # A write of the first job already past its check cannot commit either.
            with pytest.raises(GroupBusyError, match="taken by another job"), \
                    store.transaction() as cursor:
                store.fence(cursor, "g", generation)
            second.commit("g", [OffsetRange("events", 0, 2, 4)])
        with pytest.raises(GroupBusyError, match="taken by another job while this job"):
            store.commit("g", [OffsetRange("events", 0, 4, 6)])  # and it stays stopped
    assert store.load("g") == {T: 4}


def test_a_lock_cut_while_no_one_else_took_the_group_is_taken_again(postgres, store):
    store.seed("g", {T: 0})
    with store.lockGroup("g"):
        assert terminate_lock_sessions(postgres) == 1
        store.commit("g", [OffsetRange("events", 0, 0, 2)])  # takes the lock again first
        with pytest.raises(GroupBusyError), other_job(store, postgres.dsn).lockGroup("g"):
            pass
    assert store.load("g") == {T: 2}


@pytest.mark.services  # a PostgreSQL server of its own
def test_a_job_holding_its_group_across_postgres_restarts(scratch):
    with EmbeddedPostgres(scratch / "pg") as database:
        store = PostgresOffsetStore(database.dsn)
        second = other_job(store, database.dsn)
        store.seed("g", {T: 0})
        with store.lockGroup("g"):
            database.restart()
            store.commit("g", [OffsetRange("events", 0, 0, 2)])  # its lock taken again
            with pytest.raises(GroupBusyError), second.lockGroup("g"):
                pass  # ... so a second job cannot start
            database.restart()
            with second.lockGroup("g"):  # the second job was faster this time
                with pytest.raises(GroupBusyError):
                    store.commit("g", [OffsetRange("events", 0, 2, 4)])
                second.commit("g", [OffsetRange("events", 0, 2, 4)])
        assert store.load("g") == {T: 4}


@pytest.mark.parametrize("failOnDataLoss", [True, False])
def test_an_offset_stored_past_the_log_end_names_the_store_and_the_group(
        spark, kafka, kafka_topic, store, failOnDataLoss):
    topic = kafka_topic(partitions=1)
    kafka.produce(topic, [b"x"] * 3)
    store.seed("re-created", {TopicPartition(topic, 0): 40})  # from the topic's former life
    conf = {"spark.streaming.kafka.failOnDataLoss": str(failOnDataLoss).lower()}
    driver = Driver(spark, conf=conf)
    stream = createDirectStreamFromStore(driver.ssc, store, "re-created", kafka.params(),
                                         topics=[topic])
    seen = []
    stream.foreachRDD(lambda rdd: seen.extend(r for r in rdd.offsetRanges() if r.count()))
    # Even without failOnDataLoss: the store's offset would make every commit mismatch.
    with pytest.raises(DataLossError) as raised:
        driver.start()
    error = raised.value
    assert (error.topic, error.partition, error.fromOffset) == (topic, 0, 40)
    assert error.store == repr(store) and error.group == "re-created"
    assert repr(store) in str(error) and "'re-created'" in str(error)
    assert "reset the group's offsets in the store" in str(error)
    driver.ssc.stop(stopSparkContext=False)
    assert seen == []
    assert store.load("re-created") == {TopicPartition(topic, 0): 40}  # nothing moved
