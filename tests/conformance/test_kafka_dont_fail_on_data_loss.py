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
"""Apache Spark's KafkaDontFailOnDataLossSuite and KafkaSourceStressForDontFailOnDataLossSuite
(connector/kafka-0-10-sql) translated to Python and run against ``format("kafka-direct")``
(and Spark's own ``kafka`` source, the reference run: docs/testing.md).

Spark's KafkaMissingOffsetsTest broker ages records out within seconds (tiny segments and
retention); here the records are deleted with ``delete_records`` before the query reads,
which moves the log start the same way. The memory sink / ``saveAsTable`` become a
``foreachBatch`` / ``collect``.

Left out:

* "failOnDataLoss=false should not return duplicated records: continuous processing":
  continuous processing is not available to Python data sources.
* The "v1" / "v2" variants run once: they choose between the JVM source's two
  implementations.
"""

import random
import time

import pytest

from tests.conformance.kafka_sql_utils import (
    StreamTest,
    delete_topic,
    ours_only,
    send_messages,
    source_reader,
    values_as_ints,
)


def missing_offsets_topic(kafka, kafka_topic):
    """50 records of which retention took the first 20 (the log starts at 20)."""
    topic = kafka_topic(prefix="failOnDataLoss")
    send_messages(kafka, topic, range(50), partition=0)
    kafka.delete_records(topic, 0, 20)
    assert kafka.end_offsets(topic, [0])[0][0] > 0, "the records were not deleted"
    return topic


def kafka_options(kafka, topic):
    return {"kafka.bootstrap.servers": kafka.bootstrap_servers,
            "kafka.metadata.max.age.ms": "1", "subscribe": topic,
            "startingOffsets": f'{{"{topic}":{{"0":0}}}}', "failOnDataLoss": "false",
            "kafkaConsumer.pollTimeoutMs": "1000"}


def verify_no_duplicates(result):
    assert len(set(result)) == len(result), f"{result} contains duplicated records"
    # Make sure Kafka did remove some records so that this test is valid.
    assert 0 < len(result) < 50


def test_fail_on_data_loss_false_should_not_return_duplicated_records_microbatch(
        spark_session, kafka, kafka_topic, tmp_path):
    """KafkaDontFailOnDataLossSuite: "failOnDataLoss=false should not return duplicated
    records: microbatch v1" / "... microbatch v2"."""
    topic = missing_offsets_topic(kafka, kafka_topic)
    reader = source_reader(spark_session, streaming=True, **kafka_options(kafka, topic))
    test = StreamTest(reader.load(), tmp_path / "checkpoint").start()
    try:
        test.process_all_available()
        assert test.query.exception() is None
    finally:
        test.stop()
    result = test.answer()
    verify_no_duplicates(result)
    assert result == list(range(20, 50))


def test_fail_on_data_loss_false_should_not_return_duplicated_records_batch(
        spark_session, kafka, kafka_topic):
    """KafkaDontFailOnDataLossSuite: "failOnDataLoss=false should not return duplicated
    records: batch v1" / "... batch v2"."""
    topic = missing_offsets_topic(kafka, kafka_topic)
    df = source_reader(spark_session, **kafka_options(kafka, topic)).load()
    result = sorted(values_as_ints(df))
    verify_no_duplicates(result)
    assert result == list(range(20, 50))


class SlowWriter:
    """The stress test's ForeachWriter: slow processing so that records age out."""

    def open(self, partition_id, epoch_id):
        return True

    def process(self, row):
        time.sleep(random.random() * 0.05)

    def close(self, error):
        pass


@pytest.mark.slow
def test_stress_test_for_fail_on_data_loss_false(spark_session, kafka, kafka_topic, tmp_path):
    """KafkaSourceStressForDontFailOnDataLossSuite: "stress test for failOnDataLoss=false"
    (20 s of creating, deleting, re-creating topics, deleting records and producing while a
    query with failOnDataLoss=false reads them all; the query must not fail)."""
    prefix = kafka_topic(prefix="failOnDataLoss")
    names = (f"{prefix}-{n}" for n in range(10_000))
    reader = source_reader(spark_session, streaming=True, **{
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "subscribePattern": f"{prefix}-.*", "startingOffsets": "earliest",
        "failOnDataLoss": "false", "fetchOffset.numRetries": "10",
        "fetchOffset.retryIntervalMs": "500"})
    query = (reader.load().selectExpr("CAST(value AS STRING)").writeStream
             .foreach(SlowWriter()).option("checkpointLocation", str(tmp_path / "checkpoint"))
             .start())
    topics, deleted = [], set()
    rng = random.Random(42)
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            action = rng.randrange(10)
            if action == 0:  # Create a new topic
                topics.append(kafka.create_topic(next(names)))
            elif action == 1 and topics:  # Delete an existing topic
                topic = topics.pop(rng.randrange(len(topics)))
                delete_topic(kafka, topic)
                deleted.add(topic)
            elif action == 2 and deleted:  # Recreate a topic that was deleted
                topic = rng.choice(sorted(deleted))
                deleted.discard(topic)
                topics.append(kafka.create_topic(topic))
            elif action == 3:
                time.sleep(0.1)
            elif action == 4 and topics:  # retention: the oldest records go
                topic = rng.choice(topics)
                _, end = kafka.end_offsets(topic, [0])[0]
                if end:
                    kafka.delete_records(topic, 0, rng.randrange(end + 1))
            else:  # Push random messages
                for topic in topics:
                    size = rng.randrange(10)
                    if size:
                        send_messages(kafka, topic, [rng.randrange(10) for _ in range(size)])
            # `failOnDataLoss` is `false`, we should not fail the query
            assert query.exception() is None, query.exception()
    finally:
        query.stop()
    assert query.exception() is None, query.exception()


@ours_only("which records a batch reads after retention overtook the query depends on the "
           "source's fetching: kafka-direct fetches each batch's range afresh; Spark's cached "
           "consumer had fetched all 50 records in the first batch and serves the deleted ones "
           "from its buffer (no data loss seen, no duplicates either)")
def test_fail_on_data_loss_false_records_aged_out_while_the_query_runs(
        spark_session, kafka, kafka_topic, tmp_path):
    """KafkaDontFailOnDataLossSuite: "failOnDataLoss=false should not return duplicated
    records: microbatch v2", with retention overtaking the running query (as Spark's broker
    does during the test): after the first batch, records up to offset 30 go."""
    topic = kafka_topic(prefix="failOnDataLoss")
    send_messages(kafka, topic, range(50), partition=0)
    options = dict(kafka_options(kafka, topic), maxOffsetsPerTrigger="10")
    reader = source_reader(spark_session, streaming=True, **options)
    seen = {}

    def each(batch, batch_id):
        seen[batch_id] = values_as_ints(batch)
        if batch_id == 0:
            kafka.delete_records(topic, 0, 30)

    query = (reader.load().writeStream.foreachBatch(each)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    result = sorted(v for rows in seen.values() for v in rows)
    verify_no_duplicates(result)
    assert result == [*range(0, 10), *range(30, 50)]


def test_fail_on_data_loss_false_records_aged_out_after_planning_a_batch_read(
        spark_session, kafka, kafka_topic):
    """KafkaDontFailOnDataLossSuite: "failOnDataLoss=false should not return duplicated
    records: batch v2", with retention between planning (the DataFrame) and reading."""
    topic = kafka_topic(prefix="failOnDataLoss")
    send_messages(kafka, topic, range(50), partition=0)
    df = source_reader(spark_session, **kafka_options(kafka, topic)).load()
    df.schema  # noqa: B018  (planned)
    kafka.delete_records(topic, 0, 20)
    result = sorted(values_as_ints(df))
    verify_no_duplicates(result)
    assert result == list(range(20, 50))


def test_fail_on_data_loss_false_topic_recreated_while_the_query_runs(
        spark_session, kafka, kafka_topic, tmp_path):
    """KafkaDontFailOnDataLossSuite: "failOnDataLoss=false should not return duplicated
    records: microbatch v2", with the topic deleted and re-created shorter (its log shrinks
    below the query's position) while the query runs: a warning, and the query goes on."""
    topic = kafka_topic(prefix="failOnDataLoss")
    send_messages(kafka, topic, range(10), partition=0)
    options = dict(kafka_options(kafka, topic), startingOffsets="earliest")
    reader = source_reader(spark_session, streaming=True, **options)
    test = StreamTest(reader.load(), tmp_path / "checkpoint").start()
    try:
        test.check_answer(range(10))
        delete_topic(kafka, topic)
        kafka.create_topic(topic)
        send_messages(kafka, topic, [100, 101, 102], partition=0)
        time.sleep(1)
        test.process_all_available()
        send_messages(kafka, topic, range(103, 120), partition=0)
        test.process_all_available()
        assert test.query.exception() is None, test.query.exception()
    finally:
        test.stop()
    result = test.answer()
    assert len(set(result)) == len(result), f"{result} contains duplicated records"
    assert set(range(10)) | set(range(110, 120)) <= set(result), result
