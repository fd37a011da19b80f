"""KafkaRDD / createRDD against the real broker and a real local Spark."""

import json
import time

import pytest
from confluent_kafka import Producer

from kafka_direct import (
    ConfigurationError,
    DataLossError,
    KafkaDirectError,
    KafkaRDD,
    KafkaReadError,
    KafkaUtils,
    LocationStrategies,
    OffsetOutOfRangeError,
    OffsetRange,
    PollTimeoutError,
    RecordError,
    UnknownTopicOrPartitionError,
)
from kafka_direct.client import columnar
from kafka_direct.client.cached_consumers import ConsumerCache, consumer_cache
from kafka_direct.client.columnar import columnar_cache
from kafka_direct.client.params import executor_params
from kafka_direct.rdd.kafka_rdd import ReadSettings
from kafka_direct.rdd.record_reader import count_range, read_range
from kafka_direct.testing.kafka import ANY_TIMESTAMP


def fill(kafka, topic, partitions, per_partition):
    for p in range(partitions):
        kafka.produce(topic, [f"{p}:{i}".encode() for i in range(per_partition)], partition=p)


def test_reads_exact_ranges_of_several_partitions_in_partition_order(kafka, kafka_topic,
                                                                     spark, params):
    topic = kafka_topic(partitions=3)
    fill(kafka, topic, 3, 50)
    ranges = [OffsetRange(topic, 2, 5, 17), OffsetRange(topic, 0, 0, 50),
              OffsetRange(topic, 1, 49, 50), OffsetRange(topic, 1, 10, 10)]
    rdd = KafkaUtils.createRDD(spark, params, ranges)
    assert isinstance(rdd, KafkaRDD)
    assert rdd.offsetRanges() == ranges
    assert rdd.getNumPartitions() == 4
    per_partition = rdd.mapPartitionsWithIndex(
        lambda i, records: [(i, [(r.partition, r.offset, r.value) for r in records])]).collect()
    for index, got in per_partition:
        r = ranges[index]
        assert got == [(r.partition, o, f"{r.partition}:{o}".encode())
                       for o in range(r.fromOffset, r.untilOffset)]
    assert rdd.count() == 12 + 50 + 1
    assert rdd.isEmpty() is False
    assert [r.offset for r in rdd.take(3)] == [5, 6, 7]
    empty = KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 0, 3, 3)])
    assert empty.count() == 0 and empty.isEmpty() and empty.collect() == []
    assert KafkaUtils.createRDD(spark, params, []).collect() == []


def test_keys_headers_timestamps_deserializers_and_message_handler(kafka, kafka_topic, spark,
                                                                   params):
    topic = kafka_topic()
    kafka.produce(topic, [json.dumps({"n": i}).encode() for i in range(3)],
                  keys=[b"k0", None, b"k2"], headers=[("source", b"test")])
    raw = KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 0, 0, 3)]).collect()
    assert [r.key for r in raw] == [b"k0", None, b"k2"]
    assert all(r.headers == (("source", b"test"),) for r in raw)
    assert all(r.timestamp > 1_600_000_000_000 and r.timestampType == 0 for r in raw)
    decoded = KafkaUtils.createRDD(
        spark, params, [OffsetRange(topic, 0, 0, 3)],
        keyDeserializer=lambda b: b.decode(), valueDeserializer=json.loads,
        messageHandler=lambda r: (r.key, r.value["n"], r.offset)).collect()
    assert decoded == [("k0", 0, 0), (None, 1, 1), ("k2", 2, 2)]


def test_transaction_markers_and_aborted_records_are_gaps_not_errors(kafka, kafka_topic,
                                                                     spark, params):
    topic = kafka_topic()
    kafka.produce(topic, [b"plain-0", b"plain-1"])
    producer = Producer(kafka.params(**{"transactional.id": f"tx-{topic}"}))
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=f"aborted-{i}".encode(), partition=0)
    assert producer.flush(30) == 0  # in the log: an abort drops what was not sent yet
    producer.abort_transaction(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=f"committed-{i}".encode(), partition=0)
    producer.commit_transaction(30)
    kafka.produce(topic, [b"plain-2"])
    kafka.await_stable(topic, [0])  # the markers are written after the commit returns
    (_, high), = kafka.end_offsets(topic, [0]).values()
    rdd = KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 0, 0, high)])
    values = [r.value for r in rdd.collect()]
    assert values == [b"plain-0", b"plain-1", b"committed-0", b"committed-1", b"committed-2",
                      b"plain-2"]
    assert rdd.count() == 6 < high  # the markers take offsets but hold no record
    uncommitted = KafkaUtils.createRDD(
        spark, {**params, "isolation.level": "read_uncommitted"}, [OffsetRange(topic, 0, 0, high)])
    assert uncommitted.count() == 9 == len(uncommitted.collect())  # the aborted ones too
    offsets = [r.offset for r in rdd.collect()]
    assert offsets == sorted(offsets) and len(set(offsets)) == 6
    # a range of only the last commit marker: exact, empty, and it ends
    last_committed = offsets[4]
    marker_only = KafkaUtils.createRDD(
        spark, params, [OffsetRange(topic, 0, last_committed + 1, offsets[5])])
    assert marker_only.count() == 0 and marker_only.isEmpty()


def test_deleted_records_raise_typed_data_loss_or_skip_with_fail_on_data_loss_false(
        kafka, kafka_topic, spark, params):
    topic = kafka_topic(partitions=2)
    fill(kafka, topic, 2, 40)
    kafka.delete_records(topic, 1, 25)
    rdd = KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 0, 0, 40),
                                               OffsetRange(topic, 1, 10, 40)])
    with pytest.raises(DataLossError) as info:
        rdd.map(lambda r: r.offset).filter(lambda o: o >= 0).collect()  # derived RDDs too
    error = info.value
    assert (error.topic, error.partition, error.fromOffset, error.untilOffset,
            error.logStartOffset) == (topic, 1, 10, 40, 25)
    lenient = KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 1, 10, 40)],
                                   failOnDataLoss=False)
    assert [r.offset for r in lenient.collect()] == list(range(25, 40))


def test_a_range_beyond_the_log_end_is_a_typed_error(kafka, kafka_topic, spark, params):
    topic = kafka_topic()
    fill(kafka, topic, 1, 10)
    rdd = KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 0, 5, 20)])
    with pytest.raises(OffsetOutOfRangeError) as info:
        rdd.count()
    assert info.value.logEndOffset == 10 and info.value.untilOffset == 20


def test_no_progress_within_the_poll_timeout_is_a_typed_error_naming_the_range(
        own_kafka, spark):
    own_kafka.create_topic("stalled")
    own_kafka.produce("stalled", [b"x"] * 5)
    rdd = KafkaUtils.createRDD(spark, own_kafka.params(), [OffsetRange("stalled", 0, 0, 5)],
                               pollTimeoutMs=1500)
    own_kafka.pause()  # the broker stops answering once the RDD is defined
    try:
        with pytest.raises(PollTimeoutError) as info:
            rdd.collect()
    finally:
        own_kafka.resume()
    error = info.value
    assert (error.topic, error.partition, error.fromOffset, error.untilOffset) == (
        "stalled", 0, 0, 5)
    assert error.timeoutMs == 1500 and "1500 ms" in str(error)
    assert rdd.count() == 5  # the same RDD reads fine once the broker answers again


def test_a_range_of_a_topic_deleted_after_create_rdd_fails_typed_at_once(kafka, kafka_topic,
                                                                         spark, params):
    # createRDD's check sees the topic; it is deleted before the tasks read. The tasks used
    # to wait out the poll timeout and fail with a PollTimeoutError blaming the broker.
    topic = kafka_topic(partitions=2)
    fill(kafka, topic, 2, 10)
    ranges = [OffsetRange(topic, 0, 2, 10), OffsetRange(topic, 1, 0, 5)]
    rdd = KafkaUtils.createRDD(spark, params, ranges, pollTimeoutMs=60_000)
    kafka.delete_topic(topic)
    # collect() reads with the Python reader; count() with the native one where it loads.
    for action in (rdd.collect, rdd.count):
        started = time.monotonic()
        with pytest.raises(UnknownTopicOrPartitionError) as info:
            action()
        elapsed = time.monotonic() - started
        error = info.value
        assert error.topic == topic and error.partition in (0, 1)
        planned = ranges[error.partition]
        assert (error.fromOffset, error.untilOffset) == (planned.fromOffset,
                                                         planned.untilOffset)
        assert "does not exist" in str(error) and "stored position" in str(error)
        # Two attempts of each task (local[2,2]), each failing within seconds.
        assert elapsed < 20, f"{action.__name__} failed after {elapsed:.1f} s"


def test_driver_side_errors_name_the_fault(kafka, kafka_topic, spark, params):
    topic = kafka_topic(partitions=2)
    with pytest.raises(UnknownTopicOrPartitionError, match="does not exist"):
        KafkaUtils.createRDD(spark, params, [OffsetRange("no-such-topic-xyz", 0, 0, 1)])
    with pytest.raises(UnknownTopicOrPartitionError, match="partitions 0..1, not 5") as info:
        KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 5, 0, 1)])
    assert info.value.partition == 5
    with pytest.raises(ConfigurationError, match="PreferFixed"):
        KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 0, 0, 0)],
                             LocationStrategies.PreferBrokers())
    with pytest.raises(ConfigurationError, match="no.such.property"):
        KafkaUtils.createRDD(spark, {**params, "no.such.property": 1},
                             [OffsetRange(topic, 0, 0, 0)])
    with pytest.raises(ConfigurationError, match="OffsetRange"):
        KafkaUtils.createRDD(spark, params, [(topic, 0, 0, 1)])


def test_a_failed_first_attempt_is_retried_and_reads_the_same_records(kafka, kafka_topic,
                                                                       spark, params, tmp_path):
    topic = kafka_topic(partitions=2)
    fill(kafka, topic, 2, 30)
    seen_dir = str(tmp_path)

    def fail_first_attempt(index, records):
        import os

        from pyspark import TaskContext

        attempt = TaskContext.get().attemptNumber()
        offsets = [r.offset for r in records]
        with open(os.path.join(seen_dir, f"{index}-{attempt}"), "w") as f:
            f.write(json.dumps(offsets))
        if attempt == 0:
            raise RuntimeError("first attempt fails on purpose")
        return [(index, offsets)]

    ranges = [OffsetRange(topic, 0, 3, 30), OffsetRange(topic, 1, 0, 17)]
    result = dict(KafkaUtils.createRDD(spark, params, ranges)
                  .mapPartitionsWithIndex(fail_first_attempt).collect())
    for index, r in enumerate(ranges):
        expected = list(range(r.fromOffset, r.untilOffset))
        assert result[index] == expected
        assert json.loads((tmp_path / f"{index}-0").read_text()) == expected
        assert json.loads((tmp_path / f"{index}-1").read_text()) == expected


def test_consecutive_ranges_reuse_one_cached_consumer(kafka, kafka_topic):
    topic = kafka_topic()
    fill(kafka, topic, 1, 100)
    cache = ConsumerCache()
    settings = ReadSettings(params=executor_params(kafka.params(**{"group.id": "reuse"})))
    try:
        first = [r.offset for r in read_range(OffsetRange(topic, 0, 0, 40), settings,
                                              cache=cache)]
        consumer, release = cache.acquire(topic, 0, settings.params)
        release()
        second = [r.offset for r in read_range(OffsetRange(topic, 0, 40, 100), settings,
                                               cache=cache)]
        again, release = cache.acquire(topic, 0, settings.params)
        release()
        assert first + second == list(range(100))
        assert cache.created == 1 and again is consumer
        retried = [r.offset for r in read_range(OffsetRange(topic, 0, 40, 100), settings,
                                                attempt=1, cache=cache)]
        assert retried == second and cache.created == 2
    finally:
        cache.clear()


def test_a_consumer_handed_over_from_range_to_range_never_waits_on_a_long_poll(
        kafka, kafka_topic):
    # Each range ends at its log end, where librdkafka's next fetch is a long poll; while
    # the broker holds it, that connection fetches nothing else. A cache of one consumer
    # reads 20 partitions one after another: with librdkafka's default wait (500 ms) each
    # range waited about half a second for the previous partition's poll (10 s in all).
    topic = kafka_topic(partitions=20)
    fill(kafka, topic, 20, 5)
    cache = ConsumerCache(capacity=1)
    settings = ReadSettings(params=executor_params(kafka.params(**{"group.id": "handover"})))
    try:
        list(read_range(OffsetRange(topic, 0, 0, 5), settings, cache=cache))  # connected
        started = time.monotonic()
        read = [[r.offset for r in read_range(OffsetRange(topic, p, 0, 5), settings,
                                              cache=cache)] for p in range(1, 20)]
        elapsed = time.monotonic() - started
        assert read == [list(range(5))] * 19
        assert cache.created == 1 and cache.handedOver == 19
        assert elapsed < 4.0, f"19 hand-overs took {elapsed:.1f} s"
    finally:
        cache.clear()


def _worker_pid(index, records):
    import os

    return [os.getpid()]  # the records are never started, as the sinks' Arrow path does


def test_a_task_that_never_starts_its_records_leaves_its_worker_reusable(kafka, kafka_topic,
                                                                        spark, params):
    # PySpark reuses a Python worker only when the task read its input to the end; a task
    # over a KafkaRDD that never starts its records (the sinks read the range as Arrow
    # themselves) left its range unread, and every such task started a new worker process.
    topic = kafka_topic(partitions=4)
    fill(kafka, topic, 4, 5)
    ranges = [OffsetRange(topic, p, 0, 5) for p in range(4)]
    pids = set()
    for _ in range(4):
        pids.update(KafkaUtils.createRDD(spark, params, ranges)
                    .mapPartitionsWithIndex(_worker_pid).collect())
    # 16 tasks on 2 cores: at most a few workers, not one per task.
    assert len(pids) <= 4, f"{len(pids)} Python workers for 16 tasks"


def test_to_df_has_the_schema_of_sparks_kafka_source(kafka, kafka_topic, spark, params):
    topic = kafka_topic()
    kafka.produce(topic, [b"a", b"b"], keys=[b"k", None], headers=[("h", b"1")])
    rdd = KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 0, 0, 2)])
    df = rdd.toDF()
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                          "timestampType", "headers"]
    assert df.schema["offset"].dataType.typeName() == "long"
    assert df.schema["timestamp"].dataType.typeName() == "timestamp"
    rows = df.orderBy("offset").collect()
    assert [(bytes(r.value), r.topic, r.partition, r.offset) for r in rows] == [
        (b"a", topic, 0, 0), (b"b", topic, 0, 1)]
    assert rows[0].key == b"k" and rows[1].key is None
    assert rows[0].headers[0].key == "h" and bytes(rows[0].headers[0].value) == b"1"
    with pytest.raises(ConfigurationError, match="raw records"):
        KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 0, 0, 2)],
                             valueDeserializer=bytes.decode).toDF()


def test_to_df_names_a_record_whose_timestamp_python_cannot_hold(kafka, kafka_topic, spark,
                                                                 params):
    import time

    from kafka_direct.task_errors import carried_error

    topic = kafka_topic(config=ANY_TIMESTAMP)
    producer = Producer(kafka.params())
    producer.produce(topic, value=b"ok", partition=0)
    producer.produce(topic, value=b"ns", partition=0, timestamp=time.time_ns())
    assert producer.flush(30) == 0
    df = KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 0, 0, 2)]).toDF()
    with pytest.raises(Exception) as raised:
        df.collect()
    error = carried_error(raised.value)
    assert isinstance(error, RecordError), raised.value
    assert (error.topic, error.partition, error.offset) == (topic, 0, 1)


def _count_or_error(offsetRange, settings, impl):
    try:
        return count_range(offsetRange, settings, impl=impl)
    except KafkaDirectError as error:
        return (type(error).__name__, error.context.get("fromOffset"),
                error.context.get("untilOffset"), error.context.get("logStartOffset"),
                error.context.get("logEndOffset"))


@pytest.mark.skipif(not columnar.native_status()[0], reason="the native reader is not built")
def test_count_gives_what_the_python_reader_yields_on_random_logs_and_ranges(kafka,
                                                                             kafka_topic):
    # count() counts raw records with the native reader: a differential test against the
    # records the Python reader yields, over transactions (committed and aborted), several
    # producers, deleted records, both isolation levels and cached consumers.
    import random

    from tests.client.test_columnar_reader import produce_random_log

    rng = random.Random(7)
    topic = kafka_topic(partitions=2, config=ANY_TIMESTAMP)
    produce_random_log(kafka, topic, 2, rng)
    for partition in range(2):
        kafka.delete_records(topic, partition, rng.randrange(1, 20))
    bounds = kafka.end_offsets(topic, range(2))
    compared = errors = gaps = 0
    try:
        for isolation in ("read_committed", "read_uncommitted"):
            params = executor_params(kafka.params(**{"group.id": "count-diff",
                                                     "isolation.level": isolation}))
            for _ in range(12):
                partition = rng.randrange(2)
                low, high = bounds[partition]
                start = rng.randrange(0, low + 2 if rng.random() < 0.3 else high)
                end = rng.randrange(start + 1, high + 1)
                settings = ReadSettings(params, pollTimeoutMs=20_000,
                                        failOnDataLoss=rng.random() < 0.5)
                for offsetRange in (OffsetRange(topic, partition, start, end),
                                    OffsetRange(topic, partition, end, min(high, end + 37))):
                    python = _count_or_error(offsetRange, settings, "python")
                    native = _count_or_error(offsetRange, settings, "c")
                    assert native == python, (offsetRange, isolation)
                    compared += 1
                    errors += not isinstance(python, int)
                    gaps += isinstance(python, int) and python < offsetRange.count()
    finally:
        consumer_cache.clear()
        columnar_cache.clear()
    assert compared == 48 and gaps > 0 and errors > 0, (compared, gaps, errors)
    # The log holds aborted records: read_uncommitted counts them, read_committed does not.
    whole = [OffsetRange(topic, p, bounds[p][0], bounds[p][1]) for p in range(2)]
    levels = {}
    for isolation in ("read_committed", "read_uncommitted"):
        params = executor_params(kafka.params(**{"group.id": "count-levels",
                                                 "isolation.level": isolation}))
        levels[isolation] = [count_range(r, ReadSettings(params), impl="c") for r in whole]
        assert levels[isolation] == [count_range(r, ReadSettings(params), impl="python")
                                     for r in whole]
    consumer_cache.clear()
    columnar_cache.clear()
    assert sum(levels["read_uncommitted"]) > sum(levels["read_committed"]), levels


@pytest.mark.skipif(not columnar.native_status()[0], reason="the native reader is not built")
def test_count_reads_raw_records_natively_and_others_through_their_functions(
        kafka, kafka_topic, monkeypatch):
    from kafka_direct.rdd import record_reader as module

    topic = kafka_topic()
    fill(kafka, topic, 1, 30)
    params = executor_params(kafka.params(**{"group.id": "count-path"}))
    used = []
    original = module.read_range
    monkeypatch.setattr(module, "read_range",
                        lambda *a, **k: used.append("python") or original(*a, **k))
    try:
        assert module.count_range(OffsetRange(topic, 0, 3, 30), ReadSettings(params)) == 27
        assert used == []  # no Python record was made
        # A deserializer may fail on a record: counting its elements runs it.
        failing = ReadSettings(params, valueDeserializer=lambda b: 1 / 0)
        with pytest.raises(KafkaReadError, match="valueDeserializer"):
            module.count_range(OffsetRange(topic, 0, 0, 30), failing)
        assert used == ["python"]
        assert module.count_range(OffsetRange(topic, 0, 0, 30), ReadSettings(params),
                                  impl="python") == 30
        assert used == ["python", "python"]
    finally:
        consumer_cache.clear()
        columnar_cache.clear()


def test_count_of_a_kafka_rdd_runs_its_deserializers(kafka, kafka_topic, spark, params):
    topic = kafka_topic()
    kafka.produce(topic, [b"1", b"two", b"3"])
    rdd = KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 0, 0, 3)],
                               valueDeserializer=lambda b: int(b))
    with pytest.raises(KafkaReadError) as info:
        rdd.count()
    assert info.value.offset == 1 and info.value.function == "valueDeserializer"
    assert KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 0, 0, 3)]).count() == 3


def _view(df):
    """A DataFrame of records as plain tuples, headers as lists of pairs (timestamps in ms)."""
    rows = df.selectExpr("key", "value", "topic", "partition", "offset",
                         "unix_millis(timestamp) AS millis", "timestampType", "headers").collect()
    return [(None if r.key is None else bytes(r.key), None if r.value is None else bytes(r.value),
             r.topic, r.partition, r.offset, r.millis, r.timestampType,
             None if r.headers is None else [(h.key, None if h.value is None else bytes(h.value))
                                             for h in r.headers]) for r in rows]


def test_to_df_reads_arrow_batches_one_partition_per_range_as_the_records_are(
        kafka, kafka_topic, spark, params):
    import random

    from tests.client.test_columnar_reader import produce_random_log

    topic = kafka_topic(partitions=2, config=ANY_TIMESTAMP)
    produce_random_log(kafka, topic, 2, random.Random(3), rounds=8)
    bounds = kafka.end_offsets(topic, [0, 1])
    ranges = [OffsetRange(topic, 1, 0, bounds[1][1]), OffsetRange(topic, 0, 0, bounds[0][1]),
              OffsetRange(topic, 0, 0, 0)]
    rdd = KafkaUtils.createRDD(spark, params, ranges)
    df = rdd.toDF()
    assert df.rdd.getNumPartitions() == 3
    assert "MapInArrow" in df._jdf.queryExecution().executedPlan().toString()
    expected = [(r.key, r.value, r.topic, r.partition, r.offset,
                 r.timestamp if r.timestamp >= 0 else None, r.timestampType,
                 [tuple(h) for h in r.headers] if r.headers else None)
                for r in rdd.collect()]
    assert expected and _view(df) == expected
    assert KafkaUtils.createRDD(spark, params, []).toDF().count() == 0


def test_to_df_holds_the_timestamps_sparks_source_holds(kafka, kafka_topic, spark, params):
    # Beyond Python's year 9999, within Spark's microseconds: as Spark's own source.
    far = 253_402_300_800_000  # 10000-01-01
    topic = kafka_topic(config=ANY_TIMESTAMP)
    producer = Producer(kafka.params())
    producer.produce(topic, value=b"far", partition=0, timestamp=far)
    assert producer.flush(30) == 0
    df = KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 0, 0, 1)]).toDF()
    assert df.selectExpr("unix_millis(timestamp)").collect()[0][0] == far


@pytest.mark.parametrize("keep", ["cache", "persist", "localCheckpoint", "jvm-persist",
                                  "jvm-localCheckpoint"])
def test_a_kept_kafka_rdd_counts_and_views_what_it_holds(kafka, kafka_topic, spark, params,
                                                         keep):
    # count() and toDF() of an RDD whose records Spark keeps must not read Kafka again:
    # records deleted since are still what its collect() shows.
    from pyspark import StorageLevel

    topic = kafka_topic()
    fill(kafka, topic, 1, 20)
    rdd = KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 0, 0, 20)])
    if keep == "cache":
        rdd.cache()
    elif keep == "persist":
        rdd.persist(StorageLevel.DISK_ONLY)
    elif keep == "localCheckpoint":
        rdd.localCheckpoint()
    elif keep == "jvm-persist":  # through the JVM RDD: PySpark's flags do not know
        rdd._jrdd.cache()
    else:
        rdd._jrdd.rdd().localCheckpoint()
    assert rdd.holdsRecords()
    try:
        assert len(rdd.collect()) == 20
        kafka.delete_records(topic, 0, 15)
        assert rdd.count() == 20
        view = rdd.toDF()
        assert view.count() == 20
        assert not rdd.isEmpty()
        # The rows from kept records are those of the Arrow path: no headers is null.
        assert view.filter("headers IS NOT NULL").count() == 0
        fresh = KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 0, 0, 20)])
        assert not fresh.holdsRecords()
        with pytest.raises(DataLossError):
            fresh.count()
    finally:
        rdd.unpersist()
        rdd._jrdd.unpersist()


def test_to_df_of_a_range_beyond_the_log_end_is_the_rdds_own_error(kafka, kafka_topic, spark,
                                                                    params):
    # As count() and collect() raise it: not the source's DataLossError and its advice.
    from kafka_direct.task_errors import carried_error

    topic = kafka_topic()
    fill(kafka, topic, 1, 10)
    df = KafkaUtils.createRDD(spark, params, [OffsetRange(topic, 0, 5, 20)]).toDF()
    with pytest.raises(Exception) as raised:
        df.collect()
    error = carried_error(raised.value)
    assert isinstance(error, OffsetOutOfRangeError), raised.value
    assert error.logEndOffset == 10 and error.untilOffset == 20
