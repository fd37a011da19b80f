#
# Licensed to the Apache Software Foundation (ASF) under one or more
# contributor license agreements.  See the NOTICE file distributed with
# this work for additional information regarding copyright ownership.
# The ASF licenses this file to You under the Apache License, Version 2.0
# (the "License"); you may not use this file except in compliance with
# the License.  You may obtain a copy of the License at
#
#    http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
#
"""Apache Spark's KafkaMicroBatchSourceSuite (connector/kafka-0-10-sql: KafkaSourceSuiteBase,
KafkaMicroBatchSourceSuiteBase and its V1/V2 subclasses) translated to Python and run against
``spark.readStream.format("kafka-direct")`` (and Spark's own ``kafka`` source, the reference run:
docs/testing.md).

Each test names the Scala test it translates. StreamTest's actions map onto
``tests.conformance.kafka_sql_utils.StreamTest``: the memory sink becomes a ``foreachBatch``
that keeps every batch's rows across restarts, ``makeSureGetOffsetCalled`` and CheckAnswer's
wait become ``processAllAvailable``. Spark's StreamManualClock (one batch per clock advance)
has no Python counterpart: tests that used it check the rows of each micro-batch instead, or
what is read after each step ("compositeReadLimit": real time instead of its mocked system
clock). ``failOnDataLoss=false`` variants of the strategy tests run
under ``-m slow`` (they repeat the ``true`` ones), and so do the strategies of each starting
kind beyond one or two (each test restarts its query several times).

Left out (nothing a Python data source can show, or JVM internals):

* "async progress tracking": needs the JVM ``kafka`` sink (and async progress tracking is
  for the JVM sinks).
* "ensure that initial offset are written with an extra byte in the beginning (SPARK-19517)",
  "deserialization of initial offset written by Spark 2.1.0 (SPARK-19517)", "deserialization
  of initial offset written by future version", "default config of includeHeader doesn't
  break existing query from Spark 2.4": the JVM KafkaSource's ``sources/0/0`` file and
  checkpoints written by old Spark versions (resource files of Spark's repository).
* "V1 Source is used when disabled through SQLConf", "V2 Source is used by default": which
  JVM implementation Spark picks; a Python data source has one.
* "test custom metrics - corner cases", "SPARK-57438: metrics should not NPE when
  latestPartitionOffsets is null": unit tests of ``KafkaMicroBatchStream.metrics``. "test
  custom metrics - with rate limit" / "- no rate limit" are skipped below: PySpark's Python
  data source API has no custom metrics.
* "allow group.id prefix", "allow group.id override": Spark runs them only with the
  deprecated consumer-based offset fetching, whose driver consumer joins the group so that
  the group is listed; kafka-direct's driver reads offsets without joining a group, so
  there is no group to list.
* The four WithAdmin/WithConsumer subclasses: the same tests with another JVM offset
  fetcher; kafka-direct has one (librdkafka), so each test runs once.
* KafkaContinuousSourceSuite and the real-time-mode suites: continuous processing and
  real-time mode are not available to Python data sources.
"""

import datetime
import json
import random
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from kafka_direct import ConfigurationError, DataLossError
from kafka_direct.testing.kafka import ANY_TIMESTAMP
from tests.conformance.kafka_sql_utils import (
    REFERENCE,
    StreamTest,
    carried_error,
    delete_topic,
    difference,
    offsets_json,
    ours_only,
    refusal,
    send_at,
    send_messages,
    since_spark,
    source_reader,
    stream,
    values_as_ints,
    values_plus_one,
    wait_until,
)

#: Topic-level "earliest"/"latest" in the offsets' JSON: Spark's since SPARK-58774 (after 4.2).
TOPIC_LEVEL_OFFSETS = since_spark("4.3.0", "SPARK-58774, topic-level earliest/latest offsets")

FAIL_ON_DATA_LOSS = [True, pytest.param(False, marks=pytest.mark.slow)]
STRATEGIES = ["assign", "subscribe", "subscribePattern"]


def strategies(*default):
    """The three strategies; those not in ``default`` run under ``-m slow`` (cost)."""
    return [s if s in default else pytest.param(s, marks=pytest.mark.slow)
            for s in STRATEGIES]

def strategy_options(strategy, kafka_topic, partitions=5):
    """The topic (created) and the options of one subscription strategy."""
    if strategy == "subscribePattern":
        prefix = kafka_topic(prefix="pattern")
        topic = f"{prefix}-suffix"  # only this one matches {prefix}-.*
        return topic, {"subscribePattern": f"{prefix}-.*"}, partitions
    topic = f"{kafka_topic(prefix='unused')}-topic"
    if strategy == "assign":
        return topic, {"assign": json.dumps({topic: list(range(partitions))})}, partitions
    return topic, {"subscribe": topic}, partitions


def add_kafka_data(test, kafka, topic, values):
    """AddKafkaData: no batch running, then the values to the topic's partitions."""
    if test.query is not None and test.query.isActive:
        test.process_all_available()
    send_messages(kafka, topic, values)


def wait_until_offset_appears(kafka, topic, partition, offset):
    consumer = Consumer(kafka.params(**{"group.id": "watermarks",
                                        "isolation.level": "read_uncommitted"}))
    try:
        assert wait_until(lambda: consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=10, cached=False)[1] >= offset, 30)
    finally:
        consumer.close()


# -- KafkaSourceSuiteBase: subscribing from latest / earliest / offsets / timestamps ----------


@pytest.mark.parametrize("fail_on_data_loss", FAIL_ON_DATA_LOSS)
@pytest.mark.parametrize("strategy", strategies("subscribe"))
def test_from_latest_offsets(spark_session, kafka, kafka_topic, tmp_path, strategy,
                             fail_on_data_loss):
    """KafkaSourceSuiteBase: "assign from latest offsets", "subscribing topic by name from
    latest offsets", "subscribing topic by pattern from latest offsets" (failOnDataLoss:
    true / false)."""
    topic, options, partitions = strategy_options(strategy, kafka_topic)
    kafka.create_topic(topic, partitions)
    send_messages(kafka, topic, ["-1"])
    df = stream(spark_session, kafka, startingOffsets="latest",
                failOnDataLoss=str(fail_on_data_loss).lower(), **options)
    test = StreamTest(df, tmp_path / "checkpoint", values_plus_one).start()
    try:
        test.process_all_available()
        add_kafka_data(test, kafka, topic, [1, 2, 3])
        test.check_answer([2, 3, 4])
        test.stop()
        test.start()
        test.check_answer([2, 3, 4])  # Should get the data back on recovery
        test.stop()
        send_messages(kafka, topic, [4, 5, 6])  # Add data when stream is stopped
        test.start()
        test.check_answer(range(2, 8))  # Should get the added data
        add_kafka_data(test, kafka, topic, [7, 8])
        test.check_answer(range(2, 10))
        if strategy != "assign":  # Add partitions
            test.process_all_available()
            kafka.add_partitions(topic, 10)
        add_kafka_data(test, kafka, topic, range(9, 17))
        test.check_answer(range(2, 18))
    finally:
        test.stop()


@pytest.mark.parametrize("fail_on_data_loss", FAIL_ON_DATA_LOSS)
@pytest.mark.parametrize("strategy", strategies("subscribe", "subscribePattern"))
def test_from_earliest_offsets(spark_session, kafka, kafka_topic, tmp_path, strategy,
                               fail_on_data_loss):
    """KafkaSourceSuiteBase: "assign from earliest offsets", "subscribing topic by name from
    earliest offsets", "subscribing topic by pattern from earliest offsets" (failOnDataLoss:
    true / false)."""
    topic, options, partitions = strategy_options(strategy, kafka_topic)
    kafka.create_topic(topic, partitions)
    send_messages(kafka, topic, [1, 2, 3])
    df = stream(spark_session, kafka, startingOffsets="earliest",
                failOnDataLoss=str(fail_on_data_loss).lower(), **options)
    test = StreamTest(df, tmp_path / "checkpoint", values_plus_one).start()
    try:
        add_kafka_data(test, kafka, topic, [4, 5, 6])
        test.check_answer(range(2, 8))
        test.stop()
        test.start()
        test.check_answer(range(2, 8))
        test.stop()
        send_messages(kafka, topic, [7, 8])
        test.start()
        test.check_answer(range(2, 10))
        if strategy != "assign":
            test.process_all_available()
            kafka.add_partitions(topic, 10)
        add_kafka_data(test, kafka, topic, range(9, 17))
        test.check_answer(range(2, 18))
    finally:
        test.stop()


@pytest.mark.parametrize("fail_on_data_loss", FAIL_ON_DATA_LOSS)
@pytest.mark.parametrize("strategy", strategies("subscribe", "assign"))
def test_from_specific_offsets(spark_session, kafka, kafka_topic, tmp_path, strategy,
                               fail_on_data_loss):
    """KafkaSourceSuiteBase: "assign from specific offsets", "subscribing topic by name from
    specific offsets", "subscribing topic by pattern from specific offsets" (failOnDataLoss:
    true / false)."""
    topic, options, partitions = strategy_options(strategy, kafka_topic)
    kafka.create_topic(topic, partitions)
    starting = offsets_json({topic: {0: -2, 1: -1, 2: 0, 3: 1, 4: 2}})
    send_messages(kafka, topic, [-20, -21, -22], partition=0)  # earliest: all seen
    send_messages(kafka, topic, [-10, -11, -12], partition=1)  # latest: all skipped
    send_messages(kafka, topic, [0, 1, 2], partition=2)  # from 0: all seen
    send_messages(kafka, topic, [10, 11, 12], partition=3)  # from 1: first skipped
    send_messages(kafka, topic, [20, 21, 22], partition=4)  # from 2: two skipped
    df = stream(spark_session, kafka, startingOffsets=starting,
                failOnDataLoss=str(fail_on_data_loss).lower(), **options)
    first = [-20, -21, -22, 0, 1, 2, 11, 12, 22]
    test = StreamTest(df, tmp_path / "checkpoint").start()
    try:
        test.check_answer(first)
        test.stop()
        test.start()
        test.check_answer(first)  # Should get the data back on recovery
        add_kafka_data(test, kafka, topic, [30, 31, 32, 33, 34])
        test.check_answer([*first, 30, 31, 32, 33, 34])
    finally:
        test.stop()


def setup_test_messages_for_test_on_timestamp_offsets(kafka, topic, first, second):
    """setupTestMessagesForTestOnTimestampOffsets (no data after second for partition 4)."""
    for part, values in enumerate([[-20], [-10], [0, 1], [10, 11], [20, 21, 22]]):
        send_at(kafka, topic, values, part, first)
    for part, values in enumerate([[-21, -22], [-11, -12], [2], [12]]):
        send_at(kafka, topic, values, part, second)


def timestamps_run(spark_session, kafka, topic, tmp_path, options, first_answer,
                   add_partitions):
    test = StreamTest(stream(spark_session, kafka, **options), tmp_path / "checkpoint")
    test.start()
    try:
        test.check_answer(first_answer)
        test.stop()
        test.start()
        test.check_answer(first_answer)  # Should get the data back on recovery
        test.stop()
        send_messages(kafka, topic, [30, 31, 32])  # Add data when stream is stopped
        test.start()
        test.check_answer([*first_answer, 30, 31, 32])  # Should get the added data
        if add_partitions:
            test.process_all_available()
            kafka.add_partitions(topic, 10)
        add_kafka_data(test, kafka, topic, [40, 41, 42, 43, 44])
        test.check_answer([*first_answer, 30, 31, 32, 40, 41, 42, 43, 44])
    finally:
        test.stop()


@pytest.mark.parametrize("fail_on_data_loss", FAIL_ON_DATA_LOSS)
@pytest.mark.parametrize("strategy", strategies("subscribe"))
def test_from_specific_timestamps(spark_session, kafka, kafka_topic, tmp_path, strategy,
                                  fail_on_data_loss):
    """KafkaSourceSuiteBase: "assign from specific timestamps", "subscribing topic by name
    from specific timestamps", "subscribing topic by pattern from specific timestamps"
    (failOnDataLoss: true / false)."""
    topic, options, partitions = strategy_options(strategy, kafka_topic)
    kafka.create_topic(topic, partitions)
    first = int(time.time() * 1000) - 5000
    second = first + 1000
    setup_test_messages_for_test_on_timestamp_offsets(kafka, topic, first, second)
    # from the second timestamp, except for partition 4: from the first
    starting = offsets_json({topic: {0: second, 1: second, 2: second, 3: second, 4: first}})
    timestamps_run(spark_session, kafka, topic, tmp_path,
                   dict(options, startingOffsetsByTimestamp=starting,
                        failOnDataLoss=str(fail_on_data_loss).lower()),
                   [-21, -22, -11, -12, 2, 12, 20, 21, 22], strategy != "assign")


@pytest.mark.parametrize("fail_on_data_loss", FAIL_ON_DATA_LOSS)
@pytest.mark.parametrize("strategy", strategies("subscribe"))
def test_from_global_timestamp_per_topic(spark_session, kafka, kafka_topic, tmp_path,
                                         strategy, fail_on_data_loss):
    """KafkaSourceSuiteBase: "assign from global timestamp per topic", "subscribing topic by
    name from global timestamp per topic", "subscribing topic by pattern from global timestamp
    per topic" (failOnDataLoss: true / false)."""
    topic, options, partitions = strategy_options(strategy, kafka_topic)
    kafka.create_topic(topic, partitions)
    first = int(time.time() * 1000) - 5000
    second = first + 1000
    setup_test_messages_for_test_on_timestamp_offsets(kafka, topic, first, second)
    send_at(kafka, topic, [23, 24], 4, second)
    timestamps_run(spark_session, kafka, topic, tmp_path,
                   dict(options, startingTimestamp=second,
                        failOnDataLoss=str(fail_on_data_loss).lower()),
                   [-21, -22, -11, -12, 2, 12, 23, 24], strategy != "assign")


@pytest.mark.parametrize("kind", ["specific timestamps", "global timestamp per topic"])
@pytest.mark.parametrize("strategy", ["subscribe", "subscribePattern"])
def test_from_timestamps_with_non_matching_starting_offset(spark_session, kafka, kafka_topic,
                                                           tmp_path, strategy, kind):
    """KafkaSourceSuiteBase: "subscribing topic by name from specific timestamps with
    non-matching starting offset", "... by name from global timestamp per topic with
    non-matching starting offset", "... by pattern from specific timestamps with non-matching
    starting offset", "... by pattern from global timestamp per topic with non-matching
    starting offset"."""
    topic, options, partitions = strategy_options(strategy, kafka_topic)
    kafka.create_topic(topic, partitions)
    first = int(time.time() * 1000) - 5000
    second = first + 1000
    setup_test_messages_for_test_on_timestamp_offsets(kafka, topic, first, second)
    if kind == "global timestamp per topic":
        options["startingTimestamp"] = second
    else:
        options["startingOffsetsByTimestamp"] = offsets_json(
            {topic: dict.fromkeys(range(5), second)})
    for strategy_option in ({}, {"startingoffsetsbytimestampstrategy": "error"}):
        failing = StreamTest(stream(spark_session, kafka, **options, **strategy_option),
                             tmp_path / f"failing-{len(strategy_option)}").start()
        try:
            error = failing.expect_failure()
        finally:
            failing.stop()
        refusal(error, "no offset matched from request of topic-partition", f"{topic}-4")
    test = StreamTest(stream(spark_session, kafka, startingoffsetsbytimestampstrategy="latest",
                             **options), tmp_path / "checkpoint").start()
    try:
        test.check_answer([-21, -22, -11, -12, 2, 12])
        send_at(kafka, topic, [23, 24, 25], 4, second)
        test.check_answer([-21, -22, -11, -12, 2, 12, 23, 24, 25])
    finally:
        test.stop()


@TOPIC_LEVEL_OFFSETS
def test_subscribing_topics_from_topic_level_offsets(spark_session, kafka, kafka_topic,
                                                     tmp_path):
    """KafkaSourceSuiteBase: "subscribing topics from topic-level offsets"."""
    topic1, topic2 = kafka_topic(partitions=3), kafka_topic(partitions=2)
    send_messages(kafka, topic1, [1, 2, 3], partition=0)
    send_messages(kafka, topic2, ["11"], partition=0)
    df = stream(spark_session, kafka, subscribe=f"{topic1},{topic2}",
                startingOffsets=json.dumps({topic1: "earliest", topic2: "latest"}))
    test = StreamTest(df, tmp_path / "checkpoint").start()
    try:
        test.process_all_available()
        send_messages(kafka, topic2, ["12"], partition=0)
        add_kafka_data(test, kafka, topic1, [4])
        test.check_answer([1, 2, 3, 12, 4])
        test.stop()
        test.start()
        test.check_answer([1, 2, 3, 12, 4])
    finally:
        test.stop()


@TOPIC_LEVEL_OFFSETS
def test_topic_level_offsets_tolerate_a_new_topic_matching_subscribe_pattern(
        spark_session, kafka, kafka_topic, tmp_path):
    """KafkaMicroBatchSourceSuiteBase: "topic-level offsets tolerate a new topic matching
    subscribePattern after the start"."""
    prefix = kafka_topic(prefix="pattern")
    topic, topic2 = kafka.create_topic(f"{prefix}-a"), f"{prefix}-b"
    send_messages(kafka, topic, [1], partition=0)
    df = stream(spark_session, kafka, subscribePattern=f"{prefix}-.*",
                startingOffsets=json.dumps({topic: "earliest"}))
    test = StreamTest(df, tmp_path / "checkpoint").start()
    try:
        test.check_answer([1])
        kafka.create_topic(topic2)
        send_messages(kafka, topic2, [2], partition=0)
        assert wait_until(lambda: (test.process_all_available(),
                                   test.answer() == [1, 2])[1], 30)
    finally:
        test.stop()


def test_cannot_stop_kafka_stream(spark_session, kafka, kafka_topic, tmp_path):
    """KafkaSourceSuiteBase: "cannot stop Kafka stream"."""
    topic = kafka_topic(partitions=5)
    send_messages(kafka, topic, range(101, 106))
    df = stream(spark_session, kafka, subscribePattern=f"{topic}.*")
    test = StreamTest(df, tmp_path / "checkpoint", values_plus_one).start()
    test.process_all_available()
    test.stop()
    assert not test.query.isActive and test.query.exception() is None


def bad_source_options(spark_session, *expected, spark=(), **options):
    """``readStream...load()`` of ``options`` is refused: kafka-direct's error holds
    ``expected``; Spark's (the reference) holds ``spark``, the Scala test's message."""
    with pytest.raises(Exception) as raised:
        source_reader(spark_session, streaming=True, **options).load()
    error = refusal(raised.value, *spark)
    if error is None:
        return
    message = str(error).lower()
    for part in expected:
        assert part.lower() in message, message


def test_bad_source_options(spark_session):
    """KafkaSourceSuiteBase: "bad source options" (Spark's messages paraphrased: the asserted
    parts are their substance; the ending offsets: see the two tests below)."""
    servers = {"kafka.bootstrap.servers": "fake:9092"}
    # No strategy specified
    bad_source_options(spark_session, "subscribe", "subscribePattern", "assign",
                       spark=("options must be specified", "subscribe"), **servers)
    # Multiple strategies specified
    bad_source_options(spark_session, "only one", subscribe="t", subscribePattern="t.*",
                       spark=("only one",), **servers)
    bad_source_options(spark_session, "only one", subscribe="t", assign='{"a":[0]}',
                       spark=("only one",), **servers)
    bad_source_options(spark_session, "assign", assign="",
                       spark=("no topicpartitions to assign",), **servers)
    bad_source_options(spark_session, "no topic", subscribe="",
                       spark=("no topics to subscribe to",), **servers)
    bad_source_options(spark_session, "subscribePattern", "empty", subscribePattern="",
                       spark=("pattern to subscribe is empty",), **servers)
    bad_source_options(spark_session, "minOffsetsPerTrigger", "(20)", "maxOffsetsPerTrigger",
                       "(15)", subscribe="t", minOffsetsPerTrigger="20",
                       maxOffsetsPerTrigger="15", spark=("(20)", "(15)"), **servers)


ENDINGS = [("endingOffsets", "latest"), ("endingOffsetsByTimestamp", '{"t": {"0": 1000}}'),
           ("endingTimestamp", "1000")]


@ours_only("Spark refuses them at load() (the xfail below)")
@pytest.mark.parametrize("option,value", ENDINGS)
def test_bad_source_options_ending_offsets_fail_the_stream(spark_session, tmp_path, option,
                                                           value):
    """KafkaSourceSuiteBase: "bad source options" ("Ending offset not valid in streaming
    queries", "Ending timestamp not valid in streaming queries"), when the query starts."""
    df = source_reader(spark_session, streaming=True,
                       **{"kafka.bootstrap.servers": "fake:9092", "subscribe": "t",
                          option: value}).load()
    test = StreamTest(df, tmp_path / "checkpoint").start()
    try:
        error = test.expect_failure(60)
    finally:
        test.stop()
    assert isinstance(carried_error(error), ConfigurationError), error
    assert f"'{option}' is not valid in streaming queries" in str(carried_error(error))


@difference(
    "difference (docs/migration.md): readStream.load() accepts endingOffsets; the error comes when "
    "the query starts. PySpark's DataSource.schema(), all that load() runs, cannot tell a stream "
    "from a batch read")
@pytest.mark.parametrize("option,value", ENDINGS[:2])
def test_bad_source_options_ending_offsets_fail_at_load(spark_session, option, value):
    """KafkaSourceSuiteBase: "bad source options" (Spark: IllegalArgumentException from
    ``readStream...load()``)."""
    bad_source_options(spark_session, "not valid in streaming queries", subscribe="t",
                       spark=("not valid in streaming queries",),
                       **{"kafka.bootstrap.servers": "fake:9092", option: value})


@pytest.mark.parametrize("key,value", [
    ("kafka.auto.offset.reset", "someValue"),
    ("kafka.interceptor.classes", "someValue"),
    ("kafka.key.deserializer", "someValue"),
    ("kafka.value.deserializer", "someValue"),
    ("kafka.auto.offset.reset", "none"),
    ("kafka.auto.offset.reset", "earliest"),
    ("kafka.auto.offset.reset", "latest"),
    pytest.param("kafka.enable.auto.commit", "someValue", marks=difference(
        "difference: kafka-direct does not refuse kafka.enable.auto.commit "
        "(Spark: 'not supported'); it forces it off with a warning (documented in "
        "kafka_direct/sql/source/options.py and docs/migration.md)")),
])
def test_unsupported_kafka_configs(spark_session, key, value):
    """KafkaSourceSuiteBase: "unsupported kafka configs"."""
    reader = source_reader(spark_session, streaming=True, subscribe="topic",
                           **{"kafka.bootstrap.servers": "somehost:9092", key: value})
    with pytest.raises(Exception) as raised:
        reader.load()
    error = refusal(raised.value, "not supported")
    if error is not None:  # kafka-direct's wording
        assert "not supported" in str(error).lower()


def test_get_offsets_from_case_insensitive_parameters(spark_session, kafka, kafka_topic):
    """KafkaSourceSuiteBase: "get offsets from case insensitive parameters" (the option
    values ``earLiEst`` / ``laTest``, observed in a batch read)."""
    topic = kafka_topic()
    send_messages(kafka, topic, [1, 2], partition=0)
    df = source_reader(spark_session, subscribe=topic, STARTINGOFFSETS="earLiEst",
                       endingoffsets="laTest",
                       **{"kafka.bootstrap.servers": kafka.bootstrap_servers}).load()
    assert sorted(values_as_ints(df)) == [1, 2]


@TOPIC_LEVEL_OFFSETS
def test_get_offsets_from_case_insensitive_parameters_topic_level(spark_session, kafka,
                                                                  kafka_topic):
    """KafkaSourceSuiteBase: "get offsets from case insensitive parameters"
    (``{"topic-A":"eArLiEst","topic-B":{"0":23}}``)."""
    a, b = kafka_topic(), kafka_topic()
    send_messages(kafka, a, [1, 2], partition=0)
    send_messages(kafka, b, range(30), partition=0)
    df = source_reader(spark_session, subscribe=f"{a},{b}",
                       startingOffsets=json.dumps({a: "eArLiEst", b: {"0": 23}}),
                       **{"kafka.bootstrap.servers": kafka.bootstrap_servers}).load()
    assert sorted(values_as_ints(df)) == [1, 2, *range(23, 30)]


def test_kafka_column_types(spark_session, kafka, kafka_topic):
    """KafkaSourceSuiteBase: "Kafka column types" (memory sink)."""
    now = time.time()
    topic = kafka_topic()
    kafka.produce(topic, [b"1"], headers=[("a", b"b"), ("c", b"d")])
    df = stream(spark_session, kafka, subscribe=topic, startingOffsets="earliest",
                includeHeaders="true")
    query = df.writeStream.format("memory").queryName("kafkaColumnTypes").start()
    try:
        query.processAllAvailable()
        rows = spark_session.table("kafkaColumnTypes").collect()
    finally:
        query.stop()
    assert len(rows) == 1, rows
    row = rows[0]
    assert row.key is None
    assert bytes(row.value) == b"1"
    assert row.topic == topic
    assert row.partition == 0
    assert row.offset == 0
    assert row.timestamp.timestamp() >= now - 1  # the producer's clock; ms precision
    assert row.timestampType == 0
    assert [(h.key, bytes(h.value)) for h in row.headers] == [("a", b"b"), ("c", b"d")]


def test_spark_27494_read_kafka_record_containing_null_key_values(spark_session, kafka,
                                                                   kafka_topic, tmp_path):
    """KafkaMicroBatchSourceSuiteBase: "SPARK-27494: read kafka record containing null
    key/values." (testNullableKeyValue)."""
    topic = kafka_topic()
    df = stream(spark_session, kafka, startingOffsets="earliest", subscribe=topic,
                **{"kafka.isolation.level": "read_committed"}).selectExpr(
        "CAST(key AS STRING)", "CAST(value AS STRING)")
    test = StreamTest(df, tmp_path / "checkpoint",
                      lambda d: [(r[0], r[1]) for r in d.collect()]).start()
    try:
        test.process_all_available()
        producer = Producer(kafka.params(**{"transactional.id": f"tx-{topic}"}))
        producer.init_transactions(30)
        producer.begin_transaction()
        expected = [(None, None)] * 5
        for i in range(1, 6):
            producer.produce(topic, key=str(i).encode(), value=None)
            expected.append((str(i), None))
        for i in range(6, 11):
            producer.produce(topic, key=None, value=str(i).encode())
            expected.append((None, str(i)))
        for _ in range(5):
            producer.produce(topic, key=None, value=None)
        producer.commit_transaction(30)
        key = lambda kv: (kv[0] or "", kv[1] or "")  # noqa: E731
        assert wait_until(lambda: (test.process_all_available(),
                                   len(test.batches.all_rows()) >= 15)[1], 60)
        assert sorted(test.batches.all_rows(), key=key) == sorted(expected, key=key)
    finally:
        test.stop()


# -- KafkaMicroBatchSourceSuiteBase ----------------------------------------------------------


def available_now(df, checkpoint, on_batch=None):
    """A Trigger.AvailableNow query with a foreachBatch that counts batches."""
    seen = []

    def each(batch, batch_id):
        seen.append((batch_id, values_as_ints(batch) if on_batch is None else None))
        if on_batch is not None:
            on_batch(batch, batch_id)

    query = (df.writeStream.foreachBatch(each).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    return query, seen


def test_trigger_available_now(spark_session, kafka, kafka_topic, tmp_path):
    """KafkaMicroBatchSourceSuiteBase: "Trigger.AvailableNow"."""
    topic = kafka_topic(partitions=5)
    kafka.produce(topic, [f"foo-{x}".encode() for x in range(15)], partition=0)
    df = stream(spark_session, kafka, maxOffsetsPerTrigger=5, subscribe=topic,
                startingOffsets="earliest")
    query, seen = available_now(df.selectExpr("CAST(offset AS STRING) AS value"),
                                tmp_path / "checkpoint")
    try:
        assert query.awaitTermination(120)
    finally:
        query.stop()
    assert len(seen) == 3  # 15 / 5


@difference(
    "difference (docs/migration.md): a partition missing from a metadata answer while its topic "
    "exists keeps its position (a transient gap is never taken for data loss); a topic re-created "
    "with fewer partitions between two triggers looks the same, so AvailableNow reads what the "
    "remaining partitions hold, where Spark fails")
def test_trigger_available_now_throws_when_topic_partitions_got_unavailable(
        spark_session, kafka, kafka_topic, tmp_path):
    """KafkaMicroBatchSourceSuiteBase: "Query with Trigger.AvailableNow should throw error when
    topic partitions got unavailable during subsequent batches"."""
    topic = kafka_topic(partitions=5)
    send_messages(kafka, topic, [f"foo-{x}" for x in range(15)], partition=0)
    df = stream(spark_session, kafka, maxOffsetsPerTrigger=5, subscribe=topic,
                startingOffsets="earliest", failOnDataLoss="true")

    def recreate(_batch, _batch_id):
        delete_topic(kafka, topic)
        kafka.create_topic(topic, 3)  # fewer partitions than the planned end
        send_messages(kafka, topic, [f"foo-{x}" for x in range(15)], partition=0)

    query, _ = available_now(df, tmp_path / "checkpoint", recreate)
    with pytest.raises(StreamingQueryException) as raised:
        try:
            query.awaitTermination(300)
        finally:
            query.stop()
    # Spark: "Some of partitions in Kafka topic(s) have been lost during running query with
    # Trigger.AvailableNow."
    assert f"{topic}-3" in str(carried_error(raised.value) or raised.value)


def test_trigger_available_now_throws_when_offsets_in_planned_partitions_got_unavailable(
        spark_session, kafka, kafka_topic, tmp_path):
    """KafkaMicroBatchSourceSuiteBase: "Query with Trigger.AvailableNow should throw error when
    offset(s) in planned topic partitions got unavailable during subsequent batches"."""
    topic = kafka_topic(partitions=5)
    send_messages(kafka, topic, [f"foo-{x}" for x in range(15)], partition=0)
    df = stream(spark_session, kafka, maxOffsetsPerTrigger=5, subscribe=topic,
                startingOffsets="earliest", failOnDataLoss="true")

    def recreate(_batch, _batch_id):
        delete_topic(kafka, topic)
        kafka.create_topic(topic, 5)
        send_messages(kafka, topic, [f"foo-{x}" for x in range(10)], partition=0)

    query, _ = available_now(df, tmp_path / "checkpoint", recreate)
    with pytest.raises(StreamingQueryException):
        try:
            query.awaitTermination(300)
        finally:
            query.stop()


def test_de_serialization_of_initial_offsets(spark_session, kafka, kafka_topic, tmp_path):
    """KafkaMicroBatchSourceSuiteBase: "(de)serialization of initial offsets"."""
    topic = kafka_topic(partitions=5)
    test = StreamTest(stream(spark_session, kafka, subscribe=topic), tmp_path / "checkpoint")
    test.start()
    test.process_all_available()
    test.stop()
    test.start()
    try:
        test.process_all_available()
        assert test.query.exception() is None
    finally:
        test.stop()


def test_spark_26718_rate_limit_set_to_long_max(spark_session, kafka, kafka_topic, tmp_path):
    """KafkaMicroBatchSourceSuiteBase: "SPARK-26718 Rate limit set to Long.Max should not
    overflow integer during end offset calculation"."""
    topic = kafka_topic()
    send_messages(kafka, topic, range(5), partition=0)
    df = stream(spark_session, kafka, startingOffsets=offsets_json({topic: {0: 5}}),
                maxOffsetsPerTrigger=2**63 - 1, subscribe=topic)
    test = StreamTest(df, tmp_path / "checkpoint").start()
    try:
        test.process_all_available()
        add_kafka_data(test, kafka, topic, [30, 31, 32, 33, 34])
        test.check_answer([30, 31, 32, 33, 34])
    finally:
        test.stop()


def batch_sequence(test):
    return [sorted(test.batches.rows[b]) for b in sorted(test.batches.rows)
            if test.batches.rows[b]]


def max_offsets_topic(kafka, kafka_topic):
    topic = kafka_topic(partitions=3)
    send_messages(kafka, topic, range(100, 201), partition=0)
    send_messages(kafka, topic, range(10, 21), partition=1)
    send_messages(kafka, topic, ["1"], partition=2)
    return topic


def test_max_offsets_per_trigger(spark_session, kafka, kafka_topic, tmp_path):
    """KafkaMicroBatchSourceSuiteBase: "maxOffsetsPerTrigger" (each batch at most 10 offsets,
    everything read once across a restart; then Trigger.Once ignores the limit)."""
    topic = max_offsets_topic(kafka, kafka_topic)
    df = stream(spark_session, kafka, maxOffsetsPerTrigger=10, subscribe=topic,
                startingOffsets="earliest")
    test = StreamTest(df, tmp_path / "checkpoint").start()
    try:
        assert test.batches.wait_for(lambda b: len(b.rows) >= 2)
        test.stop()
        test.start()
        test.check_answer([1, *range(10, 21), *range(100, 201)])
    finally:
        test.stop()
    assert all(len(rows) <= 10 for rows in test.batches.rows.values())
    assert len(test.batches.rows) >= 12  # 113 offsets, 10 per batch
    # When Trigger.Once() is used, the read limit should be ignored
    once = StreamTest(df, tmp_path / "once")
    once.start(once=True)
    assert once.query.awaitTermination(120)
    assert [len(r) for r in once.batches.rows.values()] == [113]
    send_messages(kafka, topic, range(1000, 1011))
    once.start(once=True)
    assert once.query.awaitTermination(120)
    assert once.answer() == sorted([1, *range(10, 21), *range(100, 201), *range(1000, 1011)])


@difference(
    "difference (docs/migration.md: maxOffsetsPerTrigger 'is split over partitions by lag (the "
    "direct stream's rule, in exact integers)'): batches take exactly the limit by largest "
    "remainders (9, 1, 0 from lags 101, 11, 1); Spark floors each share and rounds shares below 1 "
    "up (8, 1, 1)")
def test_max_offsets_per_trigger_batches_as_spark(spark_session, kafka, kafka_topic,
                                                  tmp_path):
    """KafkaMicroBatchSourceSuiteBase: "maxOffsetsPerTrigger" (the rows of the first two
    batches, which Spark's manual clock checks one by one)."""
    topic = max_offsets_topic(kafka, kafka_topic)
    df = stream(spark_session, kafka, maxOffsetsPerTrigger=10, subscribe=topic,
                startingOffsets="earliest")
    test = StreamTest(df, tmp_path / "checkpoint").start()
    try:
        assert test.batches.wait_for(lambda b: len(b.rows) >= 2)
    finally:
        test.stop()
    assert batch_sequence(test)[:2] == [
        sorted([1, 10, *range(100, 108)]),  # 1 from smallest, 1 from middle, 8 from biggest
        sorted([11, *range(108, 117)])]  # smallest now empty, 1 more from middle, 9 more


def test_min_offsets_per_trigger(spark_session, kafka, kafka_topic, tmp_path):
    """KafkaMicroBatchSourceSuiteBase: "minOffsetsPerTrigger" (real time instead of the
    manual clock, so maxTriggerDelay 10s instead of 5s: a batch the record count starts must
    come before the delay could have started it, on a loaded machine too)."""
    topic = kafka_topic(partitions=3)
    send_messages(kafka, topic, range(100, 110), partition=0)
    send_messages(kafka, topic, range(10, 15), partition=1)
    send_messages(kafka, topic, ["1"], partition=2)
    df = stream(spark_session, kafka, minOffsetsPerTrigger=15, maxTriggerDelay="10s",
                subscribe=topic, startingOffsets="earliest")
    test = StreamTest(df, tmp_path / "checkpoint").start()
    try:
        # First Batch is always processed
        assert test.batches.wait_for(lambda b: len(b.all_rows()) >= 16)
        first = [1, *range(10, 15), *range(100, 110)]
        assert test.answer() == sorted(first)
        # Adding more data but less than minOffsetsPerTrigger: no batch before the delay
        started = time.monotonic()
        send_messages(kafka, topic, range(15, 21), partition=1)
        time.sleep(1)
        assert test.answer() == sorted(first)
        send_messages(kafka, topic, range(110, 121), partition=0)
        send_messages(kafka, topic, ["2"], partition=2)
        # Running batch now as number of records is greater than minOffsetsPerTrigger
        second = [*first, 2, *range(15, 21), *range(110, 121)]
        assert test.batches.wait_for(lambda b: len(b.all_rows()) >= len(second))
        # Started by the record count, before the delay could start it: its trigger came
        # less than maxTriggerDelay after the first batch's. (Trigger times, not the wait:
        # on a loaded machine the batch itself may run long after its trigger.)
        triggers = []
        deadline = time.monotonic() + 60  # the batch's progress follows its output
        while len(triggers) < 2 and time.monotonic() < deadline:
            triggers = [datetime.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00"))
                        for p in test.query.recentProgress if p["numInputRows"]]
            time.sleep(0.1)
        assert len(triggers) >= 2 and (triggers[1] - triggers[0]).total_seconds() < 9.0, (
            triggers, time.monotonic() - started)
        assert test.answer() == sorted(second)
        # Testing maxTriggerDelay
        send_messages(kafka, topic, range(121, 126), partition=0)
        send_messages(kafka, topic, range(21, 26), partition=1)
        waiting = time.monotonic()
        time.sleep(1)
        assert test.answer() == sorted(second)
        third = [*second, *range(121, 126), *range(21, 26)]
        assert test.batches.wait_for(lambda b: len(b.all_rows()) >= len(third))
        assert time.monotonic() - waiting >= 6.0  # the delay counts from the last batch
        assert test.answer() == sorted(third)
    finally:
        test.stop()
    # When Trigger.Once() is used, the read limit should be ignored
    once = StreamTest(df, tmp_path / "once")
    once.start(once=True)
    assert once.query.awaitTermination(120)
    assert once.answer() == sorted(third)


def test_composite_read_limit(spark_session, kafka, kafka_topic, tmp_path):
    """KafkaMicroBatchSourceSuiteBase: "compositeReadLimit" (real time instead of the mocked
    system clock: minOffsetsPerTrigger 15, maxTriggerDelay 5s, maxOffsetsPerTrigger 20)."""
    topic = kafka_topic(partitions=3)
    send_messages(kafka, topic, range(100, 121), partition=0)
    send_messages(kafka, topic, range(10, 21), partition=1)
    send_messages(kafka, topic, ["1"], partition=2)
    df = stream(spark_session, kafka, minOffsetsPerTrigger=15, maxTriggerDelay="5s",
                maxOffsetsPerTrigger=20, subscribe=topic, startingOffsets="earliest")
    test = StreamTest(df, tmp_path / "checkpoint").start()
    try:
        # First Batch is always processed but it will process only 20 (Spark: 19)
        assert test.batches.wait_for(lambda b: len(b.rows) >= 1)
        first = len(test.batches.rows[0])
        assert first <= 20
        # 33 - first < 15 pending: no batch until the delay, then the rest
        time.sleep(1)
        assert len(test.answer()) == first
        all_values = [1, *range(10, 21), *range(100, 121)]
        assert test.batches.wait_for(lambda b: len(b.all_rows()) == 33, 30)
        assert test.answer() == sorted(all_values)
    finally:
        test.stop()


def test_input_row_metrics(spark_session, kafka, kafka_topic, tmp_path):
    """KafkaMicroBatchSourceSuiteBase: "input row metrics"."""
    topic = kafka_topic(partitions=5)
    send_messages(kafka, topic, ["-1"])
    test = StreamTest(stream(spark_session, kafka, subscribe=topic), tmp_path / "checkpoint",
                      values_plus_one).start(processingTime="1 millisecond")
    try:
        test.process_all_available()
        add_kafka_data(test, kafka, topic, [1, 2, 3])
        test.check_answer([2, 3, 4])
        assert sum(p["numInputRows"] for p in test.query.recentProgress) == 3
    finally:
        test.stop()


def test_subscribing_topic_by_pattern_with_topic_deletions(spark_session, kafka, kafka_topic,
                                                           tmp_path):
    """KafkaMicroBatchSourceSuiteBase: "subscribing topic by pattern with topic deletions"."""
    prefix = kafka_topic(prefix="pattern")
    topic, topic2 = kafka.create_topic(f"{prefix}-seems", 5), f"{prefix}-bad"
    send_messages(kafka, topic, ["-1"])
    df = stream(spark_session, kafka, subscribePattern=f"{prefix}-.*", failOnDataLoss="false")
    test = StreamTest(df, tmp_path / "checkpoint", values_plus_one).start()
    try:
        test.process_all_available()
        add_kafka_data(test, kafka, topic, [1, 2, 3])
        test.check_answer([2, 3, 4])
        test.process_all_available()
        delete_topic(kafka, topic)
        kafka.create_topic(topic2, 5)
        add_kafka_data(test, kafka, topic2, [4, 5, 6])
        test.check_answer([2, 3, 4, 5, 6, 7])
    finally:
        test.stop()


def last_offset_log(checkpoint):
    """The newest file of the checkpoint's offset log."""
    logs = [p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()]
    return max(logs, key=lambda p: int(p.name))


@difference(
    "difference (docs/migration.md): with failOnDataLoss=false a deleted topic's partitions leave "
    "the offsets, so a re-created topic is read from offset 0 (Spark keeps the old position and "
    "skips the new log's first records); an empty offsets map is then a valid position (every "
    "partition new, from 0), where SPARK-41375 guards Spark's empty map, which meant "
    "startingOffsets")
def test_spark_41375_empty_partitions_should_not_record_to_latest_offset(
        spark_session, kafka, kafka_topic, tmp_path):
    """KafkaMicroBatchSourceSuiteBase: "SPARK-41375: empty partitions should not record to
    latest offset"."""
    prefix = kafka_topic(prefix="pattern")
    topic = kafka.create_topic(f"{prefix}-good", 5)
    send_messages(kafka, topic, ["-1"])
    df = stream(spark_session, kafka, subscribePattern=f"{prefix}-.*", failOnDataLoss="false")
    checkpoint = tmp_path / "checkpoint"
    test = StreamTest(df, checkpoint, values_plus_one).start()
    try:
        test.process_all_available()
        add_kafka_data(test, kafka, topic, [1, 2, 3])
        test.check_answer([2, 3, 4])
        delete_topic(kafka, topic)
        time.sleep(2)  # a few triggers see no topic at all
        test.process_all_available()
    finally:
        test.stop()
    latest = last_offset_log(checkpoint).read_text().splitlines()[-1]
    assert json.loads(latest) != {}, latest


def test_subscribe_topic_by_pattern_with_topic_recreation_between_batches(
        spark_session, kafka, kafka_topic, tmp_path):
    """KafkaMicroBatchSourceSuiteBase: "subscribe topic by pattern with topic recreation
    between batches"."""
    prefix = kafka_topic(prefix="pattern")
    topic, topic2 = kafka.create_topic(f"{prefix}-good"), kafka.create_topic(f"{prefix}-bad")
    send_messages(kafka, topic, [1, 3])
    send_messages(kafka, topic2, [2, 4])
    df = stream(spark_session, kafka, startingOffsets="earliest",
                subscribePattern=f"{prefix}-.*")
    test = StreamTest(df, tmp_path / "checkpoint").start()
    try:
        test.check_answer([1, 2, 3, 4])
    finally:
        test.stop()
    delete_topic(kafka, topic2)
    kafka.create_topic(topic2)
    send_messages(kafka, topic2, [6])
    wait_until_offset_appears(kafka, topic2, 0, 1)
    test.start()
    try:
        error = test.expect_failure(60)
    finally:
        test.stop()
    # The offset of `topic2` should be changed from 2 to 1 (Spark: KafkaIllegalStateException
    # "was changed from 2 to 1"; kafka-direct: DataLossError, its log ends below the position)
    if REFERENCE:
        assert "was changed from 2 to 1" in str(error), error
        return
    lost = carried_error(error)
    assert isinstance(lost, DataLossError), error
    assert (lost.topic, lost.partition) == (topic2, 0)
    assert "ends at 1, below the query's position 2" in str(lost)


def test_subscribe_topic_by_pattern_with_topic_recreation_between_batches_fail_on_data_loss_false(
        spark_session, kafka, kafka_topic, tmp_path):
    """KafkaMicroBatchSourceSuiteBase: "subscribe topic by pattern with topic recreation
    between batches", with failOnDataLoss=false: the shrunk log is a warning, the query goes
    on and reads what comes after."""
    prefix = kafka_topic(prefix="pattern")
    topic, topic2 = kafka.create_topic(f"{prefix}-good"), kafka.create_topic(f"{prefix}-bad")
    send_messages(kafka, topic, [1, 3])
    send_messages(kafka, topic2, [2, 4])
    df = stream(spark_session, kafka, startingOffsets="earliest",
                subscribePattern=f"{prefix}-.*", failOnDataLoss="false")
    test = StreamTest(df, tmp_path / "checkpoint").start()
    try:
        test.check_answer([1, 2, 3, 4])
    finally:
        test.stop()
    delete_topic(kafka, topic2)
    kafka.create_topic(topic2)
    send_messages(kafka, topic2, [6])
    wait_until_offset_appears(kafka, topic2, 0, 1)
    test.start()
    try:
        test.process_all_available()
        send_messages(kafka, topic2, [7, 8])
        send_messages(kafka, topic, [9])
        test.process_all_available()
        assert test.query.exception() is None
    finally:
        test.stop()
    answer = test.answer()
    assert len(answer) == len(set(answer))
    assert {1, 2, 3, 4, 9} <= set(answer) and {7, 8} <= set(answer), answer


def test_kafka_source_with_watermark(spark_session, kafka, kafka_topic):
    """KafkaMicroBatchSourceSuiteBase: "KafkaSource with watermark" (memory sink)."""
    now = time.time()
    topic = kafka_topic()
    send_messages(kafka, topic, [1])
    df = stream(spark_session, kafka, startingOffsets="earliest", subscribe=topic)
    windowed = (df.withWatermark("timestamp", "10 seconds")
                .groupBy(F.window("timestamp", "5 seconds").alias("window"))
                .agg(F.count("*").alias("count"))
                .select(F.col("window").getField("start").alias("window"), "count"))
    query = (windowed.writeStream.format("memory").outputMode("complete")
             .queryName("kafkaWatermark").start())
    try:
        query.processAllAvailable()
        rows = spark_session.table("kafkaWatermark").collect()
    finally:
        query.stop()
    assert len(rows) == 1, rows
    assert rows[0]["window"].timestamp() >= now - 5 - 1
    assert rows[0]["count"] == 1


class DeletingWriter:
    """The ForeachWriter of "delete a topic when a Spark job is running": each task's open()
    deletes and re-creates the topic before the task reads."""

    def __init__(self, bootstrap, topic, refill=0):
        self.bootstrap = bootstrap
        self.topic = topic
        self.refill = refill

    def open(self, partition_id, epoch_id):
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.delete_topics([self.topic], operation_timeout=30)[self.topic].result(30)
        deadline = time.monotonic() + 30
        while self.topic in admin.list_topics(timeout=5).topics:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        try:
            admin.create_topics([NewTopic(self.topic, 1, 1)],
                                operation_timeout=30)[self.topic].result(30)
        except KafkaException as error:
            # A client's metadata request re-created it first (brokers create topics on
            # demand; Java's consumer asks them to): Spark's KafkaTestUtils.createTopic does
            # not look at the creation's result either.
            if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        if self.refill:
            from confluent_kafka import Producer

            producer = Producer({"bootstrap.servers": self.bootstrap})
            for n in range(self.refill):
                producer.produce(self.topic, value=str(n).encode(), partition=0)
            assert producer.flush(30) == 0
        return True

    def process(self, row):
        pass

    def close(self, error):
        pass


def test_delete_a_topic_when_a_spark_job_is_running(spark_session, kafka, kafka_topic,
                                                    tmp_path):
    """KafkaMicroBatchSourceSuiteBase: "delete a topic when a Spark job is running"."""
    topic = kafka_topic()
    send_messages(kafka, topic, range(1, 11))
    df = stream(spark_session, kafka, subscribe=topic, startingOffsets="earliest",
                failOnDataLoss="false", **{"kafkaConsumer.pollTimeoutMs": "1000"})
    query = (df.writeStream.foreach(DeletingWriter(kafka.bootstrap_servers, topic))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    # `failOnDataLoss` is `false`, we should not fail the query
    assert query.exception() is None


def test_delete_a_topic_when_a_spark_job_is_running_shorter_log(spark_session, kafka,
                                                               kafka_topic, tmp_path):
    """KafkaMicroBatchSourceSuiteBase: "delete a topic when a Spark job is running", the topic
    re-created with 3 records before the task reads its range [0, 10): the log shrank below
    the range's end; with failOnDataLoss=false the query must not fail."""
    topic = kafka_topic()
    send_messages(kafka, topic, range(1, 11))
    df = stream(spark_session, kafka, subscribe=topic, startingOffsets="earliest",
                failOnDataLoss="false", **{"kafkaConsumer.pollTimeoutMs": "1000"})
    query = (df.writeStream.foreach(DeletingWriter(kafka.bootstrap_servers, topic, refill=3))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None


def test_spark_22956_current_partition_offsets_should_be_set_when_no_new_data_comes_in(
        spark_session, kafka, kafka_topic, tmp_path):
    """KafkaMicroBatchSourceSuiteBase: "SPARK-22956: currentPartitionOffsets should be set when
    no new data comes in" (each batch's rows, then a restart that repeats nothing)."""

    def specific_df(values):
        topic = kafka_topic()
        send_messages(kafka, topic, values, partition=0)
        return stream(spark_session, kafka, maxOffsetsPerTrigger=5, subscribe=topic,
                      startingOffsets="earliest")

    df = specific_df(range(0, 10)).union(specific_df(range(100, 200)))
    test = StreamTest(df, tmp_path / "checkpoint").start()
    try:
        assert test.batches.wait_for(lambda b: len(b.rows) >= 3)
        test.stop()
        test.start()
        test.check_answer([*range(0, 10), *range(100, 200)])
    finally:
        test.stop()
    batches = batch_sequence(test)
    # 5 from smaller topic, 5 from bigger one; then the bigger one alone, 5 at a time
    assert batches[:3] == [[*range(0, 5), *range(100, 105)],
                           [*range(5, 10), *range(105, 110)], list(range(110, 115))]
    assert batches[3:] == [list(range(s, s + 5)) for s in range(115, 200, 5)]


def self_join_run(spark_session, kafka, kafka_topic, checkpoint, reuse):
    topic = kafka_topic(partitions=2)
    df = stream(spark_session, kafka, subscribe=topic)
    values = df.selectExpr("CAST(CAST(value AS STRING) AS INT) AS value",
                           "CAST(CAST(value AS STRING) AS INT) % 5 AS key")
    join = values.join(values, "key")
    spark_session.conf.set("spark.sql.exchange.reuse", reuse)
    test = StreamTest(join, checkpoint, lambda d: [tuple(r) for r in d.collect()]).start()
    try:
        test.process_all_available()
        add_kafka_data(test, kafka, topic, [1, 2])
        test.check_answer([(1, 1, 1), (2, 2, 2)])
        add_kafka_data(test, kafka, topic, [6, 3])
        test.check_answer([(1, 1, 1), (2, 2, 2), (3, 3, 3), (1, 6, 1), (1, 1, 6), (1, 6, 6)])
        return test.query.recentProgress
    finally:
        test.stop()
        spark_session.conf.unset("spark.sql.exchange.reuse")


@pytest.mark.parametrize("reuse,rows_read", [("false", 8), ("true", 4)])
def test_ensure_stream_stream_self_join_generates_correct_metrics(
        spark_session, kafka, kafka_topic, tmp_path, reuse, rows_read):
    """KafkaMicroBatchSourceSuiteBase: "ensure stream-stream self-join generates only one
    offset in log and correct metrics" (the answer and numInputRows, with exchange reuse off:
    scanned twice, and on: once)."""
    progress = self_join_run(spark_session, kafka, kafka_topic, tmp_path / "checkpoint", reuse)
    assert sum(p["numInputRows"] for p in progress) == rows_read


def test_ensure_stream_stream_self_join_generates_only_one_offset_in_log(
        spark_session, kafka, kafka_topic, tmp_path):
    """KafkaMicroBatchSourceSuiteBase: "ensure stream-stream self-join generates only one
    offset in log and correct metrics" (``q.availableOffsets.iterator.size == 1``).

    ``availableOffsets`` is keyed by source; a progress report lists the same distinct
    sources (``sources.distinct``). The offset log's file is no measure: Spark's own source
    has one line per side of the join there too, the same source twice (the reference run
    showed it).
    """
    progress = self_join_run(spark_session, kafka, kafka_topic, tmp_path / "checkpoint",
                             "false")
    assert len(progress[-1]["sources"]) == 1, progress[-1]["sources"]


def transactional_producer(kafka, topic):
    """One transactional producer for all of a test's transactions, as Spark's suite has."""
    producer = Producer(kafka.params(**{"transactional.id": f"tx-{topic}"}))
    producer.init_transactions(30)
    return producer


def one_transaction(producer, topic, values, commit=True):
    """A transaction of ``producer``: ``values`` sent, then committed, aborted or (None) left
    open."""
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=str(value).encode(), partition=0)
    assert producer.flush(30) == 0
    if commit is None:
        return producer
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)
    return producer


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_read_kafka_transactional_messages(spark_session, kafka, kafka_topic, tmp_path,
                                           isolation):
    """KafkaMicroBatchSourceSuiteBase: "read Kafka transactional messages: read_committed",
    "read Kafka transactional messages: read_uncommitted" (maxOffsetsPerTrigger 3: batches of
    markers only, batches starting and ending on a marker, gaps in the middle; what is read
    after each step)."""
    topic = kafka_topic()
    committed = isolation == "read_committed"
    df = stream(spark_session, kafka, maxOffsetsPerTrigger=3, subscribe=topic,
                startingOffsets="earliest", **{"kafka.isolation.level": isolation,
                                               "kafkaConsumer.pollTimeoutMs": "5000"})
    test = StreamTest(df, tmp_path / "checkpoint").start()
    producer = transactional_producer(kafka, topic)
    try:
        test.check_answer([])
        one_transaction(producer, topic, range(0, 5), commit=None)
        wait_until_offset_appears(kafka, topic, 0, 5)
        # Should not see any uncommitted messages (read_uncommitted: sees them)
        test.check_answer([] if committed else range(0, 5))
        producer.commit_transaction(30)
        wait_until_offset_appears(kafka, topic, 0, 6)
        test.check_answer(range(0, 5))
        one_transaction(producer, topic, range(6, 11), commit=False)
        wait_until_offset_appears(kafka, topic, 0, 12)
        aborted = [] if committed else list(range(6, 11))
        test.check_answer([*range(0, 5), *aborted])
        one_transaction(producer, topic, range(12, 17))
        wait_until_offset_appears(kafka, topic, 0, 18)
        test.check_answer([*range(0, 5), *aborted, *range(12, 17)])
        one_transaction(producer, topic, ["18"])
        one_transaction(producer, topic, ["20"])
        one_transaction(producer, topic, ["22", "23"])
        wait_until_offset_appears(kafka, topic, 0, 25)
        test.check_answer([*range(0, 5), *aborted, *range(12, 17), 18, 20, 22, 23])
    finally:
        test.stop()
    assert all(len(rows) <= 3 for rows in test.batches.rows.values())


def test_spark_25495_fetched_data_reset_should_reset_all_fields(spark_session, kafka,
                                                                 kafka_topic, tmp_path):
    """KafkaMicroBatchSourceSuiteBase: "SPARK-25495: FetchedData.reset should reset all
    fields"."""
    topic = kafka_topic()
    df = stream(spark_session, kafka, subscribe=topic, startingOffsets="earliest",
                **{"kafka.isolation.level": "read_committed"})
    producer = transactional_producer(kafka, topic)
    one_transaction(producer, topic, range(0, 4))
    wait_until_offset_appears(kafka, topic, 0, 5)
    seen = {}

    def each(batch, batch_id):
        if batch_id == 0:
            # Send more messages before the tasks of the current batch read it.
            one_transaction(producer, topic, range(4, 8))
            wait_until_offset_appears(kafka, topic, 0, 10)
        seen[batch_id] = sorted(values_as_ints(batch))

    query = (df.writeStream.foreachBatch(each)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert seen[0] == [0, 1, 2, 3]
    assert [v for b in sorted(seen) if b > 0 for v in seen[b]] == [4, 5, 6, 7]


def test_spark_30656_min_partitions(spark_session, kafka, kafka_topic, tmp_path):
    """KafkaMicroBatchSourceSuiteBase: "SPARK-30656: minPartitions"."""
    topic = kafka_topic(partitions=3)
    send_messages(kafka, topic, range(0, 10), partition=0)
    send_messages(kafka, topic, range(10, 20), partition=1)
    send_messages(kafka, topic, ["20"], partition=2)
    df = stream(spark_session, kafka, subscribe=topic, startingOffsets="earliest",
                minPartitions="6")
    test = StreamTest(df, tmp_path / "checkpoint",
                      lambda d: [(d.rdd.getNumPartitions(), v) for v in values_as_ints(d)])
    test.start()
    try:
        test.process_all_available()
    finally:
        test.stop()
    rows = test.batches.rows[0]
    assert min(n for n, _ in rows) >= 6
    assert sorted(v for _, v in rows) == list(range(21))


def test_spark_56243_malformed_record_timestamp_throws_detailed_error(
        spark_session, kafka, kafka_topic, tmp_path):
    """KafkaMicroBatchSourceSuiteBase: "SPARK-56243: malformed record timestamp throws detailed
    error"."""
    topic = kafka_topic(config=ANY_TIMESTAMP)  # Kafka 4 refuses it by default
    nano_timestamp = 1712345678123456789
    send_at(kafka, topic, ["value"], 0, nano_timestamp)
    df = stream(spark_session, kafka, subscribe=topic, startingOffsets="earliest")
    # Rows counted on the executors: the failure must come from the source, not from
    # PySpark's conversion of a timestamp on the driver.
    test = StreamTest(df.selectExpr("CAST(timestamp AS LONG) AS ts"), tmp_path / "checkpoint",
                      lambda d: [r.ts for r in d.collect()]).start()
    try:
        error = test.expect_failure(60)
    finally:
        test.stop()
    message = str(carried_error(error) or error)
    assert topic in message and str(nano_timestamp) in message


def test_min_partitions_is_supported(spark_session, kafka, kafka_topic, tmp_path):
    """KafkaMicroBatchV2SourceSuite: "minPartitions is supported" (the Spark partitions of a
    batch of 100 offsets of one Kafka partition; the option's bad values)."""
    topic = kafka_topic()
    send_messages(kafka, topic, range(100), partition=0)
    for min_partitions, generated in ((None, 1), ("1", 1), ("4", 4)):
        options = {} if min_partitions is None else {"minPartitions": min_partitions}
        df = stream(spark_session, kafka, subscribe=topic, startingOffsets="earliest",
                    **options)
        test = StreamTest(df, tmp_path / f"checkpoint-{min_partitions}",
                          lambda d: [d.rdd.getNumPartitions()])
        test.start()
        try:
            test.process_all_available()
        finally:
            test.stop()
        assert test.batches.rows[0] == [generated]
    for bad in ("a", "1.0", "0", "-1"):
        with pytest.raises(Exception) as raised:
            stream(spark_session, kafka, subscribe=topic, minPartitions=bad)
        refusal(raised.value)


@pytest.mark.skip(reason="PySpark's Python data source API has no custom metrics "
                         "(SupportsReportMetrics): a source's progress has no 'metrics'")
def test_custom_metrics_with_rate_limit():
    """KafkaMicroBatchV2SourceSuite: "test custom metrics - with rate limit", "test custom
    metrics - no rate limit" (minOffsetsBehindLatest, maxOffsetsBehindLatest,
    avgOffsetsBehindLatest)."""


def test_spark_53560_no_crash_looping_during_uncommitted_batch_retry_in_available_now(
        spark_session, kafka, kafka_topic, tmp_path):
    """KafkaSourceSuiteBase: "SPARK-53560: no crash looping during uncommitted batch retry in
    AvailableNow trigger"."""
    topic = kafka_topic()
    send_messages(kafka, topic, range(1, 8), partition=0)

    def fail_on_7(value):
        if value == 7:
            raise RuntimeError("error for 7")
        return value

    udf = F.udf(fail_on_7, "int")
    df = stream(spark_session, kafka, subscribe=topic, startingOffsets="earliest").select(
        udf(F.expr("CAST(CAST(value AS STRING) AS INT)")).alias("value"))
    test = StreamTest(df, tmp_path / "checkpoint",
                      lambda d: [r[0] for r in d.collect()])
    test.start(availableNow=True)
    error = test.expect_failure()
    assert "error for 7" in str(error)
    kafka.add_partitions(topic, 2)
    test.start(availableNow=True)
    # Getting this error means the query has passed the planning stage.
    error = test.expect_failure()
    assert "error for 7" in str(error)


# -- KafkaSourceStressSuite ------------------------------------------------------------------


@pytest.mark.slow
def test_stress_test_with_multiple_topics_and_partitions(spark_session, kafka, kafka_topic,
                                                         tmp_path):
    """KafkaSourceStressSuite: "stress test with multiple topics and partitions" (random
    actions: new topics, deleted topics while the query runs, more partitions, data, restarts;
    after each, everything added so far is read exactly once)."""
    prefix = kafka_topic(prefix="stress")
    names = (f"{prefix}-stress{n}" for n in range(1, 10_000))
    rng = random.Random(7)
    topics = []
    for _ in range(5):
        topics.append(kafka.create_topic(next(names), rng.randint(1, 5)))
        send_messages(kafka, topics[-1], range(101, 106))
    df = stream(spark_session, kafka, subscribePattern=f"{prefix}-stress.*",
                failOnDataLoss="false")
    test = StreamTest(df, tmp_path / "checkpoint", values_plus_one).start()
    expected = []
    try:
        test.process_all_available()  # makeSureGetOffsetCalled: from the latest offsets
        for _step in range(40):
            data = [rng.randrange(1000) for _ in range(rng.randrange(1, 10))]
            action = rng.randrange(6)
            if action == 0:  # Add a new topic
                topics.append(kafka.create_topic(next(names), rng.randint(1, 5)))
            elif action == 1 and len(topics) > 1 and test.query.isActive:
                test.process_all_available()  # nothing of it unread
                delete_topic(kafka, topics.pop(rng.randrange(1, len(topics))))
            elif action == 2:  # Add partitions
                topic = rng.choice(topics)
                partitions = len(kafka.admin().list_topics(topic, timeout=10)
                                 .topics[topic].partitions)
                kafka.add_partitions(topic, partitions + rng.randint(1, 3))
            elif action == 3:
                if test.query.isActive:
                    test.stop()
                else:
                    test.start()
            send_messages(kafka, rng.choice(topics), data)
            expected.extend(d + 1 for d in data)
            if test.query.isActive:
                test.check_answer(expected)
        if not test.query.isActive:
            test.start()
        test.check_answer(expected)
    finally:
        test.stop()
