"""KafkaRDDs over a kept JVM parent: the offsets in the batch's function, the parent kept.

Against the real broker and a real local Spark (``local[2,2]``: a failed task is retried
once): each batch's RDD reads exactly its ranges, partition ``i`` range ``i``, a retried
task the same records; counting and the DataFrame view see the same ranges; the parent is
the same JVM RDD while the partitions and their locations stay, a new one otherwise.
"""

import json
import pickle

import pytest

from kafka_direct import KafkaDirectError, KafkaRDD, LocationStrategies, OffsetRange
from kafka_direct.rdd.kafka_rdd import ReadSettings
from kafka_direct.rdd.kept_parent import KeptParent, RangesAt, pack_offsets
from kafka_direct.topic_partition import TopicPartition


def fill(kafka, topic, partitions, per_partition):
    for p in range(partitions):
        kafka.produce(topic, [f"{p}:{i}".encode() for i in range(per_partition)], partition=p)


def batch(kept, spark, ranges, settings):
    partitions = [r.topicPartition() for r in ranges]
    locations = KeptParent.locations(spark, partitions, LocationStrategies.PreferConsistent(),
                                     None)
    offsets = pack_offsets([r.fromOffset for r in ranges], [r.untilOffset for r in ranges])
    return kept.kafka_rdd(spark, partitions, offsets, settings, locations, lambda: ranges)


def test_the_offsets_of_a_range_are_read_back_at_its_index_in_a_task():
    at = RangesAt(pack_offsets([0, 5, 2**63 - 2], [3, 5, 2**63 - 1]), 3)
    at = pickle.loads(pickle.dumps(at))  # as a task gets it
    assert list(at(1, iter([("t", 7)]))) == [("t", 7, 5, 5)]
    assert list(at(2, iter([("u", 0)]))) == [("u", 0, 2**63 - 2, 2**63 - 1)]
    with pytest.raises(KafkaDirectError, match="partition 3 .* 3 ranges"):
        at(3, iter([("t", 0)]))
    with pytest.raises(KafkaDirectError, match="holds 2 elements"):
        at(0, iter([("t", 0), ("t", 1)]))
    with pytest.raises(KafkaDirectError, match="2 ranges must be 32 bytes"):
        RangesAt(b"\0" * 16, 2)
    assert pack_offsets([2**63], [2**63]) is None  # beyond int64: the ranges refuse it


def test_batches_over_a_kept_parent_read_exactly_their_ranges(kafka, kafka_topic, spark,
                                                               params, tmp_path):
    topic = kafka_topic(partitions=3)
    fill(kafka, topic, 3, 40)
    settings = ReadSettings(params=params)
    kept = KeptParent()
    first = [OffsetRange(topic, 0, 0, 10), OffsetRange(topic, 1, 5, 5),
             OffsetRange(topic, 2, 0, 20)]
    second = [OffsetRange(topic, 0, 10, 40), OffsetRange(topic, 1, 5, 12),
              OffsetRange(topic, 2, 20, 21)]
    rdds = [batch(kept, spark, ranges, settings) for ranges in (first, second)]
    assert rdds[0]._prev_jrdd is rdds[1]._prev_jrdd  # one JVM parent for both batches
    seen_dir = str(tmp_path)

    def fail_first_attempt(index, records):
        import os

        from pyspark import TaskContext

        attempt = TaskContext.get().attemptNumber()
        offsets = [(r.partition, r.offset, r.value) for r in records]
        with open(os.path.join(seen_dir, f"{index}-{attempt}"), "w") as f:
            f.write(json.dumps([[p, o, v.decode()] for p, o, v in offsets]))
        if attempt == 0:
            raise RuntimeError("first attempt fails on purpose")
        return [(index, offsets)]

    for ranges, rdd in zip((first, second), rdds, strict=True):
        assert isinstance(rdd, KafkaRDD) and rdd.offsetRanges() == ranges
        assert rdd.getNumPartitions() == 3
        expected = {index: [(r.partition, o, f"{r.partition}:{o}".encode())
                            for o in range(r.fromOffset, r.untilOffset)]
                    for index, r in enumerate(ranges)}
        got = dict(rdd.mapPartitionsWithIndex(
            lambda i, records: [(i, [(r.partition, r.offset, r.value) for r in records])])
            .collect())
        assert got == expected
        assert rdd.count() == sum(r.count() for r in ranges)
        assert rdd._ranges_rdd.collect() == [(r.topic, r.partition, r.fromOffset,
                                              r.untilOffset) for r in ranges]
        assert sorted(row.offset for row in rdd.toDF().collect()) == sorted(
            o for r in ranges for o in range(r.fromOffset, r.untilOffset))
        # A retried task reads exactly the records of its range again.
        assert dict(rdd.mapPartitionsWithIndex(fail_first_attempt).collect()) == expected
        for index, records in expected.items():
            for attempt in (0, 1):
                assert json.loads((tmp_path / f"{index}-{attempt}").read_text()) == [
                    [p, o, v.decode()] for p, o, v in records]


def test_other_partitions_make_a_new_parent(kafka, kafka_topic, spark, params):
    topic = kafka_topic(partitions=3)
    fill(kafka, topic, 3, 5)
    settings = ReadSettings(params=params)
    kept = KeptParent()
    two = [OffsetRange(topic, 0, 0, 2), OffsetRange(topic, 1, 0, 3)]
    grown = [*two, OffsetRange(topic, 2, 0, 4)]  # a partition added
    reordered = [two[1], two[0]]
    rdds = [batch(kept, spark, ranges, settings) for ranges in (two, two, grown, reordered)]
    parents = [rdd._prev_jrdd for rdd in rdds]
    assert parents[0] is parents[1]
    assert parents[2] is not parents[1] and parents[3] is not parents[2]
    for ranges, rdd in zip((two, two, grown, reordered), rdds, strict=True):
        assert rdd.mapPartitions(lambda records: [[(r.partition, r.offset)
                                                   for r in records]]).collect() == [
            [(r.partition, o) for o in range(r.fromOffset, r.untilOffset)] for r in ranges]
    assert kept.holds([r.topicPartition() for r in reordered], [[], []])
    assert not kept.holds([TopicPartition(topic, 1), TopicPartition(topic, 9)], [[], []])
    assert not kept.holds([r.topicPartition() for r in reordered], [["host"], []])
    kept.forget()
    assert not kept.holds([r.topicPartition() for r in reordered], [[], []])
