"""``spark.read.format("kafka-direct")`` on the real broker and Spark: exact rows."""

import time

import pytest
from confluent_kafka import Producer

from kafka_direct import (
    ConfigurationError,
    DataLossError,
    RecordError,
    UnknownTopicOrPartitionError,
)
from kafka_direct.client.columnar import native_status
from kafka_direct.task_errors import carried_error
from kafka_direct.testing.kafka import ANY_TIMESTAMP

#: The executor reader of the test running (both run every test of this module).
READER = {"name": None}


@pytest.fixture(autouse=True, params=["c", "python"])
def executor_reader(request):
    if request.param == "c" and not native_status()[0]:
        pytest.skip(f"no native reader: {native_status()[1]}")
    READER["name"] = request.param
    yield request.param
    READER["name"] = None


def read(spark_session, kafka, **options):
    reader = spark_session.read.format("kafka-direct").option(
        "kafka.bootstrap.servers", kafka.bootstrap_servers).option("reader", READER["name"])
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def values(df):
    return sorted((r.partition, r.offset, r.value) for r in df.collect())


def produce_numbered(kafka, topic, partitions, per_partition, start=0):
    for p in range(partitions):
        kafka.produce(topic, [f"{p}:{start + i}".encode() for i in range(per_partition)],
                      partition=p)


def test_subscribe_reads_every_record_with_sparks_columns(spark_session, kafka, kafka_topic):
    topic = kafka_topic(partitions=2)
    before = time.time()
    kafka.produce(topic, [b"a", None], keys=[b"k", None], partition=0,
                  headers=[("h", b"1")])
    kafka.produce(topic, [b"c"], partition=1)
    df = read(spark_session, kafka, subscribe=topic, includeHeaders="true")
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                          "timestampType", "headers"]
    rows = sorted(df.collect(), key=lambda r: (r.partition, r.offset))
    assert [(r.key, r.value, r.topic, r.partition, r.offset, r.timestampType)
            for r in rows] == [(b"k", b"a", topic, 0, 0, 0), (None, None, topic, 0, 1, 0),
                               (None, b"c", topic, 1, 0, 0)]
    assert all(before - 5 <= r.timestamp.timestamp() <= time.time() + 5 for r in rows)
    assert [[(h.key, h.value) for h in r.headers] for r in rows[:2]] == [[("h", b"1")]] * 2
    assert rows[2].headers is None  # no header: null, as Spark's source
    assert "headers" not in read(spark_session, kafka, subscribe=topic).columns


def test_pattern_matches_whole_topic_names_and_assign_only_its_partitions(
        spark_session, kafka, kafka_topic):
    prefix = kafka_topic(prefix="pat")  # a name of its own: pat-<hex>-<n>
    base = prefix.rsplit("-", 1)[0]
    one, two = kafka.create_topic(f"{base}-x1", 2), kafka.create_topic(f"{base}-x2", 1)
    longer = kafka.create_topic(f"{base}-x1-archive", 1)
    for topic in (one, two, longer):
        kafka.produce(topic, [topic.encode()], partition=0)
    kafka.produce(one, [b"p1"], partition=1)
    df = read(spark_session, kafka, subscribePattern=rf"{base}-x\d")
    assert sorted((r.topic, r.partition, r.value) for r in df.collect()) == [
        (one, 0, one.encode()), (one, 1, b"p1"), (two, 0, two.encode())]
    assigned = read(spark_session, kafka, assign=f'{{"{one}": [1]}}')
    assert [(r.topic, r.partition, r.value) for r in assigned.collect()] == [(one, 1, b"p1")]


def test_starting_and_ending_offsets(spark_session, kafka, kafka_topic):
    topic = kafka_topic(partitions=2)
    produce_numbered(kafka, topic, 2, 10)
    df = read(spark_session, kafka, subscribe=topic,
              startingOffsets=f'{{"{topic}": {{"0": 3, "1": -2}}}}',
              endingOffsets=f'{{"{topic}": {{"0": 5, "1": -1}}}}')
    assert values(df) == [(0, 3, b"0:3"), (0, 4, b"0:4")] + [
        (1, i, f"1:{i}".encode()) for i in range(10)]
    everything = read(spark_session, kafka, subscribe=topic)  # earliest to latest
    assert len(values(everything)) == 20


def test_a_dataframe_keeps_the_offsets_of_its_first_action(spark_session, kafka,
                                                          kafka_topic):
    # PySpark plans a Python data source once per DataFrame, at its first action; later
    # actions on it (and on DataFrames derived from it) reuse those ranges. Spark's own
    # source resolves earliest / latest again at every action. Documented in
    # docs/structured-source.md: build a new DataFrame to see newer records.
    topic = kafka_topic()
    produce_numbered(kafka, topic, 1, 3)
    df = read(spark_session, kafka, subscribe=topic)  # earliest to latest
    produce_numbered(kafka, topic, 1, 2, start=3)  # before the first action: counted
    assert df.count() == 5
    produce_numbered(kafka, topic, 1, 4, start=5)  # after it: not in this DataFrame
    assert df.count() == 5
    assert [r.offset for r in df.collect()] == list(range(5))
    assert df.filter("offset >= 0").count() == 5
    assert read(spark_session, kafka, subscribe=topic).count() == 9


def test_timestamps_choose_the_first_record_at_or_after_them(spark_session, kafka,
                                                            kafka_topic):
    topic = kafka_topic()
    producer = Producer(kafka.params())
    # Recent times: records older than the topic's retention (7 days) would be deleted.
    base = int(time.time()) * 1000 - 600_000
    for i in range(6):
        producer.produce(topic, value=b"%d" % i, partition=0, timestamp=base + 1000 * i)
    assert producer.flush(30) == 0
    df = read(spark_session, kafka, subscribe=topic, startingTimestamp=base + 2500,
              endingOffsetsByTimestamp=f'{{"{topic}": {{"0": {base + 4000}}}}}')
    assert [(r.offset, r.value) for r in df.collect()] == [(3, b"3")]
    assert {r.timestamp.timestamp() * 1000 for r in df.collect()} == {base + 3000}
    # No record is that recent: an error by default, the end with strategy latest.
    late = read(spark_session, kafka, subscribe=topic, startingTimestamp=base + 60_000)
    with pytest.raises(Exception) as raised:
        late.collect()
    assert isinstance(carried_error(raised.value), ConfigurationError)
    assert "startingOffsetsByTimestampStrategy=latest" in str(raised.value)
    assert read(spark_session, kafka, subscribe=topic, startingTimestamp=base + 60_000,
                startingOffsetsByTimestampStrategy="latest").count() == 0


def test_a_timestamp_in_nanoseconds_is_a_record_error_naming_the_record(
        spark_session, kafka, kafka_topic):
    # Nanoseconds where Kafka wants milliseconds: times 1000 it overflows Spark's
    # microseconds, and used to come back wrapped around, as the year -99483.
    topic = kafka_topic(config=ANY_TIMESTAMP)
    producer = Producer(kafka.params())
    now_ms = int(time.time() * 1000)
    for i in range(4):
        producer.produce(topic, value=b"%d" % i, partition=0,
                         timestamp=time.time_ns() if i == 2 else now_ms)
    assert producer.flush(30) == 0
    with pytest.raises(Exception) as raised:
        read(spark_session, kafka, subscribe=topic).collect()
    error = carried_error(raised.value)
    assert isinstance(error, RecordError), raised.value
    assert (error.topic, error.partition, error.offset) == (topic, 0, 2)
    assert error.timestamp > 10**18 and "nanoseconds" in error.cause
    # The fix the message names: start after the record.
    after = read(spark_session, kafka, subscribe=topic,
                 startingOffsets=f'{{"{topic}": {{"0": 3}}}}')
    assert [(r.offset, int(r.timestamp.timestamp() * 1000)) for r in after.collect()] == [
        (3, now_ms)]


def test_aborted_transactions_and_markers_are_gaps_under_read_committed(
        spark_session, kafka, kafka_topic):
    topic = kafka_topic()
    kafka.produce(topic, [b"plain-0"], partition=0)
    producer = Producer(kafka.params(**{"transactional.id": f"tx-{topic}"}))
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=f"aborted-{i}".encode(), partition=0)
    producer.abort_transaction(30)
    producer.begin_transaction()
    for i in range(2):
        producer.produce(topic, value=f"committed-{i}".encode(), partition=0)
    producer.commit_transaction(30)
    kafka.produce(topic, [b"plain-1"], partition=0)
    kafka.await_stable(topic, [0])  # the markers are written after the commit returns
    (_, high), = kafka.end_offsets(topic, [0]).values()
    expected = [b"plain-0", b"committed-0", b"committed-1", b"plain-1"]
    committed = read(spark_session, kafka, subscribe=topic)
    assert [r.value for r in sorted(committed.collect(), key=lambda r: r.offset)] == expected
    # Markers and aborted records take offsets.
    assert committed.count() == 4 < high, (high, kafka.end_offsets(topic, [0]))
    # An open transaction: read_committed ends at the last stable offset (no wait);
    # kafka.isolation.level reaches the executors' consumers.
    producer.begin_transaction()
    producer.produce(topic, value=b"open", partition=0)
    assert producer.flush(30) == 0
    try:
        assert sorted(r.value for r in read(spark_session, kafka,
                                            subscribe=topic).collect()) == sorted(expected)
        uncommitted = read(spark_session, kafka, subscribe=topic,
                           **{"kafka.isolation.level": "read_uncommitted"})
        assert b"open" in {r.value for r in uncommitted.collect()}
    finally:
        producer.abort_transaction(30)


def test_deleted_records_are_data_loss_or_skipped(spark_session, kafka, kafka_topic):
    topic = kafka_topic()
    produce_numbered(kafka, topic, 1, 10)
    kafka.delete_records(topic, 0, 6)
    from_zero = read(spark_session, kafka, subscribe=topic,
                     startingOffsets=f'{{"{topic}": {{"0": 2}}}}')
    with pytest.raises(Exception) as raised:
        from_zero.collect()
    error = carried_error(raised.value)
    assert isinstance(error, DataLossError)
    assert (error.topic, error.partition, error.fromOffset, error.logStartOffset) == (
        topic, 0, 2, 6)
    lenient = read(spark_session, kafka, subscribe=topic, failOnDataLoss="false",
                   startingOffsets=f'{{"{topic}": {{"0": 2}}}}')
    assert [r.offset for r in lenient.collect()] == [6, 7, 8, 9]


@pytest.mark.parametrize("partitions", [2, 6])
def test_a_topic_deleted_after_planning_fails_typed(spark_session, kafka, kafka_topic,
                                                    partitions):
    # A DataFrame keeps the ranges of its first action: its next action reads a topic
    # deleted since, one range a task (2 partitions) or in a fetch session (6 in 4 tasks).
    topic = kafka_topic(partitions=partitions)
    produce_numbered(kafka, topic, partitions, 5)
    df = read(spark_session, kafka, subscribe=topic, **{"kafkaConsumer.pollTimeoutMs": 60_000})
    assert df.count() == 5 * partitions
    kafka.delete_topic(topic)
    started = time.monotonic()
    with pytest.raises(Exception) as raised:
        df.collect()
    elapsed = time.monotonic() - started
    error = carried_error(raised.value)
    assert isinstance(error, UnknownTopicOrPartitionError), raised.value
    assert error.topic == topic and 0 <= error.partition < partitions
    assert (error.fromOffset, error.untilOffset) == (0, 5)
    assert f"{topic}-{error.partition}" in str(error) and "deleted" in str(error)
    assert elapsed < 30, f"the typed error took {elapsed:.1f} s"


def test_small_ranges_of_many_partitions_are_read_in_few_tasks(spark_session, kafka,
                                                               kafka_topic):
    # Each Python data source task costs Spark about 10 ms before it reads: 24 small
    # ranges are packed into tasks, read in order, as many as the session's default
    # parallelism (4 in the tests), so its cores stay busy; or minPartitions.
    topic = kafka_topic(partitions=24)
    produce_numbered(kafka, topic, 24, 5)
    assert spark_session.sparkContext.defaultParallelism == 4
    packed = read(spark_session, kafka, subscribe=topic)
    assert packed.rdd.getNumPartitions() == 4
    assert read(spark_session, kafka, subscribe=topic,
                minPartitions=2).rdd.getNumPartitions() == 2
    assert read(spark_session, kafka, subscribe=topic,
                minOffsetsPerTask=10).rdd.getNumPartitions() == 12
    one_each = read(spark_session, kafka, subscribe=topic, minOffsetsPerTask=0)
    assert one_each.rdd.getNumPartitions() == 24
    rows = [(r.partition, r.offset, r.value) for r in packed.collect()]
    assert rows == [(r.partition, r.offset, r.value) for r in one_each.collect()]
    assert rows == [(p, i, f"{p}:{i}".encode()) for p in range(24) for i in range(5)]


def test_min_partitions_splits_ranges_into_more_tasks(spark_session, kafka, kafka_topic):
    topic = kafka_topic(partitions=2)
    produce_numbered(kafka, topic, 2, 30)
    df = read(spark_session, kafka, subscribe=topic, minPartitions=6)
    assert df.rdd.getNumPartitions() == 6
    assert values(df) == values(read(spark_session, kafka, subscribe=topic))
    assert len(values(df)) == 60


def test_option_mistakes_fail_at_load_naming_the_option(spark_session, kafka, kafka_topic):
    topic = kafka_topic()
    with pytest.raises(Exception) as raised:
        read(spark_session, kafka, subscribe=topic, assign=f'{{"{topic}": [0]}}')
    assert isinstance(carried_error(raised.value), ConfigurationError)
    assert "only one of the options" in str(raised.value)
    with pytest.raises(Exception) as raised:
        read(spark_session, kafka, subscribe=topic, startingOffsets="latest").collect()
    assert "can't be latest for batch queries" in str(raised.value)
    with pytest.raises(Exception) as raised:
        spark_session.read.format("kafka-direct").schema("value STRING").option(
            "kafka.bootstrap.servers", kafka.bootstrap_servers).option(
            "subscribe", topic).load().collect()
    error = carried_error(raised.value)
    assert isinstance(error, ConfigurationError)
    assert "types column 'value' as string" in str(error) and "cast after load()" in str(error)


def test_a_token_provider_named_in_the_options_authenticates_driver_and_executors(
        spark_session, kafka, kafka_topic, tmp_path):
    # Options are strings: ``kafka.oauth_cb`` names the provider by module path, imported
    # where each client is created (the driver's metadata client, each task's consumer).
    topic = kafka_topic(partitions=2)
    kafka.produce(topic, [b"a", b"b"], partition=0)
    calls = tmp_path / "calls"
    if kafka.sasl_bootstrap_servers is None:
        pytest.skip("this broker has no SASL_PLAINTEXT listener")
    df = read(spark_session, kafka, subscribe=topic,
              **{"kafka.bootstrap.servers": kafka.sasl_bootstrap_servers,
                 "kafka.security.protocol": "SASL_PLAINTEXT",
                 "kafka.sasl.mechanisms": "OAUTHBEARER",
                 "kafka.sasl.oauthbearer.config": str(calls),
                 "kafka.oauth_cb": "tests.client.oauth_tokens:provide"})
    if READER["name"] == "c":  # chosen explicitly: a clear refusal, not a silent switch
        with pytest.raises(Exception, match="the native reader cannot apply oauth_cb"):
            df.collect()
        return
    assert values(df) == [(0, 0, b"a"), (0, 1, b"b")]
    assert len(set(calls.read_text().split())) >= 2  # the driver's and a task's


def test_a_query_reads_only_the_columns_it_names(spark_session, kafka, kafka_topic):
    topic = kafka_topic(partitions=2, config=ANY_TIMESTAMP)
    produce_numbered(kafka, topic, 2, 30)
    producer = Producer(kafka.params())  # a timestamp Spark cannot hold, in a column not read
    producer.produce(topic, value=b"late", partition=1, timestamp=time.time_ns())
    assert producer.flush(30) == 0
    by_option = read(spark_session, kafka, subscribe=topic, columns="value,offset,partition")
    assert by_option.columns == ["value", "offset", "partition"]
    rows = sorted((r.partition, r.offset, r.value) for r in by_option.collect())
    assert rows == sorted([(p, o, f"{p}:{o}".encode()) for p in range(2) for o in range(30)]
                          + [(1, 30, b"late")])
    by_schema = spark_session.read.format("kafka-direct").schema(
        "partition int, value binary").option("reader", READER["name"]).option(
        "kafka.bootstrap.servers", kafka.bootstrap_servers).option("subscribe", topic).load()
    assert by_schema.columns == ["partition", "value"]
    assert sorted(tuple(r) for r in by_schema.collect()) == sorted((p, v) for p, _, v in rows)
    with pytest.raises(Exception) as raised:  # the timestamp column read: the record fails
        read(spark_session, kafka, subscribe=topic, columns="offset,timestamp").collect()
    error = carried_error(raised.value)
    assert isinstance(error, RecordError)
    assert "read without the timestamp column" in str(error)  # the way out just shown


def test_grouped_and_ungrouped_reads_give_the_same_records(spark_session, kafka, kafka_topic):
    # Differential: tasks of many small ranges (one fetch session each) against one task
    # per range, over ranges with transaction markers and aborted records between them.
    topic = kafka_topic(partitions=30)
    producer = Producer(kafka.params(**{"transactional.id": f"tx-{topic}"}))
    producer.init_transactions(30)
    for round_ in range(3):
        producer.begin_transaction()
        for p in range(30):
            for i in range(p % 5 + 1):
                producer.produce(topic, f"{p}:{round_}:{i}".encode(), partition=p,
                                 headers=[("r", bytes([round_]))])
        if round_ == 1:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)

    def rows(**options):
        df = read(spark_session, kafka, subscribe=topic, includeHeaders="true", **options)
        return df.rdd.getNumPartitions(), [
            (r.partition, r.offset, r.value, [(h.key, h.value) for h in r.headers])
            for r in df.collect()]

    tasks, grouped = rows()
    assert tasks == 4  # the session's parallelism
    assert rows(minOffsetsPerTask=0) == (30, grouped)
    assert rows(maxRangesPerTask=4) == (8, grouped)
    assert len(grouped) == 2 * sum(p % 5 + 1 for p in range(30))
