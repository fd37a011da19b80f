"""``spark.readStream.format("kafka-direct")`` on the real broker and Spark."""

import contextlib
import json
import threading
import time
from collections import Counter

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from pyspark.errors import StreamingQueryException

from kafka_direct import DataLossError, RecordError
from kafka_direct.task_errors import carried_error
from kafka_direct.testing.kafka import ANY_TIMESTAMP


def stream(spark_session, kafka, **options):
    reader = spark_session.readStream.format("kafka-direct").option(
        "kafka.bootstrap.servers", kafka.bootstrap_servers)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


class Batches:
    """foreachBatch target: each batch's (partition, offset, value) rows and arrival time."""

    def __init__(self, on_batch=None):
        self.rows = {}
        self.deliveries = Counter()
        self.times = {}
        self.on_batch = on_batch
        self.changed = threading.Condition()

    def __call__(self, df, batch_id):
        rows = sorted((r.partition, r.offset, r.value) for r in df.collect())
        if self.on_batch is not None:
            self.on_batch(batch_id)
        with self.changed:
            self.rows[batch_id] = rows
            self.deliveries[batch_id] += 1
            self.times[batch_id] = time.monotonic()
            self.changed.notify_all()

    def wait_for(self, condition, timeout=60):
        with self.changed:
            assert self.changed.wait_for(lambda: condition(self), timeout), self.rows

    def all_rows(self):
        return [row for batch_id in sorted(self.rows) for row in self.rows[batch_id]]


def trigger_seconds(query, batch_id, timeout=30):
    """When the trigger that ran ``batch_id`` began (Spark's progress), in epoch seconds."""
    from datetime import datetime

    deadline = time.monotonic() + timeout
    while True:
        for progress in query.recentProgress:
            if progress.batchId == batch_id:
                return datetime.fromisoformat(progress.timestamp.replace("Z", "+00:00")
                                              ).timestamp()
        assert time.monotonic() < deadline, f"no progress of batch {batch_id}"
        time.sleep(0.05)


def as_data(offset):
    return json.loads(offset) if isinstance(offset, str) else offset


def produce_numbered(kafka, topic, partition, start, count):
    kafka.produce(topic, [f"{partition}:{start + i}".encode() for i in range(count)],
                  partition=partition)


def expected(partitions, count, start=0):
    return sorted((p, o, f"{p}:{o}".encode()) for p in range(partitions)
                  for o in range(start, start + count))


def test_available_now_with_max_offsets_per_trigger(spark_session, kafka, kafka_topic,
                                                    tmp_path):
    topic = kafka_topic(partitions=2)
    for p in range(2):
        produce_numbered(kafka, topic, p, 0, 10)

    def more_during_the_first_batch(batch_id):
        if batch_id == 0:  # arrives after the query started: not for this run
            produce_numbered(kafka, topic, 0, 10, 5)

    batches = Batches(more_during_the_first_batch)
    group = f"monitor-{topic}"
    query = (stream(spark_session, kafka, subscribe=topic, startingOffsets="earliest",
                    maxOffsetsPerTrigger=6, commitOffsetsToGroup="true",
                    **{"kafka.group.id": group})
             .writeStream.foreachBatch(batches)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert sorted(batches.all_rows()) == expected(2, 10)
    assert [len(batches.rows[b]) for b in sorted(batches.rows)] == [6, 6, 6, 2]
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert [p["numInputRows"] for p in progress] == [6, 6, 6, 2]
    source = progress[-1]["sources"][0]
    assert as_data(source["endOffset"]) == {topic: {"0": 10, "1": 10}}
    # reportLatestOffset: the AvailableNow target, not the records that came later.
    assert as_data(source["latestOffset"]) == {topic: {"0": 10, "1": 10}}
    # The offset log holds our JSON text, in its one order.
    log = (tmp_path / "checkpoint" / "offsets" / "3").read_text().splitlines()
    assert log[-1] == json.dumps({topic: {"0": 10, "1": 10}})
    # The group shows the query's progress to monitoring tools.
    consumer = Consumer(kafka.params(**{"group.id": group}))
    try:
        committed = consumer.committed([KafkaTopicPartition(topic, p) for p in range(2)], 10)
    finally:
        consumer.close()
    assert [c.offset for c in committed] == [10, 10]


def test_restart_from_the_checkpoint_loses_and_repeats_nothing(spark_session, kafka,
                                                               kafka_topic, tmp_path):
    topic = kafka_topic(partitions=3)
    for p in range(3):
        produce_numbered(kafka, topic, p, 0, 10)
    checkpoint = tmp_path / "checkpoint"
    first = Batches()
    query = (stream(spark_session, kafka, subscribe=topic, startingOffsets="earliest",
                    maxOffsetsPerTrigger=7)
             .writeStream.foreachBatch(first).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert [len(first.rows[b]) for b in sorted(first.rows)] == [7, 7, 7, 7, 2]
    # As if the driver died after its last batch's output but before its commit: the
    # restarted query runs that batch again from the offset log.
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    assert last == 4
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    for p in range(3):
        produce_numbered(kafka, topic, p, 10, 4)
    second = Batches()
    query = (stream(spark_session, kafka, subscribe=topic, startingOffsets="earliest",
                    maxOffsetsPerTrigger=7)
             .writeStream.foreachBatch(second).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert second.rows[last] == first.rows[last]  # the same batch, the same records
    delivered = {**first.rows, **second.rows}  # a batch id counts once (idempotent sinks)
    rows = [row for b in sorted(delivered) for row in delivered[b]]
    assert sorted(rows) == expected(3, 14)
    assert len(rows) == len(set(rows))


def test_min_offsets_per_trigger_waits_up_to_max_trigger_delay(spark_session, kafka,
                                                               kafka_topic, tmp_path):
    topic = kafka_topic()
    produce_numbered(kafka, topic, 0, 0, 3)
    batches = Batches()
    query = (stream(spark_session, kafka, subscribe=topic, startingOffsets="earliest",
                    minOffsetsPerTrigger=5, maxTriggerDelay="4s")
             .writeStream.foreachBatch(batches)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        batches.wait_for(lambda b: len(b.rows) >= 1)  # the first batch never waits
        assert batches.rows[0] == expected(1, 3)
        produce_numbered(kafka, topic, 0, 3, 2)  # 2 < 5: waits for the delay
        batches.wait_for(lambda b: len(b.rows) >= 2)
        # Counted between the two batches' triggers (Spark's progress), as the delay is:
        # from the last batch's start, not its output, which a cold first batch (its
        # workers started on a busy machine) delays by seconds.
        waited = trigger_seconds(query, 1) - trigger_seconds(query, 0)
        assert waited >= 3.5, waited
        assert batches.rows[1] == expected(1, 2, start=3)
        produce_numbered(kafka, topic, 0, 5, 6)  # 6 >= 5: at the next trigger
        asked = time.monotonic()
        batches.wait_for(lambda b: len(b.rows) >= 3)
        assert batches.times[2] - asked < 3.5
        assert batches.rows[2] == expected(1, 6, start=5)
    finally:
        query.stop()


def test_partitions_added_mid_query_are_read_from_their_start(spark_session, kafka,
                                                              kafka_topic, tmp_path):
    topic = kafka_topic()
    produce_numbered(kafka, topic, 0, 0, 3)
    batches = Batches()
    query = (stream(spark_session, kafka, subscribe=topic, startingOffsets="earliest")
             .writeStream.foreachBatch(batches)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        batches.wait_for(lambda b: len(b.all_rows()) >= 3)
        kafka.add_partitions(topic, 3)
        produce_numbered(kafka, topic, 1, 0, 4)
        produce_numbered(kafka, topic, 2, 0, 2)
        batches.wait_for(lambda b: len(b.all_rows()) >= 9)
    finally:
        query.stop()
    rows = batches.all_rows()
    assert sorted(rows) == sorted(expected(1, 3) + [
        (1, o, f"1:{o}".encode()) for o in range(4)] + [
        (2, o, f"2:{o}".encode()) for o in range(2)])


def test_records_deleted_under_a_stopped_query(spark_session, kafka, kafka_topic, tmp_path):
    topic = kafka_topic()
    produce_numbered(kafka, topic, 0, 0, 10)
    checkpoint = str(tmp_path / "checkpoint")

    def run(**options):
        batches = Batches()
        query = (stream(spark_session, kafka, subscribe=topic, startingOffsets="earliest",
                        **options)
                 .writeStream.foreachBatch(batches).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        with contextlib.suppress(StreamingQueryException):
            query.awaitTermination(120)
        assert not query.isActive
        return query, batches

    query, batches = run()
    assert batches.all_rows() == expected(1, 10)
    produce_numbered(kafka, topic, 0, 10, 10)
    kafka.delete_records(topic, 0, 15)  # retention overtook the stopped query
    query, batches = run()
    error = carried_error(query.exception())
    assert isinstance(error, DataLossError), query.exception()
    assert (error.topic, error.partition, error.fromOffset, error.logStartOffset) == (
        topic, 0, 10, 15)
    assert batches.all_rows() == []
    query, batches = run(failOnDataLoss="false")
    assert query.exception() is None
    assert batches.all_rows() == expected(1, 5, start=15)


def test_a_timestamp_in_nanoseconds_fails_the_query_with_a_record_error(
        spark_session, kafka, kafka_topic, tmp_path):
    topic = kafka_topic(partitions=2, config=ANY_TIMESTAMP)
    produce_numbered(kafka, topic, 0, 0, 3)
    producer = Producer(kafka.params())
    producer.produce(topic, value=b"1:0", partition=1, timestamp=time.time_ns())
    assert producer.flush(30) == 0
    batches = Batches()
    query = (stream(spark_session, kafka, subscribe=topic, startingOffsets="earliest")
             .writeStream.foreachBatch(batches)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    with contextlib.suppress(StreamingQueryException):
        query.awaitTermination(120)
    assert not query.isActive
    error = carried_error(query.exception())
    assert isinstance(error, RecordError), query.exception()
    assert (error.topic, error.partition, error.offset) == (topic, 1, 0)
    assert batches.all_rows() == []


def test_the_per_partition_cap_counts_partitions_added_between_runs(spark_session, kafka,
                                                                    kafka_topic, tmp_path):
    topic = kafka_topic()
    produce_numbered(kafka, topic, 0, 0, 6)

    def run():
        batches = Batches()
        query = (stream(spark_session, kafka, subscribePattern=topic,
                        startingOffsets="earliest", maxOffsetsPerPartitionPerTrigger=2)
                 .writeStream.foreachBatch(batches)
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(120)
        assert query.exception() is None
        return [len(batches.rows[b]) for b in sorted(batches.rows)], batches.all_rows()

    sizes, rows = run()
    assert sizes == [2, 2, 2] and sorted(rows) == expected(1, 6)
    kafka.add_partitions(topic, 3)
    produce_numbered(kafka, topic, 1, 0, 6)
    produce_numbered(kafka, topic, 2, 0, 6)
    sizes, rows = run()  # three partitions now: 2 x 3 offsets per trigger
    assert sizes == [6, 6]
    assert sorted(rows) == sorted((p, o, f"{p}:{o}".encode()) for p in (1, 2)
                                  for o in range(6))


def test_a_stream_with_a_schema_of_some_columns_reads_only_them(spark_session, kafka,
                                                                kafka_topic, tmp_path):
    topic = kafka_topic(partitions=2)
    for p in range(2):
        produce_numbered(kafka, topic, p, 0, 12)
    seen = []
    df = (spark_session.readStream.format("kafka-direct").schema(
        "value binary, offset long, partition int")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", topic).option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 10).load())
    assert df.columns == ["value", "offset", "partition"]
    query = (df.writeStream.foreachBatch(lambda batch, _: seen.extend(batch.collect()))
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert {tuple(row.asDict()) for row in seen} == {("value", "offset", "partition")}
    assert sorted((r.partition, r.offset, r.value) for r in seen) == expected(2, 12)
