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
"""Apache Spark's KafkaOffsetReaderSuite (connector/kafka-0-10-sql) translated to Python
where its behaviour shows in a query: the offset ranges a batch read plans (one Spark
partition per range, split for ``minPartitions``) and the checks of starting offsets
against the assigned partitions.

``getOffsetRangesFromUnresolvedOffsets`` / ``getOffsetRangesFromResolvedOffsets`` are
observed as the records of each Spark partition of ``spark.read...load()``. Each Spark test
ran twice (``useDeprecatedOffsetFetching`` true / false: two JVM offset readers); kafka-direct
has one, so each runs once.

Left out:

* "isolationLevel must give back READ_UNCOMMITTED when set" / "... READ_COMMITTED when set":
  the reader's field; the isolation level's effect on reads is tested by
  KafkaRelationSuite's and KafkaMicroBatchSourceSuite's transactional tests.
"""

import json

import pytest
from confluent_kafka import Producer

from tests.conformance.kafka_sql_utils import difference, ours_only, read, refusal, send_messages


def partition_offsets(df):
    """Each Spark partition's (topic-partition, offset) records, sorted."""
    parts = df.selectExpr("partition", "offset").rdd.glom().collect()
    return sorted([(r.partition, r.offset) for r in part] for part in parts if part)


@ours_only("kafka-direct's default isolation level, read_committed (the xfail below is "
           "Spark's)")
def test_isolation_level_default_when_not_set(spark_session, kafka, kafka_topic):
    """KafkaOffsetReaderSuite: "isolationLevel must give back default isolation level when not
    set" (kafka-direct's default, read_committed, as docs/migration.md says: an open
    transaction's records are not read)."""
    topic = kafka_topic()
    send_messages(kafka, topic, ["plain"], partition=0)
    producer = Producer(kafka.params(**{"transactional.id": f"tx-{topic}"}))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"open", partition=0)
    assert producer.flush(30) == 0
    try:
        values = [bytes(r.value) for r in read(spark_session, kafka, subscribe=topic).collect()]
    finally:
        producer.abort_transaction(30)
    assert values == [b"plain"]


@difference(
    "documented difference (docs/migration.md: 'isolation.level defaults to read_committed'); "
    "Spark's Java consumer defaults to read_uncommitted and reads an open transaction's records")
def test_isolation_level_default_is_the_java_consumers(spark_session, kafka, kafka_topic):
    """KafkaOffsetReaderSuite: "isolationLevel must give back default isolation level when not
    set" (Spark: ConsumerConfig.DEFAULT_ISOLATION_LEVEL, read_uncommitted)."""
    topic = kafka_topic()
    producer = Producer(kafka.params(**{"transactional.id": f"tx-{topic}"}))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"open", partition=0)
    assert producer.flush(30) == 0
    try:
        values = [bytes(r.value) for r in read(spark_session, kafka, subscribe=topic).collect()]
    finally:
        producer.abort_transaction(30)
    assert values == [b"open"]


def test_isolation_level_must_throw_exception_when_invalid_isolation_level_set(
        spark_session, kafka, kafka_topic):
    """KafkaOffsetReaderSuite: "isolationLevel must throw exception when invalid isolation
    level set"."""
    topic = kafka_topic()
    with pytest.raises(Exception) as raised:
        read(spark_session, kafka, subscribe=topic,
             **{"kafka.isolation.level": "intentionally_invalid"}).collect()
    error = refusal(raised.value)
    if error is not None:  # kafka-direct's wording
        assert "isolation.level" in str(error)


def test_spark_30656_get_offset_ranges_from_unresolved_offsets_using_specific_offsets(
        spark_session, kafka, kafka_topic):
    """KafkaOffsetReaderSuite: "SPARK-30656: getOffsetRangesFromUnresolvedOffsets - using
    specific offsets"."""
    topic = kafka_topic()
    send_messages(kafka, topic, range(10), partition=0)
    df = read(spark_session, kafka, subscribe=topic, minPartitions=3,
              startingOffsets=json.dumps({topic: {"0": 1}}),
              endingOffsets=json.dumps({topic: {"0": 4}}))
    assert partition_offsets(df) == [[(0, 1)], [(0, 2)], [(0, 3)]]


def test_spark_30656_get_offset_ranges_from_unresolved_offsets_using_special_offsets(
        spark_session, kafka, kafka_topic):
    """KafkaOffsetReaderSuite: "SPARK-30656: getOffsetRangesFromUnresolvedOffsets - using
    special offsets" (EARLIEST-1, 1-2, 2-LATEST)."""
    topic = kafka_topic()
    send_messages(kafka, topic, range(4), partition=0)
    df = read(spark_session, kafka, subscribe=topic, minPartitions=3,
              startingOffsets="earliest", endingOffsets="latest")
    assert partition_offsets(df) == [[(0, 0)], [(0, 1)], [(0, 2), (0, 3)]]


def test_spark_48383_start_offset_does_not_match_assigned(spark_session, kafka, kafka_topic):
    """KafkaOffsetReaderSuite: "SPARK-48383: START_OFFSET_DOES_NOT_MATCH_ASSIGNED error
    class" (three partitions, two in the offsets)."""
    topic = kafka_topic(partitions=3)
    with pytest.raises(Exception) as raised:
        read(spark_session, kafka, subscribe=topic, minPartitions=4,
             startingOffsets=json.dumps({topic: {"0": -2, "1": -2}}),
             endingOffsets=json.dumps({topic: {"0": -1, "1": 3}})).collect()
    error = refusal(raised.value)
    if error is not None:  # kafka-direct's wording
        assert "startingOffsets" in str(error) and f"{topic}-2" in str(error), error


def test_spark_30656_get_offset_ranges_from_unresolved_offsets_multiple_topic_partitions(
        spark_session, kafka, kafka_topic):
    """KafkaOffsetReaderSuite: "SPARK-30656: getOffsetRangesFromUnresolvedOffsets - multiple
    topic partitions" (whole topic: the third test above names partition 2 of 2)."""
    topic = kafka_topic(partitions=2)
    send_messages(kafka, topic, range(100), partition=0)
    send_messages(kafka, topic, range(4), partition=1)
    df = read(spark_session, kafka, subscribe=topic, minPartitions=4,
              startingOffsets=json.dumps({topic: {"0": -2, "1": -2}}),
              endingOffsets=json.dumps({topic: {"0": -1, "1": 3}}))
    assert partition_offsets(df) == sorted([
        [(1, o) for o in range(0, 3)], [(0, o) for o in range(0, 33)],
        [(0, o) for o in range(33, 66)], [(0, o) for o in range(66, 100)]])


def test_spark_30656_get_offset_ranges_from_resolved_offsets(spark_session, kafka,
                                                              kafka_topic):
    """KafkaOffsetReaderSuite: "SPARK-30656: getOffsetRangesFromResolvedOffsets"."""
    topic = kafka_topic(partitions=2)
    send_messages(kafka, topic, range(100), partition=0)
    send_messages(kafka, topic, range(4), partition=1)
    df = read(spark_session, kafka, subscribe=topic, minPartitions=4,
              startingOffsets=json.dumps({topic: {"0": 0, "1": 0}}),
              endingOffsets=json.dumps({topic: {"0": 100, "1": 3}}))
    assert partition_offsets(df) == sorted([
        [(0, o) for o in range(0, 33)], [(0, o) for o in range(33, 66)],
        [(0, o) for o in range(66, 100)], [(1, o) for o in range(0, 3)]])


@pytest.mark.parametrize("specified", [2, 4])
def test_kafka_timestamp_offset_does_not_match_assigned(spark_session, kafka, kafka_topic,
                                                        specified):
    """KafkaOffsetReaderSuite: "KAFKA_TIMESTAMP_OFFSET_DOES_NOT_MATCH_ASSIGNED error class -
    partitions assigned: 3, specified: 2" / "... specified: 4"."""
    topic = kafka_topic(partitions=3)
    with pytest.raises(Exception) as raised:
        read(spark_session, kafka, subscribe=topic, minPartitions=4,
             startingOffsetsByTimestamp=json.dumps(
                 {topic: {str(p): 0 for p in range(specified)}})).collect()
    error = refusal(raised.value)
    if error is not None:  # kafka-direct's wording
        assert "startingOffsetsByTimestamp" in str(error), error
        assert ("misses" if specified == 2 else "names") in str(error), error
