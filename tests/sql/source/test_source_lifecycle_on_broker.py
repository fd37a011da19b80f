"""The ``kafka-direct`` source's topic lifecycle on the real broker: deleted, re-created and
shrunk logs, as Spark's own Kafka source reports them (KafkaDontFailOnDataLossSuite)."""

import contextlib
import json
import time

import pytest
from confluent_kafka.admin import AdminClient
from pyspark.errors import StreamingQueryException

from kafka_direct import DataLossError, OffsetRange
from kafka_direct.client.cached_consumers import ConsumerCache
from kafka_direct.client.params import executor_params
from kafka_direct.rdd.arrow_reader import PartitionReadSettings, read_partition
from kafka_direct.rdd.kafka_rdd import ReadSettings
from kafka_direct.task_errors import CarriedTaskError, carried_error, carry_errors
from tests.sql.source.test_source_stream import Batches, expected, produce_numbered, stream


def delete_topic(kafka, topic):
    """Delete ``topic`` and wait until the cluster says it does not exist."""
    admin = kafka.admin()  # kept alive until the answer arrives
    admin.delete_topics([topic], operation_timeout=30)[topic].result(30)
    # Asked without topic creation (a default AdminClient's question would create it again).
    asking = AdminClient(kafka.params(**{"allow.auto.create.topics": False}))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        described = asking.list_topics(topic, timeout=5).topics.get(topic)
        if described is None or described.error is not None:
            return
        time.sleep(0.1)
    raise AssertionError(f"topic {topic} still listed after its deletion")


def wait_until(condition, timeout=60, what=""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def source_ends(query):
    return [json.loads(p["sources"][0]["endOffset"]) if isinstance(
        p["sources"][0]["endOffset"], str) else p["sources"][0]["endOffset"]
        for p in query.recentProgress if p["sources"]]


def running(spark_session, kafka, topic, batches, checkpoint, **options):
    return (stream(spark_session, kafka, subscribe=topic, startingOffsets="earliest",
                   **options)
            .writeStream.foreachBatch(batches).option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds").start())


# -- defect 5: a topic deleted under a running query ----------------------------------------

def test_a_topic_deleted_under_a_running_query_is_data_loss(spark_session, kafka, kafka_topic,
                                                             tmp_path):
    topic = kafka_topic()
    produce_numbered(kafka, topic, 0, 0, 5)
    batches = Batches()
    query = running(spark_session, kafka, topic, batches, tmp_path / "checkpoint")
    try:
        batches.wait_for(lambda b: len(b.all_rows()) >= 5)
        delete_topic(kafka, topic)
        with contextlib.suppress(StreamingQueryException):
            query.awaitTermination(60)
        assert not query.isActive
        error = carried_error(query.exception())
        assert isinstance(error, DataLossError), query.exception()
        assert (error.topic, error.partition, error.fromOffset) == (topic, 0, 5)
        assert "failOnDataLoss=false" in str(error)
    finally:
        query.stop()


def test_a_re_created_topic_is_read_from_offset_zero_without_fail_on_data_loss(
        spark_session, kafka, kafka_topic, tmp_path):
    topic = kafka_topic()
    produce_numbered(kafka, topic, 0, 0, 5)
    batches = Batches()
    checkpoint = tmp_path / "checkpoint"
    query = running(spark_session, kafka, topic, batches, checkpoint, failOnDataLoss="false")
    try:
        batches.wait_for(lambda b: len(b.all_rows()) >= 5)
        delete_topic(kafka, topic)
        # A trigger sees the topic gone: its partitions leave the offsets.
        wait_until(lambda: any(topic not in end for end in source_ends(query)),
                   what="a batch whose end no longer holds the deleted topic")
        kafka.create_topic(topic, 1)
        produce_numbered(kafka, topic, 0, 0, 8)  # refilled beyond the old position 5
        batches.wait_for(lambda b: len(b.all_rows()) >= 13)
        time.sleep(1)  # nothing more arrives
    finally:
        query.stop()
    assert query.exception() is None
    rows = batches.all_rows()
    # The old log's 5 records, then all 8 of the new log: none of its first 5 skipped.
    assert rows == expected(1, 5) + expected(1, 8)
    logged = [json.loads((checkpoint / "offsets" / name).read_text().splitlines()[-1])
              for name in sorted((p.name for p in (checkpoint / "offsets").iterdir()
                                  if p.name.isdigit()), key=int)]
    assert {} in logged  # the batch that dropped the lost partition
    assert logged[-1] == {topic: {"0": 8}}


# -- defect 6: a range planned beyond a log that shrank -------------------------------------

def reading_settings(kafka, failOnDataLoss):
    params = executor_params(kafka.params(**{"group.id": "lifecycle"}))
    return PartitionReadSettings(ReadSettings(params, pollTimeoutMs=5000,
                                              failOnDataLoss=failOnDataLoss))


def read_offsets(offsetRange, settings):
    batches = carry_errors(read_partition(offsetRange, settings, cache=ConsumerCache()))
    return [o for b in batches for o in b.column("offset").to_pylist()]


@pytest.mark.parametrize("begin, until, log_start, found", [
    (5, 15, 0, list(range(5, 10))),   # the range's end beyond the new end
    (12, 15, 0, []),                  # its start beyond the new end
    (5, 15, 8, [8, 9]),               # its start below the new log start, its end beyond
])
def test_a_range_planned_before_the_log_shrank(kafka, kafka_topic, begin, until, log_start,
                                                found):
    topic = kafka_topic()
    produce_numbered(kafka, topic, 0, 0, 15)  # the log the range was planned on
    delete_topic(kafka, topic)
    kafka.create_topic(topic, 1)
    produce_numbered(kafka, topic, 0, 0, 10)
    if log_start:
        kafka.delete_records(topic, 0, log_start)
    offsetRange = OffsetRange(topic, 0, begin, until)
    with pytest.raises(CarriedTaskError) as raised:
        read_offsets(offsetRange, reading_settings(kafka, True))
    error = carried_error(raised.value)
    assert isinstance(error, DataLossError), error
    assert (error.topic, error.partition, error.fromOffset, error.untilOffset) == (
        topic, 0, begin, until)
    assert "failondataloss=false" in str(error).lower()
    assert read_offsets(offsetRange, reading_settings(kafka, False)) == found


def test_a_batch_replayed_after_its_topic_shrank(spark_session, kafka, kafka_topic, tmp_path):
    topic = kafka_topic()
    produce_numbered(kafka, topic, 0, 0, 10)
    checkpoint = tmp_path / "checkpoint"

    def run(**options):
        batches = Batches()
        query = (stream(spark_session, kafka, subscribe=topic, startingOffsets="earliest",
                        **options)
                 .writeStream.foreachBatch(batches)
                 .option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        with contextlib.suppress(StreamingQueryException):
            query.awaitTermination(120)
        assert not query.isActive
        return query, batches

    query, first = run()
    assert first.all_rows() == expected(1, 10)
    # As if the driver died before committing the batch: the restart replays [0, 10) from
    # the offset log, on a topic re-created with 4 records since.
    (checkpoint / "commits" / "0").unlink()
    (checkpoint / "commits" / ".0.crc").unlink(missing_ok=True)
    delete_topic(kafka, topic)
    kafka.create_topic(topic, 1)
    produce_numbered(kafka, topic, 0, 0, 4)
    query, replayed = run()
    error = carried_error(query.exception())
    assert isinstance(error, DataLossError), query.exception()
    assert (error.fromOffset, error.untilOffset) == (0, 10)
    query, replayed = run(failOnDataLoss="false")
    assert query.exception() is None
    assert replayed.rows[0] == expected(1, 4)  # what exists of the planned range


# -- defect 7: Trigger.AvailableNow and its target ------------------------------------------

@pytest.mark.parametrize("recreate", [False, True])
def test_available_now_reports_a_target_that_no_longer_exists(spark_session, kafka,
                                                              kafka_topic, tmp_path, recreate):
    topic = kafka_topic(partitions=2)
    for p in range(2):
        produce_numbered(kafka, topic, p, 0, 10)

    def run(**options):
        def shrink_after_the_first_batch(batch_id):
            if batch_id == 0:
                delete_topic(kafka, topic)
                if recreate:  # a new log ending below the target, above the position
                    kafka.create_topic(topic, 2)
                    produce_numbered(kafka, topic, 0, 0, 4)

        batches = Batches(shrink_after_the_first_batch)
        query = (stream(spark_session, kafka, subscribe=topic, startingOffsets="earliest",
                        maxOffsetsPerTrigger=6, **options)
                 .writeStream.foreachBatch(batches)
                 .option("checkpointLocation", str(tmp_path / f"checkpoint-{len(options)}"))
                 .trigger(availableNow=True).start())
        with contextlib.suppress(StreamingQueryException):
            query.awaitTermination(120)
        assert not query.isActive
        return query, batches

    query, batches = run()
    error = carried_error(query.exception())
    assert isinstance(error, DataLossError), query.exception()
    assert error.topic == topic and "failOnDataLoss=false" in str(error)
    if recreate:
        assert "Trigger.AvailableNow" in str(error)
        delete_topic(kafka, topic)
    kafka.create_topic(topic, 2)
    for p in range(2):
        produce_numbered(kafka, topic, p, 0, 10)
    query, batches = run(failOnDataLoss="false")
    assert query.exception() is None
    rows = batches.all_rows()
    assert rows[:6] == sorted(expected(1, 3) + [(1, o, f"1:{o}".encode()) for o in range(3)])
    if recreate:  # what exists of the target: the new log's offset 3 of partition 0
        assert rows[6:] == [(0, 3, b"0:3")]
    else:
        assert rows[6:] == []
