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
"""Apache Spark's KafkaRelationSuite (connector/kafka-0-10-sql, batch reads of the ``kafka``
source) translated to Python and run against ``spark.read.format("kafka-direct")`` (and
Spark's own ``kafka`` source, the reference run: docs/testing.md).

Each test names the Scala test it translates. ``checkAnswer`` becomes a comparison of sorted
values; ``IllegalArgumentException`` / ``IllegalStateException`` become kafka-direct's
``ConfigurationError`` (a ``ValueError``) carried by Spark's failure. Kafka's retention-based
``cleanupLogs`` becomes ``delete_records`` below the log end.

Left out (nothing a Python data source can show):

* "V1 Source is used when set through SQLConf" / "V2 Source is used when set through
  SQLConf": ``spark.sql.sources.useV1SourceList`` chooses between the JVM source's two
  implementations; a Python data source has one (a DataSource V2 relation).
* KafkaRelationSuiteWithAdminV1 / WithAdminV2: the same tests with
  ``spark.sql.streaming.kafka.useDeprecatedOffsetFetching`` (Java consumer vs. AdminClient
  offset fetching); kafka-direct has one offset reader (librdkafka), so the base tests run
  once.
"""

import json
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.conformance.kafka_sql_utils import (
    create_df,
    difference,
    offsets_json,
    read,
    refusal,
    send_at,
    send_messages,
    source_reader,
    string_values,
    strings,
    wait_until,
)

EARLIEST_LATEST_ONCE = (
    "difference (docs/migration.md): 'earliest'/'latest' are resolved once when PySpark plans the "
    "batch DataFrame (once per DataFrame), not late-bound at each action as Spark's KafkaRelation; "
    "resolving them in tasks would not be exact under task retries")


def three_partitions(kafka, kafka_topic):
    topic = kafka_topic(partitions=3)
    send_messages(kafka, topic, range(0, 10), partition=0)
    send_messages(kafka, topic, range(10, 20), partition=1)
    send_messages(kafka, topic, ["20"], partition=2)
    return topic


def wait_until_offset_appears(kafka, topic, partition, offset):
    """KafkaTestUtils.waitUntilOffsetAppears: the high watermark (not the last stable
    offset) reaches ``offset``."""
    consumer = Consumer(kafka.params(**{"group.id": "watermarks",
                                        "isolation.level": "read_uncommitted"}))
    try:
        assert wait_until(lambda: consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=10, cached=False)[1] >= offset, 30)
    finally:
        consumer.close()


def test_explicit_earliest_to_latest_offsets(spark_session, kafka, kafka_topic):
    """KafkaRelationSuite: "explicit earliest to latest offsets" (first half)."""
    topic = three_partitions(kafka, kafka_topic)
    df = create_df(spark_session, kafka, topic, startingOffsets="earliest",
                   endingOffsets="latest")
    assert string_values(df) == strings(range(0, 21))


@difference(EARLIEST_LATEST_ONCE)
def test_explicit_earliest_to_latest_offsets_late_binding(spark_session, kafka, kafka_topic):
    """KafkaRelationSuite: "explicit earliest to latest offsets" ("latest" should late bind
    to the current (latest) offset in the df)."""
    topic = three_partitions(kafka, kafka_topic)
    df = create_df(spark_session, kafka, topic, startingOffsets="earliest",
                   endingOffsets="latest")
    assert string_values(df) == strings(range(0, 21))
    send_messages(kafka, topic, range(21, 30), partition=2)
    assert string_values(df) == strings(range(0, 30))


def test_default_starting_and_ending_offsets(spark_session, kafka, kafka_topic):
    """KafkaRelationSuite: "default starting and ending offsets"."""
    topic = three_partitions(kafka, kafka_topic)
    assert string_values(create_df(spark_session, kafka, topic)) == strings(range(0, 21))


def test_explicit_offsets(spark_session, kafka, kafka_topic):
    """KafkaRelationSuite: "explicit offsets" (up to the static ending offset)."""
    topic = three_partitions(kafka, kafka_topic)
    starting = offsets_json({topic: {0: -2, 1: -2, 2: 0}})
    ending = offsets_json({topic: {0: -1, 1: -1, 2: 1}})
    df = create_df(spark_session, kafka, topic, startingOffsets=starting,
                   endingOffsets=ending)
    assert string_values(df) == strings(range(0, 21))
    # static offset partition 2, nothing should change
    send_messages(kafka, topic, range(31, 40), partition=2)
    assert string_values(df) == strings(range(0, 21))
    # A new DataFrame with the same options sees partition 1's new latest offset.
    send_messages(kafka, topic, range(21, 31), partition=1)
    again = create_df(spark_session, kafka, topic, startingOffsets=starting,
                      endingOffsets=ending)
    assert string_values(again) == strings(range(0, 31))


@difference(EARLIEST_LATEST_ONCE)
def test_explicit_offsets_latest_late_binding(spark_session, kafka, kafka_topic):
    """KafkaRelationSuite: "explicit offsets" (latest offset partition 1, should change: on
    the same DataFrame)."""
    topic = three_partitions(kafka, kafka_topic)
    df = create_df(spark_session, kafka, topic,
                   startingOffsets=offsets_json({topic: {0: -2, 1: -2, 2: 0}}),
                   endingOffsets=offsets_json({topic: {0: -1, 1: -1, 2: 1}}))
    assert string_values(df) == strings(range(0, 21))
    send_messages(kafka, topic, range(21, 31), partition=1)
    assert string_values(df) == strings(range(0, 31))


def test_default_starting_and_ending_offsets_with_headers(spark_session, kafka, kafka_topic):
    """KafkaRelationSuite: "default starting and ending offsets with headers"."""
    topic = kafka_topic(partitions=3)
    kafka.produce(topic, [b"1"], partition=0)  # RecordBuilder.headers(Seq()): no header
    kafka.produce(topic, [b"2"], partition=1, headers=[("a", b"b"), ("c", b"d")])
    kafka.produce(topic, [b"3"], partition=2, headers=[("e", b"f"), ("e", b"g")])
    df = create_df(spark_session, kafka, topic, include_headers=True)
    rows = sorted(df.collect(), key=lambda r: r[0])
    got = [(r[0], None if r[1] is None else [(h.key, bytes(h.value)) for h in r[1]])
           for r in rows]
    assert got == [("1", None), ("2", [("a", b"b"), ("c", b"d")]),
                   ("3", [("e", b"f"), ("e", b"g")])]


def prepare_timestamp_related_unit_test(kafka, kafka_topic):
    """KafkaRelationSuite's prepareTimestampRelatedUnitTest: 0-9, 10-19 and 20-29 spread
    over 3 partitions, each decade one second after the one before."""
    topic = kafka_topic(partitions=3)
    first = int(time.time() * 1000) - 5000
    for decade, timestamp in ((0, first), (10, first + 1000), (20, first + 2000)):
        for part in range(3):
            send_at(kafka, topic, [n for n in range(decade, decade + 10) if n % 3 == part],
                    part, timestamp)
    return topic, [first, first + 1000, first + 2000, first + 3000]


def verify_timestamp_related_query_result(spark_session, kafka, topic, expectation,
                                          **options):
    df = read(spark_session, kafka, subscribe=topic, **options).selectExpr(
        "CAST(value AS STRING)")
    assert string_values(df) == strings(expectation)


def per_partition(topic, value, partitions=range(3)):
    return offsets_json({topic: dict.fromkeys(partitions, value)})


def test_timestamp_provided_for_starting_and_ending(spark_session, kafka, kafka_topic):
    """KafkaRelationSuite: "timestamp provided for starting and ending"."""
    topic, ts = prepare_timestamp_related_unit_test(kafka, kafka_topic)
    verify_timestamp_related_query_result(
        spark_session, kafka, topic, range(10, 20),
        startingOffsetsByTimestamp=per_partition(topic, ts[1]),
        endingOffsetsByTimestamp=per_partition(topic, ts[2]))


def test_timestamp_provided_for_starting_offset_provided_for_ending(spark_session, kafka,
                                                                    kafka_topic):
    """KafkaRelationSuite: "timestamp provided for starting, offset provided for ending"."""
    topic, ts = prepare_timestamp_related_unit_test(kafka, kafka_topic)
    verify_timestamp_related_query_result(
        spark_session, kafka, topic, [n for n in range(30) if n % 3 != 2] + [2],
        startingOffsetsByTimestamp=per_partition(topic, ts[0]),
        endingOffsets=offsets_json({topic: {0: -1, 1: -1, 2: 1}}))


def test_timestamp_provided_for_ending_offset_provided_for_starting(spark_session, kafka,
                                                                    kafka_topic):
    """KafkaRelationSuite: "timestamp provided for ending, offset provided for starting"."""
    topic, ts = prepare_timestamp_related_unit_test(kafka, kafka_topic)
    verify_timestamp_related_query_result(
        spark_session, kafka, topic, range(0, 20),
        startingOffsets=offsets_json({topic: {0: -2, 1: -2, 2: 0}}),
        endingOffsetsByTimestamp=per_partition(topic, ts[2]))


def test_timestamp_provided_for_starting_ending_not_provided(spark_session, kafka,
                                                             kafka_topic):
    """KafkaRelationSuite: "timestamp provided for starting, ending not provided"."""
    topic, ts = prepare_timestamp_related_unit_test(kafka, kafka_topic)
    verify_timestamp_related_query_result(
        spark_session, kafka, topic, range(10, 30),
        startingOffsetsByTimestamp=per_partition(topic, ts[1]))


def test_timestamp_provided_for_ending_starting_not_provided(spark_session, kafka,
                                                             kafka_topic):
    """KafkaRelationSuite: "timestamp provided for ending, starting not provided"."""
    topic, ts = prepare_timestamp_related_unit_test(kafka, kafka_topic)
    verify_timestamp_related_query_result(
        spark_session, kafka, topic, range(0, 20),
        endingOffsetsByTimestamp=per_partition(topic, ts[2]))


def test_global_timestamp_provided_for_starting_and_ending(spark_session, kafka, kafka_topic):
    """KafkaRelationSuite: "global timestamp provided for starting and ending"."""
    topic, ts = prepare_timestamp_related_unit_test(kafka, kafka_topic)
    verify_timestamp_related_query_result(
        spark_session, kafka, topic, range(10, 20), startingTimestamp=ts[1],
        endingTimestamp=ts[2])


def test_no_matched_offset_for_timestamp_starting_offsets(spark_session, kafka, kafka_topic):
    """KafkaRelationSuite: "no matched offset for timestamp - startingOffsets"."""
    topic, ts = prepare_timestamp_related_unit_test(kafka, kafka_topic)
    starting = offsets_json({topic: {0: ts[1], 1: ts[1], 2: 2**63 - 1}})
    with pytest.raises(Exception) as raised:
        verify_timestamp_related_query_result(spark_session, kafka, topic, [],
                                              startingOffsetsByTimestamp=starting)
    # Spark: "No offset matched from request"; kafka-direct names the partition and the fix.
    error = refusal(raised.value)
    if error is not None:  # kafka-direct's wording
        assert "no record of" in str(error) and f"{topic}-2" in str(error), error


def test_preferences_on_offset_related_options(spark_session, kafka, kafka_topic):
    """KafkaRelationSuite: "preferences on offset related options"."""
    topic, ts = prepare_timestamp_related_unit_test(kafka, kafka_topic)
    by_partition = per_partition(topic, ts[1])
    # all options are specified: global timestamp
    verify_timestamp_related_query_result(
        spark_session, kafka, topic, range(20, 30), startingTimestamp=ts[2],
        startingOffsetsByTimestamp=by_partition, startingOffsets="earliest")
    # timestamp for partition and offsets are specified: timestamp for partition
    verify_timestamp_related_query_result(
        spark_session, kafka, topic, range(10, 30), startingOffsetsByTimestamp=by_partition,
        startingOffsets="earliest")


def test_no_matched_offset_for_timestamp_ending_offsets(spark_session, kafka, kafka_topic):
    """KafkaRelationSuite: "no matched offset for timestamp - endingOffsets"."""
    topic, ts = prepare_timestamp_related_unit_test(kafka, kafka_topic)
    ending = offsets_json({topic: {0: ts[1], 1: ts[1], 2: 2**63 - 1}})
    verify_timestamp_related_query_result(
        spark_session, kafka, topic, list(range(0, 10)) + [n for n in range(10, 30)
                                                           if n % 3 == 2],
        endingOffsetsByTimestamp=ending)


def test_reuse_same_dataframe_in_query(spark_session, kafka, kafka_topic):
    """KafkaRelationSuite: "reuse same dataframe in query"."""
    topic = kafka_topic()
    send_messages(kafka, topic, range(0, 11), partition=0)
    df = create_df(spark_session, kafka, topic, startingOffsets="earliest",
                   endingOffsets="latest")
    assert string_values(df.union(df)) == strings(list(range(11)) * 2)


@difference(EARLIEST_LATEST_ONCE)
def test_late_binding_start_offsets(spark_session, kafka, kafka_topic):
    """KafkaRelationSuite: "test late binding start offsets" (retention's cleanupLogs as
    delete_records up to the log end)."""
    topic = kafka_topic()
    send_messages(kafka, topic, range(0, 10), partition=0)
    df = create_df(spark_session, kafka, topic, startingOffsets="earliest",
                   endingOffsets="latest")
    assert string_values(df) == strings(range(0, 10))
    kafka.delete_records(topic, 0, 10)  # blow away current set of messages
    send_messages(kafka, topic, range(10, 20), partition=0)
    # Ensure that we late bind to the new starting position
    assert string_values(df) == strings(range(10, 20))


def test_late_binding_start_offsets_new_dataframe(spark_session, kafka, kafka_topic):
    """KafkaRelationSuite: "test late binding start offsets", with a new DataFrame for the
    second read (what kafka-direct binds at planning)."""
    topic = kafka_topic()
    send_messages(kafka, topic, range(0, 10), partition=0)
    assert string_values(create_df(spark_session, kafka, topic, startingOffsets="earliest",
                                   endingOffsets="latest")) == strings(range(0, 10))
    kafka.delete_records(topic, 0, 10)
    send_messages(kafka, topic, range(10, 20), partition=0)
    assert string_values(create_df(spark_session, kafka, topic, startingOffsets="earliest",
                                   endingOffsets="latest")) == strings(range(10, 20))


def bad_options(spark_session, *expected, spark=(), **options):
    """The batch read of ``options`` is refused: kafka-direct's error holds ``expected``;
    Spark's (the reference) holds ``spark``, the Scala test's message."""
    with pytest.raises(Exception) as raised:
        source_reader(spark_session, **options).load().collect()
    error = refusal(raised.value, *spark)
    if error is None:
        return None
    assert isinstance(error, ValueError)  # Spark: IllegalArgumentException
    message = str(error).lower()
    for part in expected:
        assert part.lower() in message, message
    return message


def test_bad_batch_query_options(spark_session, kafka):
    """KafkaRelationSuite: "bad batch query options".

    Spark's messages are paraphrased: kafka-direct's name the option and the fix; the
    asserted parts are the substance of Spark's.
    """
    servers = {"kafka.bootstrap.servers": kafka.bootstrap_servers}
    # Specifying an ending offset as the starting point
    latest = ("starting offset can't be latest for batch queries on Kafka",)
    bad_options(spark_session, "can't be latest for batch queries", subscribe="t",
                startingOffsets="latest", spark=latest, **servers)
    # Now do it with an explicit json start offset indicating latest
    bad_options(spark_session, "startingOffsets", "t", subscribe="t",
                startingOffsets=offsets_json({"t": {0: -1}}),
                spark=("t-0", "can't be latest for batch queries on Kafka"),
                **servers)
    # Make sure we catch ending offsets that indicate earliest
    bad_options(spark_session, "can't be earliest for batch queries", subscribe="t",
                endingOffsets="earliest",
                spark=("ending offset can't be earliest for batch queries on Kafka",),
                **servers)
    # Make sure we catch ending offsets that indicating earliest
    bad_options(spark_session, "endingOffsets", "t", subscribe="t",
                endingOffsets=offsets_json({"t": {0: -2}}),
                spark=("t-0", "can't be earliest for batch queries on Kafka"),
                **servers)
    # No strategy specified
    bad_options(spark_session, "must be given", "subscribe", "subscribePattern",
                spark=("options must be specified", "subscribe"), **servers)
    # Multiple strategies specified
    bad_options(spark_session, "only one", subscribe="t", subscribePattern="t.*",
                spark=("only one",), **servers)
    bad_options(spark_session, "only one", subscribe="t", assign='{"a":[0]}',
                spark=("only one",), **servers)
    bad_options(spark_session, "assign", assign="", spark=("no topicpartitions to assign",),
                **servers)
    bad_options(spark_session, "subscribe", "no topic", subscribe="",
                spark=("no topics to subscribe to",), **servers)
    bad_options(spark_session, "subscribePattern", "empty", subscribePattern="",
                spark=("pattern to subscribe is empty",), **servers)


def test_bad_batch_query_options_without_bootstrap_servers(spark_session):
    """KafkaRelationSuite: "bad batch query options" runs its checks without
    ``kafka.bootstrap.servers``: Spark checks the subscription first."""
    bad_options(spark_session, "only one", subscribe="t", subscribePattern="t.*",
                spark=("only one",))
    bad_options(spark_session, "no topic", subscribe="", spark=("no topics to subscribe to",))
    bad_options(spark_session, "can't be latest for batch queries", subscribe="t",
                startingOffsets="latest", **{"kafka.bootstrap.servers": "127.0.0.1:1"},
                spark=("starting offset can't be latest for batch queries on Kafka",))


def transactional_producer(kafka, topic):
    """One transactional producer for all of a test's transactions, as Spark's suite has."""
    producer = Producer(kafka.params(**{"transactional.id": f"tx-{topic}"}))
    producer.init_transactions(30)
    return producer


def transaction(producer, topic, values):
    """Begin a transaction and send ``values`` in it; the caller commits or aborts it."""
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=str(value).encode(), partition=0)
    assert producer.flush(30) == 0


def test_read_kafka_transactional_messages_read_committed(spark_session, kafka, kafka_topic):
    """KafkaRelationSuite: "read Kafka transactional messages: read_committed"."""
    topic = kafka_topic()

    def df():
        return read(spark_session, kafka, subscribe=topic,
                    **{"kafka.isolation.level": "read_committed"}).selectExpr(
            "CAST(value AS STRING)")

    producer = transactional_producer(kafka, topic)
    transaction(producer, topic, range(1, 6))
    # Should not read any messages before they are committed
    assert df().isEmpty()
    producer.commit_transaction(30)
    wait_until_offset_appears(kafka, topic, 0, 6)
    assert string_values(df()) == strings(range(1, 6))
    transaction(producer, topic, range(6, 11))
    producer.abort_transaction(30)
    wait_until_offset_appears(kafka, topic, 0, 12)
    assert string_values(df()) == strings(range(1, 6))
    transaction(producer, topic, range(11, 16))
    producer.commit_transaction(30)
    wait_until_offset_appears(kafka, topic, 0, 18)
    # Should skip aborted messages and read new committed ones.
    assert string_values(df()) == strings(list(range(1, 6)) + list(range(11, 16)))


def test_read_kafka_transactional_messages_read_uncommitted(spark_session, kafka,
                                                            kafka_topic):
    """KafkaRelationSuite: "read Kafka transactional messages: read_uncommitted"."""
    topic = kafka_topic()

    def df():
        return read(spark_session, kafka, subscribe=topic,
                    **{"kafka.isolation.level": "read_uncommitted"}).selectExpr(
            "CAST(value AS STRING)")

    producer = transactional_producer(kafka, topic)
    transaction(producer, topic, range(1, 6))
    wait_until_offset_appears(kafka, topic, 0, 5)
    # "read_uncommitted" should see all messages including uncommitted ones
    assert string_values(df()) == strings(range(1, 6))
    producer.commit_transaction(30)
    wait_until_offset_appears(kafka, topic, 0, 6)
    assert string_values(df()) == strings(range(1, 6))
    transaction(producer, topic, range(6, 11))
    producer.abort_transaction(30)
    wait_until_offset_appears(kafka, topic, 0, 12)
    # "read_uncommitted" should see all messages including uncommitted or aborted ones
    assert string_values(df()) == strings(range(1, 11))
    transaction(producer, topic, range(11, 16))
    producer.commit_transaction(30)
    wait_until_offset_appears(kafka, topic, 0, 18)
    assert string_values(df()) == strings(range(1, 16))


def collect_partitions(rdd):
    return rdd.glom().collect()


def test_spark_30656_min_partitions(spark_session, kafka, kafka_topic):
    """KafkaRelationSuite: "SPARK-30656: minPartitions" (up to the late binding)."""
    topic = three_partitions(kafka, kafka_topic)
    df = create_df(spark_session, kafka, topic, minPartitions="6")
    partitions = collect_partitions(df.rdd)
    assert len(partitions) >= 6
    assert {row[0] for part in partitions for row in part} == set(strings(range(0, 21)))


@difference(EARLIEST_LATEST_ONCE)
def test_spark_30656_min_partitions_late_binding(spark_session, kafka, kafka_topic):
    """KafkaRelationSuite: "SPARK-30656: minPartitions" ("Because of late binding, reused
    `rdd` and `df` should see the new data")."""
    topic = three_partitions(kafka, kafka_topic)
    df = create_df(spark_session, kafka, topic, minPartitions="6")
    assert {r[0] for r in df.collect()} == set(strings(range(0, 21)))
    send_messages(kafka, topic, range(21, 31))
    assert {row[0] for part in collect_partitions(df.rdd) for row in part} == \
        set(strings(range(0, 31)))


def test_topic_partition_for_start_offset_and_end_offset_must_match(spark_session, kafka,
                                                                    kafka_topic):
    """KafkaRelationSuite: "topic-partition for start offset and end offset must match".

    Spark compares the two options' partitions; kafka-direct checks each option names
    exactly the partitions read. The topic exists here with 3 partitions.
    """
    topic = kafka_topic(partitions=3)
    for p in range(3):
        send_messages(kafka, topic, ["x", "y"], partition=p)
    with pytest.raises(Exception) as raised:
        read(spark_session, kafka, subscribe=topic,
             startingOffsets=json.dumps({topic: {"0": 1, "1": 1, "2": 1}}),
             endingOffsets=json.dumps({topic: {"0": 0, "1": 0}})).collect()
    error = refusal(raised.value)
    if error is not None:  # kafka-direct's wording
        assert "endingOffsets" in str(error) and f"misses {topic}-2" in str(error), error


def test_unresolved_start_offset_greater_than_end_offset(spark_session, kafka, kafka_topic):
    """KafkaRelationSuite: "unresolved start offset greater than end offset"."""
    topic = kafka_topic(partitions=3)
    for p in range(3):
        send_messages(kafka, topic, ["x", "y"], partition=p)
    with pytest.raises(Exception) as raised:
        read(spark_session, kafka, subscribe=topic,
             startingOffsets=json.dumps({topic: {"0": 1, "1": 1, "2": 1}}),
             endingOffsets=json.dumps({topic: {"0": 0, "1": 0, "2": 0}})).collect()
    error = refusal(raised.value)
    if error is not None:  # kafka-direct's wording
        assert "starting offset 1" in str(error) and "ending offset 0" in str(error), error


def test_resolved_start_offset_greater_than_end_offset_without_latest(spark_session, kafka,
                                                                       kafka_topic):
    """KafkaRelationSuite: "resolved start offset greater than end offset (without
    latest)"."""
    topic = kafka_topic(partitions=3)
    now = int(time.time() * 1000)
    for p in range(3):
        send_at(kafka, topic, ["0"], p, now - 1000)
        send_at(kafka, topic, ["0"], p, now)
    df = read(spark_session, kafka, subscribe=topic,
              startingOffsets=json.dumps({topic: {"0": 3, "1": 3, "2": 3}}),
              endingOffsetsByTimestamp=json.dumps({topic: {"0": now, "1": now, "2": now}}))
    with pytest.raises(Exception) as raised:
        df.collect()
    # Spark: "The resolved start offset 3 is greater than the resolved end offset 1 for"
    # (3 is beyond the end, 2, already: kafka-direct says so first).
    error = refusal(raised.value)
    if error is not None:  # kafka-direct's wording
        assert "offset 3" in str(error), error


def test_resolved_start_offset_greater_than_end_offset_with_latest(spark_session, kafka,
                                                                    kafka_topic):
    """KafkaRelationSuiteV1: "resolved start offset greater than end offset (with
    latest)"."""
    topic = kafka_topic(partitions=3)
    df = read(spark_session, kafka, subscribe=topic,
              startingOffsets=json.dumps({topic: {"0": 1, "1": 1, "2": 1}}))
    with pytest.raises(Exception) as raised:
        df.collect()
    error = refusal(raised.value)
    if error is not None:  # kafka-direct's wording
        assert "offset 1" in str(error), error
