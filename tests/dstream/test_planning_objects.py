"""What a batch's planning builds in Python at a thousand partitions, counted.

At a thousand partitions every Python object or call made per partition costs the driver
about a millisecond a batch. A batch of the same partitions as the batch before it reuses
what did not change (the partitions' order, the ListOffsets request, the listing's
partitions) and builds its ranges in one checked step; a changed partition set is still
noticed at the next batch.
"""

import collections

import confluent_kafka
import pytest

from kafka_direct import ConsumerStrategies, LocationStrategies, OffsetRange, StreamingContext
from kafka_direct.client.driver_consumer import DriverConsumer
from kafka_direct.dstream.direct_kafka_input_dstream import DirectKafkaInputDStream
from kafka_direct.topic_partition import TopicPartition
from tests.fakes.confluent_clients import CountingCluster
from tests.fakes.fake_cluster import FakeSparkContext, stub_rdds

PARAMS = {"bootstrap.servers": "fake:9092", "group.id": "g", "auto.offset.reset": "earliest"}


@pytest.fixture(autouse=True)
def _no_spark(monkeypatch):
    stub_rdds(monkeypatch)


def _strategy(kind, counting):
    if kind == "assign":
        return ConsumerStrategies.Assign(
            [TopicPartition(t, p) for t in counting.topics for p in range(counting.partitions)],
            PARAMS)
    return ConsumerStrategies.Subscribe(counting.topics, PARAMS, groupManagement=False)


def _stream(counting, kind):
    consumer, admin = counting.clients()
    stream = DirectKafkaInputDStream(
        StreamingContext(FakeSparkContext(None), 1), LocationStrategies.PreferConsistent(),
        _strategy(kind, counting), driverConsumerFactory=lambda params: DriverConsumer(
            params, consumerFactory=consumer, adminFactory=admin))
    stream.initialize(0)
    stream.start()
    return stream


def _counting(monkeypatch):
    """Counts per-partition Python work: objects built, checks run, hashes computed."""
    counts = collections.Counter()

    def counted(owner, name, label):
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            counts[label] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)

    counted(TopicPartition, "__post_init__", "TopicPartition built")
    counted(TopicPartition, "__hash__", "TopicPartition hashed")
    counted(OffsetRange, "__post_init__", "OffsetRange checked one by one")
    kafka_partition = confluent_kafka.TopicPartition

    def request_partition(*args):
        counts["request partition built"] += 1
        return kafka_partition(*args)

    monkeypatch.setattr(confluent_kafka, "TopicPartition", request_partition)
    return counts


@pytest.mark.parametrize("kind", ["assign", "subscribe"])
def test_a_batch_of_unchanged_partitions_builds_nothing_per_partition(monkeypatch, kind):
    counting = CountingCluster()
    stream = _stream(counting, kind)
    counts = _counting(monkeypatch)
    try:
        stream.compute(1000)  # the first batch of this layout may build it
        for batch in range(2, 5):
            counting.end += 3
            counts.clear()
            ranges = stream.compute(batch * 1000)
            assert [(r.fromOffset, r.untilOffset) for r in ranges] == \
                [(counting.end - 3, counting.end)] * 1000
            assert [(r.topic, r.partition) for r in ranges] == sorted(
                (t, p) for t in counting.topics for p in range(100))
            assert counts["TopicPartition built"] == 0, counts
            assert counts["request partition built"] == 0, counts
            assert counts["OffsetRange checked one by one"] == 0, counts
            # TopicPartition's hash is a Python call: one a partition, to key the ends
            # Kafka answered; the positions are read in the layout's order and the commit
            # queue keeps the batch's bounds as lists.
            assert counts["TopicPartition hashed"] <= 1000, counts
    finally:
        stream.stop()


def test_partitions_added_between_cached_batches_are_read_from_the_next_batch():
    counting = CountingCluster()
    stream = _stream(counting, "subscribe")
    try:
        for batch in range(1, 3):
            counting.end += 1
            assert len(stream.compute(batch * 1000)) == 1000
        counting.partitions = 102  # every topic grows by two partitions
        counting.end += 1
        counting.requests.clear()
        ranges = stream.compute(3000)
        assert len(ranges) == 1020
        new = [(r.fromOffset, r.untilOffset) for r in ranges if r.partition >= 100]
        assert new == [(counting.end, counting.end)] * 20  # they start at their end
        assert [(r.topic, r.partition) for r in ranges] == sorted(
            (t, p) for t in counting.topics for p in range(102))
        old = {(r.fromOffset, r.untilOffset) for r in ranges if r.partition < 100}
        assert old == {(counting.end - 1, counting.end)}
        counting.end += 2
        ranges = stream.compute(4000)
        assert {(r.fromOffset, r.untilOffset) for r in ranges} == {
            (counting.end - 2, counting.end)}
        assert len(ranges) == 1020
    finally:
        stream.stop()


def test_a_partition_gone_from_the_listing_keeps_its_position_and_resumes():
    counting = CountingCluster(topics=2, partitions=3)
    stream = _stream(counting, "subscribe")
    try:
        counting.end += 1
        stream.compute(1000)
        stream.compute(2000)
        counting.topics = ["t0"]  # t1 missing from the metadata for a batch
        counting.end += 1
        assert {(r.topic, r.partition) for r in stream.compute(3000)} == {
            ("t0", 0), ("t0", 1), ("t0", 2)}
        counting.topics = ["t0", "t1"]
        counting.end += 1
        ranges = stream.compute(4000)
        assert {(r.topic, r.fromOffset, r.untilOffset) for r in ranges} == {
            ("t0", counting.end - 1, counting.end), ("t1", counting.end - 2, counting.end)}
    finally:
        stream.stop()
